"""Objects of a posix tier as the executors touch them: read, write (fsynced, under a new unique name),
verify, delete, and list what no metadata references (garbage from crashed or failed jobs).

A compaction retires the objects it replaced by writing a ``<object>.retired`` marker *before* committing; an
unreferenced object is deleted once its marker (or, without one, its own mtime) is older than the grace
period, so a reader that listed the old segments before the swap can finish."""

import os
import struct
import time
import uuid
import zlib
from pathlib import Path

from common.message_codec import HEADER_SIZE, MESSAGE_MAGIC

RETIRED = ".retired"
CQ_UNIT_SIZE = 28


class CorruptObjectError(ValueError):
    """A merged object does not hold what its parts held."""


def read_object(root: Path, path: str) -> bytes:
    with open(root / path, "rb") as f:
        return f.read()


def write_object(root: Path, path: str, data: bytes) -> None:
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    with open(file, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def merged_name(first_path: str) -> str:
    """Beside the first part, named by the same base offset plus a unique suffix."""
    return f"{first_path}.c{uuid.uuid4().hex[:12]}"


# What verify reads of a record header (common/message_codec.py): size, magic, CRC, physical offset, and the
# body, topic and properties lengths; one unpack per record instead of the whole header.
_VERIFY_FIELDS = struct.Struct(">iII16xq48xiBH")
assert _VERIFY_FIELDS.size == HEADER_SIZE


def verify(data: bytes, segment_type: int, base_offset: int, expected_size: int) -> int:
    """Length, and for a commitlog every record's structure, CRC and position; returns records checked."""
    if len(data) != expected_size:
        raise CorruptObjectError(f"{len(data)} bytes written, {expected_size} expected")
    if segment_type == 1:
        if len(data) % CQ_UNIT_SIZE:
            raise CorruptObjectError(f"consume queue object of {len(data)} bytes is not whole units")
        return len(data) // CQ_UNIT_SIZE
    view, pos, records, end = memoryview(data), 0, 0, len(data)
    unpack, crc32 = _VERIFY_FIELDS.unpack_from, zlib.crc32
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptObjectError(f"torn record at offset {base_offset + pos}")
        size, magic, crc, physical, body_len, topic_len, props_len = unpack(view, pos)
        if (magic != MESSAGE_MAGIC or size != HEADER_SIZE + topic_len + props_len + body_len or pos + size > end
                or physical != base_offset + pos or crc32(view[pos + HEADER_SIZE : pos + size]) != crc):
            raise CorruptObjectError(f"no valid record at offset {base_offset + pos}")
        pos += size
        records += 1
    return records


def delete_object(root: Path, path: str) -> int:
    """Delete an object and its marker; returns the bytes freed (0 if it was gone: idempotent)."""
    file = root / path
    try:
        size = file.stat().st_size
        file.unlink()
    except FileNotFoundError:
        size = 0
    (root / (path + RETIRED)).unlink(missing_ok=True)
    return size


def retire(root: Path, path: str) -> None:
    (root / (path + RETIRED)).write_bytes(str(time.time()).encode())


def unretire(root: Path, path: str) -> None:
    (root / (path + RETIRED)).unlink(missing_ok=True)


def garbage(root: Path, broker_name: str, referenced: set[str], grace_s: float,
            now: float | None = None) -> list[str]:
    """Objects under the broker's directory that no segment record references and whose retirement (or
    creation) is older than the grace period. Markers of objects still referenced (a refused commit) or of
    objects already gone are removed on the way."""
    now = now if now is not None else time.time()
    base = root / broker_name
    out: list[str] = []
    if not base.exists():
        return out
    for file in base.rglob("*"):
        if not file.is_file():
            continue
        rel = str(file.relative_to(root))
        if rel.endswith(RETIRED):
            obj = rel[: -len(RETIRED)]
            stale = obj in referenced and now - file.stat().st_mtime > grace_s  # a failed commit's marker
            if stale or not (root / obj).exists():  # or its object went and a kill kept the marker
                file.unlink(missing_ok=True)
            continue
        if rel in referenced:
            continue
        marker = root / (rel + RETIRED)
        since = marker.stat().st_mtime if marker.exists() else file.stat().st_mtime
        if now - since > grace_s:
            out.append(rel)
    return out

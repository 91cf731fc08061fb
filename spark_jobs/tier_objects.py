"""Objects of a tier as the executors touch them: read, write (durably, under a new unique name), verify,
delete, and list what no metadata references (garbage from crashed or failed jobs).

A tier is a :class:`TierLocation` (a posix directory, or an S3 bucket and key prefix read and written through
the broker's own S3 backend, so executors need no shared directory); a plain path means a posix directory.

A compaction retires the objects it replaced by writing a ``<object>.retired`` marker *before* committing; an
unreferenced object is deleted once its marker (or, without one, its own mtime) is older than the grace
period, so a reader that listed the old segments before the swap can finish. A merged object no record references
and nothing retired is left for :data:`UNCOMMITTED_MERGED_S` (another run may be about to commit it)."""

import os
import re
import struct
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider
from broker.tiered.provider.s3_file_segment import S3Config
from common.message_codec import HEADER_SIZE, MESSAGE_MAGIC

RETIRED = ".retired"
CQ_UNIT_SIZE = 28
# Calls a job's driver keeps in flight on the tier's objects (retire, unretire, delete): each is one or more
# round trips to the store (an object store's are tens of milliseconds), so a thousand made one after another
# took most of a compaction's time.
OBJECT_CALLS_IN_FLIGHT = 16
T = TypeVar("T")


class CorruptObjectError(ValueError):
    """A merged object does not hold what its parts held."""


@dataclass(frozen=True, slots=True)
class TierLocation:
    """Where a broker's tier is, as shipped to executors: provider, root (directory or key prefix) and, for s3,
    the server, bucket and signing keys."""

    provider: TieredBackendServiceProvider
    root: str
    s3: S3Config | None = None

    @property
    def is_s3(self) -> bool:
        return self.provider is TieredBackendServiceProvider.S3

    def factory(self) -> FileSegmentFactory:
        return FileSegmentFactory(self.provider, self.root, self.s3)


Tier = Path | str | TierLocation


def location(tier: Tier) -> TierLocation:
    return tier if isinstance(tier, TierLocation) else TierLocation(TieredBackendServiceProvider.POSIX, str(tier))


def _posix(tier: Tier) -> Path | None:
    loc = location(tier)
    return None if loc.is_s3 else Path(loc.root)


def read_object(tier: Tier, path: str) -> bytes:
    root = _posix(tier)
    if root is not None:
        with open(root / path, "rb") as f:
            return f.read()
    seg = location(tier).factory().open(path)
    size = seg.real_size()
    if not size:
        raise FileNotFoundError(f"no object {path} in the tier")
    return seg.read(0, size)


def read_run(tier: Tier, parts: list[tuple[str, int]]) -> list[bytes]:
    """The first ``size`` bytes of each ``(path, size)``, all in one directory (a compaction group's parts). On
    an object store one listing finds every part's chunks and the GETs overlap (:data:`OBJECT_CALLS_IN_FLIGHT`);
    a part shorter than its size comes back short (the caller verifies)."""
    root = _posix(tier)
    if root is not None:
        out = []
        for path, size in parts:
            with open(root / path, "rb") as f:
                out.append(f.read(size))
        return out
    loc = location(tier)
    paths = [path for path, _ in parts]
    segments = dict(zip(paths, loc.factory().open_run(paths), strict=True))
    sizes = dict(parts)
    return on_each_object(lambda _, path: segments[path].read(0, sizes[path]), loc, paths)


def read_range(tier: Tier, path: str, position: int, length: int) -> bytes:
    root = _posix(tier)
    if root is not None:
        with open(root / path, "rb") as f:
            f.seek(position)
            return f.read(length)
    return location(tier).factory().open(path).read(position, length)


def object_size(tier: Tier, path: str) -> int:
    root = _posix(tier)
    if root is not None:
        return (root / path).stat().st_size
    return location(tier).factory().open(path).real_size()


def write_object(tier: Tier, path: str, data: bytes) -> None:
    root = _posix(tier)
    if root is None:  # one PUT: durable and whole when it returns
        location(tier).factory().open(path).write(0, data)
        return
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    with open(file, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def merged_name(first_path: str) -> str:
    """Beside the first part, named by the same base offset plus a unique suffix."""
    return f"{first_path}.c{uuid.uuid4().hex[:12]}"


MERGED_NAME = re.compile(r"\.c[0-9a-f]{12}$")
# How long a merged object no record references yet is left alone (unless retired): it may be another run's, still
# merging or committing (a run over thousands of segments takes minutes). Deleted at the grace period, a second run
# started meanwhile removed the first one's merged objects, which the first then swapped in: records of objects that
# were gone, and their messages skipped by readers. A killed run's leftovers go once this long has passed.
UNCOMMITTED_MERGED_S = 6 * 3600.0


def _unreferenced_age_limit(rel: str, retired: bool, grace_s: float) -> float:
    """How old an unreferenced object must be to go: the grace period, or for a merged object never retired (maybe
    another run's, not committed yet) :data:`UNCOMMITTED_MERGED_S` at least."""
    if not retired and MERGED_NAME.search(rel):
        return max(grace_s, UNCOMMITTED_MERGED_S)
    return grace_s


# What verify reads of a record header (common/message_codec.py): size, magic, CRC, queue id, and the body, topic
# and properties lengths; one unpack per record instead of the whole header. Not the physical offset: a tiered
# record keeps its local commitlog offset (records of older versions hold their tiered position), so it says
# nothing about where the record sits in the tier.
_VERIFY_FIELDS = struct.Struct(">iIIi68xiBH")
assert _VERIFY_FIELDS.size == HEADER_SIZE


def verify(data: bytes, segment_type: int, base_offset: int, expected_size: int,
           queue: tuple[str, int] | None = None) -> int:
    """Length, and for a commitlog every record's structure and CRC, and that it is one of ``queue``'s (topic,
    queue id: a queue's flat file holds its records only) when given; returns records checked."""
    if len(data) != expected_size:
        raise CorruptObjectError(f"{len(data)} bytes written, {expected_size} expected")
    if segment_type == 1:
        if len(data) % CQ_UNIT_SIZE:
            raise CorruptObjectError(f"consume queue object of {len(data)} bytes is not whole units")
        return len(data) // CQ_UNIT_SIZE
    view, pos, records, end = memoryview(data), 0, 0, len(data)
    unpack, crc32 = _VERIFY_FIELDS.unpack_from, zlib.crc32
    topic = queue[0].encode() if queue is not None else b""
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptObjectError(f"torn record at offset {base_offset + pos}")
        size, magic, crc, queue_id, body_len, topic_len, props_len = unpack(view, pos)
        var = pos + HEADER_SIZE  # the variable part: topic first
        if (magic != MESSAGE_MAGIC or size != HEADER_SIZE + topic_len + props_len + body_len or pos + size > end
                or crc32(view[var : pos + size]) != crc):
            raise CorruptObjectError(f"no valid record at offset {base_offset + pos}")
        if queue is not None and (queue_id != queue[1] or view[var : var + topic_len] != topic):
            raise CorruptObjectError(f"the record at offset {base_offset + pos} is not one of {queue[0]}:{queue[1]}'s")
        pos += size
        records += 1
    return records


def on_each_object(call: Callable[[Tier, str], T], tier: Tier, paths: Iterable[str]) -> list[T]:
    """``call(tier, path)`` for every path, up to :data:`OBJECT_CALLS_IN_FLIGHT` at once; the results in the
    paths' order. Every call has ended when this returns or raises (the first failure, once all ended)."""
    paths = list(paths)
    if len(paths) <= 1:
        return [call(tier, p) for p in paths]
    with ThreadPoolExecutor(min(OBJECT_CALLS_IN_FLIGHT, len(paths)), thread_name_prefix="tier-object") as pool:
        futures = [pool.submit(call, tier, p) for p in paths]
    return [f.result() for f in futures]


def delete_object(tier: Tier, path: str) -> int:
    """Delete an object and its marker; returns the bytes freed (0 if it was gone: idempotent)."""
    root = _posix(tier)
    if root is None:
        factory = location(tier).factory()
        seg = factory.open(path)
        size = seg.real_size()
        seg.destroy()
        factory.open(path + RETIRED).destroy()
        return size
    file = root / path
    try:
        size = file.stat().st_size
        file.unlink()
    except FileNotFoundError:
        size = 0
    (root / (path + RETIRED)).unlink(missing_ok=True)
    return size


def group_by_directory(paths: Iterable[str]) -> dict[str, list[str]]:
    """Paths by their directory (one queue's commitlog or consume queue), each list in the paths' order."""
    out: dict[str, list[str]] = {}
    for path in paths:
        out.setdefault(path.rpartition("/")[0], []).append(path)
    return out


def delete_objects(tier: Tier, paths: Iterable[str]) -> int:
    """:func:`delete_object` for many objects nothing reads any more (garbage, expired); returns the bytes freed.
    On an object store one listing and batch deletes a directory, the directories :data:`OBJECT_CALLS_IN_FLIGHT`
    at once: a thousand garbage objects were five thousand requests one by one."""
    paths = list(paths)
    if _posix(tier) is not None:
        return sum(delete_object(tier, path) for path in paths)
    return _destroy_by_directory(location(tier), paths, with_markers=True)


def _destroy_by_directory(loc: TierLocation, paths: list[str], with_markers: bool = False) -> int:
    """Object-store objects (and their markers) destroyed a directory at a time; the bytes ``paths`` held."""
    factory = loc.factory()
    by_directory = group_by_directory(paths)

    def destroy(_: Tier, directory: str) -> int:
        run = by_directory[directory]
        return sum(factory.destroy_run(run + [p + RETIRED for p in run] if with_markers else run)[: len(run)])

    return sum(on_each_object(destroy, loc, by_directory))


def retire(tier: Tier, path: str) -> None:
    root = _posix(tier)
    if root is None:
        location(tier).factory().open(path + RETIRED).write(0, str(time.time()).encode())
        return
    (root / (path + RETIRED)).write_bytes(str(time.time()).encode())


def unretire(tier: Tier, path: str) -> None:
    root = _posix(tier)
    if root is None:
        location(tier).factory().open(path + RETIRED).destroy()
        return
    (root / (path + RETIRED)).unlink(missing_ok=True)


def garbage(tier: Tier, broker_name: str, referenced: set[str], grace_s: float,
            now: float | None = None) -> list[str]:
    """Objects under the broker's directory that no segment record references and whose retirement (or
    creation) is older than the grace period. Markers of objects still referenced (a refused commit) or of
    objects already gone are removed on the way."""
    now = now if now is not None else time.time()
    root = _posix(tier)
    if root is None:
        return _object_store_garbage(location(tier), broker_name, referenced, grace_s, now)
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
        retired = marker.exists()
        since = marker.stat().st_mtime if retired else file.stat().st_mtime
        if now - since > _unreferenced_age_limit(rel, retired, grace_s):
            out.append(rel)
    return out


def _object_store_garbage(loc: TierLocation, broker_name: str, referenced: set[str], grace_s: float,
                          now: float) -> list[str]:
    """:func:`garbage` over a listing of the bucket (the times are the objects' last writes)."""
    factory = loc.factory()
    objects = factory.list_objects(broker_name)
    out: list[str] = []
    stale_markers: list[str] = []
    for rel, mtime in sorted(objects.items()):
        if rel.endswith(RETIRED):
            obj = rel[: -len(RETIRED)]
            if (obj in referenced and now - mtime > grace_s) or obj not in objects:
                stale_markers.append(rel)
            continue
        if rel in referenced:
            continue
        retired = rel + RETIRED in objects
        since = objects.get(rel + RETIRED, mtime)
        if now - since > _unreferenced_age_limit(rel, retired, grace_s):
            out.append(rel)
    _destroy_by_directory(loc, stale_markers)
    return out

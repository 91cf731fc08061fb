"""A KV shard snapshot on disk: ``RMQKVSN2`` then length-prefixed (>I) KvSnapshotChunk messages, the first
holding the header (shard, shards, source broker, commitlog offset), then a trailer: the length 0xFFFFFFFF, the
number of entries (>Q) and the CRC-32 of the chunks' bytes (>I). A file cut anywhere, or with a flipped bit, is
refused whole: cut at a chunk boundary or changed inside a value, it read as a smaller or different snapshot, and
was imported so. A file of an earlier release (``RMQKVSNP``, no trailer) is read as it was written."""

import os
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

from client.errors import MQClientError
from proto import kv_pb2

MAGIC = b"RMQKVSN2"
MAGIC_WITHOUT_TRAILER = b"RMQKVSNP"  # an earlier release's snapshots
LENGTH = struct.Struct(">I")
TRAILER_MARK = 0xFFFFFFFF  # where a chunk's length would be: the trailer follows
TRAILER = struct.Struct(">QI")  # entries, CRC-32 of every byte between the magic and the mark


def write_snapshot(path: Path, chunks: list[kv_pb2.KvSnapshotChunk]) -> int:
    """Write the chunks (to ``path.tmp``, then renamed over ``path``); returns the number of entries. A path that
    names no file, or an existing one that is not a regular file (a device, a directory), is refused: the rename
    would replace it."""
    if not path.name or path.name in (".", ".."):
        raise MQClientError(f"cannot write a KV snapshot to {str(path)!r}: name a file")
    if (path.exists() or path.is_symlink()) and not path.is_file():
        raise MQClientError(f"cannot write a KV snapshot to {path}: it exists and is not a regular file")
    tmp = path.with_name(path.name + ".tmp")
    entries, crc = sum(len(c.entries) for c in chunks), 0
    with _create(path, tmp) as f:
        f.write(MAGIC)
        for chunk in chunks:
            data = chunk.SerializeToString()
            for part in (LENGTH.pack(len(data)), data):
                f.write(part)
                crc = zlib.crc32(part, crc)
        f.write(LENGTH.pack(TRAILER_MARK) + TRAILER.pack(entries, crc))
        f.flush()
        os.fsync(f.fileno())  # on disk before it takes the name: a crash leaves the old file or the whole new one
    tmp.replace(path)
    return entries


def _create(path: Path, tmp: Path) -> BinaryIO:
    """``tmp``, new, beside ``path``; a failure says that it is this file that could not be made (the path itself
    may be fine: /proc/version exists, but /proc takes no new file)."""
    try:
        return open(tmp, "wb")
    except OSError as exc:
        if not tmp.parent.exists():
            why = f"directory {tmp.parent} does not exist"
        elif not tmp.parent.is_dir():
            why = f"{tmp.parent} is not a directory"
        else:
            why = (f"{tmp.parent} cannot hold a new file {tmp.name} (written first, then renamed over {path.name}): "
                   f"{exc.strerror or exc}")
        raise MQClientError(f"cannot write a KV snapshot to {path}: {why}") from None


def read_snapshot(path: Path) -> list[kv_pb2.KvSnapshotChunk]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MQClientError(f"cannot read KV snapshot {path}: {exc.strerror}") from None
    with_trailer = data.startswith(MAGIC)
    if not with_trailer and not data.startswith(MAGIC_WITHOUT_TRAILER):
        raise MQClientError(f"{path} is not a KV snapshot (no {MAGIC.decode()} header)")
    chunks: list[kv_pb2.KvSnapshotChunk] = []
    pos = len(MAGIC)
    while pos < len(data):
        if pos + LENGTH.size > len(data):
            raise MQClientError(f"KV snapshot {path} is truncated at byte {pos}")
        (n,) = LENGTH.unpack_from(data, pos)
        if with_trailer and n == TRAILER_MARK:
            _check_trailer(path, data, pos, chunks)
            break
        pos += LENGTH.size
        if pos + n > len(data):
            raise MQClientError(f"KV snapshot {path} is truncated at byte {pos}")
        chunks.append(kv_pb2.KvSnapshotChunk.FromString(data[pos : pos + n]))
        pos += n
    else:
        if with_trailer:
            raise MQClientError(f"KV snapshot {path} is truncated: it ends at byte {len(data)} without its trailer")
    if not chunks or not chunks[0].HasField("header"):
        raise MQClientError(f"KV snapshot {path} has no header")
    later = next((i for i, chunk in enumerate(chunks) if i and chunk.HasField("header")), None)
    if later is not None:
        raise MQClientError(f"KV snapshot {path} has a second header, in chunk {later} (counting from 0): a snapshot "
                            "has one, in its first chunk")
    return chunks


def _check_trailer(path: Path, data: bytes, pos: int, chunks: list[kv_pb2.KvSnapshotChunk]) -> None:
    """The trailer at ``pos`` ends the file and matches the chunks before it."""
    end = pos + LENGTH.size + TRAILER.size
    if end != len(data):
        raise MQClientError(f"KV snapshot {path} is damaged: its trailer at byte {pos} is "
                            f"{'cut' if end > len(data) else 'followed by more bytes'}")
    entries, crc = TRAILER.unpack_from(data, pos + LENGTH.size)
    if zlib.crc32(memoryview(data)[len(MAGIC):pos]) != crc:
        raise MQClientError(f"KV snapshot {path} is damaged: its bytes do not match their CRC (changed after it "
                            "was written)")
    found = sum(len(c.entries) for c in chunks)
    if found != entries:
        raise MQClientError(f"KV snapshot {path} is damaged: it holds {found} entries, its trailer says {entries}")

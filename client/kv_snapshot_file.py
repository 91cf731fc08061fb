"""A KV shard snapshot on disk: ``RMQKVSNP`` then length-prefixed (>I) KvSnapshotChunk messages, the first
holding the header (shard, shards, source broker, commitlog offset)."""

import struct
from pathlib import Path
from typing import BinaryIO

from client.errors import MQClientError
from proto import kv_pb2

MAGIC = b"RMQKVSNP"
LENGTH = struct.Struct(">I")


def write_snapshot(path: Path, chunks: list[kv_pb2.KvSnapshotChunk]) -> int:
    """Write the chunks (to ``path.tmp``, then renamed over ``path``); returns the number of entries. A path that
    names no file, or an existing one that is not a regular file (a device, a directory), is refused: the rename
    would replace it."""
    if not path.name or path.name in (".", ".."):
        raise MQClientError(f"cannot write a KV snapshot to {str(path)!r}: name a file")
    if (path.exists() or path.is_symlink()) and not path.is_file():
        raise MQClientError(f"cannot write a KV snapshot to {path}: it exists and is not a regular file")
    tmp = path.with_name(path.name + ".tmp")
    with _create(path, tmp) as f:
        f.write(MAGIC)
        for chunk in chunks:
            data = chunk.SerializeToString()
            f.write(LENGTH.pack(len(data)))
            f.write(data)
    tmp.replace(path)
    return sum(len(c.entries) for c in chunks)


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
    if not data.startswith(MAGIC):
        raise MQClientError(f"{path} is not a KV snapshot (no {MAGIC.decode()} header)")
    chunks, pos = [], len(MAGIC)
    while pos < len(data):
        if pos + LENGTH.size > len(data):
            raise MQClientError(f"KV snapshot {path} is truncated at byte {pos}")
        (n,) = LENGTH.unpack_from(data, pos)
        pos += LENGTH.size
        if pos + n > len(data):
            raise MQClientError(f"KV snapshot {path} is truncated at byte {pos}")
        chunks.append(kv_pb2.KvSnapshotChunk.FromString(data[pos : pos + n]))
        pos += n
    if not chunks or not chunks[0].HasField("header"):
        raise MQClientError(f"KV snapshot {path} has no header")
    later = next((i for i, chunk in enumerate(chunks) if i and chunk.HasField("header")), None)
    if later is not None:
        raise MQClientError(f"KV snapshot {path} has a second header, in chunk {later} (counting from 0): a snapshot "
                            "has one, in its first chunk")
    return chunks

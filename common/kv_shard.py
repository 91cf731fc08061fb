"""The KV store's shards: the system static topic that carries them, key-to-shard hashing, input limits.

Shared by the broker (which checks a key belongs to a shard it leads) and the SDK (which routes by it).
"""

import zlib
from collections.abc import Sequence
from typing import Any

KV_TOPIC = "rmq_sys_KV"  # a static topic: one logic queue per shard, its chain of physical queues on brokers
DEFAULT_KV_SHARDS = 8

MAX_KEY_BYTES = 1024
MAX_VALUE_BYTES = 4 * 1024 * 1024
MAX_SCAN_LIMIT = 10_000
MAX_GET_KEYS = 4096


class KvInputError(ValueError):
    """A key, value or limit breaks a KV rule; the message says which."""


def shard_of(key: bytes, total_shards: int) -> int:
    """Stable across processes and versions: CRC32 of the key bytes."""
    return zlib.crc32(key) % total_shards


def check_key(key: bytes) -> None:
    if not key:
        raise KvInputError("key is empty")
    if len(key) > MAX_KEY_BYTES:
        raise KvInputError(f"key is {len(key)} bytes, longer than {MAX_KEY_BYTES}")


def check_value(value: bytes, what: str = "value") -> None:
    if len(value) > MAX_VALUE_BYTES:
        raise KvInputError(f"{what} is {len(value)} bytes, larger than {MAX_VALUE_BYTES} (4 MiB)")


def check_scan_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_SCAN_LIMIT:
        raise KvInputError(f"scan limit {limit} is outside 1..{MAX_SCAN_LIMIT}")


def snapshot_shape_error(chunks: Sequence[Any]) -> str | None:
    """What is wrong with a KV snapshot's chunks (``KvSnapshotChunk``s) as a whole, or None: it has one header, in
    its first chunk (a second one, of another shard say, would be ignored)."""
    if not chunks or not chunks[0].HasField("header"):
        return "a KV snapshot starts with a header chunk"
    later = next((i for i, chunk in enumerate(chunks) if i and chunk.HasField("header")), None)
    if later is not None:
        return f"a KV snapshot has one header, in its first chunk: chunk {later} (counting from 0) carries another"
    return None

"""Where applied KV state lives: one interface, two backends (RocksDB, in-memory with snapshots).

State is kept per *partition*: the physical queue of rmq_sys_KV that the ops were written to. A shard that
moved between brokers has one partition per broker it lived on, and a broker that leads it again later gets
a new physical queue, so a partition never mixes generations of a shard. Values are raw states
(:mod:`broker.kv.kv_record`): present or a tombstone. Tombstones stay, so a read on a new leader does not
fall back to an older broker for a key deleted since.

The applied offset (commitlog offset after the last applied op) is stored atomically with the state:
whatever a crash leaves is consistent with it, and replaying the commitlog from it restores the rest.
"""

import struct
from abc import ABC, abstractmethod
from collections.abc import Iterator
from enum import StrEnum

PARTITION = struct.Struct(">I")

StateWrites = dict[tuple[int, bytes], bytes]  # (partition, key) -> raw state, in apply order


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``; None if there is none."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def in_scan(key: bytes, prefix: bytes, start_after: bytes) -> bool:
    return key.startswith(prefix) and key > start_after


class KvStoreType(StrEnum):
    """``kvStoreType``: which :class:`KvStateStore` holds applied state."""

    ROCKSDB = "rocksdb"
    MEMORY = "memory"  # with periodic snapshots (``kvSnapshotInterval``)


class KvStateStore(ABC):
    """Applied KV state. Writers: only the KV dispatcher (one thread), plus snapshot import through it."""

    @abstractmethod
    def load(self) -> int:
        """Open persisted state; returns the applied offset it is consistent with."""

    @abstractmethod
    def get(self, partition: int, keys: list[bytes]) -> list[bytes | None]:
        """Raw states of ``keys`` (None where the partition never saw the key)."""

    def get_each(self, partitions: list[int], keys: list[bytes]) -> list[bytes | None]:
        """Raw state of each ``keys[i]`` in ``partitions[i]``: a get over shards in one call, in request order."""
        return [self.get(partition, [key])[0] for partition, key in zip(partitions, keys, strict=True)]

    @abstractmethod
    def scan(self, partition: int, prefix: bytes, start_after: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` (key, raw state) in key order: keys with ``prefix`` greater than ``start_after``,
        tombstones included."""

    @abstractmethod
    def apply(self, writes: StateWrites, applied_offset: int) -> None:
        """Write the states and the applied offset as one atomic unit."""

    @abstractmethod
    def flush(self) -> int:
        """Make applied state durable (when due); returns the offset that is durable now."""

    @abstractmethod
    def rewind(self, applied_offset: int) -> None:
        """Take ``applied_offset``, below the applied offset, as applied, durably, keeping the state: the commitlog
        lost its tail below what was applied (a machine crash under ASYNC_FLUSH). What the lost ops did cannot be
        undone; the records appended from there on (new ones) must apply."""

    @abstractmethod
    def snapshot(self, partition: int) -> tuple[int, Iterator[tuple[bytes, bytes]]]:
        """A consistent view of a partition: the applied offset it reflects and its (key, raw state) in key
        order. The iterator stays valid while writes go on."""

    # -- a new replica's copy of its master's state (broker/ha/state_copy.py) -----------------------
    @abstractmethod
    def copy_out(self) -> tuple[int, Iterator[tuple[bytes, bytes]]]:
        """The applied offset and every key's state (``PARTITION`` + key -> raw state), as of one moment."""

    @abstractmethod
    def clear(self) -> None:
        """Forget every key; the applied offset becomes 0 (a copy starts)."""

    @abstractmethod
    def put_copied(self, records: list[tuple[bytes, bytes]]) -> None:
        """Store states of :meth:`copy_out`'s form (durable only with :meth:`set_applied`)."""

    @abstractmethod
    def set_applied(self, applied_offset: int) -> None:
        """The copy is whole: it reflects ``applied_offset``; made durable now."""

    @abstractmethod
    def partition_sizes(self) -> dict[int, int]:
        """Keys (tombstones included) held per partition, for status output."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release."""


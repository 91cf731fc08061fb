"""KV state in RocksDB (WAL off): the seed's main option, for more keys than fit in memory.

Keys: ``b"D" + partition (>I) + key -> raw state`` and ``b"A" -> >q applied offset``. Each apply is one
WriteBatch with the applied offset, so RocksDB's flushed memtables are always a consistent prefix; the
commitlog replays the rest after a crash. A RocksDB flush runs at most every ``flush_interval_s``.
"""

import logging
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from rocksdict import Rdict, ReadOptions, WriteBatch

from broker.kv.kv_state_store import PARTITION, KvStateStore, StateWrites, prefix_end
from broker.rocksdb_raw import open_raw, raw_items, raw_keys, snapshot_get, unlogged_write_options

log = logging.getLogger(__name__)

OFFSET = struct.Struct(">q")
DATA = b"D"
DATA_END = bytes([DATA[0] + 1])  # every data key sorts below it
APPLIED_KEY = b"A"


def _head(partition: int) -> bytes:
    """What every data key of ``partition`` starts with."""
    return DATA + PARTITION.pack(partition)


class RocksDBKvStateStore(KvStateStore):
    def __init__(self, root: Path, flush_interval_s: float = 5.0) -> None:
        self.root = root
        self.flush_interval_s = flush_interval_s
        self._db: Rdict | None = None
        self._write_options = unlogged_write_options()
        self._applied = 0
        self._durable = 0
        self._last_flush = time.monotonic()
        self._flush_lock = threading.Lock()

    @property
    def db(self) -> Rdict:
        assert self._db is not None, "KV state store is not loaded"
        return self._db

    def load(self) -> int:
        self._db = open_raw(self.root)
        raw = self._db.get(APPLIED_KEY)
        self._applied = self._durable = OFFSET.unpack(raw)[0] if raw is not None else 0
        return self._applied

    def get(self, partition: int, keys: list[bytes]) -> list[bytes | None]:
        head = _head(partition)
        return cast(list[bytes | None], self.db.get([head + k for k in keys]))  # a list of keys: a list back

    def get_each(self, partitions: list[int], keys: list[bytes]) -> list[bytes | None]:
        # One multi-get for every shard: each call costs on its own, and RocksDB batches a call's lookups.
        heads = {partition: _head(partition) for partition in set(partitions)}
        return cast(list[bytes | None], self.db.get([heads[p] + key for p, key in zip(partitions, keys, strict=True)]))

    def scan(self, partition: int, prefix: bytes, start_after: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        return list(self._iterate(partition, prefix, start_after, limit))

    def _iterate(self, partition: int, prefix: bytes, start_after: bytes, limit: int | None = None,
                 ) -> Iterator[tuple[bytes, bytes]]:
        head = _head(partition)
        start = head + max(prefix, start_after + b"\x00") if start_after else head + prefix
        end = prefix_end(prefix)
        options = ReadOptions()  # kept referenced for the whole scan (rocksdict stops early otherwise)
        options.set_iterate_upper_bound(head + end if end is not None else _head(partition + 1))
        cut = len(head)
        for n, (key, raw) in enumerate(raw_items(self.db, from_key=start, read_opt=options), 1):
            yield key[cut:], raw
            if limit is not None and n >= limit:
                return

    def apply(self, writes: StateWrites, applied_offset: int) -> None:
        assert applied_offset >= self._applied, f"applied offset went back: {applied_offset} < {self._applied}"
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        heads: dict[int, bytes] = {}
        for (partition, key), raw in writes.items():
            head = heads.get(partition)
            if head is None:
                head = heads[partition] = _head(partition)
            put(head + key, raw)
        batch.put(APPLIED_KEY, OFFSET.pack(applied_offset))
        self.db.write(batch, self._write_options)
        self._applied = applied_offset

    def flush(self, force: bool = False) -> int:
        with self._flush_lock:
            if self._db is None or self._applied == self._durable:
                return self._durable
            if not force and time.monotonic() - self._last_flush < self.flush_interval_s:
                return self._durable
            applied = self._applied  # the memtable flushed now holds everything applied before this line
            self._db.flush(True)
            self._last_flush = time.monotonic()
            self._durable = applied
            return applied

    def rewind(self, applied_offset: int) -> None:
        assert applied_offset <= self._applied, f"a rewind forward: {applied_offset} > {self._applied}"
        with self._flush_lock:
            self.db.put(APPLIED_KEY, OFFSET.pack(applied_offset), self._write_options)
            self.db.flush(True)
            self._applied = self._durable = applied_offset

    def snapshot(self, partition: int) -> tuple[int, Iterator[tuple[bytes, bytes]]]:
        # rocksdict's snapshot iterators do not isolate (0.3.29), its point reads do. Keys are never removed
        # (deletes leave tombstones), so walking the live keys and reading each through the snapshot gives
        # exactly the snapshot's contents.
        snap = self.db.snapshot()
        raw = snapshot_get(snap, APPLIED_KEY)
        offset = OFFSET.unpack(raw)[0] if raw is not None else 0
        head = _head(partition)

        def entries() -> Iterator[tuple[bytes, bytes]]:
            for key, _ in self._iterate(partition, b"", b""):
                state = snapshot_get(snap, head + key)
                if state is not None:
                    yield key, state

        return offset, entries()

    def copy_out(self) -> tuple[int, Iterator[tuple[bytes, bytes]]]:
        snap = self.db.snapshot()  # point reads through it, over the live keys: see snapshot()
        raw = snapshot_get(snap, APPLIED_KEY)
        offset = OFFSET.unpack(raw)[0] if raw is not None else 0

        def records() -> Iterator[tuple[bytes, bytes]]:
            options = ReadOptions()  # kept referenced for the whole scan (rocksdict stops early otherwise)
            options.set_iterate_upper_bound(DATA_END)
            for key in raw_keys(self.db, from_key=DATA, read_opt=options):
                state = snapshot_get(snap, key)
                if state is not None:
                    yield key[len(DATA):], state

        return offset, records()

    def clear(self) -> None:
        with self._flush_lock:
            batch = WriteBatch(raw_mode=True)
            batch.delete_range(DATA, DATA_END)
            batch.put(APPLIED_KEY, OFFSET.pack(0))
            self.db.write(batch, self._write_options)
            self._applied = self._durable = 0

    def put_copied(self, records: list[tuple[bytes, bytes]]) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, state in records:
            batch.put(DATA + key, state)
        self.db.write(batch, self._write_options)

    def set_applied(self, applied_offset: int) -> None:
        with self._flush_lock:
            self.db.put(APPLIED_KEY, OFFSET.pack(applied_offset), self._write_options)
            self.db.flush(True)
            self._applied = self._durable = applied_offset

    def partition_sizes(self) -> dict[int, int]:
        sizes: dict[int, int] = {}
        options = ReadOptions()
        options.set_iterate_upper_bound(bytes([DATA[0] + 1]))
        for key in raw_keys(self.db, from_key=DATA, read_opt=options):
            partition = PARTITION.unpack_from(key, 1)[0]
            sizes[partition] = sizes.get(partition, 0) + 1
        return sizes

    def close(self) -> None:
        if self._db is None:
            return
        self.flush(force=True)
        self._db.close()
        self._db = None

"""KV state in memory with periodic snapshots to disk: the seed's second option, for stores whose keys fit
in memory. A snapshot (``kv/memory.snapshot``) holds every partition and the applied offset it reflects,
written to a temporary file, fsynced and renamed into place; after a crash the commitlog replays from its
offset. The dispatcher flush service calls :meth:`flush` every second; a snapshot is written when at least
``snapshot_interval_s`` passed and something changed.

File layout: ``>8sq`` magic, applied offset; then per entry ``>IHI`` partition, key length, state length,
key, state; ``>I`` CRC32 of everything before it at the end.
"""

import bisect
import logging
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from broker.kv.kv_state_store import PARTITION, KvStateStore, StateWrites, in_scan
from common.atomic_file import write_file_atomically

log = logging.getLogger(__name__)

MAGIC = b"RMQKVSN1"
HEAD = struct.Struct(">8sq")
ENTRY = struct.Struct(">IHI")
CRC = struct.Struct(">I")
SNAPSHOT_FILE = "memory.snapshot"
_NOTHING: dict[bytes, bytes] = {}  # a partition never written (get_each reads without the lock)


class MemoryKvStateStore(KvStateStore):
    def __init__(self, root: Path, snapshot_interval_s: float = 10.0) -> None:
        self.root = root
        self.snapshot_interval_s = snapshot_interval_s
        self._partitions: dict[int, dict[bytes, bytes]] = {}
        self._sorted: dict[int, list[bytes]] = {}  # sorted keys per partition, rebuilt lazily for scans
        self._applied = 0
        self._durable = 0
        self._last_snapshot = time.monotonic()
        self._lock = threading.Lock()
        self._snapshot_lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self.root / SNAPSHOT_FILE

    def load(self) -> int:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            self._applied = self._durable = self._read_snapshot(self.path.read_bytes())
        log.info("kv_memory_loaded keys=%d applied=%d", sum(map(len, self._partitions.values())), self._applied)
        return self._applied

    def _read_snapshot(self, data: bytes) -> int:
        assert len(data) >= HEAD.size + CRC.size, f"{self.path}: truncated"
        assert CRC.unpack_from(data, len(data) - CRC.size)[0] == zlib.crc32(memoryview(data)[: -CRC.size]), \
            f"{self.path}: CRC mismatch"
        magic, applied = HEAD.unpack_from(data)
        assert magic == MAGIC, f"{self.path}: not a KV snapshot"
        pos, end = HEAD.size, len(data) - CRC.size
        partitions = self._partitions
        while pos < end:
            partition, key_len, state_len = ENTRY.unpack_from(data, pos)
            pos += ENTRY.size
            key = data[pos : pos + key_len]
            pos += key_len
            partitions.setdefault(partition, {})[key] = data[pos : pos + state_len]
            pos += state_len
        return applied

    def get(self, partition: int, keys: list[bytes]) -> list[bytes | None]:
        part = self._partitions.get(partition)
        return [part.get(k) for k in keys] if part else [None] * len(keys)

    def get_each(self, partitions: list[int], keys: list[bytes]) -> list[bytes | None]:
        parts = self._partitions
        return [parts.get(p, _NOTHING).get(k) for p, k in zip(partitions, keys, strict=True)]

    def scan(self, partition: int, prefix: bytes, start_after: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        with self._lock:
            part = self._partitions.get(partition, {})
            keys = self._sorted.get(partition)
            if keys is None:
                keys = self._sorted[partition] = sorted(part)
            i = bisect.bisect_right(keys, start_after) if start_after >= prefix else bisect.bisect_left(keys, prefix)
            out: list[tuple[bytes, bytes]] = []
            while i < len(keys) and len(out) < limit and in_scan(keys[i], prefix, start_after):
                out.append((keys[i], part[keys[i]]))
                i += 1
            return out

    def apply(self, writes: StateWrites, applied_offset: int) -> None:
        assert applied_offset >= self._applied, f"applied offset went back: {applied_offset} < {self._applied}"
        with self._lock:
            for (partition, key), raw in writes.items():
                part = self._partitions.get(partition)
                if part is None:
                    part = self._partitions[partition] = {}
                if key not in part:
                    self._sorted.pop(partition, None)
                part[key] = raw
            self._applied = applied_offset

    def flush(self, force: bool = False) -> int:
        with self._snapshot_lock:
            if self._applied == self._durable:
                return self._durable
            if not force and time.monotonic() - self._last_snapshot < self.snapshot_interval_s:
                return self._durable
            with self._lock:  # a consistent copy; the write to disk happens outside the lock
                applied = self._applied
                copy = {p: dict(part) for p, part in self._partitions.items()}
            self._write_snapshot(copy, applied)
            self._last_snapshot = time.monotonic()
            self._durable = applied
            return applied

    def rewind(self, applied_offset: int) -> None:
        assert applied_offset <= self._applied, f"a rewind forward: {applied_offset} > {self._applied}"
        self._snapshot_as_of(applied_offset)

    def _snapshot_as_of(self, applied_offset: int) -> None:
        """The state now, said to reflect ``applied_offset``, written to disk at once."""
        with self._snapshot_lock:
            with self._lock:
                self._applied = applied_offset
                copy = {p: dict(part) for p, part in self._partitions.items()}
            self._write_snapshot(copy, applied_offset)
            self._durable = applied_offset

    def _write_snapshot(self, partitions: dict[int, dict[bytes, bytes]], applied: int) -> None:
        chunks = [HEAD.pack(MAGIC, applied)]
        pack = ENTRY.pack
        for partition, part in partitions.items():
            for key, raw in part.items():
                chunks += (pack(partition, len(key), len(raw)), key, raw)
        data = b"".join(chunks)
        write_file_atomically(self.path, data + CRC.pack(zlib.crc32(data)))
        log.info("kv_memory_snapshot_written applied=%d bytes=%d", applied, len(data))

    def snapshot(self, partition: int) -> tuple[int, Iterator[tuple[bytes, bytes]]]:
        with self._lock:
            applied = self._applied
            entries = sorted(self._partitions.get(partition, {}).items())
        return applied, iter(entries)

    def copy_out(self) -> tuple[int, Iterator[tuple[bytes, bytes]]]:
        with self._lock:
            applied = self._applied
            records = [(PARTITION.pack(p) + key, raw)
                       for p, part in self._partitions.items() for key, raw in part.items()]
        return applied, iter(records)

    def clear(self) -> None:
        with self._lock:
            self._partitions.clear()
            self._sorted.clear()
            self._applied = 0

    def put_copied(self, records: list[tuple[bytes, bytes]]) -> None:
        with self._lock:
            for raw_key, raw in records:
                partition = PARTITION.unpack_from(raw_key)[0]
                self._partitions.setdefault(partition, {})[raw_key[PARTITION.size:]] = raw
                self._sorted.pop(partition, None)

    def set_applied(self, applied_offset: int) -> None:
        self._snapshot_as_of(applied_offset)

    def partition_sizes(self) -> dict[int, int]:
        return {p: len(part) for p, part in self._partitions.items()}

    def close(self) -> None:
        self.flush(force=True)

"""POP's durable state: one RocksDB (write-ahead log on) under ``<storePathRootDir>/pop``. A pop, an ack, a
change of invisible time or a dead-lettering is one atomic write batch, written before the broker answers: a
crash (SIGKILL included) loses no acked message's ack and no handed-out message, and the scan offset never gets
ahead of the in-flight entries it covers (they are written together). Under SYNC_FLUSH each batch is synced.

Keys (group and topic names cannot hold NUL):
    ``S`` group NUL topic NUL queue id (>i)              -> scan offset (>q)
    ``I`` group NUL topic NUL queue id (>i) offset (>q)  -> until ms, reconsume times, delivery (>qiq), message group
    ``H`` group NUL topic NUL queue id (>i) offset (>q)  -> message group (FIFO: read, held back)
"""

import functools
import struct
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import WriteBatch, WriteOptions

from broker.pop.pop_queue_state import InFlight, PopKey, QueuePopState
from broker.rocksdb_raw import open_raw, raw_items, raw_keys

QUEUE_ID = struct.Struct(">i")
OFFSET = struct.Struct(">q")
IN_FLIGHT = struct.Struct(">qiq")
SCAN, IN_FLIGHT_TAG, HELD = b"S", b"I", b"H"


@functools.lru_cache(maxsize=65536)
def _queue_key(key: PopKey) -> bytes:
    group, topic, queue_id = key
    return b"%s\x00%s\x00%s" % (group.encode(), topic.encode(), QUEUE_ID.pack(queue_id))


def _split(raw: bytes) -> tuple[PopKey, bytes]:
    group, topic, rest = raw.split(b"\x00", 2)
    return (group.decode(), topic.decode(), QUEUE_ID.unpack_from(rest)[0]), rest[QUEUE_ID.size:]


@dataclass(slots=True)
class PopWrite:
    """One atomic change: what to put and what to delete."""

    scan: dict[PopKey, int] = field(default_factory=dict)
    in_flight: dict[tuple[PopKey, int], InFlight] = field(default_factory=dict)
    held: dict[tuple[PopKey, int], str] = field(default_factory=dict)
    done_in_flight: set[tuple[PopKey, int]] = field(default_factory=set)
    done_held: set[tuple[PopKey, int]] = field(default_factory=set)
    done_scan: set[PopKey] = field(default_factory=set)  # queues forgotten whole

    def __bool__(self) -> bool:
        return bool(self.scan or self.in_flight or self.held or self.done_in_flight or self.done_held
                    or self.done_scan)


class PopStateStore:
    def __init__(self, path: Path, sync: bool) -> None:
        self.db = open_raw(path)
        self._options = WriteOptions()
        self._options.sync = sync

    def load(self) -> dict[PopKey, QueuePopState]:
        states: dict[PopKey, QueuePopState] = {}
        for raw, value in raw_items(self.db):
            key, rest = _split(raw[1:])
            tag = raw[:1]
            if tag == SCAN:
                state = states.setdefault(key, QueuePopState(0))
                state.scan_offset = OFFSET.unpack(value)[0]
            elif tag == IN_FLIGHT_TAG:
                until, times, delivery = IN_FLIGHT.unpack_from(value)
                states.setdefault(key, QueuePopState(0)).in_flight[OFFSET.unpack(rest)[0]] = InFlight(
                    until, times, delivery, value[IN_FLIGHT.size:].decode())
            elif tag == HELD:
                states.setdefault(key, QueuePopState(0)).held[OFFSET.unpack(rest)[0]] = value.decode()
        return states

    def write(self, change: PopWrite) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, offset in change.scan.items():
            batch.put(SCAN + _queue_key(key), OFFSET.pack(offset))
        for (key, offset), f in change.in_flight.items():
            batch.put(IN_FLIGHT_TAG + _queue_key(key) + OFFSET.pack(offset),
                      IN_FLIGHT.pack(f.invisible_until_ms, f.reconsume_times, f.delivery) + f.message_group.encode())
        for (key, offset), group in change.held.items():
            batch.put(HELD + _queue_key(key) + OFFSET.pack(offset), group.encode())
        for key, offset in change.done_in_flight:
            batch.delete(IN_FLIGHT_TAG + _queue_key(key) + OFFSET.pack(offset))
        for key, offset in change.done_held:
            batch.delete(HELD + _queue_key(key) + OFFSET.pack(offset))
        for key in change.done_scan:
            batch.delete(SCAN + _queue_key(key))
        self.db.write(batch, self._options)

    def clear(self) -> None:
        batch = WriteBatch(raw_mode=True)
        for key in raw_keys(self.db):
            batch.delete(key)
        self.db.write(batch, self._options)

    def close(self) -> None:
        self.db.close()

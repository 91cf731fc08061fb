"""POP's durable state: one RocksDB (write-ahead log on) under ``<storePathRootDir>/pop``. A pop, an ack, a
change of invisible time or a dead-lettering is one atomic write batch, written before the broker answers: a
crash (SIGKILL included) loses no acked message's ack and no handed-out message, and the scan offset never gets
ahead of the in-flight entries it covers (they are written together). Under SYNC_FLUSH each batch is synced.

Keys (group and topic names cannot hold NUL):
    ``S`` group NUL topic NUL queue id (>i)                -> scan offset (>q)
    ``D`` group NUL topic NUL queue id (>i) delivery (>q)  -> the delivery's messages still in flight, each
                                                              offset, until ms, reconsume times, group length
                                                              (>qqiH) and message group
    ``H`` group NUL topic NUL queue id (>i) offset (>q)    -> message group (FIFO: read, held back)

A delivery (what one pop handed out of one queue) is one record: rewritten when some of its messages are acked,
deleted when the last one is. Stores written before deliveries were kept whole (``I``: one record a message) are
rewritten so on load. There is no way back: a broker that predates deliveries ignores ``D`` records.

A slave copies the whole database from its master (:meth:`PopStateStore.snapshot`, :meth:`replace_with`): the
records as they are, so a copy needs no codec of its own beyond the length-prefixed packing.
"""

import functools
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import Rdict, WriteBatch, WriteOptions

from broker.pop.pop_queue_state import InFlight, PopKey, QueuePopState
from broker.rocksdb_raw import ReopenedAfterRefusal, open_raw, raw_items, raw_keys
from broker.rocksdb_records import decode_records, encode_records

QUEUE_ID = struct.Struct(">i")
OFFSET = struct.Struct(">q")
IN_FLIGHT = struct.Struct(">qiq")  # the older one-record-a-message form
ENTRY = struct.Struct(">qqiH")
SCAN, DELIVERY, HELD, IN_FLIGHT_TAG = b"S", b"D", b"H", b"I"


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
    # (queue, delivery) -> the delivery's messages in flight now (offset -> entry); empty: all settled, delete it
    deliveries: dict[tuple[PopKey, int], dict[int, InFlight]] = field(default_factory=dict)
    held: dict[tuple[PopKey, int], str] = field(default_factory=dict)
    done_held: set[tuple[PopKey, int]] = field(default_factory=set)
    done_scan: set[PopKey] = field(default_factory=set)  # queues forgotten whole

    def __bool__(self) -> bool:
        return bool(self.scan or self.deliveries or self.held or self.done_held or self.done_scan)


class PopStateStore:
    def __init__(self, path: Path, sync: bool) -> None:
        self._database = ReopenedAfterRefusal(open_raw(path), path)
        self._options = WriteOptions()
        self._options.sync = sync
        # A version names the state as of now: this store's opening and its writes since. A slave that holds a copy
        # of version V asks for V's successor only (an unchanged state is not read nor sent again).
        self._opening = os.urandom(8).hex()
        self._writes = 0
        self.copied_from = ""  # the master's version this store is a copy of ("": none, or written since)

    @property
    def version(self) -> str:
        return f"{self._opening}-{self._writes}"

    def _changing(self) -> None:
        """Any write: before it, so a failed one changes the version too (a copy taken again is harmless)."""
        self._writes += 1
        self.copied_from = ""

    def load(self) -> dict[PopKey, QueuePopState]:
        states: dict[PopKey, QueuePopState] = {}
        older_keys: list[bytes] = []
        older: dict[tuple[PopKey, int], dict[int, InFlight]] = {}
        for raw, value in raw_items(self.db):
            key, rest = _split(raw[1:])
            tag = raw[:1]
            if tag == SCAN:
                state = states.setdefault(key, QueuePopState(0))
                state.scan_offset = OFFSET.unpack(value)[0]
            elif tag == DELIVERY:
                state = states.setdefault(key, QueuePopState(0))
                for offset, entry in _entries(value, OFFSET.unpack(rest)[0]):
                    state.put_in_flight(offset, entry)
            elif tag == HELD:
                states.setdefault(key, QueuePopState(0)).held[OFFSET.unpack(rest)[0]] = value.decode()
            elif tag == IN_FLIGHT_TAG:  # an older store's message: rewritten as a delivery of its own
                until, times, delivery = IN_FLIGHT.unpack_from(value)
                offset = OFFSET.unpack(rest)[0]
                entry = InFlight(until, times, delivery, value[IN_FLIGHT.size:].decode())
                states.setdefault(key, QueuePopState(0)).put_in_flight(offset, entry)
                older.setdefault((key, delivery), {})[offset] = entry
                older_keys.append(raw)
        if older_keys:  # one atomic rewrite: a crash in it leaves the older records, read so again
            batch = WriteBatch(raw_mode=True)
            for raw in older_keys:
                batch.delete(raw)
            self._put_deliveries(batch, older)
            self._write_batch(batch)
        return states

    def write(self, change: PopWrite) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, offset in change.scan.items():
            batch.put(SCAN + _queue_key(key), OFFSET.pack(offset))
        self._put_deliveries(batch, change.deliveries)
        for (key, offset), group in change.held.items():
            batch.put(HELD + _queue_key(key) + OFFSET.pack(offset), group.encode())
        for key, offset in change.done_held:
            batch.delete(HELD + _queue_key(key) + OFFSET.pack(offset))
        for key in change.done_scan:
            batch.delete(SCAN + _queue_key(key))
        self._write_batch(batch)

    @staticmethod
    def _put_deliveries(batch: WriteBatch, deliveries: dict[tuple[PopKey, int], dict[int, InFlight]]) -> None:
        pack = ENTRY.pack
        for (key, delivery), entries in deliveries.items():
            db_key = DELIVERY + _queue_key(key) + OFFSET.pack(delivery)
            if not entries:
                batch.delete(db_key)
                continue
            parts: list[bytes] = []
            for offset, f in entries.items():
                group = f.message_group.encode()
                parts += (pack(offset, f.invisible_until_ms, f.reconsume_times, len(group)), group)
            batch.put(db_key, b"".join(parts))

    def clear(self) -> None:
        self.replace_with(b"")

    def snapshot(self) -> bytes:
        """Every record, as :func:`encode_snapshot` packs them: what a slave copies. The caller keeps writes out
        (POP's lock) for a consistent copy."""
        return encode_snapshot(raw_items(self.db))

    def replace_with(self, snapshot: bytes) -> None:
        """This store becomes ``snapshot`` (another's :meth:`snapshot`), in one atomic write batch."""
        items = decode_snapshot(snapshot)
        batch = WriteBatch(raw_mode=True)
        for key in raw_keys(self.db):
            if key not in items:
                batch.delete(key)
        for key, value in items.items():
            batch.put(key, value)
        self._write_batch(batch)

    def _write_batch(self, batch: WriteBatch) -> None:
        """One atomic write; after the disk refused one, the next reopens the database first: POP works again once
        there is room, without a restart."""
        self._changing()
        self._database.write(lambda db: db.write(batch, self._options))

    @property
    def db(self) -> Rdict:
        return self._database.db

    def close(self) -> None:
        self.db.close()


def _entries(value: bytes, delivery: int) -> list[tuple[int, InFlight]]:
    out: list[tuple[int, InFlight]] = []
    pos = 0
    while pos < len(value):
        offset, until, times, group_len = ENTRY.unpack_from(value, pos)
        pos += ENTRY.size
        out.append((offset, InFlight(until, times, delivery, value[pos:pos + group_len].decode())))
        pos += group_len
    return out


def encode_snapshot(items: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The records as ``rocksdb_records`` frames them."""
    return encode_records(items)


def decode_snapshot(snapshot: bytes) -> dict[bytes, bytes]:
    items: dict[bytes, bytes] = {}
    for key, value in decode_records(snapshot, "POP state snapshot"):
        if value is None or key[:1] not in (SCAN, DELIVERY, HELD, IN_FLIGHT_TAG) or key.count(b"\x00") < 2:
            raise ValueError(f"POP state snapshot holds a key of no POP record: {key[:40]!r}")
        items[key] = value
    return items

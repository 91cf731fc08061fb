"""Pending timers in RocksDB, filled by the commitlog's dispatch chain from the timer topic's records.

Keys (raw bytes, so RocksDB keeps them in due order)::

    timer       >QQ due time (epoch ms), commitlog offset of the timer-topic record  ->  the record's bytes
    checkpoint  b"\\xffcheckpoint"                                                    ->  >q commitlog offset
    deletion    b"\\xffdeleted/" topic                                                ->  >q commitlog offset

A timer holds a copy of its record, so a pending timer never depends on commitlog retention (a delay of weeks
outlives ``fileReservedTime``). The WAL is on: one dispatch is one WriteBatch of its timers and the checkpoint,
so after a process kill RocksDB holds a prefix of the batches consistent with the checkpoint beside it, and the
chain replays the rest from the commitlog; records below the checkpoint are skipped, so a replay never brings
back a timer that was delivered. The WAL is synced at each ``flush`` (the dispatcher flush service, every
``flushIntervalConsumeQueue``), and only then does :meth:`checkpoint` move: the commitlog below it may expire.

A timer taken out - delivered, dropped or recalled - is deleted (:meth:`remove`) after a marker naming it is
appended to the timer topic's queue 1, which only the broker writes (its body: the keys of the timers taken out).
A marker's dispatch deletes them too, in the same WriteBatch as the checkpoint that passes it, so whatever replays
the commitlog - recovery, a slave (whose timer store sees every timer its master stored, and would deliver them all
again once promoted) - takes them out as well. ``delivery_lock`` is held by the delivery from taking due timers to
removing them, and by a recall from finding its timer to removing it: a recalled message is never delivered, a
delivered one never recalled.

A deletion key holds where the topic's last deleteTopic record is in the commitlog (written when dispatch reaches
it, in order with the timers): a timer recorded before it is dropped when due (the topic it was for is gone; one
made again under the name must not start with it), one recorded after it is delivered, and so is one of a topic
this broker has no config of but never saw deleted (a replica promoted before its copy of a new topic).

Due times fit in 7 bytes (any time before the year 2 million), so the checkpoint's 0xff key sorts after every
timer. Deleted timers leave tombstones at the front of the key space until compaction: scans start at a floor
below which no timer is pending, not at the first key.
"""

import logging
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from rocksdict import Rdict, ReadOptions, WriteBatch

from broker.rocksdb_raw import open_raw, raw_items, raw_keys, snapshot_get
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest
from common.message_codec import decode_record
from common.message_properties import TIMER_OUT_MS_NEEDLE, find_property
from common.timer_topic import TIMER_DELETES_QUEUE_ID, TIMER_TOPIC

log = logging.getLogger(__name__)

TIMER_KEY = struct.Struct(">QQ")  # due ms, physical offset
OFFSET = struct.Struct(">q")
CHECKPOINT_KEY = b"\xffcheckpoint"
DELETION_PREFIX = b"\xffdeleted/"
# Where this store began noting deletions: a store of an older release knows none before its checkpoint then.
DELETIONS_FROM_KEY = b"\xffdeletions_from"
META_START = b"\xff"  # every timer key sorts below it
ALL_KEYS_END = b"\xff\xff"  # every key sorts below it (the meta keys' names are ASCII)

ReadAt = Callable[[int, int], bytes]
StartOffset = Callable[[], int]
DueListener = Callable[[int], None]
Timer = tuple[bytes, bytes]  # key, record


def timer_key(due_ms: int, physical_offset: int) -> bytes:
    return TIMER_KEY.pack(due_ms, physical_offset)


def due_of_key(key: bytes) -> int:
    return TIMER_KEY.unpack(key)[0]


class TimerMessageStore(CommitLogDispatcher):
    name = "timer"
    keeps_commit_log = True  # timers dispatched after the last WAL sync are rebuilt only by replay

    def __init__(self, root: Path, read_at: ReadAt, fresh_start: StartOffset = lambda: 0) -> None:
        self.root = root
        self._read_at = read_at
        # Where a new timer store starts: no timer record is older than the timer store, so a store that had none
        # (one from before delayed messages) is not replayed whole for it.
        self._fresh_start = fresh_start
        self._db: Rdict | None = None
        self._applied = 0  # commitlog offset after the last record looked at
        self._stored = 0  # the checkpoint as written in RocksDB
        self._durable = 0  # the checkpoint as of the last WAL sync
        self._apply_lock = threading.Lock()  # dispatch (a reput pass) and flush (flush thread) write the checkpoint
        self._floor_lock = threading.Lock()
        self._floor = b""  # no pending timer sorts below it
        # first_due's last find: no pending timer sorts in [floor, it). Recalled (or delivered) timers leave
        # tombstones that a scan from the floor walked past at every call, ten times a second (the timers review:
        # 200k recalled far-future timers, 17 ms a call). Forgotten when a timer is added below it or the floor is
        # lowered; ``_hint_gen`` counts those, so a scan that raced one does not keep its find.
        self._first_hint = b""
        self._hint_gen = 0
        self._pending = 0
        self.delivery_lock = threading.Lock()  # see the module's docstring
        # Under ``delivery_lock``: timers the delivery holds, waiting for the broker that leads their static topic's
        # logic queue now (take_due passes over them), and of those the ones it is forwarding there (not recallable
        # while the forward is under way: it may store them).
        self.held: set[bytes] = set()
        self.forwarding: set[bytes] = set()
        self.due_listeners: list[DueListener] = []  # told the earliest due time of each dispatch that added timers

    @property
    def db(self) -> Rdict:
        assert self._db is not None, "timer store is not loaded"
        return self._db

    @property
    def pending(self) -> int:
        """Timers stored and not yet delivered."""
        return self._pending

    # -- dispatch chain ----------------------------------------------------------------------------
    def load(self) -> None:
        self._db = open_raw(self.root)
        raw = self._db.get(CHECKPOINT_KEY)
        if raw is None:
            start = self._fresh_start()
            self._db.put(CHECKPOINT_KEY, OFFSET.pack(start))
            self._db.flush_wal(True)
            log.info("timer_store_created path=%s checkpoint=%d", self.root, start)
            raw = OFFSET.pack(start)
        self._applied = self._stored = self._durable = OFFSET.unpack(raw)[0]
        self.deletions_from = self._deletions_from(self._applied)
        read = ReadOptions()  # kept referenced for the whole scan (rocksdict stops early otherwise)
        read.set_iterate_upper_bound(META_START)
        self._pending = sum(1 for _ in raw_keys(self._db, read_opt=read))
        first = self.first_due()
        log.info("timer_loaded pending=%d checkpoint=%d first_due_ms=%s", self._pending, self._applied,
                 first if first is not None else "none")

    def _deletions_from(self, checkpoint: int) -> int:
        raw = self.db.get(DELETIONS_FROM_KEY)
        if raw is None:  # new, or of a release that noted no deletions: known from here on (replayed ones too)
            self.db.put(DELETIONS_FROM_KEY, OFFSET.pack(checkpoint))
            self.db.flush_wal(True)
            return checkpoint
        return int(OFFSET.unpack(raw)[0])

    def checkpoint(self) -> int:
        return self._durable

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        with self._apply_lock:
            first_due = self._dispatch(requests, end_offset)
        if first_due is not None:
            for listener in self.due_listeners:
                listener(first_due)

    def _dispatch(self, requests: list[DispatchRequest], end_offset: int) -> int | None:
        if end_offset <= self._applied:
            return None  # re-dispatch of what was stored before a restart
        applied_from = self._applied
        batch: WriteBatch | None = None
        first_key = META_START
        added: set[bytes] = set()
        taken_out: set[bytes] = set()
        for topic, queue_id, _, physical, size, _, _, props in requests:
            if topic != TIMER_TOPIC or physical < applied_from:
                continue
            if batch is None:
                batch = WriteBatch(raw_mode=True)
            if queue_id == TIMER_DELETES_QUEUE_ID:  # the timers it names go (if still there: a replay, a replica)
                keys = marked_keys(self._read_at(physical, size))
                for key, stored in zip(keys, self._get_each(keys), strict=True):
                    if key in added:
                        added.discard(key)
                    elif key in taken_out or stored is None:
                        continue  # gone already (the master deleted it when it appended the marker): no tombstone
                    else:
                        taken_out.add(key)
                    batch.delete(key)
                continue
            key = timer_key(self._due_of(props, physical), physical)
            batch.put(key, self._read_at(physical, size))
            first_key = min(first_key, key)
            added.add(key)
        if batch is None:
            self._applied = end_offset
            return None
        batch.put(CHECKPOINT_KEY, OFFSET.pack(end_offset))
        self.db.write(batch)
        # Applied once written: a refused write (the store fail-stops) must not let a flush move the checkpoint
        # past timers that are not stored, or the restart's replay would skip them.
        self._applied = self._stored = end_offset
        with self._floor_lock:
            self._pending += len(added) - len(taken_out)
            self._lower_floor(first_key)
        return due_of_key(first_key) if added else None

    def topic_deleted(self, topic: str, at_offset: int) -> None:
        """Remember the latest deletion of ``topic`` (a replay of an older one keeps the later)."""
        key = DELETION_PREFIX + topic.encode()
        with self._apply_lock:
            if at_offset > self.deleted_at(topic):
                self.db.put(key, OFFSET.pack(at_offset))
                log.info("timer_topic_deletion_noted topic=%s commitlog_offset=%d", topic, at_offset)

    def deleted_at(self, topic: str) -> int:
        """The commitlog offset of the latest deleteTopic of ``topic`` dispatched here; -1 for none."""
        raw = self.db.get(DELETION_PREFIX + topic.encode())
        return -1 if raw is None else OFFSET.unpack(raw)[0]

    def stale_before(self, topic: str, configured: bool) -> int:
        """The commitlog offset below which ``topic``'s timers were recorded for a topic that is gone: its latest
        deletion; for a topic with no config here, also where this store began noting deletions (one recorded
        before may be of a topic deleted then, which only a config's absence tells)."""
        deleted = self.deleted_at(topic)
        return deleted if configured else max(deleted, self.deletions_from)

    @staticmethod
    def _due_of(props: bytes, physical: int) -> int:
        raw = find_property(props, TIMER_OUT_MS_NEEDLE)
        if raw is None or not raw.isdigit() or len(raw) > 16:
            # Only the broker writes this topic: a record without its due time is another version's or a bug's.
            # Due at once: its delivery then says what is missing, rather than it waiting forever.
            log.warning("timer_record_without_due physical_offset=%d", physical)
            return 0
        return int(raw)

    def flush(self) -> None:
        with self._apply_lock:
            applied = self._applied
            if applied > self._stored:  # records since the last timer were other topics': move the mark
                self.db.put(CHECKPOINT_KEY, OFFSET.pack(applied))
                self._stored = applied
        self.db.flush_wal(True)
        self._durable = applied

    def truncate_dirty(self, commit_log_end: int) -> None:
        if self._applied <= commit_log_end:
            return
        # Only after a machine crash with ASYNC_FLUSH: the commitlog lost records this store had taken. Their
        # timers stay (delivered as acknowledged); new records at those offsets must not be skipped.
        log.error("timer_applied_past_commitlog_end applied=%d commitlog_end=%d", self._applied, commit_log_end)
        with self._apply_lock:
            self.db.put(CHECKPOINT_KEY, OFFSET.pack(commit_log_end))
            self._applied = self._stored = self._durable = commit_log_end
            self._clamp_deletions(commit_log_end)

    def _clamp_deletions(self, commit_log_end: int) -> None:
        """A deletion noted past the end (its record lost with the tail, the deletion itself kept in metadata) is
        moved to the end: timers recorded before it stay the deleted topic's, and new ones at those offsets, a topic
        made again, are not taken for its."""
        for key, raw in list(raw_items(self.db, from_key=DELETION_PREFIX)):
            if not key.startswith(DELETION_PREFIX):
                break
            if OFFSET.unpack(raw)[0] > commit_log_end:
                self.db.put(key, OFFSET.pack(commit_log_end))

    # -- delivery ----------------------------------------------------------------------------------
    def pending_record(self, due_ms: int, physical_offset: int) -> bytes | None:
        """The stored record of the timer due at ``due_ms`` from ``physical_offset``; None when none is pending
        (delivered, recalled, or never stored here), or while it is being forwarded (``forwarding``). Under
        ``delivery_lock`` it stays so until :meth:`remove`."""
        key = timer_key(due_ms, physical_offset)
        return None if key in self.forwarding else self.db.get(key)

    def first_due(self) -> int | None:
        """The earliest due time pending, or None."""
        with self._floor_lock:
            start, gen = max(self._floor, self._first_hint), self._hint_gen
        found = META_START
        for key in raw_keys(self.db, from_key=start):
            found = min(key, META_START)
            break
        with self._floor_lock:
            if self._hint_gen == gen:
                self._first_hint = found
        return due_of_key(found) if found < META_START else None

    def _lower_floor(self, key: bytes) -> None:
        """Under the floor lock: a timer at ``key`` may be pending (added, or handed back)."""
        self._floor = min(self._floor, key)
        if key < self._first_hint:
            self._first_hint = b""
            self._hint_gen += 1

    def take_due(self, now_ms: int, limit: int, max_bytes: int | None = None) -> list[Timer]:
        """Up to ``limit`` timers due at ``now_ms`` or before, earliest first, and once past ``max_bytes`` of
        records no more (at least one). They stay stored until
        :meth:`remove`; hand them back with :meth:`give_back` if they could not be delivered. Timers in ``held``
        are passed over, not counted, and left below the scan floor: the delivery hands them back when it lets go
        of them."""
        with self._floor_lock:
            start = self._floor
            self._floor = META_START  # timers dispatched from now on lower it again
        upper = timer_key(now_ms + 1, 0)
        read = ReadOptions()
        read.set_iterate_upper_bound(upper)
        taken: list[Timer] = []
        size, full = 0, False
        for item in raw_items(self.db, from_key=start, read_opt=read):
            if item[0] in self.held:
                continue
            taken.append(item)
            size += len(item[1])
            if len(taken) >= limit or (max_bytes is not None and size >= max_bytes):
                full = True
                break
        resume = taken[-1][0] + b"\x00" if full else upper  # every timer below it was taken
        with self._floor_lock:
            self._floor = min(self._floor, resume)
        return taken

    def pending_between(self, from_ms: int, to_ms: int) -> Iterator[Timer]:
        """The timers due from ``from_ms`` to ``to_ms``, in due order, as they are now."""
        read = ReadOptions()  # kept referenced for the whole scan
        read.set_iterate_upper_bound(timer_key(to_ms + 1, 0))
        yield from raw_items(self.db, from_key=timer_key(from_ms, 0), read_opt=read)

    def take_keys(self, keys: list[bytes]) -> list[Timer]:
        """Those of ``keys`` still pending and not held, taken out as :meth:`take_due` takes them (the delivery
        removes or gives them back)."""
        return [(key, raw) for key, raw in zip(keys, self._get_each(keys), strict=True)
                if raw is not None and key not in self.held]

    def give_back(self, first_key: bytes) -> None:
        """Timers taken but not delivered, the first of them at ``first_key``: the next scan starts there."""
        with self._floor_lock:
            self._lower_floor(first_key)

    def remove(self, keys: list[bytes]) -> None:
        """Delete timers taken out (their marker appended: see the module's docstring), in one WriteBatch; the ones
        a marker's dispatch deleted already are not counted twice."""
        if not keys:
            return
        with self._apply_lock:
            present = [key for key, raw in zip(keys, self._get_each(keys), strict=True) if raw is not None]
            if not present:
                return
            batch = WriteBatch(raw_mode=True)
            for key in present:
                batch.delete(key)
            self.db.write(batch)
        with self._floor_lock:
            self._pending -= len(present)

    def _get_each(self, keys: list[bytes]) -> list[bytes | None]:
        return cast(list[bytes | None], self.db.get(list[Any](keys))) if keys else []  # one multi-get

    # -- a new replica's copy of its master's state (broker/ha/state_copy.py) -----------------------
    def copy_out(self) -> tuple[int, Iterator[tuple[bytes, bytes]]]:
        """Every record (timers, checkpoint, deletion notes) as of one moment: point reads through a snapshot over
        the live keys. A timer taken out after the snapshot is missed, which is what a replay gives too: its marker
        lies past the snapshot's checkpoint (a marker dispatched before it had deleted the timer in the snapshot)."""
        snap = self.db.snapshot()
        raw = snapshot_get(snap, CHECKPOINT_KEY)
        checkpoint = OFFSET.unpack(raw)[0] if raw is not None else 0

        def records() -> Iterator[tuple[bytes, bytes]]:
            for key in raw_keys(self.db):
                value = snapshot_get(snap, key)
                if value is not None:
                    yield key, value

        return checkpoint, records()

    def copy_in_begin(self) -> None:
        with self._apply_lock:
            batch = WriteBatch(raw_mode=True)
            batch.delete_range(b"", ALL_KEYS_END)
            batch.put(CHECKPOINT_KEY, OFFSET.pack(0))
            self.db.write(batch)
            self._adopt(0)

    def copy_in(self, records: list[tuple[bytes, bytes]]) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in records:
            batch.put(key, value)
        self.db.write(batch)

    def copy_in_end(self, applied_offset: int) -> None:
        with self._apply_lock:
            self.db.put(CHECKPOINT_KEY, OFFSET.pack(applied_offset))
            self.db.flush_wal(True)
            self._adopt(applied_offset)

    def _adopt(self, checkpoint: int) -> None:
        """What is in memory follows the records copied in (under the apply lock)."""
        self._applied = self._stored = self._durable = checkpoint
        self.deletions_from = self._deletions_from(checkpoint)
        read = ReadOptions()  # kept referenced for the whole scan
        read.set_iterate_upper_bound(META_START)
        pending = sum(1 for _ in raw_keys(self.db, read_opt=read))
        with self._floor_lock:
            self._pending = pending
            self._lower_floor(b"")

    def close(self) -> None:
        """After the message store shut down (its last dispatch and flush are in)."""
        if self._db is None:
            return
        db, self._db = self._db, None
        try:
            db.close()
        except Exception as exc:  # rocksdict's error for an I/O failure (a full disk): the WAL keeps what was synced
            raise OSError(f"closing the timer store: {exc}") from None
        log.info("timer_closed pending=%d checkpoint=%d", self._pending, self._stored)


def marker_body(keys: list[bytes]) -> bytes:
    """A marker's body: the keys of the timers it takes out."""
    assert all(len(key) == TIMER_KEY.size for key in keys), "timer keys are 16 bytes"
    return b"".join(keys)


def marked_keys(record: bytes) -> list[bytes]:
    """The timer keys a marker record (queue 1) names; none when its body is not a whole number of keys (only the
    broker writes these: logged, as another version's or a bug's)."""
    body = decode_record(record, verify_crc=False).body  # the reput read it whole already
    size = TIMER_KEY.size
    if len(body) % size:
        log.warning("timer_marker_malformed body_bytes=%d", len(body))
        return []
    return [body[i:i + size] for i in range(0, len(body), size)]

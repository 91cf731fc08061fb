"""All consume queues in one RocksDB (``storeType=defaultRocksDB``): no file per queue, so a million queues
cost keys, not files.

Keys (raw bytes, ordered for range scans; ``\\x00`` cannot occur in a topic name)::

    unit        b"U" + topic + b"\\x00" + queue id (>I) + queue offset (>q)  ->  >qiqq physical offset, size,
                                                                               tags code, store time
    queue meta  b"M" + topic + b"\\x00" + queue id (>I)                      ->  >qq min offset, max offset
    checkpoint  b"C"                                                          ->  >q commitlog offset dispatched

Writes go without the WAL. One dispatch is one WriteBatch holding its units, the min/max of every queue
it touched and the checkpoint, so whatever a crash leaves of RocksDB (its flushed memtables: a prefix of
the batches) is consistent with the checkpoint stored beside it; recovery re-dispatches the rest from
the commitlog. Min/max of every queue are also kept in memory (loaded at start): reads never ask RocksDB
for them.

Flush policy: the dispatcher flush service calls ``flush`` every ``flushIntervalConsumeQueue`` (1 s).
A RocksDB flush itself is cheap (a few ms), but each writes one small L0 table, and every four of them
trigger a compaction that rewrites the overlapping part of L1 -- with the units of many queues interleaved
in key order, most of it. Measured at 125k units/s, 100,000 queues, 60 s: flushing every second cost 83%
of a core and 0.80 GB of compaction writes; this policy 61% and 0.33 GB. So a call flushes only when
``flush_interval_s`` (10 s) passed since the last flush or the active memtable holds ``flush_bytes``
(48 MiB, about when RocksDB would switch memtables itself); otherwise it does nothing and the checkpoint
lags: a crash re-dispatches up to ~10 s more of the commitlog (idempotent). ``shutdown`` always flushes;
truncation at recovery and topic deletion flush at once, expiry at the next call. The one thing replay cannot
rebuild is the max offset of a queue whose messages all expired before a flush: ``prepare_expiry`` writes those
queues' bounds through the WAL before the segments go (see there).
"""

import logging
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rocksdict import AccessType, Rdict, ReadOptions, WriteBatch, WriteOptions

from broker.rocksdb_raw import broker_db_options, raw_items, synced_write_options, unlogged_write_options
from broker.store.consume_queue.consume_queue_store import (
    BoundaryType,
    ConsumeQueueStore,
    UnitTuple,
    bisect_offsets,
    offset_by_time,
)
from broker.store.consume_queue.deleted_queue_ends import DeletedQueueEnds
from broker.store.consume_queue.file_consume_queue import MAX_GAP_UNITS
from broker.store.dispatch.dispatch_request import DispatchRequest

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]

UNIT = struct.Struct(">qiqq")  # physical offset, size, tags code, store time
UNIT_CQ = struct.Struct(">qiq8x")  # the same bytes without the store time: a UnitTuple
META = struct.Struct(">qq")  # min offset, max offset
OFFSET = struct.Struct(">q")
QUEUE_ID = struct.Struct(">I")
UNIT_PREFIX = b"U"
META_PREFIX = b"M"
CHECKPOINT_KEY = b"C"
SEPARATOR = b"\x00"

DEFAULT_FLUSH_INTERVAL_S = 10.0
# Three quarters of RocksDB's default write buffer (64 MiB): a busy store flushes memtable-sized tables,
# about when RocksDB would switch memtables itself, and the checkpoint advances with them.
DEFAULT_FLUSH_BYTES = 48 * 1024 * 1024


def unit_key_prefix(topic: str, queue_id: int) -> bytes:
    return UNIT_PREFIX + topic.encode() + SEPARATOR + QUEUE_ID.pack(queue_id)


def meta_key(topic: str, queue_id: int) -> bytes:
    return META_PREFIX + topic.encode() + SEPARATOR + QUEUE_ID.pack(queue_id)


class ConsumeQueueDamaged(OSError):
    """RocksDB found the consume queue's files damaged: the storage's fault, said on one line with the remedy."""


class _Queue:
    """In-memory bounds of one queue: units exist exactly for [min_offset, max_offset)."""

    __slots__ = ("key", "max_offset", "meta_key", "min_offset", "prefix")

    def __init__(self, topic: str, queue_id: int, min_offset: int, max_offset: int) -> None:
        self.key = (topic, queue_id)
        self.prefix = unit_key_prefix(topic, queue_id)
        self.meta_key = meta_key(topic, queue_id)
        self.min_offset = min_offset
        self.max_offset = max_offset


def open_db(root: Path, read_only: bool = False) -> Rdict:
    options = broker_db_options()
    if read_only:
        return Rdict(str(root), options, access_type=AccessType.read_only(False))
    root.mkdir(parents=True, exist_ok=True)
    return Rdict(str(root), options)


def read_durable_checkpoint(root: Path) -> int | None:
    """The checkpoint as RocksDB has it on disk (read-only: works while another process has it open)."""
    db = open_db(root, read_only=True)
    try:
        raw = db.get(CHECKPOINT_KEY)
        return OFFSET.unpack(raw)[0] if raw is not None else None
    finally:
        db.close()


class RocksDBConsumeQueueStore(ConsumeQueueStore):
    def __init__(self, root: Path, store_time: Callable[[int], int], *,
                 flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S, flush_bytes: int = DEFAULT_FLUSH_BYTES,
                 commit_min: Callable[[], int] = lambda: 0) -> None:
        self.root = root
        self._store_time = store_time  # interface parity with the file store: the time is in the unit
        self._commit_min = commit_min  # the commitlog's first offset: a gap's cause (``_gap``)
        self.flush_interval_s = flush_interval_s
        self.flush_bytes = flush_bytes
        self._db: Rdict | None = None
        self._write_options = unlogged_write_options()
        self._synced_write_options = synced_write_options()
        self._queues: dict[QueueKey, _Queue] = {}
        self.deleted_ends = DeletedQueueEnds()
        self._dispatched_offset = 0
        self._checkpoint = 0
        self._dirty = False  # written since the last RocksDB flush
        self._flush_now = False  # a maintenance write wants the next flush call not to wait
        self._last_flush = time.monotonic()
        self._lock = threading.Lock()  # writers: dispatch, truncation, expiry, topic deletion
        self._flush_lock = threading.Lock()
        self.flush_count = 0  # RocksDB flushes done (for tests and diagnostics)

    @property
    def db(self) -> Rdict:
        assert self._db is not None, "RocksDB consume queue store is not loaded"
        return self._db

    # -- lifecycle ---------------------------------------------------------------------------------
    def load(self) -> None:
        if self._db is not None:
            return
        self._db = db = open_db(self.root)
        read_options = ReadOptions()
        read_options.set_iterate_upper_bound(bytes([META_PREFIX[0] + 1]))
        queues = {}
        for key, value in raw_items(db, from_key=META_PREFIX, read_opt=read_options):
            topic, queue_id = key[1:-5].decode(), QUEUE_ID.unpack_from(key, len(key) - 4)[0]
            low, high = META.unpack(value)
            queues[(topic, queue_id)] = _Queue(topic, queue_id, low, high)
        self._queues = queues
        raw = db.get(CHECKPOINT_KEY)
        self._checkpoint = self._dispatched_offset = OFFSET.unpack(raw)[0] if raw is not None else 0
        self._last_flush = time.monotonic()
        log.info("consume_queue_rocksdb_loaded queues=%d checkpoint=%d", len(queues), self._checkpoint)

    def shutdown(self) -> None:
        if self._db is None:
            return
        self._flush(force=True)
        with self._lock, self._flush_lock:
            self._db.close()
            self._db = None

    def carry_over(self, ends: dict[QueueKey, int]) -> int:
        """Queues this store does not hold, as bounds without units at their ends (``min = max``), durably: those of
        a consume queue it replaces whose records expired (``store_type_switch.py``). Returns how many."""
        with self._lock:
            new = {key: end for key, end in ends.items() if key not in self._queues}
            if not new:
                return 0
            batch = WriteBatch(raw_mode=True)
            for (topic, queue_id), end in new.items():
                queue = _Queue(topic, queue_id, end, end)
                batch.put(queue.meta_key, META.pack(end, end))
                self._queues[queue.key] = queue
            self.db.write(batch, self._synced_write_options)
        return len(new)

    # -- dispatcher --------------------------------------------------------------------------------
    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        db = self.db
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        pack_unit = UNIT.pack
        pack_offset = OFFSET.pack
        queues = self._queues
        # per queue touched: [queue, new min, new max]; applied to memory only once the batch is written
        touched: dict[QueueKey, list] = {}
        last_topic: str | None = None
        last_queue_id = -1
        work: list = []
        prefix = b""
        with self._lock:
            for topic, queue_id, queue_offset, physical_offset, size, tags_code, store_ts, _props in requests:
                if queue_id != last_queue_id or topic != last_topic:
                    key = (topic, queue_id)
                    work = touched.get(key)  # type: ignore[assignment]
                    if work is None:
                        queue = queues.get(key)
                        if queue is None:  # a new queue starts at its first unit
                            queue = _Queue(topic, queue_id, queue_offset, queue_offset)
                        work = touched[key] = [queue, queue.min_offset, queue.max_offset]
                    prefix = work[0].prefix
                    last_topic, last_queue_id = topic, queue_id
                if queue_offset != work[2]:
                    if queue_offset < work[2]:
                        continue  # already there: a re-dispatch after restart
                    self._gap(batch, work, queue_offset, physical_offset, store_ts)
                put(prefix + pack_offset(queue_offset), pack_unit(physical_offset, size, tags_code, store_ts))
                work[2] = queue_offset + 1
            for queue, low, high in touched.values():
                put(queue.meta_key, META.pack(low, high))
            put(CHECKPOINT_KEY, pack_offset(end_offset))
            db.write(batch, self._write_options)
            for key, (queue, low, high) in touched.items():
                queue.min_offset = low
                queue.max_offset = high
                if key not in queues:
                    queues[key] = queue
            self._dispatched_offset = end_offset
            self._dirty = True

    def _gap(self, batch: WriteBatch, work: list, queue_offset: int, physical_offset: int, store_ts: int) -> None:
        """The next unit (``physical_offset``, ``store_ts``) lies past the queue's end. After units the commitlog
        still holds, records between were lost to damage on disk: the hole is filled. Otherwise the queue restarts
        there (as the file store does for an empty queue): the commitlog between them is gone (expired before it was
        re-dispatched), so its units point at nothing either: they are dropped."""
        queue, low, high = work
        last = self._unit(queue, high - 1) if low < high else None
        if last is not None and last[0] >= self._commit_min() and queue_offset - high <= MAX_GAP_UNITS:
            # The units before are readable: records lost to damage on disk (dispatch/damaged_range.py) made the
            # hole. Empty units fill it, which reads pass over; restarted, the queue lost everything before it. Each
            # is at the next record's offset and time, so units never go down (expiry and search by time bisect).
            blank = UNIT.pack(physical_offset, 0, 0, store_ts)
            for offset in range(high, queue_offset):
                batch.put(queue.prefix + OFFSET.pack(offset), blank)
            log.warning("consume_queue_gap_filled queue=%r from=%d to=%d: records lost to damage on disk",
                        queue.prefix, high, queue_offset)
            work[2] = queue_offset
            return
        if low < high:
            log.warning("consume_queue_gap queue=%r max=%d next=%d: restarting the queue", queue.prefix, high,
                        queue_offset)
            batch.delete_range(queue.prefix + OFFSET.pack(0), queue.prefix + OFFSET.pack(queue_offset))
        work[1] = work[2] = queue_offset

    def checkpoint(self) -> int:
        return self._checkpoint

    def flush(self) -> None:
        self._flush(force=False)

    def _flush(self, force: bool) -> None:
        with self._flush_lock:
            db = self._db
            if db is None:
                return
            dispatched = self._dispatched_offset  # everything below it is in the memtable we flush now
            if dispatched == self._checkpoint and not self._dirty and not self._flush_now:
                return
            due = (force or self._flush_now or time.monotonic() - self._last_flush >= self.flush_interval_s
                   or (db.property_int_value("rocksdb.cur-size-active-mem-table") or 0) >= self.flush_bytes)
            if not due:
                return
            was_dirty, was_due = self._dirty, self._flush_now
            self._dirty = False  # cleared first: what changes during the flush sets them again
            self._flush_now = False
            try:
                db.flush(True)
            except BaseException:  # refused (a full disk): still to flush, or an idle broker never would (WAL off)
                self._dirty = self._dirty or was_dirty
                self._flush_now = self._flush_now or was_due
                raise
            self._last_flush = time.monotonic()
            self.flush_count += 1
            self._checkpoint = dispatched

    def truncate_dirty(self, commit_log_end: int) -> None:
        """Drop units whose message is at or past the commitlog end, from each queue's max backwards."""
        db = self.db
        batch = WriteBatch(raw_mode=True)
        cut: list[tuple[_Queue, int]] = []
        with self._lock:
            for queue in self._queues.values():
                low, high = queue.min_offset, queue.max_offset
                new_high = high
                if low < high:
                    stop = queue.prefix + OFFSET.pack(low)
                    for key, value in raw_items(db, backwards=True, from_key=queue.prefix + OFFSET.pack(high - 1)):
                        if key < stop or UNIT.unpack(value)[0] < commit_log_end:
                            break
                        new_high -= 1
                if new_high != high:
                    batch.delete_range(queue.prefix + OFFSET.pack(new_high), queue.prefix + OFFSET.pack(high))
                    batch.put(queue.meta_key, META.pack(low, new_high))
                    cut.append((queue, new_high))
            moved = self._dispatched_offset > commit_log_end
            if moved:
                batch.put(CHECKPOINT_KEY, OFFSET.pack(commit_log_end))
            if not cut and not moved:
                return
            db.write(batch, self._write_options)
            for queue, new_high in cut:
                queue.max_offset = new_high
            self._dispatched_offset = min(self._dispatched_offset, commit_log_end)
        with self._flush_lock:
            # Durable before new records reuse the cut commitlog range: a crash must not bring these back.
            db.flush(True)
            self.flush_count += 1
            self._last_flush = time.monotonic()
            self._checkpoint = min(self._checkpoint, commit_log_end)
        log.info("consume_queue_truncated commitlog_end=%d queues_cut=%d", commit_log_end, len(cut))

    # -- queries -----------------------------------------------------------------------------------
    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get((topic, queue_id))
        return queue.min_offset if queue else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get((topic, queue_id))
        return queue.max_offset if queue else 0

    def read_units(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[UnitTuple]:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return []
        offset = max(offset, queue.min_offset)
        end = min(queue.max_offset, offset + max_count)
        if offset >= end:
            return []
        prefix = queue.prefix
        start_key = prefix + OFFSET.pack(offset)
        read_options = ReadOptions()
        read_options.set_iterate_upper_bound(prefix + OFFSET.pack(end))
        keys: list[bytes] = []
        values: list[bytes] = []
        for key, value in raw_items(self.db, from_key=start_key, read_opt=read_options):
            keys.append(key)
            values.append(value)
        # Keys are unique within [offset, end): they are contiguous if the first and the last are where
        # they should be. Not so only when expiry or truncation removed units under this read.
        if not keys or keys[0] != start_key or keys[-1] != prefix + OFFSET.pack(offset + len(keys) - 1):
            self._check_readable(topic, queue_id, offset, start_key, read_options)
            return []
        return list(UNIT_CQ.iter_unpack(b"".join(values)))

    def _check_readable(self, topic: str, queue_id: int, offset: int, start_key: bytes,
                        read_options: ReadOptions) -> None:
        """A read that found the units short: RocksDB's iteration ends without a word at a damaged block, and the
        queue's readers would wait at that offset for good. Raises if that is why."""
        iterator = self.db.iter(read_options)
        iterator.seek(start_key)
        while iterator.valid():
            iterator.next()
        try:
            iterator.status()
        except Exception as exc:
            raise ConsumeQueueDamaged(
                f"consume queue store {self.root} is damaged at {topic}/{queue_id} offset {offset} ({exc}): stop the "
                f"broker and remove that directory; the next start rebuilds it from the commitlog") from None

    def _unit(self, queue: _Queue, offset: int) -> tuple[int, int, int, int] | None:
        raw = self.db.get(queue.prefix + OFFSET.pack(offset))
        return UNIT.unpack(raw) if raw is not None else None

    def store_times(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[int]:
        """Store times of the units from ``offset`` (as ``read_units``, RocksDB only: the file store has none)."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return []
        units = (self._unit(queue, o) for o in range(offset, min(queue.max_offset, offset + max_count)))
        return [u[3] for u in units if u is not None]

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int, boundary: BoundaryType) -> int:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return 0

        def store_time(offset: int) -> int:
            unit = self._unit(queue, offset)
            return unit[3] if unit is not None else -1  # removed under us by expiry: before everything

        return offset_by_time(queue.min_offset, queue.max_offset, store_time, timestamp, boundary)

    def queue_max_offsets(self) -> dict[QueueKey, int]:
        return {key: queue.max_offset for key, queue in self._queues.items()}

    # -- maintenance -------------------------------------------------------------------------------
    def correct_min_offset(self, commit_log_min_offset: int) -> None:
        """Move each queue's min past units below the commitlog's min and delete_range them."""
        applied = self._apply_min_moves(self._min_moves(commit_log_min_offset), self._write_options)
        if applied:
            self._flush_now = True  # durable at the next flush call, not after seconds
            log.info("consume_queue_min_corrected commitlog_min=%d queues=%d", commit_log_min_offset, applied)

    def prepare_expiry(self, commit_log_min_offset: int) -> None:
        """A queue whose units all lie below the new commitlog min may hold them only in the memtable (the WAL is
        off). After a crash, no replay could bring back its max offset (its messages are gone): the queue would
        restart at an old offset and hand those offsets out again. So each such queue's emptied bounds go through
        the WAL, synced, before the segments go. A queue with a unit above the new min needs nothing: replay
        brings that unit back. Nothing at all when the flushed checkpoint already covers the range."""
        if self._checkpoint >= commit_log_min_offset:
            return
        emptied = [(q, low) for q, low in self._min_moves(commit_log_min_offset) if low >= q.max_offset]
        applied = self._apply_min_moves(emptied, self._synced_write_options, only_emptying=True)
        if applied:
            log.info("consume_queue_emptied_before_expiry commitlog_min=%d checkpoint=%d queues=%d",
                     commit_log_min_offset, self._checkpoint, applied)

    def _min_moves(self, commit_log_min_offset: int) -> list[tuple[_Queue, int]]:
        """Each queue with units below ``commit_log_min_offset``, and the offset of its first unit at or past it."""
        moves: list[tuple[_Queue, int]] = []
        for queue in list(self._queues.values()):
            low, high = queue.min_offset, queue.max_offset
            if low >= high:
                continue
            first = self._unit(queue, low)
            if first is not None and first[0] >= commit_log_min_offset:
                continue

            def physical(offset: int, queue: _Queue = queue) -> int:
                unit = self._unit(queue, offset)
                return unit[0] if unit is not None else -1

            new_low = bisect_offsets(low, high, physical, commit_log_min_offset, strict=False)
            if new_low > low:
                moves.append((queue, new_low))
        return moves

    def _apply_min_moves(self, moves: list[tuple[_Queue, int]], write_options: WriteOptions,
                         only_emptying: bool = False) -> int:
        """Write the moves in one batch; returns how many applied. ``only_emptying`` skips a queue that got a
        unit since the moves were computed (that unit lies above the expired range)."""
        if not moves:
            return 0
        batch = WriteBatch(raw_mode=True)
        applied: list[tuple[_Queue, int]] = []
        with self._lock:
            for queue, new_low in moves:
                if queue.min_offset >= new_low or self._queues.get(queue.key) is not queue:
                    continue  # moved or deleted meanwhile
                if only_emptying and new_low < queue.max_offset:
                    continue
                new_low = min(new_low, queue.max_offset)
                batch.delete_range(queue.prefix + OFFSET.pack(0), queue.prefix + OFFSET.pack(new_low))
                batch.put(queue.meta_key, META.pack(new_low, queue.max_offset))
                applied.append((queue, new_low))
            if applied:
                self.db.write(batch, write_options)
            for queue, new_low in applied:
                queue.min_offset = new_low
        return len(applied)

    def topic_deleted(self, topic: str, at_offset: int = 0) -> None:
        name = topic.encode()
        with self._lock:
            keys = [k for k in self._queues if k[0] == topic]
            self.deleted_ends.note(topic, {key[1]: self._queues[key].max_offset for key in keys})
            for key in keys:
                del self._queues[key]
            batch = WriteBatch(raw_mode=True)
            for prefix in (UNIT_PREFIX, META_PREFIX):
                batch.delete_range(prefix + name + SEPARATOR, prefix + name + bytes([SEPARATOR[0] + 1]))
            self.db.write(batch, self._write_options)
        # Flushed by the next pass, not here (on the dispatch thread, maybe the event loop): lost to a crash before
        # it, the deletion is replayed with the checkpoint that goes with it (the deletion record is in the log).
        self._flush_now = True
        log.info("consume_queue_topic_deleted topic=%s queues=%d", topic, len(keys))

"""One queue in the tier: its tiered commitlog (this queue's records only, each byte for byte as the local
commitlog holds it) and its tiered consume queue pointing into it (the seed's composite flat file).

Consume-queue unit (28 bytes, ``>qiqq``): tiered commitlog offset, size, tags hash, store time; unit ``q`` of
the queue sits at byte ``q * 28`` of the consume-queue stream, so queue offsets need no mapping. The commitlog
is always committed before the consume queue: a crash between the two leaves commitlog bytes nothing points
at, never a unit pointing at bytes that are not in the tier.

A record keeps its physical offset field: its offset in the local commitlog, of which its offset message id is
made (store host and commitlog offset), so a message read from the tier has the id its send returned. Its tiered
position is its unit's. An older version overwrote the field with the tiered position: the queue's record says
from which queue offset on the records keep it (``commit_log_offsets_from``); below, the reader restores it
(``TieredMessageStore``).
"""

import logging
import struct
import threading
import time

from broker.store.consume_queue.consume_queue_store import BoundaryType
from broker.tiered.file.flat_append_file import FlatAppendFile, LoadMode
from broker.tiered.file.read_ahead_cache import ReadAhead, ReadAheadCache
from broker.tiered.metadata.tiered_metadata_store import QueueMetadata, SegmentStatus, TieredMetadataStore
from broker.tiered.provider.file_segment import FileSegmentType
from broker.tiered.provider.file_segment_factory import FileSegmentFactory

log = logging.getLogger(__name__)

CQ_UNIT = struct.Struct(">qiqq")
UNIT = CQ_UNIT.size
QUEUE_OFFSET_AT, PHYSICAL_OFFSET_AT = 20, 28  # of the record header (common/message_codec.py)
RECORD_OFFSET = struct.Struct(">q")  # either field
MAX_READ_BYTES = 16 * 1024 * 1024
COMMIT_LOG_READ_AHEAD = 4 * 1024 * 1024  # bytes of a read-ahead block (a few thousand 1 KiB messages)
CONSUME_QUEUE_READ_AHEAD = UNIT * 16 * 1024  # units of 16 Ki messages


def record_queue_offset(record: bytes) -> int:
    return RECORD_OFFSET.unpack_from(record, QUEUE_OFFSET_AT)[0]


def record_physical_offset(record: bytes) -> int:
    return RECORD_OFFSET.unpack_from(record, PHYSICAL_OFFSET_AT)[0]


def with_physical_offset(record: bytes, physical_offset: int) -> bytes:
    """The record with its physical offset field set (the CRC covers the variable part only: still valid)."""
    return record[:PHYSICAL_OFFSET_AT] + RECORD_OFFSET.pack(physical_offset) + record[PHYSICAL_OFFSET_AT + 8:]


class FlatMessageFile:
    def __init__(self, factory: FileSegmentFactory, metadata: TieredMetadataStore, broker_name: str, topic: str,
                 queue_id: int, commit_log_segment_size: int, consume_queue_segment_size: int,
                 read_ahead_cache: ReadAheadCache | None = None) -> None:
        """``read_ahead_cache``: both files read ahead into it (a backend where every read is a round trip)."""
        self.topic, self.queue_id = topic, queue_id
        self.metadata = metadata
        cl_ahead = cq_ahead = None
        if read_ahead_cache is not None:
            cl_ahead = ReadAhead(read_ahead_cache, COMMIT_LOG_READ_AHEAD)
            cq_ahead = ReadAhead(read_ahead_cache, CONSUME_QUEUE_READ_AHEAD)
        self.commit_log = FlatAppendFile(factory, metadata, broker_name, topic, queue_id, FileSegmentType.COMMIT_LOG,
                                         commit_log_segment_size, read_ahead=cl_ahead)
        cq_size = max(UNIT, consume_queue_segment_size - consume_queue_segment_size % UNIT)
        self.consume_queue = FlatAppendFile(factory, metadata, broker_name, topic, queue_id,
                                            FileSegmentType.CONSUME_QUEUE, cq_size, unit=UNIT, read_ahead=cq_ahead)
        self._commit_lock = threading.Lock()
        self._queue_record_due = False  # a commit's queue record was not written (its metadata store refused)
        # Queue offsets below it hold records an older version uploaded, their physical offset field overwritten
        # with their tiered position (set by ``load``). ``_offsets_from_due``: not stored yet, which must be done
        # before a unit at or above it is committed (a restart would take that unit for an older version's).
        self.commit_log_offsets_from = 0
        self._offsets_from_due = False
        self.destroyed = False  # the topic was deleted: an expiry pass holding this file leaves it alone

    def load(self, first_queue_offset: int, mode: LoadMode = LoadMode.RECOVER) -> None:
        self.commit_log.load(0, mode)  # first: the consume queue's units are checked against its end
        self.consume_queue.load(first_queue_offset * UNIT, mode)
        if mode is not LoadMode.FOLLOW:
            self._drop_dangling_units()
        self._load_offsets_from(self.metadata.get_queue(self.topic, self.queue_id))
        log.info("tiered_queue_loaded topic=%s queue=%d min=%d max=%d commitlog_bytes=%d", self.topic, self.queue_id,
                 self.min_offset, self.max_offset, self.commit_log.commit_offset)

    def _load_offsets_from(self, recorded: QueueMetadata | None) -> None:
        """Where records that keep their commitlog offset begin: as recorded, or (a record an older version wrote,
        or none) after every unit committed. Never past the units there are: what is appended from the end on is
        this version's."""
        stored = recorded.commit_log_offsets_from if recorded is not None else None
        self.commit_log_offsets_from = self.max_offset if stored is None else min(stored, self.max_offset)
        self._offsets_from_due = stored != self.commit_log_offsets_from

    def _lower_offsets_from(self, queue_offset: int) -> None:
        """Units from ``queue_offset`` on were cut: the records appended there again are this version's."""
        if queue_offset < self.commit_log_offsets_from:
            self.commit_log_offsets_from = queue_offset
            self._offsets_from_due = True

    def _drop_dangling_units(self) -> None:
        """Units are committed after the bytes they point at, so none dangles, unless the backend lost
        commitlog bytes (a lost object, the memory backend after a restart): then the units from the first one
        pointing past the commitlog's end go, and those queue offsets are uploaded again."""
        end = self.commit_log.commit_offset

        def inside(q: int) -> bool:
            unit = self.units(q, 1)
            return bool(unit) and unit[0][0] + unit[0][1] <= end and unit[0][0] >= self.commit_log.min_offset

        lo, hi = self.min_offset, self.max_offset
        if lo >= hi or inside(hi - 1):
            return
        while lo < hi:  # the first unit that is not inside
            mid = (lo + hi) // 2
            if inside(mid):
                lo = mid + 1
            else:
                hi = mid
        log.error("tiered_units_dangling topic=%s queue=%d from=%d to=%d: cut, to be uploaded again", self.topic,
                  self.queue_id, lo, self.max_offset)
        self.consume_queue.cut_to(lo * UNIT)

    # -- offsets (queue offsets) ---------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.consume_queue.min_offset // UNIT

    @property
    def max_offset(self) -> int:
        """One past the last committed unit."""
        return self.consume_queue.commit_offset // UNIT

    @property
    def dispatch_offset(self) -> int:
        """One past the last appended unit (committed or not): the next queue offset this file takes."""
        return self.consume_queue.append_offset // UNIT

    # -- write ---------------------------------------------------------------------------------------
    def append(self, record: bytes, queue_offset: int, tags_code: int, store_time: int) -> None:
        """Buffer one record."""
        self.append_run(record, [(queue_offset, len(record), tags_code, store_time)])

    def append_run(self, records: bytes, units: list[tuple[int, int, int, int]]) -> None:
        """Buffer consecutive records of this queue, given as one byte run (they sit next to each other in the
        local commitlog when sent together) and their ``(queue offset, size, tags hash, store time)``. The
        records go as they are: each keeps its commitlog offset (its message id); its unit has its tiered one."""
        assert units and units[0][0] == self.dispatch_offset, \
            f"{self.topic}:{self.queue_id}: queue offset {units[0][0]} appended at {self.dispatch_offset}"
        position = self.commit_log.append_offset
        pack_unit = CQ_UNIT.pack
        cq = []
        at = 0
        for _, size, tags_code, store_time in units:
            cq.append(pack_unit(position + at, size, tags_code, store_time))
            at += size
        assert at == len(records), "record sizes do not add up to the run"
        last_time = units[-1][3]
        self.commit_log.append(bytes(records), last_time)
        self.consume_queue.append(b"".join(cq), last_time)

    def commit(self) -> None:
        with self._commit_lock:
            if self._offsets_from_due:  # first: a restart must not take the units committed next for old ones
                self._write_queue_record()
            self.commit_log.commit()  # first: the units written next point into these bytes
            self.consume_queue.commit()
            self._queue_record_due = True
            self._write_queue_record()
            self._queue_record_due = False

    def _write_queue_record(self) -> None:
        """Under the commit lock: the queue's record as the committed units stand."""
        self.metadata.update_queue(QueueMetadata(self.topic, self.queue_id, self.min_offset, self.max_offset,
                                                 int(time.time() * 1000), self.commit_log_offsets_from))
        self._offsets_from_due = False

    def rebase(self, queue_offset: int) -> None:
        """The queue's records below ``queue_offset`` can no more be uploaded (the backend lost some, and they
        expired locally): its consume queue restarts there, as a queue whose start expired before it reached the
        tier. Units served before are expired (the consume queue is one unbroken stream); the commitlog bytes they
        pointed at go with the next expiry pass, as bytes before the first unit served."""
        with self._commit_lock:
            self.consume_queue.restart_at(queue_offset * UNIT)
            self._lower_offsets_from(queue_offset)
            self._write_queue_record()

    def cut_to(self, queue_offset: int) -> None:
        """The units from ``queue_offset`` on go (the local commitlog lost those records: new messages take
        their offsets); what is uploaded there again is this version's."""
        with self._commit_lock:
            self.consume_queue.cut_to(queue_offset * UNIT)
            self._lower_offsets_from(queue_offset)

    @property
    def uncommitted(self) -> bool:
        """Whether a commit has work: buffered bytes, or a record a commit whose bytes went in could not write (the
        metadata store refused: a full local disk), a segment's or the queue's. A new queue is listed by its record
        alone at a restart, so a retry must write it even with nothing more to upload."""
        return self._queue_record_due or self.commit_log.uncommitted or self.consume_queue.uncommitted

    # -- read ----------------------------------------------------------------------------------------
    def units(self, queue_offset: int, count: int) -> list[tuple[int, int, int, int]]:
        """Committed units from ``queue_offset`` (at most ``count``)."""
        return self._units_from(queue_offset, count)[1]

    def _units_from(self, queue_offset: int, count: int) -> tuple[int, list[tuple[int, int, int, int]]]:
        """(the queue offset of the first unit, the units): from ``queue_offset``, or from the minimum if expiry
        moved it past that (read once: it may move again meanwhile)."""
        start = max(queue_offset, self.min_offset)
        end = min(queue_offset + count, self.max_offset)
        if start >= end:
            return start, []
        data = self.consume_queue.read(start * UNIT, (end - start) * UNIT)
        return start, list(CQ_UNIT.iter_unpack(data[: len(data) - len(data) % UNIT]))

    def messages(self, queue_offset: int, max_nums: int, max_bytes: int, tags_codes: set[int] | None,
                 ) -> tuple[list[bytes], int, int]:
        """Records from ``queue_offset``: (records, their bytes, the next queue offset). One read of the
        commitlog span they cover (this queue's records are contiguous there). Offsets that expired since the caller
        looked are skipped: the next offset counts from the first unit read."""
        start, units = self._units_from(queue_offset, max_nums)
        if not units:
            return [], 0, start
        picked: list[tuple[int, int]] = []  # (commitlog position, size)
        total, next_offset = 0, start
        for position, size, tags_code, _ in units:
            if picked and (total + size > max_bytes or position + size - picked[0][0] > MAX_READ_BYTES):
                break
            next_offset += 1
            if tags_codes is not None and tags_code not in tags_codes:
                continue
            picked.append((position, size))
            total += size
        if not picked:
            return [], 0, next_offset
        first = picked[0][0]
        span = self.commit_log.read(first, picked[-1][0] + picked[-1][1] - first)
        view = memoryview(span)
        return [bytes(view[p - first : p - first + s]) for p, s in picked], total, next_offset

    def offset_by_time(self, timestamp: int, boundary: BoundaryType) -> int:
        """LOWER: the first queue offset stored at or after ``timestamp`` (max if none); UPPER: the last one
        stored at or before it (min if none)."""
        lo, hi = self.min_offset, self.max_offset
        if lo >= hi:
            return hi
        def store_time(q: int) -> int:
            unit = self.units(q, 1)
            return unit[0][3] if unit else 0
        if boundary is BoundaryType.LOWER:
            a, b = lo, hi
            while a < b:
                mid = (a + b) // 2
                if store_time(mid) >= timestamp:
                    b = mid
                else:
                    a = mid + 1
            return a
        a, b = lo, hi
        while a < b:  # first offset stored after timestamp
            mid = (a + b) // 2
            if store_time(mid) > timestamp:
                b = mid
            else:
                a = mid + 1
        return max(lo, a - 1)

    # -- expiry --------------------------------------------------------------------------------------
    def expire(self, cutoff_ms: int, delete: bool) -> int:
        """Consume-queue segments whose last message is older than ``cutoff_ms`` go first (the min offset moves),
        then the commitlog segments wholly before the first unit still served. Returns segments expired."""
        with self._commit_lock:
            if self.destroyed:  # its records are gone: an expiry would write the queue's back
                return 0
            cq = self.consume_queue
            keep_from = cq.min_offset
            for m in list(cq.segments):
                if m.status.name != "SEALED" or m.end_ms >= cutoff_ms:
                    break
                keep_from = m.end_offset
            gone = cq.expire_before(keep_from, delete)
            oldest = self.commit_log.segments[:1]
            if oldest and oldest[0].status is SegmentStatus.SEALED:  # else none can go: no backend read for it
                first = self.units(self.min_offset, 1)
                commit_log_keep = first[0][0] if first else self.commit_log.commit_offset
                gone += self.commit_log.expire_before(commit_log_keep, delete)
            if gone:
                self._write_queue_record()
                log.info("tiered_expired topic=%s queue=%d segments=%d min_offset=%d deleted=%s", self.topic,
                         self.queue_id, len(gone), self.min_offset, delete)
            return len(gone)

    def destroy_objects(self) -> None:
        """Both streams' objects go (the topic was deleted; ``FlatFileStore.delete_topic`` drops the records)."""
        with self._commit_lock:
            self.destroyed = True
            self.commit_log.destroy_objects()
            self.consume_queue.destroy_objects()

    def segment_count(self) -> int:
        return len(self.commit_log.segments) + len(self.consume_queue.segments)

    def total_bytes(self) -> int:
        return self.commit_log.total_bytes() + self.consume_queue.total_bytes()

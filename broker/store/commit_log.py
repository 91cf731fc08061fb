"""The commitlog: every message of every queue, appended in one sequence of fixed-size segments.

One lock covers an append: queue offsets come from ``topic_queue_table``, physical offsets from the
write position, store time is never behind the previous append's. A record never straddles segments:
the tail of a segment too small for the next record gets an end-of-segment marker.
"""

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.put_message_result import AppendResult
from common.message_codec import (
    BATCH_CONTINUES,
    BLANK_MIN_LENGTH,
    OFFSET_BATCH_MARK,
    OFFSET_STORE_TIMESTAMP,
    SIZE_MAGIC,
    STORE_TIMESTAMP,
    check_record,
    write_blank,
)
from common.wire_batch import WireBatch

log = logging.getLogger(__name__)


class NothingAppended(OSError):
    """The commitlog refused a batch before any of its records was written (e.g. ENOSPC): nothing changed."""


class NotAdmitted(Exception):
    """A batch's ``admit`` said no under the commitlog's lock (its topic was deleted after the caller's check):
    nothing was written."""


class AppendObserver(Protocol):
    """Told of every run of records ``append_batch`` writes into a segment, in commitlog order (reput's dispatch
    hints, ``broker/store/dispatch/dispatch_hints.py``), and that the log was truncated."""

    def appended(self, topic: str, queue_id: int, queue_offset: int, physical_offsets: Sequence[int],
                 sizes: Sequence[int], properties: Sequence[bytes], store_timestamp: int, end: int) -> None: ...

    def forget(self) -> None: ...


class CommitLog:
    def __init__(self, store_dir: Path, mapped_file_size: int, close_grace_s: float = 30.0) -> None:
        self.mapped_file_queue = MappedFileQueue(store_dir, mapped_file_size, close_grace_s)
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._last_store_timestamp = 0
        # What dispatchers may read up to; moved by appends (ASYNC_FLUSH) or by flushes (SYNC_FLUSH), and, when
        # ``replication_gated`` (a SYNC_MASTER, a slave), never past what the replicas have (``replicated``).
        self.confirm_offset = 0
        self.confirm_follows_flush = False
        self.replication_gated = False
        self._local_confirm = 0
        self._replicated = 0
        self._confirm_lock = threading.Lock()
        self._confirm_listeners: list[Callable[[int], None]] = []
        self._append_listeners: list[Callable[[int], None]] = []
        self._append_observer: AppendObserver | None = None

    # -- geometry ----------------------------------------------------------------------------------
    @property
    def mapped_file_size(self) -> int:
        return self.mapped_file_queue.mapped_file_size

    def max_record_size(self) -> int:
        return self.mapped_file_size - BLANK_MIN_LENGTH

    def min_offset(self) -> int:
        return self.mapped_file_queue.min_offset()

    def max_offset(self) -> int:
        return self.mapped_file_queue.max_offset()

    def flushed_offset(self) -> int:
        return self.mapped_file_queue.flushed_offset()

    # -- confirm offset ----------------------------------------------------------------------------
    def add_confirm_listener(self, listener: Callable[[int], None]) -> None:
        self._confirm_listeners.append(listener)

    def add_append_listener(self, listener: Callable[[int], None]) -> None:
        """Called with the new end after every append (replication wakes its senders)."""
        self._append_listeners.append(listener)

    def observe_appends(self, observer: AppendObserver) -> None:
        self._append_observer = observer

    def advance_confirm_offset(self, offset: int) -> None:
        """What this store alone would confirm (appended, or flushed under SYNC_FLUSH)."""
        if offset > self._local_confirm:
            self._local_confirm = offset
            self._publish_confirm()

    def set_replicated_offset(self, offset: int) -> None:
        """The replicas have everything below ``offset`` (a master: its in-sync slaves' acks; a slave: what its
        master confirmed)."""
        if offset > self._replicated:
            self._replicated = offset
            self._publish_confirm()

    def republish_confirm(self) -> None:
        """``replication_gated`` changed: the confirm offset may move now."""
        self._publish_confirm()

    def _publish_confirm(self) -> None:
        with self._confirm_lock:  # appends and acks publish from different threads: the offset only grows
            target = min(self._local_confirm, self._replicated) if self.replication_gated else self._local_confirm
            if target <= self.confirm_offset:
                return
            self.confirm_offset = target
        for listener in self._confirm_listeners:
            listener(target)

    def on_flushed(self, flushed_offset: int) -> None:
        if self.confirm_follows_flush:
            self.advance_confirm_offset(flushed_offset)

    # -- append ------------------------------------------------------------------------------------
    def append_batch(self, batch: WireBatch, restart_queues_of: str | None = None,
                     admit: Callable[[], bool] | None = None) -> AppendResult:
        """Append a batch of one queue; its records get consecutive queue offsets. ``restart_queues_of``: a
        topic whose queues start again at offset 0 right after this batch (a deletion record's topic).
        ``admit``: asked under the lock, before anything is written (NotAdmitted when it says no), so a check
        it makes cannot be overtaken by a deletion record, which appends under the same lock."""
        physical_offsets: list[int] = []
        sizes = batch.sizes
        observer = self._append_observer
        with self._lock:
            if admit is not None and not admit():
                raise NotAdmitted(f"{batch.topic.decode()} is no longer admitted")
            key = (batch.topic.decode(), batch.queue_id)
            first_queue_offset = queue_offset = self.topic_queue_table.get(key, 0)
            now = max(int(time.time() * 1000), self._last_store_timestamp)
            self._last_store_timestamp = now
            i, n = 0, len(sizes)
            try:
                while i < n:
                    segment = self.mapped_file_queue.last_writable()
                    room = segment.remaining - BLANK_MIN_LENGTH
                    if i == 0 and batch.total_size() <= room:  # the common case: the whole batch fits
                        j = n
                    elif i == 0 and segment.wrote_position > 0 and batch.total_size() <= self._empty_room():
                        # Whole in the next segment, as upstream: split over two, a crash between the writes kept
                        # the first part (whole, valid records) of a batch its producer was told failed.
                        self._end_segment(segment)
                        continue
                    else:  # larger than a segment (mappedFileSizeCommitLog below the batch): it must span
                        j, chunk = i, 0
                        while j < n and chunk + sizes[j] <= room:
                            chunk += sizes[j]
                            j += 1
                    if j == i:
                        assert segment.wrote_position > 0, f"record of {sizes[i]} bytes cannot fit an empty segment"
                        self._end_segment(segment)
                        continue
                    physical = segment.file_from_offset + segment.wrote_position
                    segment.append(batch.encode(i, j, queue_offset, physical, now, physical_offsets))
                    if observer is not None:
                        self._tell(observer, key[0], batch, i, j, queue_offset, physical_offsets[i - j:], now,
                                   segment.file_from_offset + segment.wrote_position)
                    queue_offset += j - i
                    i = j
            except OSError as exc:
                if i == 0:  # the write position did not move: the log is as it was
                    raise NothingAppended(exc.errno or 0, f"nothing appended: {exc.strerror or exc}") from exc
                self.topic_queue_table[key] = queue_offset  # the written part keeps its queue offsets
                raise
            self.topic_queue_table[key] = queue_offset
            if restart_queues_of is not None:
                for deleted in [k for k in self.topic_queue_table if k[0] == restart_queues_of]:
                    del self.topic_queue_table[deleted]
            end = self.mapped_file_queue.max_offset()
            if not self.confirm_follows_flush:
                self.advance_confirm_offset(end)
        for listener in self._append_listeners:
            listener(end)
        return AppendResult(physical_offsets, first_queue_offset, now, end)

    def _empty_room(self) -> int:
        """What a batch may fill of an empty segment."""
        return self.mapped_file_size - BLANK_MIN_LENGTH

    @staticmethod
    def _tell(observer: AppendObserver, topic: str, batch: WireBatch, i: int, j: int, queue_offset: int,
              physical_offsets: list[int], store_timestamp: int, end: int) -> None:
        """The records are written: whatever the observer does must not undo that (its hints are a shortcut;
        forgotten, reput parses the bytes)."""
        try:
            observer.appended(topic, batch.queue_id, queue_offset, physical_offsets, batch.sizes[i:j],
                              batch.properties[i:j], store_timestamp, end)
        except Exception:
            log.exception("append_observer_failed topic=%s queue_id=%d", topic, batch.queue_id)
            observer.forget()

    # -- replication -------------------------------------------------------------------------------
    def read_replica(self, offset: int, max_bytes: int, until: int | None = None) -> memoryview:
        """Stored bytes from ``offset`` (a master's end of what a slave has): at most ``max_bytes``, never across a
        segment (a slave's segments start where the master's do) nor past ``until`` (an epoch's end). They may end
        inside a record or an append, as upstream's: a replica dispatches only whole records below what its master
        confirmed, and one promoted cuts what it holds of an unfinished one (``cut_partial_record``). Empty when
        nothing is there yet."""
        segment = self.mapped_file_queue.find(offset)
        if segment is None:
            return memoryview(b"")
        pos = offset - segment.file_from_offset
        end = min(segment.wrote_position, pos + max_bytes)
        if until is not None:
            end = min(end, until - segment.file_from_offset)
        return memoryview(segment.mm)[pos:end] if end > pos else memoryview(b"")

    def segment_size_at(self, offset: int) -> int:
        """The size of the segment holding ``offset`` (the configured size if none does yet)."""
        segment = self.mapped_file_queue.find(offset)
        return segment.file_size if segment is not None else self.mapped_file_size

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the queue's next append will get (0 for a queue this commitlog has not appended to since
        it was recovered: the consume queue knows more then). One dict read: no lock."""
        return self.topic_queue_table.get((topic, queue_id), 0)

    def append_replica(self, offset: int, data: bytes | memoryview, segment_size: int | None = None) -> int:
        """A slave appends its master's bytes where they were on the master; returns the new end. The bytes are
        whole records and end-of-segment markers of one segment (the master cut them so), of ``segment_size`` bytes
        on the master: a segment begun here is made that size (the master's older segments keep the size they were
        written at when mappedFileSizeCommitLog changed; made at this replica's size, they ended elsewhere, and it
        skipped records or stopped)."""
        with self._lock:
            end = self.mapped_file_queue.max_offset()
            assert offset == end, f"replica bytes for offset {offset}, but this commitlog ends at {end}"
            segment = self.mapped_file_queue.last_writable(segment_size)
            assert segment.file_from_offset + segment.wrote_position == offset, "replica segments follow the master's"
            assert len(data) <= segment.remaining, f"replica bytes cross the segment ending at {segment.end_offset}"
            segment.append(data)
            end = offset + len(data)
            if not self.confirm_follows_flush:
                self.advance_confirm_offset(end)
        return end

    def start_empty_at(self, offset: int, segment_size: int | None = None) -> None:
        """A log with no records begins at ``offset``, a segment's start: a new replica of a master whose older
        segments expired copies its log from there (again, if that segment expired before a record came). Its
        first segment is the master's: ``segment_size`` bytes from ``offset`` (a master whose
        mappedFileSizeCommitLog changed has segments that start at no multiple of this log's size; None: a master
        that does not say, of this log's size). Nothing below it will ever be here, so it counts as confirmed."""
        with self._lock:
            mfq = self.mapped_file_queue
            assert mfq.max_offset() == mfq.min_offset(), f"a commitlog with records ends at {mfq.max_offset()}"
            assert segment_size is not None or offset % mfq.mapped_file_size == 0, f"{offset} is not a segment's start"
            mfq.destroy_all()
            mfq.reset_start(offset, segment_size)
            with self._confirm_lock:
                self.confirm_offset = self._local_confirm = self._replicated = offset

    @staticmethod
    def _end_segment(segment: MappedFile) -> None:
        blank = bytearray(BLANK_MIN_LENGTH)
        write_blank(blank, 0, segment.remaining)
        segment.write_at(segment.wrote_position, blank)
        segment.wrote_position = segment.file_size

    # -- read --------------------------------------------------------------------------------------
    def read_record(self, physical_offset: int) -> bytes | None:
        """The whole record at ``physical_offset`` if one starts there and is intact, else None."""
        segment = self.mapped_file_queue.find(physical_offset)
        if segment is None or physical_offset >= self.confirm_offset:
            return None
        pos = physical_offset - segment.file_from_offset
        size = check_record(segment.mm, pos, segment.file_size, physical_offset, verify_crc=True)
        return segment.read(pos, size) if size > 0 else None

    def read_at(self, offset: int, size: int) -> bytes:
        """``size`` bytes at commitlog ``offset``, which the caller located (a record, or a run of them; no checks).
        They come from ``offset``'s segment: a span past its end comes back short."""
        segment = self.mapped_file_queue.find(offset)
        assert segment is not None, f"commitlog offset {offset} is not held"
        return segment.read(offset - segment.file_from_offset, size)

    def store_timestamp_at(self, physical_offset: int) -> int:
        segment = self.mapped_file_queue.find(physical_offset)
        if segment is None:
            return -1
        return STORE_TIMESTAMP.unpack_from(segment.mm, physical_offset - segment.file_from_offset
                                           + OFFSET_STORE_TIMESTAMP)[0]

    # -- recovery ----------------------------------------------------------------------------------
    def scan_valid_end(self, start: int, verify_crc: bool, written_whole_below: int = 0) -> int:
        """Walk records from ``start`` (a record boundary); the offset just past the last valid one. The records of
        an append a crash cut short are whole and valid, but the last of them still says more follow
        (``BATCH_CONTINUES``): the log ends where that append began, as its producer was never told it was stored.
        Appends that began below ``written_whole_below`` were on disk whole (the flushed checkpoint): the scan
        stopping inside one found a corrupt record, not a torn write, and keeps the records before it."""
        files = self.mapped_file_queue.files
        if not files:
            return 0
        start = max(start, files[0].file_from_offset)
        append_start = -1  # where the append the last valid record belongs to began, while it is unfinished
        for segment in files:
            if segment.end_offset <= start:
                continue
            pos = start - segment.file_from_offset
            limit, base = segment.file_size, segment.file_from_offset
            with memoryview(segment.mm) as view:  # a record's CRC is taken over a slice of it, not over a copy
                while True:
                    size = check_record(view, pos, limit, base + pos, verify_crc)
                    if size > 0:
                        if view[pos + OFFSET_BATCH_MARK] & BATCH_CONTINUES:
                            if append_start < 0:
                                append_start = base + pos
                        else:
                            append_start = -1
                        pos += size
                    elif size == 0:  # an append larger than a segment goes on in the next one
                        start = segment.end_offset
                        break
                    else:
                        start = base + pos
                        break
            if size < 0:
                break
        if append_start >= written_whole_below:
            log.warning("unfinished_append_cut from=%d to=%d: the log ends inside an append (a write a crash cut "
                        "short, or a replica's copy of one that came in part); nobody was told it was stored",
                        append_start, start)
            return append_start
        return start

    def recover_to(self, end: int) -> None:
        """Make ``end`` the commitlog end: zero a torn tail, drop later segments."""
        self.mapped_file_queue.truncate_to(end)
        if self._append_observer is not None:
            self._append_observer.forget()
        for segment in self.mapped_file_queue.files:
            if segment.end_offset <= end:
                segment.wrote_position = segment.flushed_position = segment.file_size
        # What survived a restart counts as confirmed, replicated or not (replicas catch up from here).
        self.confirm_offset = self._local_confirm = self._replicated = end

    def truncate_tail(self, end: int) -> None:
        """A replica cuts the tail its master does not have (never what was dispatched: the caller checks)."""
        with self._lock:
            assert end >= self.confirm_offset, f"cutting at {end}, below the confirm offset {self.confirm_offset}"
            self.mapped_file_queue.truncate_to(end)
            if self._append_observer is not None:
                self._append_observer.forget()
            self._local_confirm = min(self._local_confirm, end)
            self._replicated = min(self._replicated, end)

    def cut_partial_record(self, from_offset: int) -> int:
        """A replica about to be promoted: what it holds past its last whole append (its master's frames end anywhere)
        goes, with the confirm offset that counted it: none of it was acknowledged (a master confirms whole appends),
        nor dispatched (``from_offset``, where reput stands, a record boundary the scan starts from). Returns the
        log's end."""
        with self._lock:
            # CRC too: a record's header may be all there while its body was never written (zeros past the end).
            end = self.scan_valid_end(from_offset, verify_crc=True, written_whole_below=from_offset)
            if end < self.max_offset():
                self.mapped_file_queue.truncate_to(end)
                if self._append_observer is not None:
                    self._append_observer.forget()
                with self._confirm_lock:
                    self.confirm_offset = min(self.confirm_offset, end)
                    self._local_confirm = min(self._local_confirm, end)
                    self._replicated = min(self._replicated, end)
                log.warning("partial_append_cut end=%d: the log ended inside an append its master sent in parts", end)
            return end

    def cap_recovered_confirm(self, confirmed: int) -> None:
        """After recovery, when replicated: only what was confirmed before the crash is shown (the rest may be a
        tail the group's next master does not have); confirmation resumes from the group."""
        with self._confirm_lock:
            self._replicated = min(self._replicated, confirmed)
            self.confirm_offset = min(self.confirm_offset, confirmed)

    def record_size_at(self, physical_offset: int) -> int:
        segment = self.mapped_file_queue.find(physical_offset)
        if segment is None:
            return -1
        return SIZE_MAGIC.unpack_from(segment.mm, physical_offset - segment.file_from_offset)[0]

    def shutdown(self, flush: bool = True) -> None:
        self.mapped_file_queue.shutdown(flush)


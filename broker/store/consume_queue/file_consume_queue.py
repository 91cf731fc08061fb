"""One queue's consume queue in files of 20-byte units: physical offset, size, tags code."""

import logging
import struct
from collections.abc import Callable
from pathlib import Path

from broker.store.consume_queue.consume_queue_store import (
    BoundaryType,
    CqUnit,
    UnitTuple,
    bisect_offsets,
    offset_by_time,
)
from broker.store.mapped_file_queue import MappedFileQueue

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size
assert UNIT_SIZE == 20
# A larger hole in a queue's offsets is no damage on disk (that loses a few records) but a broken invariant.
MAX_GAP_UNITS = 1_000_000

log = logging.getLogger(__name__)


def hole_units(after: bytes, count: int) -> bytes:
    """``count`` empty units (size 0: reads pass over them) for records lost to damage, each at the commitlog offset
    of the record ``after`` starts with, so the units' offsets never go down (expiry and search by time bisect them;
    an offset 0 made them skip good records, and tiered storage took them for expired ones)."""
    return UNIT.pack(UNIT.unpack_from(after)[0], 0, 0) * count


class FileConsumeQueue:
    def __init__(self, topic: str, queue_id: int, queue_dir: Path, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_queue = MappedFileQueue(queue_dir, file_size)
        self.min_offset = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    def load(self) -> None:
        """Find the written extent: units are never all-zero (size > 0), unwritten space is. Read with read(),
        not through the mapping: on tmpfs a mapping's read of a hole allocates a page (all of a mostly empty
        file, at every start), and on a full tmpfs it is SIGBUS."""
        mfq = self.mapped_file_queue
        mfq.load()
        files = mfq.files
        if not files:
            return
        last = files[-1]
        last_bytes = last.path.read_bytes()
        used = len(last_bytes.rstrip(b"\x00"))
        last.wrote_position = last.flushed_position = -(-used // UNIT_SIZE) * UNIT_SIZE
        first = files[0]
        head = (last_bytes if first is last else first.path.read_bytes())[: first.wrote_position]
        lead = (len(head) - len(head.lstrip(b"\x00"))) // UNIT_SIZE * UNIT_SIZE
        self.min_offset = (files[0].file_from_offset + lead) // UNIT_SIZE

    def max_offset(self) -> int:
        return self.mapped_file_queue.max_offset() // UNIT_SIZE

    def is_empty(self) -> bool:
        return self.max_offset() <= self.min_offset

    def flush(self) -> None:
        self.mapped_file_queue.flush()
        self.mapped_file_queue.release_pages()  # units read by consumers: out of RSS once durable

    # -- units -------------------------------------------------------------------------------------
    def unit_at(self, offset: int) -> CqUnit:
        segment = self.mapped_file_queue.find(offset * UNIT_SIZE)
        assert segment is not None, f"{self.topic}/{self.queue_id}: no unit at {offset}"
        return CqUnit._make(UNIT.unpack_from(segment.mm, offset * UNIT_SIZE - segment.file_from_offset))

    def put_units(self, first_offset: int, units: bytes) -> None:
        """Write units for queue offsets ``first_offset``...; ones already present are skipped, so a
        re-dispatch after restart is harmless."""
        mfq = self.mapped_file_queue
        at = first_offset * UNIT_SIZE
        current = mfq.max_offset()
        if self.is_empty() and at != current:
            mfq.destroy_all()  # nothing kept: start where the commitlog says this queue is
            mfq.reset_start(at)
            self.min_offset = first_offset
            current = at
        if at < current:
            units = units[current - at :]
            at = current
        if at > current:  # records lost to damage on disk (dispatch/damaged_range.py): empty units, passed over
            assert at - current <= MAX_GAP_UNITS * UNIT_SIZE, \
                f"{self.topic}/{self.queue_id}: gap in queue offsets, {at // 20} after {current // 20}"
            log.warning("consume_queue_gap_filled topic=%s queue_id=%d from=%d to=%d: records lost to damage on disk",
                        self.topic, self.queue_id, current // UNIT_SIZE, at // UNIT_SIZE)
            units = hole_units(units, (at - current) // UNIT_SIZE) + units
        # Bytes, not a view of them, when they fit (always but at a segment's end): a view is read-only, which
        # the store's pwrite cannot point at, and it would release the GIL for the write (pwrite_holding_gil).
        view: bytes | memoryview = units if len(units) <= mfq.last_writable().remaining else memoryview(units)
        while view:
            segment = mfq.last_writable()
            n = min(segment.remaining, len(view))
            # A write the disk refused part-way leaves nothing past the written end (MappedFile.append): the next
            # start finds the end by the first zero bytes, and would take a torn unit there for one.
            segment.append(view[:n])
            view = view[n:]

    def read_units(self, offset: int, max_count: int) -> list[UnitTuple]:
        offset = max(offset, self.min_offset)
        end = min(self.max_offset(), offset + max_count)
        if offset >= end:
            return []
        segment = self.mapped_file_queue.find(offset * UNIT_SIZE)
        if segment is None:
            return []
        pos = offset * UNIT_SIZE - segment.file_from_offset
        stop = min(end * UNIT_SIZE - segment.file_from_offset, segment.wrote_position)
        return list(UNIT.iter_unpack(segment.mm[pos:stop]))

    def _physical_at(self, offset: int) -> int:
        return self.unit_at(offset).physical_offset

    def truncate_dirty(self, commit_log_end: int) -> None:
        """Drop units whose message is at or past the commitlog end."""
        if self.is_empty():
            return
        first_bad = bisect_offsets(self.min_offset, self.max_offset(), self._physical_at, commit_log_end, strict=False)
        if first_bad < self.max_offset():
            self.mapped_file_queue.truncate_to(first_bad * UNIT_SIZE)

    def correct_min_offset(self, commit_log_min_offset: int) -> None:
        if self.is_empty():
            return
        new_min = bisect_offsets(self.min_offset, self.max_offset(), self._physical_at, commit_log_min_offset,
                                 strict=False)
        assert new_min >= self.min_offset, "min offset never moves back"
        self.min_offset = new_min
        self.mapped_file_queue.delete_first(lambda f: f.end_offset <= new_min * UNIT_SIZE, max_count=1 << 30)

    def offset_by_time(self, timestamp: int, boundary: BoundaryType, store_time: Callable[[int], int]) -> int:
        return offset_by_time(self.min_offset, self.max_offset(), lambda o: store_time(self._physical_at(o)),
                              timestamp, boundary)

    def close_retired(self) -> None:
        self.mapped_file_queue.close_retired()

    def shutdown(self) -> None:
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.mapped_file_queue.destroy_all()

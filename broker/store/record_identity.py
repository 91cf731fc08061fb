"""A read's check that the bytes a consume-queue unit points at are the record the unit names: its size, the magic,
its queue id and offset and its own commitlog offset, read from the header. Damage on disk (a bad page, a flipped
bit, a segment cut short) or a damaged unit fails it: the read skips that record, logged once, and serves the
records after it. Served anyway, such bytes stopped every consumer of the queue for good (the SDK's decode refused
the whole answer at every retry) and sent POP's scan back to the header's offset, handing out acked messages again.

Fixed-position reads, no CRC: a body damaged under an intact header is the client's CRC to find. A run of records
of one size (a producer's batch, the common pull) is checked in one unpack: the first and last record whole, the
magic of each between (a bad page zeroes it); a flipped bit in the queue offset of a record between is not seen."""

import functools
import logging
import mmap
import struct
from collections.abc import Sequence

from common.message_codec import MESSAGE_MAGIC

log = logging.getLogger(__name__)

IDENTITY = struct.Struct(">iI4xi4xqq")  # total_size, magic, queue_id, queue_offset, physical_offset
MAX_LOGGED = 4096  # damaged records named once each, up to this many (then every read of one is logged again)


@functools.lru_cache(maxsize=256)
def _magics(size: int, count: int) -> tuple[struct.Struct, tuple[int, ...]]:
    """The magics of ``count`` records of ``size`` bytes back to back, as one struct, and what they should read."""
    return struct.Struct(">" + f"4xI{size - 8}x" * (count - 1) + "4xI"), (MESSAGE_MAGIC,) * count


def run_intact(mm: mmap.mmap, pos: int, units: Sequence[tuple[int, int, int]], taken: int, queue_id: int,
               queue_offset: int) -> bool:
    """Whether the first ``taken`` ``units`` (back to back from ``pos`` in ``mm``) are each the record it names.
    Records of one size (a producer's batch): the first and the last whole, the magic of each between, in one
    unpack (a bad page zeroes them); others one by one."""
    physical, size, _tags = units[0]
    last = taken - 1
    if size >= IDENTITY.size and units[last][0] - physical == size * last:
        layout, magics = _magics(size, taken)
        try:
            return (layout.unpack_from(mm, pos) == magics
                    and record_intact(mm, pos, physical, size, queue_id, queue_offset)
                    and record_intact(mm, pos + size * last, physical + size * last, size, queue_id,
                                      queue_offset + last))
        except struct.error:  # past the segment's end
            return False
    return _each_intact(mm, pos, units, taken, queue_id, queue_offset)


def _each_intact(mm: mmap.mmap, pos: int, units: Sequence[tuple[int, int, int]], taken: int, queue_id: int,
                 queue_offset: int) -> bool:
    unpack = IDENTITY.unpack_from
    try:
        for i in range(taken):
            physical, size, _tags = units[i]
            if unpack(mm, pos) != (size, MESSAGE_MAGIC, queue_id, queue_offset + i, physical):
                return False
            pos += size
    except struct.error:  # a unit whose record would lie past the segment's end
        return False
    return True


def record_intact(mm: mmap.mmap, pos: int, physical: int, size: int, queue_id: int, queue_offset: int) -> bool:
    try:
        return IDENTITY.unpack_from(mm, pos) == (size, MESSAGE_MAGIC, queue_id, queue_offset, physical)
    except struct.error:
        return False


class DamagedRecordLog:
    """Names each damaged record once (every consumer group's read of it would say it again)."""

    def __init__(self) -> None:
        self._named: set[int] = set()

    def skipped(self, topic: str, queue_id: int, queue_offset: int, physical: int, size: int) -> None:
        if physical in self._named:
            return
        if len(self._named) < MAX_LOGGED:
            self._named.add(physical)
        log.error("record_damaged topic=%s queue_id=%d queue_offset=%d commitlog_offset=%d size=%d action=skipped: "
                  "the commitlog bytes there are not the record the consume queue names (damage on disk); readers "
                  "go on after it", topic, queue_id, queue_offset, physical, size)

"""A read's check that the bytes a consume-queue unit points at are the record the unit names: its size, the magic,
its queue id and offset and its own commitlog offset, read from the header. Damage on disk (a bad page, a flipped
bit, a segment cut short) or a damaged unit fails it: the read skips that record, logged once, and serves the
records after it. Served anyway, such bytes stopped every consumer of the queue for good (the SDK's decode refused
the whole answer at every retry) and sent POP's scan back to the header's offset, handing out acked messages again.

Two fixed-position reads per record, no CRC: a body damaged under an intact header is the client's CRC to find."""

import logging
import mmap
import struct
from collections.abc import Sequence

from common.message_codec import MESSAGE_MAGIC

log = logging.getLogger(__name__)

IDENTITY = struct.Struct(">iI4xi4xqq")  # total_size, magic, queue_id, queue_offset, physical_offset
MAX_LOGGED = 4096  # damaged records named once each, up to this many (then every read of one is logged again)


def run_intact(mm: mmap.mmap, pos: int, units: Sequence[tuple[int, int, int]], taken: int, queue_id: int,
               queue_offset: int) -> bool:
    """Whether the first ``taken`` ``units`` (back to back from ``pos`` in ``mm``) are each the record it names."""
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

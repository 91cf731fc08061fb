"""Where the records go on after damage on disk, for the replay at start.

The replay after a crash starts at the lowest dispatcher checkpoint, below the segment recovery checks (the one
holding the flushed checkpoint): bytes there were fsynced, so a record that is not where it should be is damage
(a bad page, a flipped bit), not a torn write. Failed on, it fail-stopped the store at every start for good. The
replay skips it instead: the next record is the first place after it whose header has the magic, its own
commitlog offset and a good CRC (a body that happens to hold such bytes fails the offset or the CRC); past the
segment's readable end when none is. What lay between is lost to the dispatchers: queue offsets skip it (the
consume queues fill the hole with empty units, which reads pass over), and it is logged with its range."""

import logging
import mmap

from common.message_codec import MESSAGE_MAGIC, SIZE_MAGIC, check_record

log = logging.getLogger(__name__)

MAGIC_BYTES = MESSAGE_MAGIC.to_bytes(4, "big")
MAGIC_AT = SIZE_MAGIC.size - len(MAGIC_BYTES)  # the magic's position in a record


class NoRecordHere(AssertionError):
    """Where a record should start, none does. ``requests``/``pos``: what was parsed before it, and where it is."""

    def __init__(self, offset: int, requests: list, pos: int) -> None:
        super().__init__(f"no record at commitlog offset {offset}")
        self.offset, self.requests, self.pos = offset, requests, pos


def next_record(mm: mmap.mmap, start: int, limit: int, base: int) -> int | None:
    """The position of the first intact record after ``start`` in ``mm[:limit]`` (``base``: the commitlog offset
    of ``mm[0]``), or None."""
    with memoryview(mm) as view:
        at = start + 1
        while (found := mm.find(MAGIC_BYTES, at + MAGIC_AT, limit)) >= 0:
            pos = found - MAGIC_AT
            if check_record(view, pos, limit, base + pos, verify_crc=True) > 0:
                return pos
            at = pos + 1
    return None


def log_skipped(start: int, end: int, segment_name: str) -> None:
    log.error("commitlog_damaged_skipped from=%d to=%d bytes=%d segment=%s: the records there are damaged on disk and "
              "are not dispatched (not in the consume queues, the index, KV or timers); the replay goes on after them. "
              "Restore the segment from a replica or a backup to have them back", start, end, end - start,
              segment_name)

"""What the tiered uploader reads from the local store besides the records it was handed: a queue's records
below what dispatch brought (a tier that lost some, ``TieredDispatcher._fill_gap``) and a stretch of the
commitlog as dispatch requests (records dispatched while the uploader kept none in memory, ``_refill``).

Only records whose commitlog segment is still here count: the consume queue's min may lag the commitlog's."""

import logging

from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.store.dispatch.reput_service import MAX_BATCH_RECORDS, parse_records
from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

# (physical offset, size, tags hash, store time) of a queue's record in the local commitlog
LocalUnit = tuple[int, int, int, int]


class LocalLog:
    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._topics: dict[bytes, str] = {}  # parse_records' decoded topic names

    def read_at(self, offset: int, size: int) -> bytes:
        return self.store.commit_log.read_at(offset, size)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_offset(topic, queue_id)

    def queue_end_at(self, topic: str, queue_id: int, commit_log_end: int) -> int:
        """The queue's end as of commitlog offset ``commit_log_end``: its first unit at or past it (a queue's units
        are in commitlog order), found by halving; its max offset when none is."""
        cq = self.store.consume_queue_store
        lo, hi = self.store.min_offset(topic, queue_id), self.store.max_offset(topic, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            unit = cq.read_units(topic, queue_id, mid, 1)
            if unit and unit[0][0] >= commit_log_end:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def first_held(self, topic: str, queue_id: int, offset: int, end: int) -> int:
        """The first queue offset in ``[offset, end)`` whose record is still here (``end`` if none): local
        expiry goes oldest first, so every later one is here too."""
        offset = max(offset, self.store.min_offset(topic, queue_id))
        commit_min = self.store.commit_log.min_offset()
        while offset < end:
            units = self.store.consume_queue_store.read_units(topic, queue_id, offset, min(end - offset, 1024))
            if not units:
                return end
            for physical, _, _ in units:
                if physical >= commit_min:
                    return offset
                offset += 1
        return end

    def units(self, topic: str, queue_id: int, offset: int, count: int) -> list[LocalUnit]:
        """Units of the queue from ``offset`` (at most ``count``; fewer at a file boundary), which
        :meth:`first_held` said are here."""
        units = self.store.consume_queue_store.read_units(topic, queue_id, offset, count)
        store_time = self.store.commit_log.store_timestamp_at
        return [(physical, size, tags_code, store_time(physical)) for physical, size, tags_code in units]

    def records(self, start: int, end: int, max_count: int = MAX_BATCH_RECORDS) -> tuple[list[DispatchRequest], int]:
        """Dispatch requests for the records from commitlog offset ``start`` (a record boundary below ``end``,
        the dispatched end), as reput made them, and the offset after them. A topic deletion comes alone."""
        mfq = self.store.commit_log.mapped_file_queue
        segment = mfq.find(start)
        if segment is None:  # expired (a forced clean): the oldest segment still here is the next record
            first = mfq.min_offset()
            resume = first if start < first < end else end
            log.error("tiered_reread_skipped_expired from=%d to=%d: those records are not in the tier", start, resume)
            return [], resume
        base = segment.file_from_offset
        limit = min(end, segment.end_offset) - base
        requests, pos, hit_end = parse_records(segment.mm, start - base, limit, base, self._topics, max_count)
        return requests, min(segment.end_offset, end) if hit_end else base + pos

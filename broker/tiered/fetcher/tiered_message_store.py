"""The message store as the broker's processors see it when tiered storage is on: the local store, with reads
served from the tier by ``tieredStorageLevel``:

- DISABLE: never from the tier;
- NOT_IN_DISK: from the tier when the local store no longer has the offset (its segments expired);
- NOT_IN_MEM: also when the message sits in a local commitlog segment older than the newest two (likely no
  longer in the page cache);
- FORCE: from the tier whenever it has the offset.

The queue's min offset is the lower of the two tiers'; its max is the local one (the tier lags behind it);
search by time looks in the tier for what is older than the local queue. Everything else is the local store's.
"""

import logging
from typing import Any

from broker.store.consume_queue.consume_queue_store import BoundaryType
from broker.store.get_message_result import GetMessageResult, GetMessageStatus
from broker.store.message_store import MessageStore
from broker.tiered.file.flat_file_store import FlatFileStore

log = logging.getLogger(__name__)

LEVELS = ("DISABLE", "NOT_IN_DISK", "NOT_IN_MEM", "FORCE")
HOT_SEGMENTS = 2


class TieredMessageStore:
    def __init__(self, local: MessageStore, flat_files: FlatFileStore, level: str) -> None:
        assert level in LEVELS, level
        self.local = local
        self.flat_files = flat_files
        self.level = level
        self.tier_reads = 0

    def __getattr__(self, name: str) -> Any:  # everything not about reading a queue is the local store's
        return getattr(self.local, name)

    # -- which tier ----------------------------------------------------------------------------------
    def _from_tier(self, topic: str, queue_id: int, offset: int) -> bool:
        if self.level == "DISABLE":
            return False
        flat = self.flat_files.get(topic, queue_id)
        if flat is None or not flat.min_offset <= offset < flat.max_offset:
            return False
        local = self.local
        if self.level == "FORCE" or offset < local.min_offset(topic, queue_id):
            return True
        units = local.consume_queue_store.read_units(topic, queue_id, offset, 1)
        if not units or units[0].physical_offset < local.commit_log.min_offset():
            return True  # its commitlog segment expired before the consume queue's min caught up
        if self.level == "NOT_IN_MEM":
            mfq = local.commit_log.mapped_file_queue
            segment, newest = mfq.find(units[0].physical_offset), mfq.last()
            if segment is not None and newest is not None:
                hot_bytes = HOT_SEGMENTS * local.commit_log.mapped_file_size
                return newest.file_from_offset - segment.file_from_offset >= hot_bytes
        return False

    # -- the read API ---------------------------------------------------------------------------------
    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int = 4 * 1024 * 1024, tags_codes: set[int] | None = None) -> GetMessageResult:
        flat = self.flat_files.get(topic, queue_id)
        if not self._from_tier(topic, queue_id, offset):
            result = self.local.get_message(topic, queue_id, offset, max_msg_nums, max_total_bytes, tags_codes)
            in_tier = flat is not None and flat.min_offset <= offset < flat.max_offset and self.level != "DISABLE"
            if result.messages or not in_tier or (result.status is GetMessageStatus.NO_MATCHED_MESSAGE and tags_codes):
                result.min_offset = self.min_offset(topic, queue_id)
                if result.status is GetMessageStatus.OFFSET_TOO_SMALL:  # below both tiers: the lower min
                    result.next_begin_offset = result.min_offset
                return result
            # nothing locally although the tier has it: expired between the check and the read
        assert flat is not None
        local_min = self.local.min_offset(topic, queue_id)
        # NOT_IN_DISK stops where the local store takes over; the other levels prefer the tier for all it has
        limit = min(max_msg_nums, local_min - offset) if self.level == "NOT_IN_DISK" and offset < local_min \
            else max_msg_nums
        messages, total, next_offset = flat.messages(offset, limit, max_total_bytes, tags_codes)
        self.tier_reads += len(messages)
        status = GetMessageStatus.FOUND if messages else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, next_offset, self.min_offset(topic, queue_id),
                                self.max_offset(topic, queue_id), messages, total)

    def min_offset(self, topic: str, queue_id: int) -> int:
        local = self.local.min_offset(topic, queue_id)
        flat = self.flat_files.get(topic, queue_id)
        if self.level == "DISABLE" or flat is None or flat.max_offset <= flat.min_offset:
            return local
        return min(local, flat.min_offset)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.local.max_offset(topic, queue_id)

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int,
                       boundary: BoundaryType = BoundaryType.LOWER) -> int:
        local = self.local.offset_by_time(topic, queue_id, timestamp, boundary)
        flat = self.flat_files.get(topic, queue_id)
        local_min = self.local.min_offset(topic, queue_id)
        if self.level == "DISABLE" or flat is None or not flat.min_offset < min(local_min, flat.max_offset):
            return local
        tier = flat.offset_by_time(timestamp, boundary)
        if boundary is BoundaryType.LOWER:
            # the first message at or after the time: in the tier if one older than the local queue qualifies
            return tier if tier < min(local_min, flat.max_offset) else local
        # the last message at or before the time: the local answer, unless every local message is after it
        local_empty = local_min >= self.local.max_offset(topic, queue_id)
        return tier if local_empty or self._store_time(topic, queue_id, local_min) > timestamp else local

    def _store_time(self, topic: str, queue_id: int, offset: int) -> int:
        units = self.local.consume_queue_store.read_units(topic, queue_id, offset, 1)
        return self.local.commit_log.store_timestamp_at(units[0].physical_offset) if units else -1

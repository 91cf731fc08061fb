"""The message store as the broker's processors see it when tiered storage is on: the local store, with reads
served from the tier by ``tieredStorageLevel``:

- DISABLE: never from the tier;
- NOT_IN_DISK: from the tier when the local store no longer has the offset (its segments expired);
- NOT_IN_MEM: also when the message sits in a local commitlog segment older than the newest two (likely no
  longer in the page cache);
- FORCE: from the tier whenever it has the offset.

Which reads may come from the tier (the :class:`MessageStoreReader` methods):

- ``get_message``: by the level above;
- ``min_offset``: the lower of the two tiers' (unless DISABLE);
- ``offset_by_time``: looks in the tier for what is older than the local queue (unless DISABLE).

Which are the local store's alone:

- ``max_offset`` and ``last_store_timestamp``: the tier only ever lags behind the local queue;
- lookup by message id (``select_one_message_by_offset``, ``look_message_by_offset``) and by key
  (``query_message_records``): they read only the local commitlog and index today, so a message whose local
  segment expired is not found that way even when the tier still has it.

A record read from the tier carries its commitlog offset, as the local one does (so its offset message id, made
of store host and commitlog offset, is the one its send returned). Records an older version uploaded carry their
tiered position there instead: it is restored from the local consume queue while that holds the offset's unit, and
is -1 (unknown) after, never an offset that names another message.

Writes, lifecycle and the store's internals (commitlog, reput, consume queue store) are not here: they are the
local :class:`MessageStore`'s (``self.local``, and the broker controller's ``local_store``).
"""

import logging

from broker.store.consume_queue.consume_queue_store import BoundaryType
from broker.store.get_message_result import GetMessageResult, GetMessageStatus
from broker.store.message_store import MessageStore
from broker.store.message_store_reader import DEFAULT_MAX_TOTAL_BYTES, MessageStoreReader
from broker.tiered.file.flat_file_store import FlatFileStore
from broker.tiered.file.flat_message_file import (
    FlatMessageFile,
    record_physical_offset,
    record_queue_offset,
    with_physical_offset,
)
from broker.tiered.tiered_storage_level import TieredStorageLevel
from common.message import MessageExt

log = logging.getLogger(__name__)

HOT_SEGMENTS = 2
UNKNOWN_COMMIT_LOG_OFFSET = -1  # of a record an older version uploaded, once no local unit knows its offset


class TieredMessageStore(MessageStoreReader):
    def __init__(self, local: MessageStore, flat_files: FlatFileStore, level: TieredStorageLevel) -> None:
        if not isinstance(level, TieredStorageLevel):  # parsed once (broker.conf)
            raise TypeError(f"TieredStorageLevel member expected, got {level!r}")
        self.local = local
        self.flat_files = flat_files
        self.level = level
        self.tier_reads = 0

    # -- which tier ----------------------------------------------------------------------------------
    def _from_tier(self, topic: str, queue_id: int, offset: int) -> bool:
        if self.level is TieredStorageLevel.DISABLE:
            return False
        flat = self.flat_files.get(topic, queue_id)
        if flat is None or not flat.min_offset <= offset < flat.max_offset:
            return False
        local = self.local
        if self.level is TieredStorageLevel.FORCE or offset < local.min_offset(topic, queue_id):
            return True
        units = local.consume_queue_store.read_units(topic, queue_id, offset, 1)
        if not units or units[0][0] < local.commit_log.min_offset():  # (physical offset)
            return True  # its commitlog segment expired before the consume queue's min caught up
        if self.level is TieredStorageLevel.NOT_IN_MEM:
            mfq = local.commit_log.mapped_file_queue
            segment, newest = mfq.find(units[0][0]), mfq.last()
            if segment is not None and newest is not None:
                hot_bytes = HOT_SEGMENTS * local.commit_log.mapped_file_size
                return newest.file_from_offset - segment.file_from_offset >= hot_bytes
        return False

    def may_wait_on_tier(self, topic: str, queue_id: int, offset: int) -> bool:
        # The tier serves offsets below its end: FORCE all of them; the other levels the oldest first, so whether
        # the oldest such offset at or above ``offset`` comes from the tier answers for all above it. (A local
        # segment that expires between this answer and the read sends that read to the tier all the same.)
        flat = self.flat_files.get(topic, queue_id)
        if self.level is TieredStorageLevel.DISABLE or flat is None or offset >= flat.max_offset:
            return False
        return self.level is TieredStorageLevel.FORCE or self._from_tier(topic, queue_id, max(offset, flat.min_offset))

    # -- reads the tier may serve --------------------------------------------------------------------
    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
                    tags_codes: set[int] | None = None, runs: bool = False) -> GetMessageResult:
        flat = self.flat_files.get(topic, queue_id)
        if not self._from_tier(topic, queue_id, offset):
            result = self.local.get_message(topic, queue_id, offset, max_msg_nums, max_total_bytes, tags_codes,
                                            runs)
            in_tier = (flat is not None and flat.min_offset <= offset < flat.max_offset
                       and self.level is not TieredStorageLevel.DISABLE)
            if result.messages or not in_tier or (result.status is GetMessageStatus.NO_MATCHED_MESSAGE and tags_codes):
                result.min_offset = self.min_offset(topic, queue_id)
                if result.status is GetMessageStatus.OFFSET_TOO_SMALL:
                    result.next_begin_offset = self._next_served(topic, queue_id, offset)
                return result
            # nothing locally although the tier has it: expired between the check and the read
        assert flat is not None
        local_min = self.local.min_offset(topic, queue_id)
        # NOT_IN_DISK stops where the local store takes over; the other levels prefer the tier for all it has
        stop_at_local = self.level is TieredStorageLevel.NOT_IN_DISK and offset < local_min
        limit = min(max_msg_nums, local_min - offset) if stop_at_local else max_msg_nums
        messages, total, next_offset = flat.messages(offset, limit, max_total_bytes, tags_codes)
        if offset < flat.commit_log_offsets_from:  # some were uploaded by an older version
            messages = self._restore_commit_log_offsets(topic, queue_id, messages, flat)
        self.tier_reads += len(messages)
        status = GetMessageStatus.FOUND if messages else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, next_offset, self.min_offset(topic, queue_id),
                                self.max_offset(topic, queue_id), messages, total)

    def _next_served(self, topic: str, queue_id: int, offset: int) -> int:
        """Where a read below the local store goes on: the lowest offset at or above ``offset`` that either tier
        serves. Below the tier, the tier's start; past the tier's end (a tier that stopped short of the local store,
        e.g. a queue blocked by a record too large to upload, whose next messages then expired locally), the local
        start: sending it back to the tier's start made its consumers read the tier again, for ever."""
        local_min = self.local.min_offset(topic, queue_id)
        flat = self.flat_files.get(topic, queue_id)
        if self.level is TieredStorageLevel.DISABLE or flat is None or offset >= flat.max_offset:
            return local_min
        return min(local_min, max(offset, flat.min_offset))

    def _restore_commit_log_offsets(self, topic: str, queue_id: int, records: list[bytes],
                                    flat: FlatMessageFile) -> list[bytes]:
        """Records below queue offset ``flat.commit_log_offsets_from`` may hold their tiered position where their
        commitlog offset belongs (an older version overwrote it): the local consume queue's unit of the offset still
        knows it; once that is gone nothing does, and -1 says so (the position would be another message's id). A
        record whose field is not its tiered position keeps it: the older version wrote nothing else there, so that
        one is its commitlog offset (a marker set too high, as a promoted replica's from a copy before it, is then
        harmless)."""
        below = flat.commit_log_offsets_from
        queue_offsets = [record_queue_offset(r) for r in records]
        old = [q for q in queue_offsets if q < below]
        if not old:
            return records
        units = self._local_units(topic, queue_id, old[0], old[-1] + 1)
        positions = {old[0] + i: unit[0] for i, unit in enumerate(flat.units(old[0], old[-1] + 1 - old[0]))}
        restored = []
        for q, record in zip(queue_offsets, records, strict=True):
            if q >= below or record_physical_offset(record) != positions.get(q):
                restored.append(record)
                continue
            unit = units.get(q)  # the same record: a size that differs says the unit is another's
            known = unit[0] if unit is not None and unit[1] == len(record) else UNKNOWN_COMMIT_LOG_OFFSET
            restored.append(with_physical_offset(record, known))
        return restored

    def _local_units(self, topic: str, queue_id: int, start: int, end: int) -> dict[int, tuple[int, int]]:
        """(commitlog offset, size) by queue offset of the local consume queue's units in ``[start, end)`` it
        still holds."""
        cq = self.local.consume_queue_store
        units: dict[int, tuple[int, int]] = {}
        while start < end:
            start = max(start, cq.min_offset(topic, queue_id))
            read = cq.read_units(topic, queue_id, start, end - start)
            if cq.min_offset(topic, queue_id) > start:
                continue  # the min moved: the read may have begun at it instead (it reads from the min at least)
            if not read:
                break
            for physical, size, _ in read:
                units[start] = (physical, size)
                start += 1
        return units

    def min_offset(self, topic: str, queue_id: int) -> int:
        local = self.local.min_offset(topic, queue_id)
        flat = self.flat_files.get(topic, queue_id)
        if self.level is TieredStorageLevel.DISABLE or flat is None or flat.max_offset <= flat.min_offset:
            return local
        return min(local, flat.min_offset)

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int,
                       boundary: BoundaryType = BoundaryType.LOWER) -> int:
        local = self.local.offset_by_time(topic, queue_id, timestamp, boundary)
        flat = self.flat_files.get(topic, queue_id)
        local_min = self.local.min_offset(topic, queue_id)
        if self.level is TieredStorageLevel.DISABLE or flat is None:
            return local
        if not flat.min_offset < min(local_min, flat.max_offset):  # nothing in the tier older than the local queue
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
        return self.local.commit_log.store_timestamp_at(units[0][0]) if units else -1

    # -- reads the local store alone serves ----------------------------------------------------------
    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.local.max_offset(topic, queue_id)

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        return self.local.next_queue_offset(topic, queue_id)

    def last_store_timestamp(self, topic: str, queue_id: int) -> int:
        return self.local.last_store_timestamp(topic, queue_id)

    def store_timestamp_of(self, topic: str, queue_id: int, offset: int) -> int:
        return self.local.store_timestamp_of(topic, queue_id, offset)  # (an admin reading: not worth a tier fetch)

    def select_one_message_by_offset(self, physical_offset: int) -> bytes | None:
        return self.local.select_one_message_by_offset(physical_offset)

    def look_message_by_offset(self, physical_offset: int) -> MessageExt | None:
        return self.local.look_message_by_offset(physical_offset)

    def query_message_records(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                              end_ms: int = 2**62) -> list[bytes]:
        return self.local.query_message_records(topic, key, max_num, begin_ms, end_ms)

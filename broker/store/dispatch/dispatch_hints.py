"""Dispatch hints: what the appender knows of the records it just wrote, handed to reput so that reput does not
parse them back out of the commitlog (issue 14: dispatch from what the append already knew).

The commitlog offers each run of records it writes into one segment (under its lock, so in commitlog order) as
the dispatch requests reput would parse from those bytes. Reput takes a hint only when it starts exactly where
reput stands and ends within the confirm offset; otherwise it parses the bytes, as it always does after a
restart, for a replica's appends, or when a hint was dropped because too many waited. A hint is never the only
record of anything: it is a shortcut to what the bytes say. A truncated commitlog forgets every hint (bytes
written later at the same offsets are not the ones hinted)."""

import threading
from collections import deque
from collections.abc import Sequence
from itertools import repeat

from broker.store.dispatch.dispatch_request import PHYSICAL_OFFSET, DispatchRequest
from broker.store.dispatch.topic_deletion import TOPIC_DELETION_TOPIC
from common.message_properties import TAGS_NEEDLE, properties_tags_code

# Records hinted and waiting for the confirm offset (a SYNC_MASTER's slaves behind, a SYNC_FLUSH behind the disk, a
# fail-stopped reput): past this many, appends go unhinted and reput parses them.
MAX_PENDING_RECORDS = 65_536
Hint = tuple[int, int, list[DispatchRequest]]  # start offset, end offset, the requests


class DispatchHints:
    def __init__(self, max_pending_records: int = MAX_PENDING_RECORDS) -> None:
        self.max_pending_records = max_pending_records
        self.dropped = 0  # hints not kept because too many records waited
        self._hints: deque[Hint] = deque()
        self._pending_records = 0
        self._lock = threading.Lock()  # the appender offers and forgets, reput takes

    @property
    def pending_records(self) -> int:
        return self._pending_records

    def appended(self, topic: str, queue_id: int, queue_offset: int, physical_offsets: Sequence[int],
                 sizes: Sequence[int], properties: Sequence[bytes], store_timestamp: int, end: int) -> None:
        """Records just written back to back from ``physical_offsets[0]`` to ``end``, with consecutive queue
        offsets from ``queue_offset``; ``properties``: their blocks, a repeat of the one before as the same
        object (``WireBatch.properties``)."""
        if topic == TOPIC_DELETION_TOPIC:  # reput parses it, alone (reput_service.parse_records)
            return
        if self._pending_records + len(sizes) > self.max_pending_records:  # racy read: a bound, not an invariant
            self.dropped += 1
            return
        requests = list(zip(repeat(topic), repeat(queue_id), range(queue_offset, queue_offset + len(sizes)),
                            physical_offsets, sizes, _tags_codes(properties), repeat(store_timestamp), properties,
                            strict=False))  # the repeats are endless: the records' own columns give the length
        with self._lock:
            self._hints.append((physical_offsets[0], end, requests))
            self._pending_records += len(requests)

    def take(self, offset: int, limit: int, max_records: int) -> tuple[list[DispatchRequest], int] | None:
        """The requests of the hints that start at ``offset`` and follow one another up to ``limit`` (at most
        ``max_records``, unless the first hint alone has more), and where they end; None when no hint starts at
        ``offset``, or no whole record of the one that does is below ``limit``."""
        with self._lock:
            hints = self._hints
            while hints and hints[0][0] < offset:  # reput parsed past them
                self._pending_records -= len(hints.popleft()[2])
            if not hints or hints[0][0] != offset:
                return None
            if hints[0][1] > limit:  # confirmed part-way (a replica's ack): the confirmed records, the rest later
                return self._split_first(limit)
            _, end, requests = hints.popleft()
            while hints and hints[0][0] == end and hints[0][1] <= limit and len(requests) < max_records:
                _, end, more = hints.popleft()
                requests += more
            self._pending_records -= len(requests)
        assert requests[0][PHYSICAL_OFFSET] == offset, f"a hint's first record is not at commitlog offset {offset}"
        return requests, end

    def _split_first(self, limit: int) -> tuple[list[DispatchRequest], int] | None:
        _, end, requests = self._hints[0]
        below = at = 0
        for _, _, _, physical, size, _, _, _ in requests:
            if physical + size > limit:
                break
            below, at = below + 1, physical + size
        if below == 0:
            return None
        self._hints[0] = (at, end, requests[below:])
        self._pending_records -= below
        return requests[:below], at

    def forget(self) -> None:
        """The commitlog was truncated (what was hinted may be written over), or reput stopped for good."""
        with self._lock:
            self._hints.clear()
            self._pending_records = 0


def _tags_codes(properties: Sequence[bytes]) -> list[int]:
    if TAGS_NEEDLE not in b"".join(properties):  # no record has tags (a needle across two blocks: the long way)
        return [0] * len(properties)
    first = properties[0]
    if properties.count(first) == len(properties):  # one block for all (identity makes the count cheap)
        return [properties_tags_code(first)] * len(properties)
    codes: list[int] = []
    last, code = first, properties_tags_code(first)
    for props in properties:
        if props is not last:
            last, code = props, properties_tags_code(props)
        codes.append(code)
    return codes

"""The read side of a message store, as the broker's processors and services use it.

Implemented by :class:`~broker.store.message_store.MessageStore` (the local commitlog and consume queues) and by
:class:`~broker.tiered.fetcher.tiered_message_store.TieredMessageStore` (the local store with reads served
from the second tier by ``tieredStorageLevel``). Writes, lifecycle and store internals (commitlog, reput,
consume queue store) are not part of it: they belong to the local ``MessageStore`` only.
"""

from abc import ABC, abstractmethod

from broker.store.consume_queue.consume_queue_store import BoundaryType
from broker.store.get_message_result import GetMessageResult
from common.message import MessageExt

DEFAULT_MAX_TOTAL_BYTES = 4 * 1024 * 1024


class MessageStoreReader(ABC):
    # -- by queue and queue offset -------------------------------------------------------------------
    @abstractmethod
    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
                    tags_codes: set[int] | None = None, runs: bool = False) -> GetMessageResult:
        """Up to ``max_msg_nums`` records (or ``max_total_bytes``) of a queue from ``offset``; with
        ``tags_codes``, only messages whose tag hash is in it; ``runs``: records that follow one another in the
        store may come as one item of ``messages`` (for a reader that sends them on joined)."""

    def may_wait_on_tier(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether a read of the queue at ``offset`` or above may be served by a second tier, and so wait on its
        backend (an object store across the network): the broker makes such reads off its event loop, where one
        backend that stalls would stall every client. The local store alone: never."""
        return False

    @abstractmethod
    def min_offset(self, topic: str, queue_id: int) -> int:
        """The queue's lowest readable offset."""

    @abstractmethod
    def max_offset(self, topic: str, queue_id: int) -> int:
        """One past the queue's newest message."""

    @abstractmethod
    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the queue's next message will get: every acknowledged message of it is below, dispatched
        into its consume queue or not (``max_offset`` counts the dispatched ones only)."""

    @abstractmethod
    def last_store_timestamp(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's newest message; 0 for an empty queue."""

    @abstractmethod
    def store_timestamp_of(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the queue's message at ``offset``; 0 when the local store does not hold it."""

    @abstractmethod
    def offset_by_time(self, topic: str, queue_id: int, timestamp: int,
                       boundary: BoundaryType = BoundaryType.LOWER) -> int:
        """The queue offset of the first message stored at or after ``timestamp`` (LOWER), or of the last
        one at or before it (UPPER)."""

    # -- by commitlog offset and by key ------------------------------------------------------------
    @abstractmethod
    def select_one_message_by_offset(self, physical_offset: int) -> bytes | None:
        """The whole record starting at commitlog offset ``physical_offset`` (query by message id)."""

    @abstractmethod
    def look_message_by_offset(self, physical_offset: int) -> MessageExt | None:
        """The message whose record starts at ``physical_offset``, decoded."""

    @abstractmethod
    def query_message_records(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                              end_ms: int = 2**62) -> list[bytes]:
        """Records of ``topic`` whose message key or unique key is ``key``, stored in [begin_ms, end_ms]."""

"""The consume queue interface: per (topic, queue) an index of the commitlog by queue offset.

Two implementations: files of 20-byte units (``storeType=default``) and RocksDB
(``storeType=defaultRocksDB``). Both are dispatchers in the reput chain.
"""

from abc import abstractmethod
from collections.abc import Callable
from enum import Enum
from typing import NamedTuple

from broker.store.consume_queue.deleted_queue_ends import DeletedQueueEnds
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher


class BoundaryType(Enum):
    """For search by store time: LOWER = the first message stored at or after the time;
    UPPER = the last message stored at or before it."""

    LOWER = "LOWER"
    UPPER = "UPPER"


class CqUnit(NamedTuple):
    physical_offset: int
    size: int
    tags_code: int


# What ``read_units`` answers: a CqUnit's fields as a plain tuple. A pull reads 64 units at a time, and making each
# a CqUnit cost 11 us of a pull's ~180 us on the broker (a tuple from ``struct.iter_unpack`` costs nothing more).
UnitTuple = tuple[int, int, int]


def bisect_offsets(lo: int, hi: int, key: Callable[[int], int], target: int, strict: bool) -> int:
    """The first offset in [lo, hi) whose key is >= target (> target if ``strict``); hi if none.
    ``key`` is non-decreasing over offsets (physical offsets and store times in a queue are)."""
    while lo < hi:
        mid = (lo + hi) // 2
        k = key(mid)
        if k > target or (k == target and not strict):
            hi = mid
        else:
            lo = mid + 1
    return lo


def offset_by_time(lo: int, hi: int, store_time: Callable[[int], int], timestamp: int,
                   boundary: BoundaryType) -> int:
    """Search by time over queue offsets [lo, hi) given each offset's store time."""
    if lo >= hi:
        return lo
    if boundary is BoundaryType.LOWER:
        return bisect_offsets(lo, hi, store_time, timestamp, strict=False)
    return max(lo, bisect_offsets(lo, hi, store_time, timestamp, strict=True) - 1)


class ConsumeQueueStore(CommitLogDispatcher):
    name = "consume_queue"
    # Where deleted topics' queues ended (``deleted_queue_ends.py``): each implementation notes them at deletion.
    deleted_ends: DeletedQueueEnds

    @abstractmethod
    def load(self) -> None: ...

    @abstractmethod
    def min_offset(self, topic: str, queue_id: int) -> int: ...

    @abstractmethod
    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be written (0 for an unknown queue)."""

    @abstractmethod
    def read_units(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[UnitTuple]:
        """Units from ``offset`` on, at most ``max_count``; maybe fewer (a file boundary); none only at the end."""

    @abstractmethod
    def offset_by_time(self, topic: str, queue_id: int, timestamp: int, boundary: BoundaryType) -> int: ...

    @abstractmethod
    def correct_min_offset(self, commit_log_min_offset: int) -> None:
        """Move every queue's min offset past units whose messages the commitlog no longer has."""

    def prepare_expiry(self, commit_log_min_offset: int) -> None:
        """Called before the commitlog below ``commit_log_min_offset`` is deleted: make durable now whatever a
        crash right after the deletion could not rebuild by replay. Raises when that fails (the segments stay)."""
        return None

    @abstractmethod
    def topic_deleted(self, topic: str, at_offset: int = 0) -> None:
        """Drop the topic's queues (dispatch reached its deletion: ``topic_deletion.py``)."""

    @abstractmethod
    def queue_max_offsets(self) -> dict[tuple[str, int], int]:
        """Every known queue with its max offset (rebuilds the commitlog's topic queue table)."""

    @abstractmethod
    def shutdown(self) -> None: ...

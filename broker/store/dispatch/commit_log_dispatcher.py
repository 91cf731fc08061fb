"""The interface every consumer of the dispatch chain implements (consume queue, index, KV, tiered)."""

from abc import ABC, abstractmethod

from broker.store.dispatch.dispatch_request import DispatchRequest


class CommitLogDispatcher(ABC):
    """Receives commitlog records in commitlog order, never past the confirm offset.

    Contract: ``dispatch`` is idempotent under re-dispatch (after a restart the chain replays from the
    lowest checkpoint of all dispatchers); ``checkpoint`` is a commitlog offset below which this
    dispatcher's applied state survives a crash.
    """

    name: str = "dispatcher"
    # True for state that only a replay can rebuild (the KV store): commitlog segments expire only below
    # this dispatcher's checkpoint. Others (consume queue, index) lose nothing when expired data is gone.
    keeps_commit_log: bool = False
    # False for a hold a full disk may break (``kv_disabled_hold.py``: state nobody applies now): past
    # diskSpaceCleanForciblyRatio expiry passes it rather than stop every write.
    holds_under_disk_pressure: bool = True
    # True when a flush the disk refused heals by itself (its database is reopened at its next write:
    # ``rocksdb_raw.ReopenedAfterRefusal``). Otherwise a RocksDB flush that failed leaves the database refusing
    # every write until reopened, and the store fail-stops (``DispatcherFlushService``).
    recovers_from_refused_flush: bool = False
    # False when a hole in the records (the replay at start skipping damage on disk: ``damaged_range.py``) would
    # cost more than the damage (tiered storage: its gap filling takes a hole for records it lost, and drops its
    # older messages): then the store fail-stops at the damage, as it did before holes were filled.
    takes_holes: bool = True

    @abstractmethod
    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        """Apply ``requests``; ``end_offset`` is the commitlog offset after the last of them."""

    @abstractmethod
    def checkpoint(self) -> int:
        """Commitlog offset up to which applied state is durable."""

    def load(self) -> None:  # noqa: B027 - optional hook
        """Open persisted state; called before recovery."""

    def flush(self) -> None:  # noqa: B027 - optional hook
        """Make applied state durable and advance the checkpoint."""

    def topic_deleted(self, topic: str, at_offset: int) -> None:  # noqa: B027 - optional hook
        """Dispatch reached a deleteTopic (``topic_deletion.py``), its record at commitlog offset ``at_offset``:
        forget the topic's state; what follows of it is a topic made again under the name. Comes in commitlog order,
        between ``dispatch`` calls, and again in a replay."""

    def truncate_dirty(self, commit_log_end: int) -> None:  # noqa: B027 - optional hook
        """Forget state that points at or past ``commit_log_end`` (the commitlog lost its tail)."""

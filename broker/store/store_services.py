"""Background services of the store: flushing dispatcher state, deleting expired commitlog segments."""

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.store.checkpoint import CheckpointNotWritten, OffsetCheckpoint
from broker.store.commit_log import CommitLog
from broker.store.config import MessageStoreConfig
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import segment_age_hours
from broker.store.periodic_service import PeriodicService
from broker.store.running_flags import RunningFlags
from common.storage_refusal import is_rocksdb_io_error, is_storage_failure

if TYPE_CHECKING:
    from broker.store.disk_usage_watcher import DiskUsage, DiskUsageWatcher

log = logging.getLogger(__name__)

_RESTART_HINT = " (restart the broker once the disk has room: it is rebuilt from the commitlog)"


class DispatcherFlushService(PeriodicService):
    """Makes every dispatcher's state durable and advances its checkpoint; records the commitlog's
    flushed offset (where an abnormal recovery may start checking)."""

    def __init__(self, commit_log: CommitLog, dispatchers: list[CommitLogDispatcher],
                 flushed_checkpoint: OffsetCheckpoint, running_flags: RunningFlags, interval_ms: int) -> None:
        super().__init__("dispatcher-flush", interval_ms / 1000)
        self.commit_log = commit_log
        self.dispatchers = dispatchers
        self.flushed_checkpoint = flushed_checkpoint
        self.running_flags = running_flags
        self._last_flushed = -1

    def run_once(self) -> None:
        held: Exception | None = None  # a failure this pass leaves to the next (raised once the others flushed)
        for dispatcher in self.dispatchers:
            try:
                dispatcher.flush()
            except CheckpointNotWritten as exc:
                # Its state is durable; only its checkpoint stays behind (e.g. a full disk), written next pass.
                held = held or exc
            except Exception as exc:
                if is_rocksdb_io_error(exc) and dispatcher.recovers_from_refused_flush:
                    held = held or exc  # it reopens its database at its next write; the others flush meanwhile
                    continue
                if not is_storage_failure(exc):
                    raise
                # A failed fsync is not retried (a retry may "succeed" for dropped pages, and the checkpoint
                # would then move past state that is not on disk), nor a RocksDB flush that failed (a full disk):
                # the database then refuses every write until reopened, and the broker went on taking sends it
                # could no longer dispatch, or held the commitlog from expiring for good. Fail-stop and stop
                # flushing; a restart replays from the checkpoints this pass did not move.
                self.running_flags.fail_stop(f"flushing the {dispatcher.name} failed: {exc}{_RESTART_HINT}")
                self._stopped.set()
                raise
        flushed = self.commit_log.flushed_offset()
        if flushed != self._last_flushed:
            self.flushed_checkpoint.write(flushed)
            self._last_flushed = flushed
        if held is not None:
            raise held  # logged once while it lasts (PeriodicService)


class PageReleaseService(PeriodicService):
    """Unmaps the commitlog pages readers faulted in below the flushed position (``MappedFile.release_pages``):
    else the broker's RSS grows with everything the reput and consumers ever read. Often (every 200 ms): a
    consumer catching up reads hundreds of MB a second, and a pass over segments with nothing mapped costs
    microseconds. Its own thread: off the path of appends waiting for an fsync, in both flush modes."""

    def __init__(self, commit_log: CommitLog, interval_ms: int = 200) -> None:
        super().__init__("page-release", interval_ms / 1000)
        self.commit_log = commit_log

    def run_once(self) -> None:
        self.commit_log.mapped_file_queue.release_pages()


class CleanCommitLogService(PeriodicService):
    """Deletes commitlog segments, oldest first (upstream's rules; README "Disk usage"):

    - past ``fileReservedTime``, at the ``deleteWhen`` hours;
    - past ``fileReservedTime``, at any hour, while the disk is fuller than ``diskMaxUsedSpaceRatio``;
    - expired or not, while the disk is fuller than ``diskSpaceCleanForciblyRatio`` (unless
      ``cleanFileForciblyEnable=false``), and only until it no longer is.

    Never the segment being written, never one the dispatch chain has not passed or a dispatcher that keeps the
    commitlog (KV, the transactions' half messages) has not made durable. Before deleting, ``before_delete`` lets
    the consume queue make durable what replay could not rebuild (if it cannot, nothing goes). Then moves queues'
    min offsets past the gap. A deleted segment's space returns only when its mapping closes
    (``destroyMappedFileGrace`` later): until then it counts as freed, or every pass of that grace would delete
    more."""

    MAX_DELETE_PER_PASS = 10

    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog, dispatched_offset: Callable[[bool], int],
                 before_delete: Callable[[int], None], on_deleted: Callable[[int], None],
                 disk_watcher: "DiskUsageWatcher") -> None:
        super().__init__("clean-commitlog", config.clean_resource_interval_ms / 1000)
        self.config = config
        self.commit_log = commit_log
        self.dispatched_offset = dispatched_offset
        self.before_delete = before_delete
        self.on_deleted = on_deleted
        self.disk_watcher = disk_watcher

    def is_delete_hour(self) -> bool:
        hours = {h.strip() for h in self.config.delete_when.split(";") if h.strip()}
        return "*" in hours or time.strftime("%H") in hours or str(time.localtime().tm_hour) in hours

    def run_once(self, ignore_delete_when: bool = False) -> int:
        usage = self.disk_watcher.check()
        mfq = self.commit_log.mapped_file_queue
        retired = mfq.retired_bytes()
        used = usage.percent_after_freeing(retired)
        crowded = used > self.config.disk_max_used_space_ratio
        removed: list[MappedFile] = []
        if crowded or ignore_delete_when or self.is_delete_hour():
            removed = mfq.delete_first(self._deletable(usage, retired), self.MAX_DELETE_PER_PASS, self._prepare)
        if removed:
            min_offset = self.commit_log.min_offset()
            log.info("commitlog_expired deleted=%d new_min_offset=%d disk_used_percent=%.1f", len(removed),
                     min_offset, used)
            self.on_deleted(min_offset)
        mfq.close_retired()
        if removed or retired:
            self.disk_watcher.check()  # space may be back: take writes again without waiting for the next check
        return len(removed)

    def _prepare(self, new_min_offset: int) -> bool:
        try:
            self.before_delete(new_min_offset)
        except Exception as exc:  # e.g. ENOSPC: deleting now could lose what a crash cannot rebuild
            log.error("commitlog_expiry_held new_min_offset=%d reason=%r", new_min_offset, exc)
            return False
        return True

    def _deletable(self, usage: "DiskUsage", retired: int) -> Callable[[MappedFile], bool]:
        """Which leading segments may go: dispatched ones past their reserved time, and, while the disk stays
        fuller than diskSpaceCleanForciblyRatio counting what was chosen so far as freed, unexpired ones too."""
        config = self.config
        dispatched, dispatched_under_pressure = self.dispatched_offset(False), self.dispatched_offset(True)
        freed = retired

        def deletable(f: MappedFile) -> bool:
            nonlocal freed
            left = usage.percent_after_freeing(freed)
            forcing = config.clean_file_forcibly_enable and left > config.disk_space_clean_forcibly_ratio
            if f.end_offset > (dispatched_under_pressure if forcing else dispatched):
                return False
            if f.end_offset > dispatched:
                log.warning("commitlog_deleting_held file=%s disk_used_percent=%.1f level=diskSpaceCleanForciblyRatio"
                            "=%d: a hold that yields to a full disk (kvEnable=false over KV state, or half messages of "
                            "transactions not ended) is passed",
                            f.path.name, left, config.disk_space_clean_forcibly_ratio)
            if segment_age_hours(f) < config.file_reserved_time_hours:
                if not forcing:
                    return False
                log.warning("commitlog_deleting_unexpired file=%s disk_used_percent=%.1f "
                            "level=diskSpaceCleanForciblyRatio=%d", f.path.name, left,
                            config.disk_space_clean_forcibly_ratio)
            freed += f.file_size
            return True

        return deletable

"""Background services of the store: flushing dispatcher state, deleting expired commitlog segments."""

import logging
import shutil
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

from broker.store.checkpoint import OffsetCheckpoint
from broker.store.commit_log import CommitLog
from broker.store.config import MessageStoreConfig
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import segment_age_hours

log = logging.getLogger(__name__)


class PeriodicService(ABC, threading.Thread):
    """A daemon thread that calls :meth:`run_once` every ``interval_s`` until shut down."""

    def __init__(self, name: str, interval_s: float) -> None:
        super().__init__(name=name, daemon=True)
        self.interval_s = interval_s
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.run_once()
            except Exception:
                log.exception("service_failed service=%s", self.name)

    @abstractmethod
    def run_once(self) -> object:
        """One pass of the service's work."""

    def shutdown(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=10)


class DispatcherFlushService(PeriodicService):
    """Makes every dispatcher's state durable and advances its checkpoint; records the commitlog's
    flushed offset (where an abnormal recovery may start checking)."""

    def __init__(self, commit_log: CommitLog, dispatchers: list[CommitLogDispatcher],
                 flushed_checkpoint: OffsetCheckpoint, interval_ms: int) -> None:
        super().__init__("dispatcher-flush", interval_ms / 1000)
        self.commit_log = commit_log
        self.dispatchers = dispatchers
        self.flushed_checkpoint = flushed_checkpoint
        self._last_flushed = -1

    def run_once(self) -> None:
        for dispatcher in self.dispatchers:
            dispatcher.flush()
        flushed = self.commit_log.flushed_offset()
        if flushed != self._last_flushed:
            self.flushed_checkpoint.write(flushed)
            self._last_flushed = flushed


class CleanCommitLogService(PeriodicService):
    """Deletes commitlog segments older than ``fileReservedTime`` at the ``deleteWhen`` hours, or the
    oldest ones at once when the disk is fuller than ``diskMaxUsedSpaceRatio``. Never the segment being
    written, never one the dispatch chain has not passed. Then moves queues' min offsets past the gap."""

    MAX_DELETE_PER_PASS = 10

    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog, dispatched_offset: Callable[[], int],
                 on_deleted: Callable[[int], None]) -> None:
        super().__init__("clean-commitlog", config.clean_resource_interval_ms / 1000)
        self.config = config
        self.commit_log = commit_log
        self.dispatched_offset = dispatched_offset
        self.on_deleted = on_deleted

    def is_delete_hour(self) -> bool:
        hours = {h.strip() for h in self.config.delete_when.split(";") if h.strip()}
        return "*" in hours or time.strftime("%H") in hours or str(time.localtime().tm_hour) in hours

    def disk_used_percent(self) -> float:
        usage = shutil.disk_usage(Path(self.config.store_path_root_dir))
        return 100.0 * usage.used / usage.total if usage.total else 0.0

    def run_once(self, ignore_delete_when: bool = False) -> int:
        disk_full = self.disk_used_percent() > self.config.disk_max_used_space_ratio
        mfq = self.commit_log.mapped_file_queue
        removed: list[MappedFile] = []
        if disk_full or ignore_delete_when or self.is_delete_hour():
            dispatched = self.dispatched_offset()
            reserved_h = self.config.file_reserved_time_hours

            def expired(f: MappedFile) -> bool:
                return f.end_offset <= dispatched and (disk_full or segment_age_hours(f) >= reserved_h)

            removed = mfq.delete_first(expired, self.MAX_DELETE_PER_PASS)
        if removed:
            min_offset = self.commit_log.min_offset()
            log.info("commitlog_expired deleted=%d new_min_offset=%d disk_full=%s", len(removed), min_offset, disk_full)
            self.on_deleted(min_offset)
        mfq.close_retired()
        return len(removed)

"""Flushing the commitlog: a periodic flusher (ASYNC_FLUSH) or group commit (SYNC_FLUSH).

Group commit: appenders wait until the flushed offset covers their batch; one fsync serves every
append that arrived while the previous one ran.
"""

import logging
import threading
import time

from broker.store.commit_log import CommitLog

log = logging.getLogger(__name__)


class FlushService(threading.Thread):
    """Base: a daemon thread that flushes the commitlog and reports the flushed offset."""

    def __init__(self, commit_log: CommitLog, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.commit_log = commit_log
        self._stopped = threading.Event()
        self._cond = threading.Condition()
        self.flushed_offset = commit_log.flushed_offset()

    def flush_once(self) -> int:
        flushed = self.commit_log.mapped_file_queue.flush()
        with self._cond:
            self.flushed_offset = flushed
            self._cond.notify_all()
        self.commit_log.on_flushed(flushed)
        return flushed

    def shutdown(self) -> None:
        self._stopped.set()
        self.wakeup()
        if self.is_alive():
            self.join(timeout=10)
        self.flush_once()

    def wakeup(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        """True once ``offset`` is flushed; False on timeout (ASYNC_FLUSH callers never wait)."""
        return True


class PeriodicFlushService(FlushService):
    """ASYNC_FLUSH: sync dirty data every ``interval_ms``."""

    def __init__(self, commit_log: CommitLog, interval_ms: int) -> None:
        super().__init__(commit_log, "commitlog-flush")
        self.interval_s = interval_ms / 1000

    def run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.flush_once()
            except Exception:
                log.exception("commitlog_flush_failed")


class GroupCommitService(FlushService):
    """SYNC_FLUSH: flush as soon as anything is waiting; all waiters covered by one fsync return."""

    def __init__(self, commit_log: CommitLog) -> None:
        super().__init__(commit_log, "commitlog-group-commit")
        self._requested = 0

    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if offset > self._requested:
                self._requested = offset
                self._cond.notify_all()
            while self.flushed_offset < offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def run(self) -> None:
        while not self._stopped.is_set():
            with self._cond:
                while self._requested <= self.flushed_offset and not self._stopped.is_set():
                    self._cond.wait(0.01)
            try:
                self.flush_once()
            except Exception:
                log.exception("commitlog_group_commit_failed")
                time.sleep(0.01)

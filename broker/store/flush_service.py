"""Flushing the commitlog: a periodic flusher (ASYNC_FLUSH) or group commit (SYNC_FLUSH).

Group commit: appenders wait until the flushed offset covers their batch; one fsync serves every append that
arrived while the previous one ran. Everything appended is flushed promptly, whether or not its writer waits:
under SYNC_FLUSH the confirm offset follows the flush, so an append nobody flushed would never be dispatched.

A failed fsync fail-stops the store (see ``running_flags``) and ends the flusher: it is not retried, because
after a failed fsync Linux may report success for pages it already dropped. Waiting appenders are told at once.
"""

import logging
import threading
import time
from collections.abc import Callable

from broker.store.commit_log import CommitLog
from broker.store.fault_points import check_fsync
from broker.store.running_flags import RunningFlags

log = logging.getLogger(__name__)


class FlushService(threading.Thread):
    """Base: a daemon thread that flushes the commitlog and reports the flushed offset."""

    def __init__(self, commit_log: CommitLog, running_flags: RunningFlags, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.commit_log = commit_log
        self.running_flags = running_flags
        self._stopped = threading.Event()
        self._cond = threading.Condition()
        self.flushed_offset = commit_log.flushed_offset()
        self.failed = False
        self._listeners: list[Callable[[int | None], None]] = []

    def add_flush_listener(self, listener: Callable[[int | None], None]) -> None:
        """Called on the flusher's thread after each flush with the flushed offset, and with None once a flush
        failed (the store fail-stopped: nothing more will be flushed). It must not block."""
        self._listeners.append(listener)

    def _tell(self, flushed: int | None) -> None:
        for listener in self._listeners:
            try:
                listener(flushed)
            except Exception:  # a listener's bug must not stop the flusher
                log.exception("flush_listener_failed listener=%r", listener)

    def flush_once(self) -> int:
        """Flush what was written; on a failed fsync fail-stop the store and raise."""
        if self.failed:
            raise OSError("the commitlog flusher stopped after a failed fsync")
        try:
            check_fsync("commitlog")
            flushed = self.commit_log.mapped_file_queue.flush()
        except Exception as exc:
            # Fail-stop first, then wake the waiters: a waiter that wakes must find the reason set, or it would
            # answer FLUSH_DISK_TIMEOUT (a stored result) for bytes that may never reach the disk.
            self.running_flags.fail_stop(f"fsync of the commitlog failed: {exc}",
                                         exc_info=None if isinstance(exc, OSError) else exc)
            with self._cond:
                self.failed = True
                self._cond.notify_all()
            self._tell(None)
            raise
        with self._cond:
            self.flushed_offset = flushed
            self._cond.notify_all()
        self.commit_log.on_flushed(flushed)
        self._tell(flushed)
        return flushed

    def on_truncated(self, end: int) -> None:
        """The commitlog was cut at ``end``: what is appended there next is not flushed yet."""
        with self._cond:
            self.flushed_offset = min(self.flushed_offset, end)

    def shutdown(self) -> None:
        self._stopped.set()
        self.request()
        if self.is_alive():
            self.join(timeout=10)
        if not self.failed:
            self.flush_once()

    def request(self) -> None:
        """Something was appended: flush it soon (group commit), or at the next period."""
        with self._cond:
            self._cond.notify_all()

    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        """True once ``offset`` is flushed; False on timeout or failure (ASYNC_FLUSH callers never wait)."""
        return True


class PeriodicFlushService(FlushService):
    """ASYNC_FLUSH: sync dirty data every ``interval_ms``."""

    def __init__(self, commit_log: CommitLog, running_flags: RunningFlags, interval_ms: int) -> None:
        super().__init__(commit_log, running_flags, "commitlog-flush")
        self.interval_s = interval_ms / 1000

    def request(self) -> None:
        pass  # the period decides

    def run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.flush_once()
            except Exception:
                return  # fail-stopped; logged by the running flags


class GroupCommitService(FlushService):
    """SYNC_FLUSH: flush as soon as anything is unflushed; every waiter covered by one fsync returns."""

    def __init__(self, commit_log: CommitLog, running_flags: RunningFlags) -> None:
        super().__init__(commit_log, running_flags, "commitlog-group-commit")

    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.notify_all()
            while self.flushed_offset < offset:
                left = deadline - time.monotonic()
                if left <= 0 or self.failed:
                    return False
                self._cond.wait(left)
        return True

    def _unflushed(self) -> bool:
        return self.commit_log.max_offset() > self.flushed_offset

    def run(self) -> None:
        while not self._stopped.is_set():
            with self._cond:
                # The timeout is a safety net: appends notify, but a writer that reaches the commitlog some
                # other way is still flushed within 10 ms.
                while not self._unflushed() and not self._stopped.is_set():
                    self._cond.wait(0.01)
            if self._stopped.is_set():
                return
            try:
                self.flush_once()
            except Exception:
                return  # fail-stopped; logged by the running flags

"""Whether the store may take writes, and why not (RocketMQ's ``RunningFlags``).

Two kinds of refusal:
- fail-stop: a dispatcher invariant broke or an fsync failed, so the store can no longer promise what it would
  acknowledge. It is never cleared while the process lives (after a failed fsync Linux may report success for
  pages it already dropped, so retrying proves nothing); a restart recovers from the commitlog.
- disk pressure: set and cleared by the disk watcher as usage crosses the refusal level;
- a replica: a slave's commitlog is written by replication only (``CommitLog.append_replica``), never by a put
  (controller mode: also a master without a valid lease).
Reads never consult these flags: a fenced store still serves everything it holds.
"""

import logging
import threading
from collections.abc import Callable

from common.storage_refusal import OPEN_FILES_HINT, OPEN_FILES_TEXT

log = logging.getLogger(__name__)


class RunningFlags:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.fail_stop_reason: str | None = None
        self.disk_full_reason: str | None = None
        self.replica_reason: str | None = None
        self._fail_stop_listeners: list[Callable[[str], None]] = []

    def on_fail_stop(self, listener: Callable[[str], None]) -> None:
        """Called once, from the failing thread, when the store fail-stops (e.g. to fail waiting writers)."""
        self._fail_stop_listeners.append(listener)

    def fail_stop(self, reason: str, exc_info: BaseException | None = None) -> None:
        """Stop taking writes for the rest of the process's life; the first reason wins and is logged once (with
        ``exc_info``'s traceback when the cause is an unexpected exception)."""
        with self._lock:
            if self.fail_stop_reason is not None:
                return
            self.fail_stop_reason = reason
        log.error("store_fail_stop reason=%r action='writes refused until restart; restart recovers from the "
                  "commitlog'", reason, exc_info=exc_info)
        for listener in self._fail_stop_listeners:
            listener(reason)

    def set_disk_full(self, reason: str | None) -> None:
        """``reason`` refuses writes for disk pressure; None takes writes again."""
        self.disk_full_reason = reason

    def set_replica(self, reason: str | None) -> None:
        """Refuse every put: this store copies another's log byte for byte (a slave, or in controller mode a
        replica that is not the master now or whose lease ended). None takes writes again."""
        self.replica_reason = reason

    @property
    def writeable(self) -> bool:
        return self.fail_stop_reason is None and self.disk_full_reason is None and self.replica_reason is None

    def write_refusal(self) -> str | None:
        """Why a write is refused now (the text a writer sees), or None when writes are taken."""
        if self.fail_stop_reason is not None:
            if OPEN_FILES_TEXT in self.fail_stop_reason:
                return f"the store stopped taking writes: {self.fail_stop_reason}; {OPEN_FILES_HINT}, and restart it"
            return f"the store stopped taking writes: {self.fail_stop_reason}; restart the broker to recover"
        return self.disk_full_reason or self.replica_reason

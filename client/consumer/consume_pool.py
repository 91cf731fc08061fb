"""The threads a push consumer's handlers run on: up to ``max_threads``, but only as many at once as keep tasks
finishing.

Under the GIL a handler that only computes goes no faster on a second thread; it loses time to the switching
(two push consumers of a group in one process, handlers that only count: 16 running threads each spent 10-20%
more CPU a message than one). A handler that waits (a database, an HTTP call, a sleep) needs the threads. The
pool tells the two apart by progress: it starts with one running thread, lets one more run each time tasks are
waiting and none finished for ``grow_after_s``, and lets one fewer run after a thread found nothing to do for
``shrink_after_s``. A watcher thread looks for stalls only while tasks wait and the pool may still grow.
"""

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

GROW_AFTER_S = 0.02
SHRINK_AFTER_S = 1.0


class ConsumePool:
    def __init__(self, max_threads: int, name: str, grow_after_s: float = GROW_AFTER_S,
                 shrink_after_s: float = SHRINK_AFTER_S) -> None:
        assert max_threads >= 1, f"a consume pool needs a thread, not {max_threads}"
        self.max_threads = max_threads
        self.name = name
        self.grow_after_s = grow_after_s
        self.shrink_after_s = shrink_after_s
        self._tasks: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._lock = threading.Lock()
        self._work_ready = threading.Condition(self._lock)  # a task a waiting thread may take, or shutdown
        self._watch_wake = threading.Condition(self._lock)  # tasks are waiting for a parked watcher
        self._threads: list[threading.Thread] = []
        self._allowed = 1  # threads that may run a task at once
        self._running = 0
        self._progress_s = time.monotonic()  # a task finished, or tasks came to a pool with none running
        self._watcher_parked = False
        self._shutdown = False
        self._watcher = threading.Thread(target=self._watch, name=f"{name}-watch", daemon=True)
        self._watcher.start()

    @property
    def allowed(self) -> int:
        """How many threads may run tasks at once now."""
        with self._lock:
            return self._allowed

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"consume pool {self.name} is shut down")
            if not self._running and not self._tasks:
                self._progress_s = time.monotonic()  # the stall clock starts with the work, not at the last task
            self._tasks.append((fn, args))
            if len(self._threads) < self._allowed:
                self._start_thread()
            if self._running < self._allowed:
                self._work_ready.notify()
            elif self._watcher_parked:
                self._watch_wake.notify()

    def shutdown(self, wait: bool = True, cancel_futures: bool = False,
                 timeout: float | None = None) -> list[threading.Thread]:
        """No more tasks; ``cancel_futures`` drops those not started. ``wait``: until the running ones end (for at
        most ``timeout`` seconds in all), except the caller's own when a task shuts its pool down (its thread ends
        once that task returns). Returns the threads still running a task."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                self._tasks.clear()
            self._work_ready.notify_all()
            self._watch_wake.notify_all()
            me = threading.current_thread()
            threads = [t for t in (*self._threads, self._watcher) if t is not me]
        if wait:
            deadline = None if timeout is None else time.monotonic() + timeout
            for t in threads:
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return [t for t in threads if t.is_alive() and t is not self._watcher]

    # -- inside ----------------------------------------------------------------------------------------
    def _start_thread(self) -> None:
        if len(self._threads) < self.max_threads:
            t = threading.Thread(target=self._work, name=f"{self.name}_{len(self._threads)}", daemon=True)
            self._threads.append(t)
            t.start()

    def _work(self) -> None:
        with self._lock:
            while True:
                idle_since = time.monotonic()
                while not (self._tasks and self._running < self._allowed):
                    if self._shutdown and not self._tasks:
                        return
                    if self._tasks:
                        self._work_ready.wait()  # all the threads allowed are running: one of them goes on
                        continue
                    if time.monotonic() - idle_since >= self.shrink_after_s:
                        self._allowed = max(1, self._allowed - 1)  # nothing to do: one fewer may run
                        idle_since = time.monotonic()
                    self._work_ready.wait(self.shrink_after_s)
                fn, args = self._tasks.popleft()
                self._running += 1
                if self._tasks and self._watcher_parked and self._running >= self._allowed:
                    self._watch_wake.notify()  # tasks left waiting: whether they stall is the watcher's to see
                self._lock.release()
                try:
                    fn(*args)
                except BaseException:
                    log.exception("consume_task_failed pool=%s", self.name)
                finally:
                    self._lock.acquire()
                    self._running -= 1
                    self._progress_s = time.monotonic()
                    if self._shutdown:
                        self._work_ready.notify_all()  # threads waiting for a turn see the tasks are all taken

    def _watch(self) -> None:
        with self._lock:
            while not self._shutdown:
                self._watcher_parked = not (self._tasks and self._running >= self._allowed
                                            and self._allowed < self.max_threads)
                if self._watcher_parked:
                    self._watch_wake.wait()
                    continue
                stalled_for = time.monotonic() - self._progress_s
                if stalled_for < self.grow_after_s:
                    self._watch_wake.wait(self.grow_after_s - stalled_for)
                    continue
                self._allowed += 1
                self._progress_s = time.monotonic()  # the next step waits a whole period again
                if len(self._threads) < self._allowed:
                    self._start_thread()
                self._work_ready.notify()
                log.debug("consume_pool_grew pool=%s allowed=%d", self.name, self._allowed)

"""Where the SDK's retries and failovers run: a few threads of the client instance's own.

An attempt that failed is seen on the thread that completed it: a broker stream's reader, or its reaper for a
timeout (``client/rpc_stream.py``). The retry looks the route up again, and that may ask the name server, a
blocking call; made there, it would hold up every other answer of that stream until the name server answered
(a stalled one timed them all out). So the callbacks only decide, and the retry itself runs here.

The threads are daemons, started at the first retry: a client that is never closed does not keep its process
from exiting. Work still queued at the close is failed, not run.
"""

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from client.errors import MQClientError

log = logging.getLogger(__name__)

RETRY_THREADS = 4
Work = tuple[Callable[[], None], Callable[[BaseException], None]]


# A retry is of a request that failed once: its first attempt may have been stored (a send) or applied all the same.
NOT_RETRIED = "not retried: the client was closed (an earlier attempt may have been stored)"


class ClientClosed(MQClientError):
    """The client was closed before a retry could run."""


class RetryThreads:
    def __init__(self, threads: int = RETRY_THREADS) -> None:
        assert threads >= 1
        self.threads = threads
        self._queue: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False

    def retry(self, future: "Future[Any]", attempt: Callable[[], None], delay_s: float = 0.0) -> None:
        """``attempt`` (which answers ``future`` itself) after ``delay_s``; ``future`` fails when it cannot run."""
        self.later(delay_s, attempt, failing(future))

    def later(self, delay_s: float, work: Callable[[], None], fail: Callable[[BaseException], None]) -> None:
        """Run ``work`` on these threads after ``delay_s``. ``fail`` gets what kept it from ending its request (so
        the request is answered, never left waiting): the error ``work`` raised, or :class:`ClientClosed`."""
        if delay_s <= 0:
            self._submit(work, fail)
            return
        timer = threading.Timer(delay_s, self._submit, (work, fail))
        timer.daemon = True
        timer.start()

    def _submit(self, work: Callable[[], None], fail: Callable[[BaseException], None]) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self._start()
                self._queue.put((work, fail))
        if closed:
            fail(ClientClosed(NOT_RETRIED))

    def forget_after_fork(self) -> None:
        """In a child of ``os.fork()``: these threads are the parent's; work is failed, as after a close."""
        self._lock = threading.Lock()
        self._closed = True

    def _start(self) -> None:
        """Under the lock."""
        if self._started:
            return
        self._started = True
        for i in range(self.threads):
            threading.Thread(target=self._run, name=f"client-retry-{i}", daemon=True).start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            work, fail = item
            try:
                work()
            except MQClientError as exc:  # e.g. the client closed while it ran: the request's answer
                fail(exc)
            except Exception as exc:  # a bug: its request fails with it
                log.exception("retry_failed")
                fail(exc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            started = self._started
        queued: list[Work] = []
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._queue.get_nowait()
                if item is not None:
                    queued.append(item)
        for _, fail in queued:
            fail(ClientClosed(NOT_RETRIED))
        if started:
            for _ in range(self.threads):
                self._queue.put(None)  # a retry still running ends on the closed channels


def failing(future: "Future[Any]") -> Callable[[BaseException], None]:
    """``fail`` for :meth:`RetryThreads.later`: fails ``future``, unless it was answered meanwhile."""

    def fail(error: BaseException) -> None:
        with contextlib.suppress(InvalidStateError):
            future.set_exception(error)

    return fail

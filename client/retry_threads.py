"""Where the SDK's retries and failovers run: a few threads of the client instance's own.

An attempt that failed is seen on the thread that completed it: a broker stream's reader, or its reaper for a
timeout (``client/rpc_stream.py``). The retry looks the route up again, and that may ask the name server, a
blocking call; made there, it would hold up every other answer of that stream until the name server answered
(a stalled one timed them all out). So the callbacks only decide, and the retry itself runs here.
"""

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import Any

from client.errors import MQClientError

log = logging.getLogger(__name__)

RETRY_THREADS = 4


class RetryThreads:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(RETRY_THREADS, thread_name_prefix="client-retry")

    def later(self, delay_s: float, work: Callable[[], None], fail: Callable[[BaseException], None]) -> None:
        """Run ``work`` on these threads after ``delay_s``. ``fail`` gets what kept it from ending its request
        (so the request is answered, never left waiting): a bug raised by ``work``, or the instance's close."""

        def run() -> None:
            try:
                work()
            except Exception as exc:  # a bug: its request fails with it
                log.exception("retry_failed")
                fail(exc)

        def submit() -> None:
            try:
                self._pool.submit(run)
            except RuntimeError:  # closed meanwhile
                fail(MQClientError("not retried: the client was closed"))

        if delay_s <= 0:
            submit()
            return
        timer = threading.Timer(delay_s, submit)
        timer.daemon = True
        timer.start()

    def close(self) -> None:
        self._pool.shutdown(wait=False)  # a retry still running fails on the closed channels


def failing(future: "Future[Any]") -> Callable[[BaseException], None]:
    """``fail`` for :meth:`RetryThreads.later`: fails ``future``, unless it was answered meanwhile."""

    def fail(error: BaseException) -> None:
        with contextlib.suppress(InvalidStateError):
            future.set_exception(error)

    return fail

"""The futures the SDK hands to callers (``send_async``, ``pull_async``, ``ack_async``): their callbacks run on a
small pool of the SDK's own, never on the thread that settled the future.

That thread is a stream's reader (or gRPC's), which settles every other answer of its stream: a callback that called
the SDK and waited (a send in a send's callback, an ack in an ack's) waited for an answer only that thread could
give, so it timed out and was retried (a send stored three times), or, for an ack, hung for good with every later
ack to that broker. A callback may block here: it holds one of the pool's threads, not the SDK's. Callbacks of
different futures may run in any order, as upstream's clients run them on an executor.

The SDK's own callbacks on these futures (a push consumer's next pull) use :meth:`CallbackFuture.on_done`: inline,
without the hop.
"""

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
CALLBACK_THREADS = 4

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool_in_child() -> None:
    """After ``os.fork()``, in the child: the parent's pool threads are not here, and its pool never starts others
    (callbacks submitted to it never ran: ``asyncio.wrap_future`` of a send waited for good); a new pool is made."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _callback_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(CALLBACK_THREADS, thread_name_prefix="sdk-callback")
        return _pool


def _logging_failure(fn: Callable[["Future[T]"], Any], future: "Future[T]") -> None:
    """``fn(future)`` on the pool: what it raises is logged, as ``Future`` does for a callback it runs itself (the
    pool's own future, which nobody reads, swallowed it without a word)."""
    try:
        fn(future)
    except Exception:
        log.exception("exception calling callback for %r", future)


class CallbackFuture(Future[T]):
    def add_done_callback(self, fn: Callable[["Future[T]"], Any]) -> None:
        """As ``Future.add_done_callback``, but once the future is settled ``fn`` runs on the SDK's callback pool
        (at once in this thread if it is settled already, as there)."""
        if self.done():
            super().add_done_callback(fn)
            return
        super().add_done_callback(lambda future: _callback_pool().submit(_logging_failure, fn, future))

    def on_done(self, fn: Callable[["Future[T]"], Any]) -> None:
        """The SDK's own callback: on the thread that settles the future (it must not block)."""
        super().add_done_callback(fn)


def on_done(future: "Future[T]", fn: Callable[["Future[T]"], Any]) -> None:
    """The SDK's own callback on a future it may have handed out: inline (see :meth:`CallbackFuture.on_done`)."""
    if isinstance(future, CallbackFuture):
        future.on_done(fn)
    else:
        future.add_done_callback(fn)

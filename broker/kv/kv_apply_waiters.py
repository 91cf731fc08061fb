"""Writers wait on the event loop until the KV dispatcher applied their record; the pass that applied it (in the
reput thread, or on the loop itself: ``ReputMessageService.dispatch_on``) wakes them."""

import asyncio
import functools
import heapq
import itertools
import threading
from collections.abc import Callable

# Called on the loop once the wait is over: None when applied, else why the store fail-stopped.
Settle = Callable[[str | None], None]


class StoreFailStopped(Exception):
    """The store fail-stopped before the write was applied; the message says why."""


class KvApplyWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[int, int, Settle]] = []
        self._seq = itertools.count()
        self._applied = 0
        self._lock = threading.Lock()
        self._failed: str | None = None

    def wait(self, offset: int) -> "asyncio.Future[None]":
        """A future done once everything below commitlog ``offset`` is applied (call on the loop)."""
        future: asyncio.Future[None] = self._loop.create_future()
        self.when_applied(offset, functools.partial(_settle_future, future))
        return future

    def when_applied(self, offset: int, settle: Settle) -> None:
        """Call ``settle`` on the loop once everything below commitlog ``offset`` is applied, or the store
        fail-stopped; from this call if either happened already (call on the loop). A callback rather than a
        future: a group of writers is answered in the loop turn that learns of the apply, not one turn later."""
        with self._lock:
            if self._applied >= offset:
                reason = None
            elif self._failed is not None:
                reason = self._failed
            else:
                heapq.heappush(self._heap, (offset, next(self._seq), settle))
                return
        settle(reason)

    def on_applied(self, offset: int) -> None:
        """Called by the dispatcher (in a reput pass, on either thread) after each apply."""
        ready = []
        with self._lock:
            self._applied = offset
            heap = self._heap
            while heap and heap[0][0] <= offset:
                ready.append(heapq.heappop(heap)[2])
        if ready:
            self._loop.call_soon_threadsafe(_settle_all, ready, None)

    def fail(self, reason: str) -> None:
        """The store fail-stopped: nothing more will be applied, so every waiter learns it now."""
        with self._lock:
            self._failed = reason
            waiting = [entry[2] for entry in self._heap]
            self._heap.clear()
        if waiting:
            self._loop.call_soon_threadsafe(_settle_all, waiting, reason)


def _settle_all(settles: list[Settle], reason: str | None) -> None:
    for settle in settles:
        settle(reason)


def _settle_future(future: "asyncio.Future[None]", reason: str | None) -> None:
    if future.done():  # cancelled (its caller gave up)
        return
    if reason is None:
        future.set_result(None)
    else:
        future.set_exception(StoreFailStopped(reason))

"""Writers wait on the event loop until the KV dispatcher applied their record; the reput thread wakes them."""

import asyncio
import heapq
import itertools
import threading


class StoreFailStopped(Exception):
    """The store fail-stopped before the write was applied; the message says why."""


class KvApplyWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._applied = 0
        self._lock = threading.Lock()
        self._failed: str | None = None

    def wait(self, offset: int) -> "asyncio.Future[None]":
        """A future done once everything below commitlog ``offset`` is applied (call on the loop)."""
        future: asyncio.Future[None] = self._loop.create_future()
        with self._lock:
            if self._applied >= offset:
                future.set_result(None)
            elif self._failed is not None:
                future.set_exception(StoreFailStopped(self._failed))
            else:
                heapq.heappush(self._heap, (offset, next(self._seq), future))
        return future

    def on_applied(self, offset: int) -> None:
        """Called by the dispatcher (reput thread) after each apply."""
        ready = []
        with self._lock:
            self._applied = offset
            heap = self._heap
            while heap and heap[0][0] <= offset:
                ready.append(heapq.heappop(heap)[2])
        if ready:
            self._loop.call_soon_threadsafe(_resolve, ready)


    def fail(self, reason: str) -> None:
        """The store fail-stopped: nothing more will be applied, so every waiter learns it now."""
        with self._lock:
            self._failed = reason
            waiting = [entry[2] for entry in self._heap]
            self._heap.clear()
        if waiting:
            self._loop.call_soon_threadsafe(_reject, waiting, reason)


def _reject(futures: list["asyncio.Future[None]"], reason: str) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(StoreFailStopped(reason))


def _resolve(futures: list["asyncio.Future[None]"]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)

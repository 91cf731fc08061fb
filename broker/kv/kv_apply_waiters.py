"""Writers wait on the event loop until the KV dispatcher applied their record; the reput thread wakes them."""

import asyncio
import heapq
import itertools
import threading


class KvApplyWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._applied = 0
        self._lock = threading.Lock()

    def wait(self, offset: int) -> "asyncio.Future[None]":
        """A future done once everything below commitlog ``offset`` is applied (call on the loop)."""
        future: asyncio.Future[None] = self._loop.create_future()
        with self._lock:
            if self._applied >= offset:
                future.set_result(None)
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


def _resolve(futures: list["asyncio.Future[None]"]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)

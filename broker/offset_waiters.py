"""Answers that wait on the event loop for a log offset to be reached: SYNC_FLUSH sends for the fsync
(``broker/flush_waiters.py``), SYNC_MASTER sends for their slaves (``broker/ha/ha_service.py``).

Every wait is a future on the loop in a heap by offset, so one settle answers every wait an offset covers, in
offset order, and no thread blocks per answer. Timeouts share one timer that sweeps a heap of deadlines, not a
timer per wait. Loop-only: the owner posts settles from other threads itself.
"""

import asyncio
import heapq
import itertools
from typing import Generic, TypeVar

T = TypeVar("T")

SWEEP_S = 0.05  # how often waits are checked for their timeout: how late a timed-out wait may end


class OffsetWaiters(Generic[T]):
    def __init__(self, timed_out: T) -> None:
        """``timed_out``: the result of a wait that outlived its timeout."""
        self.timed_out = timed_out
        self.loop: asyncio.AbstractEventLoop | None = None  # the first wait's loop
        self._by_offset: list[tuple[int, int, asyncio.Future[T]]] = []  # (offset, seq, future): a heap
        self._by_deadline: list[tuple[float, int, asyncio.Future[T]]] = []  # (deadline, seq, future): a heap
        self._seq = itertools.count()
        self._sweep: asyncio.TimerHandle | None = None

    def add(self, offset: int, timeout_s: float) -> "asyncio.Future[T]":
        """A future settled by the first :meth:`settle` that reaches ``offset``, by :meth:`settle_all`, or with
        ``timed_out`` after ``timeout_s``."""
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        seq = next(self._seq)
        heapq.heappush(self._by_offset, (offset, seq, future))
        heapq.heappush(self._by_deadline, (loop.time() + timeout_s, seq, future))
        if self._sweep is None:
            self._sweep = loop.call_later(SWEEP_S, self._expire)
        return future

    def settle(self, reached: int, result: T) -> None:
        """Answer ``result`` to every wait for an offset at or below ``reached``."""
        waiters = self._by_offset
        while waiters and waiters[0][0] <= reached:
            future = heapq.heappop(waiters)[2]
            if not future.done():
                future.set_result(result)

    def settle_all(self, result: T) -> None:
        """Answer ``result`` to every wait (the log will not get there: a failed fsync)."""
        waiters, self._by_offset = self._by_offset, []
        for _, _, future in waiters:
            if not future.done():
                future.set_result(result)

    def _expire(self) -> None:
        assert self.loop is not None
        now, deadlines = self.loop.time(), self._by_deadline
        while deadlines and (deadlines[0][0] <= now or deadlines[0][2].done()):
            future = heapq.heappop(deadlines)[2]
            if not future.done():
                future.set_result(self.timed_out)
        if not self._by_offset:
            deadlines.clear()  # every wait was answered: their deadlines go too
        self._sweep = self.loop.call_later(SWEEP_S, self._expire) if deadlines else None

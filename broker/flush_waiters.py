"""SYNC_FLUSH answers that wait for their fsync on the event loop, not in a thread each.

A SYNC_FLUSH send is appended on the loop like any other and answered once the group commit flushed past its
end. A thread per waiting send (asyncio's default pool, six threads on two cores) let six sends share an fsync
at most: single sends ran at 500 a second. Here every waiting answer is a future on the loop
(``broker/offset_waiters.py``), and the flusher posts each flushed offset to the loop once, which settles every
answer it covers; a failed fsync settles them all as failed at once.
"""

import contextlib
import threading

from broker.offset_waiters import OffsetWaiters
from broker.store.flush_service import FlushService


class FlushWaiters:
    def __init__(self, flush_service: FlushService) -> None:
        self.flush_service = flush_service
        self._waiters = OffsetWaiters(timed_out=False)
        self._posted = threading.Lock()  # guards _pending and _latest, written by the flusher's thread
        self._pending = False  # a settle is posted to the loop and has not run yet
        self._latest: int | None = 0  # the newest flushed offset (None: a flush failed)
        flush_service.add_flush_listener(self._flushed)

    async def wait(self, offset: int, timeout_s: float) -> bool:
        """True once the commitlog is flushed past ``offset``; False after ``timeout_s`` or when a flush failed."""
        flusher = self.flush_service
        if flusher.failed:
            return False
        if flusher.flushed_offset >= offset:
            return True
        future = self._waiters.add(offset, timeout_s)
        flusher.request()
        # Flushed between the look above and the add, with the settle already run: not waited for in vain.
        if flusher.flushed_offset >= offset or flusher.failed:
            self._settle_now(None if flusher.failed else flusher.flushed_offset)
        return await future

    def _flushed(self, offset: int | None) -> None:
        """The flusher's listener (its thread): one settle posted at a time, for the newest offset."""
        loop = self._waiters.loop
        if loop is None:
            return  # nobody waited yet
        with self._posted:
            self._latest = None if offset is None or self._latest is None else max(self._latest, offset)
            if self._pending:
                return
            self._pending = True
        with contextlib.suppress(RuntimeError):  # the loop closed (the broker stopped)
            loop.call_soon_threadsafe(self._settle_posted)

    def _settle_posted(self) -> None:
        with self._posted:
            self._pending = False
            latest = self._latest
        self._settle_now(latest)

    def _settle_now(self, flushed: int | None) -> None:
        if flushed is None:
            self._waiters.settle_all(False)
        else:
            self._waiters.settle(flushed, True)

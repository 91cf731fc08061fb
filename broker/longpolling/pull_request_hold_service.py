"""Long polling: a pull that found nothing waits here until a message arrives for its queue or it times out.

Waiters live on the server's event loop; a reput pass (in its thread, or on the loop) reports arrivals with
``call_soon_threadsafe``, so nothing polls. A waiter re-checks the queue after registering, closing the race with
an arrival that happened between the empty read and the registration.
"""

import asyncio
from collections.abc import Callable

from broker.store.dispatch.dispatch_request import DispatchRequest

QueueKey = tuple[str, int]


class PullRequestHoldService:
    def __init__(self, loop: asyncio.AbstractEventLoop, max_offset: Callable[[str, int], int]) -> None:
        self.loop = loop
        self.max_offset = max_offset
        self._waiters: dict[QueueKey, list[asyncio.Future[None]]] = {}
        self.stopping = False  # set by wake_all: nothing parks any more, so a woken waiter answers at once

    async def wait_for_arrival(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """True once the queue holds a message at ``offset`` or later; False on timeout."""
        return await self.wait_for_any(topic, {queue_id: offset}, timeout_s)

    async def wait_for_any(self, topic: str, offsets: dict[int, int], timeout_s: float) -> bool:
        """True once any of the queues (queue id -> offset) holds a message at its offset or later; False on
        timeout, or at once while the broker stops (a POP of any queue of a topic waits on them all)."""
        if self._arrived(topic, offsets):
            return True
        if self.stopping:
            return False
        future: asyncio.Future[None] = self.loop.create_future()
        keys = [(topic, queue_id) for queue_id in offsets]
        for key in keys:
            self._waiters.setdefault(key, []).append(future)
        try:
            if self._arrived(topic, offsets):
                return True
            await asyncio.wait_for(future, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    if future in waiters:
                        waiters.remove(future)
                    if not waiters:
                        del self._waiters[key]

    def _arrived(self, topic: str, offsets: dict[int, int]) -> bool:
        return any(self.max_offset(topic, queue_id) > offset for queue_id, offset in offsets.items())

    def on_arrivals(self, requests: list[DispatchRequest]) -> None:
        """Called by a reput pass (on either thread) after each dispatch batch."""
        if not self._waiters:
            return
        waiting = self._waiters
        keys = {(r[0], r[1]) for r in requests if (r[0], r[1]) in waiting}
        if keys:
            self.loop.call_soon_threadsafe(self._wake, keys)

    def _wake(self, keys: set[QueueKey]) -> None:
        for key in keys:
            for future in self._waiters.get(key, ()):
                if not future.done():
                    future.set_result(None)

    def wake_topic(self, topic: str) -> None:
        """A static topic's mapping changed (from any thread): its parked pulls and POPs read again now. One parked
        on the physical queue of a logic queue that moved got no arrival there again, and its consumer stalled for
        the rest of its long poll (up to 30 s) after every remap; woken, it hears where the queue went. Also after
        a POP ack or change of invisible time: a FIFO message group it freed may have its next message to hand out."""
        if self._waiters:  # (a read of the dict's size from any thread: a waiter missed is one parked anyway)
            self.loop.call_soon_threadsafe(lambda: self._wake({key for key in self._waiters if key[0] == topic}))

    def wake_all(self) -> None:
        """On shutdown: answer every parked pull now (woken, a pull reads again and finds nothing: it must not
        park again)."""
        self.stopping = True
        self._wake(set(self._waiters))

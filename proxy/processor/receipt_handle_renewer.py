"""Auto-renew (upstream's ReceiptHandleProcessor): a PushConsumer receives with ``auto_renew`` and no invisible
duration, and leaves it to the proxy to keep its messages invisible for as long as it consumes them. The proxy pops
them with ``ProxyConfig.default_invisible_ms`` and, ``renew_ahead_ms`` before a message's invisible time ends,
extends it by ``default_invisible_ms`` again (the broker's ChangeInvisibleTime), until the client acks it, changes
its invisible time, dead-letters it, or goes away (NotifyClientTermination, or its telemetry stream ends), and for
at most ``renew_max_ms`` after the receive.

Every renew voids the broker's previous receipt handle, while the client keeps the one it received: the proxy
answers the client's later calls with the latest one (:meth:`ReceiptHandleRenewer.release`), after any renew of
that message in flight. State lives in the proxy's memory only: after a proxy restart those messages become
visible again when their invisible time ends, as any message nobody acked. Runs on the proxy's event loop."""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from common.receipt_handle import ReceiptHandle

log = logging.getLogger(__name__)

# (group, topic, current handle, invisible ms) -> the new handle; raises when the broker refused or cannot be asked
Renew = Callable[[str, str, str, int], Awaitable[str]]
Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class _Renewed:
    client_id: str
    group: str
    topic: str
    current: str  # the broker's latest handle of the message
    until_ms: int  # when its invisible time ends
    give_up_ms: int  # renewed no more after this
    renewing: "asyncio.Future[None] | None" = None


class ReceiptHandleRenewer:
    def __init__(self, renew: Renew, invisible_ms: int, ahead_ms: int, max_ms: int,
                 clock_ms: Clock = wall_clock_ms) -> None:
        assert 0 < ahead_ms < invisible_ms, "a renew must come before the invisible time ends"
        self._renew = renew
        self.invisible_ms = invisible_ms
        self.ahead_ms = ahead_ms
        self.max_ms = max_ms
        self.clock_ms = clock_ms
        self._tracked: dict[str, _Renewed] = {}  # by the handle the client received
        self.renewed = 0  # renews done, for the log and tests

    def __len__(self) -> int:
        return len(self._tracked)

    def track(self, client_id: str, group: str, topic: str, handles: Iterable[str]) -> None:
        """Messages a receive with ``auto_renew`` handed out: renewed from now on."""
        now = self.clock_ms()
        for text in handles:
            until = ReceiptHandle.decode(text).invisible_until_ms
            self._tracked[text] = _Renewed(client_id, group, topic, text, until, now + self.max_ms)

    async def release(self, handle: str) -> str:
        """The client is done with the message it received as ``handle`` (an ack, a change of invisible time, a
        dead-lettering): renewed no more; the broker's latest handle of it, to do that with."""
        entry = self._tracked.pop(handle, None)
        if entry is None:
            return handle
        if entry.renewing is not None:
            await asyncio.shield(entry.renewing)
        return entry.current

    def forget_client(self, client_id: str) -> None:
        """The client went away: its messages become visible when their invisible time ends."""
        gone = [h for h, e in self._tracked.items() if e.client_id == client_id]
        for handle in gone:
            del self._tracked[handle]
        if gone:
            log.info("auto_renew_stopped client_id=%s messages=%d reason=client_gone", client_id, len(gone))

    async def renew_due(self) -> int:
        """Renew every message whose invisible time ends within ``ahead_ms`` (concurrently); how many were."""
        now = self.clock_ms()
        due = []
        for handle, entry in list(self._tracked.items()):
            if entry.renewing is not None or entry.until_ms - now > self.ahead_ms:
                continue
            if now >= entry.give_up_ms:
                del self._tracked[handle]
                log.warning("auto_renew_gave_up group=%s topic=%s after_ms=%d: the message becomes visible again",
                            entry.group, entry.topic, self.max_ms)
                continue
            due.append((handle, entry))
        await asyncio.gather(*(self._renew_one(handle, entry) for handle, entry in due))
        return len(due)

    async def _renew_one(self, handle: str, entry: _Renewed) -> None:
        entry.renewing = asyncio.get_running_loop().create_future()
        try:
            entry.current = await self._renew(entry.group, entry.topic, entry.current, self.invisible_ms)
            entry.until_ms = ReceiptHandle.decode(entry.current).invisible_until_ms
            self.renewed += 1
        except Exception as exc:  # refused (acked elsewhere) or the broker is away: tried again while it can help
            if self.clock_ms() >= entry.until_ms and self._tracked.get(handle) is entry:
                del self._tracked[handle]  # visible again already: another consumer may have it
            log.info("auto_renew_failed group=%s topic=%s reason=%r", entry.group, entry.topic, str(exc))
        finally:
            entry.renewing.set_result(None)
            entry.renewing = None

    async def run(self) -> None:
        """Renew what is due, several times within ``ahead_ms``, until cancelled."""
        interval_s = min(1.0, self.ahead_ms / 4000)
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.renew_due()
            except Exception:  # never let one bad round stop the renewing
                log.exception("auto_renew_round_failed")

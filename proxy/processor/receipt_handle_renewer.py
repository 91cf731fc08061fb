"""Auto-renew (upstream's ReceiptHandleProcessor): a PushConsumer receives with ``auto_renew`` and no invisible
duration, and leaves it to the proxy to keep its messages invisible for as long as it consumes them. The proxy pops
them with ``ProxyConfig.default_invisible_ms`` and, ``renew_ahead_ms`` before a message's invisible time ends,
extends it by ``default_invisible_ms`` again (the broker's ChangeInvisibleTime), until the client acks it, changes
its invisible time, dead-letters it, or goes away (NotifyClientTermination, or its telemetry stream ends), and for
at most ``renew_max_ms`` after the receive.

Every renew voids the broker's previous receipt handle, while the client keeps the one it received: the proxy
answers the client's later calls with the latest one (:meth:`ReceiptHandleRenewer.release`), after any renew of
that message in flight. A message no longer renewed keeps that translation until its latest handle expires, so a
retried ack (or one after the client reconnected) still finds it. Each renew runs on its own: one broker that does
not answer delays no other's. State lives in the proxy's memory only: after a proxy restart those messages become
visible again when their invisible time ends, as any message nobody acked. Runs on the proxy's event loop."""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from common.receipt_handle import ReceiptHandle

log = logging.getLogger(__name__)

# (group, topic, current handle, invisible ms) -> the new handle. Raises RenewRefused when the broker refused (the
# message was acked, dead-lettered or handed out again meanwhile), anything else when it could not be asked.
Renew = Callable[[str, str, str, int], Awaitable[str]]
Clock = Callable[[], int]


class RenewRefused(Exception):
    pass


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
    active: bool = True  # renewed; False: only translated, until ``until_ms``
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
        self._rounds: set[asyncio.Task[int]] = set()
        self.renewed = 0  # renews done, for the log and tests

    def __len__(self) -> int:
        """Messages renewed now."""
        return sum(entry.active for entry in self._tracked.values())

    def track(self, client_id: str, group: str, topic: str, handles: Iterable[str]) -> None:
        """Messages a receive with ``auto_renew`` handed out: renewed from now on."""
        now = self.clock_ms()
        for text in handles:
            until = ReceiptHandle.decode(text).invisible_until_ms
            self._tracked[text] = _Renewed(client_id, group, topic, text, until, now + self.max_ms)

    async def release(self, handle: str) -> str:
        """The client is done with the message it received as ``handle`` (an ack, a change of invisible time, a
        dead-lettering): renewed no more; the broker's latest handle of it, to do that with."""
        entry = self._tracked.get(handle)
        if entry is None:
            return handle
        entry.active = False
        if entry.renewing is not None:
            await asyncio.shield(entry.renewing)
        return entry.current

    def forget_client(self, client_id: str) -> None:
        """The client went away: its messages become visible when their invisible time ends."""
        stopped = 0
        for entry in self._tracked.values():
            if entry.client_id == client_id and entry.active:
                entry.active = False
                stopped += 1
        if stopped:
            log.info("auto_renew_stopped client_id=%s messages=%d reason=client_gone", client_id, stopped)

    async def renew_due(self) -> int:
        """Renew every message whose invisible time ends within ``ahead_ms`` (concurrently); how many were due.
        Forgets the translations whose latest handle expired."""
        now = self.clock_ms()
        due: list[_Renewed] = []
        gave_up = 0
        for handle, entry in list(self._tracked.items()):
            if not entry.active:
                if entry.until_ms <= now and entry.renewing is None:
                    del self._tracked[handle]
                continue
            if entry.renewing is not None or entry.until_ms - now > self.ahead_ms:
                continue
            if now >= entry.give_up_ms:
                entry.active = False
                gave_up += 1
                continue
            entry.renewing = asyncio.get_running_loop().create_future()  # before any release can run
            due.append(entry)
        if gave_up:
            log.warning("auto_renew_gave_up messages=%d after_ms=%d: they become visible again", gave_up, self.max_ms)
        try:
            outcomes = await asyncio.gather(*(self._renew_one(entry) for entry in due))
        finally:  # a round cancelled before a renew of it started: nobody may wait for that one forever
            for entry in due:
                if entry.renewing is not None and not entry.renewing.done():
                    entry.renewing.set_result(None)
                    entry.renewing = None
        failed = [reason for reason in outcomes if reason is not None]
        if failed:
            log.info("auto_renew_failed messages=%d of=%d first_reason=%r", len(failed), len(due), failed[0])
        return len(due)

    async def _renew_one(self, entry: _Renewed) -> str | None:
        """Why the renew failed, or None."""
        assert entry.renewing is not None
        try:
            entry.current = await self._renew(entry.group, entry.topic, entry.current, self.invisible_ms)
            entry.until_ms = ReceiptHandle.decode(entry.current).invisible_until_ms
            self.renewed += 1
            return None
        except RenewRefused as exc:  # nothing left to renew: translated until it expires, renewed no more
            entry.active = False
            return str(exc)
        except Exception as exc:  # the broker could not be asked: tried again next round while the handle lives
            if self.clock_ms() >= entry.until_ms:
                entry.active = False
            return str(exc)
        finally:
            entry.renewing.set_result(None)
            entry.renewing = None

    async def run(self) -> None:
        """Renew what is due, several times within ``ahead_ms``, until cancelled. Each round runs on its own, so a
        slow broker's renews do not hold up the next round's."""
        interval_s = min(1.0, self.ahead_ms / 4000)
        try:
            while True:
                await asyncio.sleep(interval_s)
                task = asyncio.create_task(self.renew_due())
                self._rounds.add(task)
                task.add_done_callback(self._round_done)
        finally:
            for task in list(self._rounds):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self._rounds, return_exceptions=True)

    def _round_done(self, task: "asyncio.Task[int]") -> None:
        self._rounds.discard(task)
        if not task.cancelled() and task.exception() is not None:  # never let one bad round stop the renewing
            log.error("auto_renew_round_failed", exc_info=task.exception())

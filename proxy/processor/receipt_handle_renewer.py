"""Auto-renew (upstream's ReceiptHandleProcessor): a PushConsumer receives with ``auto_renew`` and no invisible
duration, and leaves it to the proxy to keep its messages invisible for as long as it consumes them. The proxy pops
them with ``ProxyConfig.default_invisible_ms`` and, ``renew_ahead_ms`` before a message's invisible time ends,
extends it by ``default_invisible_ms`` again (the broker's ChangeInvisibleTime), until the client acks it, changes
its invisible time, dead-letters it, or goes away (NotifyClientTermination, or its telemetry stream ends), and for
at most ``renew_max_ms`` after the receive. Only while the client has a Telemetry stream open here (as upstream,
which stops renewing for a client whose channel is offline): a caller that never opened one, or left without a
word, gets nothing renewed, so its messages come back once their invisible time ends.

Every renew voids the broker's previous receipt handle, while the client keeps the one it received: the proxy
answers the client's later calls with the latest one (:meth:`ReceiptHandleRenewer.hold`), after any renew of that
message in flight, and renews it no more while the call runs. Renewing stops only once the broker took the message
off the client's hands or refused its handle as spent (:meth:`ReceiptHandleRenewer.settle`), and only for a call
naming the group and topic the message was received for: a call the broker refuses for another reason (another
group, a broker that cannot be reached) leaves it renewed. A message no longer renewed keeps that translation until
its latest handle expires, so a retried ack (or one after the client reconnected) still finds it. Each renew runs
on its own: one broker that does not answer delays no other's. State lives in the proxy's memory only: after a
proxy restart those messages become visible again when their invisible time ends, as any message nobody acked.
Runs on the proxy's event loop."""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# (group, topic, current handle, invisible ms) -> the new handle. Raises RenewRefused when the broker refused (the
# message was acked, dead-lettered or handed out again meanwhile), anything else when it could not be asked.
Renew = Callable[[str, str, str, int], Awaitable[str]]
Clock = Callable[[], int]
Online = Callable[[str], bool]  # client id -> whether its Telemetry stream is open here


class RenewRefused(Exception):
    pass


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(slots=True)
class _Renewed:
    client_id: str
    group: str
    topic: str
    current: str  # the broker's latest handle of the message
    until_ms: int  # when its invisible time ends, on the proxy's own clock
    give_up_ms: int  # renewed no more after this
    active: bool = True  # renewed; False: only translated, until ``until_ms``
    renewing: "asyncio.Future[None] | None" = None
    calls: int = 0  # the client's calls about it at the broker now: not renewed meanwhile (they use ``current``)


class ReceiptHandleRenewer:
    def __init__(self, renew: Renew, invisible_ms: int, ahead_ms: int, max_ms: int, online: Online,
                 clock_ms: Clock = monotonic_ms) -> None:
        assert 0 < ahead_ms < invisible_ms, "a renew must come before the invisible time ends"
        self._renew = renew
        self._online = online
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

    def track(self, client_id: str, group: str, topic: str, handles: Iterable[str], popped_at_ms: int | None = None,
              invisible_ms: int | None = None) -> None:
        """Messages a receive with ``auto_renew`` handed out: renewed from now on. ``popped_at_ms``: when the broker
        answered the pop, by :attr:`clock_ms` (default now); ``invisible_ms``: what the pop asked (default
        :attr:`invisible_ms`). Their invisible time is counted on this clock, never from the handle's time, which
        is the broker's: a proxy whose clock lagged the broker's by more than ``ahead_ms``, or was stepped, renewed
        too late, and the message went to another consumer while its own still worked on it."""
        now = self.clock_ms()
        popped_at = now if popped_at_ms is None else popped_at_ms
        until = popped_at + (self.invisible_ms if invisible_ms is None else invisible_ms)
        for text in handles:
            self._tracked[text] = _Renewed(client_id, group, topic, text, until, now + self.max_ms)

    async def hold(self, handle: str, group: str, topic: str) -> str:
        """A client's call (an ack, a change of invisible time, a dead-lettering) about the message it received as
        ``handle`` in ``group`` and ``topic``: the broker's latest handle of it, to make the call with; not renewed
        until :meth:`settle` says how the call ended. A call naming another group or topic gets ``handle`` as it
        is (the broker refuses it) and changes nothing here."""
        entry = self._entry(handle, group, topic)
        if entry is None:
            return handle
        entry.calls += 1  # before waiting: no renew of it may start now
        if entry.renewing is not None:
            try:
                await asyncio.shield(entry.renewing)
            except BaseException:  # the call was cancelled: nobody will settle it
                entry.calls -= 1
                raise
        return entry.current

    def settle(self, handle: str, group: str, topic: str, done: bool) -> None:
        """The call :meth:`hold` was for ended. ``done``: the broker took the message off the client's hands or
        refused the handle as spent (acked, expired, handed out again): renewed no more. Otherwise (refused for
        another reason, or not answered) it is renewed on as before."""
        entry = self._entry(handle, group, topic)
        if entry is None or entry.calls == 0:
            return
        entry.calls -= 1
        if done:
            entry.active = False

    def _entry(self, handle: str, group: str, topic: str) -> _Renewed | None:
        entry = self._tracked.get(handle)
        return entry if entry is not None and entry.group == group and entry.topic == topic else None

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
        gave_up = offline = 0
        for handle, entry in list(self._tracked.items()):
            if not entry.active:
                if entry.until_ms <= now and entry.renewing is None and not entry.calls:
                    del self._tracked[handle]
                continue
            if entry.renewing is not None or entry.calls or entry.until_ms - now > self.ahead_ms:
                continue
            if now >= entry.give_up_ms:
                entry.active = False
                gave_up += 1
                continue
            if not self._online(entry.client_id):  # nobody there to consume it: let it come back to the group
                entry.active = False
                offline += 1
                continue
            entry.renewing = asyncio.get_running_loop().create_future()  # before any hold can run
            due.append(entry)
        if gave_up:
            log.warning("auto_renew_gave_up messages=%d after_ms=%d: they become visible again", gave_up, self.max_ms)
        if offline:
            log.info("auto_renew_stopped messages=%d reason=client_offline: they become visible again", offline)
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
        asked_at = self.clock_ms()  # the new invisible time starts after this, on the broker
        try:
            entry.current = await self._renew(entry.group, entry.topic, entry.current, self.invisible_ms)
            entry.until_ms = asked_at + self.invisible_ms
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

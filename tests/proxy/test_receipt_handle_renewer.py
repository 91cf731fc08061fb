"""The proxy's auto-renew bookkeeping with a clock and a broker call of the test's: when a message is renewed,
which handle a client's later call uses, and when renewing stops (done, client gone or offline, refused, too
long) or goes on (a call the broker refused for another reason, or naming another group or topic)."""

import asyncio

import pytest

from common.receipt_handle import ReceiptHandle
from proxy.processor.receipt_handle_renewer import ReceiptHandleRenewer, RenewRefused

INVISIBLE, AHEAD, MAX = 3000, 1000, 20_000


class Broker:
    """ChangeInvisibleTime as the broker answers it: a new delivery, invisible from now; refuses on demand."""

    def __init__(self) -> None:
        self.now = 0
        self.calls: list[str] = []
        self.refuse = False  # the broker refuses the handle
        self.away = False  # the broker cannot be asked
        self.gate: asyncio.Event | None = None  # set: a renew waits for it
        self.offline: set[str] = set()  # clients without a Telemetry stream

    async def renew(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        self.calls.append(handle)
        if self.gate is not None:
            await self.gate.wait()
        if self.refuse:
            raise RenewRefused("receipt handle is of an earlier delivery")
        if self.away:
            raise RuntimeError("UNAVAILABLE")
        old = ReceiptHandle.decode(handle)
        return old._replace(delivery=old.delivery + 1, invisible_until_ms=self.now + invisible_ms).encode()


def handle(offset: int, until: int) -> str:
    return ReceiptHandle("broker-a", 0, offset, 1, until, 0).encode()


def renewer(broker: Broker) -> ReceiptHandleRenewer:
    return ReceiptHandleRenewer(broker.renew, INVISIBLE, AHEAD, MAX, lambda client_id: client_id not in broker.offline,
                                clock_ms=lambda: broker.now)


async def release(r: ReceiptHandleRenewer, handle: str, done: bool = True) -> str:
    """A client's call about the message, ended as ``done`` says; the handle it was made with."""
    current = await r.hold(handle, "G", "T")
    r.settle(handle, "G", "T", done)
    return current


def test_renewed_ahead_of_its_end_and_released_with_the_latest_handle():
    async def scenario() -> None:
        broker = Broker()
        r = renewer(broker)
        first = handle(7, INVISIBLE)
        r.track("c1", "G", "T", [first])
        broker.now = INVISIBLE - AHEAD - 1
        assert await r.renew_due() == 0 and broker.calls == []
        broker.now = INVISIBLE - AHEAD
        assert await r.renew_due() == 1
        broker.now += INVISIBLE - AHEAD
        assert await r.renew_due() == 1 and r.renewed == 2
        latest = await release(r, first)
        assert ReceiptHandle.decode(latest).delivery == 3 and len(r) == 0
        assert await r.renew_due() == 0
        assert await release(r, first) == latest  # a retried ack: translated while the latest handle lives
        broker.now = ReceiptHandle.decode(latest).invisible_until_ms
        await r.renew_due()
        assert await release(r, first) == first  # expired: forgotten, passed on as given

    asyncio.run(scenario())


def test_the_invisible_time_is_counted_on_the_proxys_clock_not_the_brokers():
    """A broker whose clock ran 20 s ahead of the proxy's (or a proxy clock stepped) put the handle's end 20 s later
    than it is on the proxy: the renew came after the message was visible again, and another consumer got it."""
    async def scenario() -> None:
        broker = Broker()
        proxy_now = [0]
        r = ReceiptHandleRenewer(broker.renew, INVISIBLE, AHEAD, MAX, lambda _: True, clock_ms=lambda: proxy_now[0])
        broker.now = 20_000
        first = handle(7, broker.now + INVISIBLE)
        r.track("c1", "G", "T", [first])  # popped now, as the renewer was made to ask
        proxy_now[0] = INVISIBLE - AHEAD
        assert await r.renew_due() == 1
        proxy_now[0] += INVISIBLE - AHEAD
        assert await r.renew_due() == 1 and r.renewed == 2

    asyncio.run(scenario())


def test_a_release_during_a_renew_waits_for_its_new_handle():
    async def scenario() -> None:
        broker = Broker()
        r = renewer(broker)
        first = handle(7, INVISIBLE)
        r.track("c1", "G", "T", [first])
        broker.now, broker.gate = INVISIBLE - AHEAD, asyncio.Event()
        renewing = asyncio.create_task(r.renew_due())
        await asyncio.sleep(0)
        releasing = asyncio.create_task(release(r, first))
        await asyncio.sleep(0)
        assert not releasing.done()
        broker.gate.set()
        await renewing
        assert ReceiptHandle.decode(await releasing).delivery == 2

    asyncio.run(scenario())


def test_an_ack_ready_before_the_renew_starts_waits_for_it():
    """The renew is marked in flight when it is picked, not when its task first runs."""
    async def scenario() -> None:
        broker = Broker()
        r = renewer(broker)
        first = handle(7, INVISIBLE)
        r.track("c1", "G", "T", [first])
        broker.now = INVISIBLE - AHEAD
        renewing = asyncio.create_task(r.renew_due())
        releasing = asyncio.create_task(release(r, first))  # queued on the loop right behind the round
        await renewing
        assert ReceiptHandle.decode(await releasing).delivery == 2 and broker.calls == [first]

    asyncio.run(scenario())


@pytest.mark.parametrize("why", ["client_gone", "client_offline", "refused", "away", "too_long"])
def test_renewing_stops(why: str):
    async def scenario() -> None:
        broker = Broker()
        r = renewer(broker)
        r.track("c1", "G", "T", [handle(1, INVISIBLE)])
        r.track("c2", "G", "T", [handle(2, INVISIBLE)])
        broker.now = INVISIBLE - AHEAD
        if why == "client_gone":
            r.forget_client("c1")
            assert await r.renew_due() == 1 and len(r) == 1
            assert await release(r, handle(1, INVISIBLE)) == handle(1, INVISIBLE)  # still translated: as it is
        elif why == "client_offline":  # it never opened a Telemetry stream, or left without a word
            broker.offline.add("c1")
            assert await r.renew_due() == 1 and len(r) == 1 and broker.calls == [handle(2, INVISIBLE)]
        elif why == "refused":
            broker.refuse = True
            assert await r.renew_due() == 2 and len(r) == 0  # nothing left to renew: at once
            assert await r.renew_due() == 0
        elif why == "away":
            broker.away = True
            assert await r.renew_due() == 2 and len(r) == 2  # tried again while the message is still invisible
            assert await r.renew_due() == 2
            broker.now = INVISIBLE
            await r.renew_due()
            assert len(r) == 0
        else:
            while broker.now < MAX:
                await r.renew_due()
                broker.now += AHEAD
            await r.renew_due()
            assert len(r) == 0 and r.renewed == len(broker.calls) > 2

    asyncio.run(scenario())


@pytest.mark.parametrize(("group", "topic"), [("OtherGroup", "T"), ("G", "OtherTopic")])
def test_a_call_naming_another_group_or_topic_neither_translates_nor_stops_renewing(group: str, topic: str):
    """Such a call is refused by the broker: the consumer that holds the message keeps it."""
    async def scenario() -> None:
        broker = Broker()
        r = renewer(broker)
        first = handle(7, INVISIBLE)
        r.track("c1", "G", "T", [first])
        broker.now = INVISIBLE - AHEAD
        assert await r.renew_due() == 1
        assert await r.hold(first, group, topic) == first
        r.settle(first, group, topic, done=True)
        assert len(r) == 1
        broker.now += INVISIBLE - AHEAD
        assert await r.renew_due() == 1 and r.renewed == 2

    asyncio.run(scenario())


def test_renewing_pauses_while_the_clients_call_runs_and_goes_on_when_it_did_not_settle():
    async def scenario() -> None:
        broker = Broker()
        r = renewer(broker)
        first = handle(7, INVISIBLE)
        r.track("c1", "G", "T", [first])
        assert await r.hold(first, "G", "T") == first
        broker.now = INVISIBLE - AHEAD
        assert await r.renew_due() == 0 and broker.calls == []  # the call uses this handle: not voided under it
        r.settle(first, "G", "T", done=False)  # e.g. the broker could not be reached: the client will try again
        assert await r.renew_due() == 1 and len(r) == 1
        assert ReceiptHandle.decode(await release(r, first)).delivery == 2 and len(r) == 0

    asyncio.run(scenario())


def test_a_cancelled_call_leaves_the_message_renewed():
    async def scenario() -> None:
        broker = Broker()
        r = renewer(broker)
        first = handle(7, INVISIBLE)
        r.track("c1", "G", "T", [first])
        broker.now, broker.gate = INVISIBLE - AHEAD, asyncio.Event()
        renewing = asyncio.create_task(r.renew_due())
        await asyncio.sleep(0)
        holding = asyncio.create_task(r.hold(first, "G", "T"))
        await asyncio.sleep(0)
        holding.cancel()
        broker.gate.set()
        await renewing
        with pytest.raises(asyncio.CancelledError):
            await holding
        broker.now += INVISIBLE - AHEAD
        assert await r.renew_due() == 1 and r.renewed == 2

    asyncio.run(scenario())

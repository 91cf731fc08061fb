"""Long-polling pulls and pops parked in the broker's servicers (``broker/broker_servicer.py``,
``broker/pop_servicer.py``) with the real hold service and answer stream, over a fake store: what woken pulls may
build on a stream that does not read, and how fast parked calls answer once the broker stops."""

import asyncio
import threading
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest

from broker.broker_servicer import BrokerServicer
from broker.broker_stats import BrokerStats
from broker.longpolling.pull_request_hold_service import PullRequestHoldService
from broker.pop.pop_service import PopOutcome
from broker.pop_servicer import PopServicer
from broker.processor.pull_outcome import PullOutcome
from common import stream_answers
from common.response_code import ResponseCode
from proto import broker_pb2, pop_pb2

TOPIC = "ParkedT"
ANSWER_BYTES = 64 * 1024


class FakePulls:
    """A pull processor over one queue that is empty until ``arrive``; counts the answers it builds."""

    def __init__(self) -> None:
        self.arrived = False
        self.built = 0
        self.subscription_group_manager = SimpleNamespace(auto_create=False, subscription_group_table={})
        self.threads: list[int] = []  # where each pull ran

    def blocks(self, request: broker_pb2.PullMessageRequest) -> bool:
        return False

    def pull(self, request: broker_pb2.PullMessageRequest) -> PullOutcome:
        self.threads.append(threading.get_ident())
        if not self.arrived:
            return PullOutcome(broker_pb2.PullMessageResponse(code=ResponseCode.PULL_NOT_FOUND), (TOPIC, 0, 0))
        self.built += 1
        return PullOutcome(broker_pb2.PullMessageResponse(code=ResponseCode.SUCCESS, next_begin_offset=1),
                           records=b"x" * ANSWER_BYTES)


def servicer(pulls: FakePulls, hold: PullRequestHoldService, max_suspend_ms: int = 30_000) -> BrokerServicer:
    return BrokerServicer(send=None, pull=pulls, consumer_manage=None, query=None, admin=None,  # type: ignore[arg-type]
                          hold_service=hold, stats=BrokerStats(), long_polling_max_suspend_ms=max_suspend_ms,
                          sync_flush=False)


def pull_request(request_id: int, suspend_ms: int = 30_000) -> broker_pb2.PullMessageRequest:
    return broker_pb2.PullMessageRequest(request_id=request_id, consumer_group="g", topic=TOPIC, queue_id=0,
                                         queue_offset=0, max_msg_nums=32, max_bytes=ANSWER_BYTES,
                                         commit_offset=-1, suspend_timeout_ms=suspend_ms)


async def until(check, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_woken_parked_pulls_build_no_more_than_the_stream_may_owe(monkeypatch: pytest.MonkeyPatch):
    """100 pulls parked on one queue of a stream whose client reads nothing: an arrival wakes them all, and only
    as many build their answer as fit in the stream's bound; the others answer not-found at their timeout."""
    monkeypatch.setattr(stream_answers, "MAX_BUFFERED_BYTES", 4 * ANSWER_BYTES)
    pulls = FakePulls()

    async def scenario() -> None:
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda topic, queue_id: 1 if pulls.arrived else 0)
        broker = servicer(pulls, hold)
        requests = [pull_request(i, suspend_ms=1_500) for i in range(100)]
        requests.insert(0, broker_pb2.PullMessageRequest(request_id=999, consumer_group="g", topic=TOPIC,
                                                         queue_id=0, max_msg_nums=1, commit_offset=-1))

        async def frames() -> AsyncIterator[broker_pb2.PullStreamFrame]:
            yield broker_pb2.PullStreamFrame(requests=requests)
            await asyncio.Event().wait()  # the client keeps the stream open

        stream = broker.PullMessageStream(frames(), None)
        await stream.__anext__()  # the not-parked pull's answer; then the client reads no more
        await until(lambda: len(hold._waiters.get((TOPIC, 0), ())) == 100)
        pulls.arrived = True
        hold.on_arrivals([(TOPIC, 0)])  # type: ignore[list-item]
        await until(lambda: not hold._waiters)  # every woken pull has read again, or waits for room to
        assert 1 <= pulls.built <= 4, pulls.built
        answers: list[broker_pb2.PullMessageResponse] = []
        async for encoded in stream:  # the client reads again: every pull is answered
            answers += broker_pb2.PullStreamAnswers.FromString(encoded).responses
            if len(answers) == 100:
                break
        await stream.aclose()
        codes = [a.code for a in answers]
        assert codes.count(ResponseCode.SUCCESS) == pulls.built
        assert all(c in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND) for c in codes)

    asyncio.run(scenario())


def test_woken_parked_pulls_of_a_stream_that_reads_all_get_their_messages():
    pulls = FakePulls()

    async def scenario() -> None:
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda topic, queue_id: 1 if pulls.arrived else 0)
        broker = servicer(pulls, hold)

        async def frames() -> AsyncIterator[broker_pb2.PullStreamFrame]:
            yield broker_pb2.PullStreamFrame(requests=[pull_request(i) for i in range(300)])
            await until(lambda: len(hold._waiters.get((TOPIC, 0), ())) == 300)
            pulls.arrived = True
            hold.on_arrivals([(TOPIC, 0)])  # type: ignore[list-item]

        codes = []
        async for encoded in broker.PullMessageStream(frames(), None):
            codes += [a.code for a in broker_pb2.PullStreamAnswers.FromString(encoded).responses]
        assert codes == [ResponseCode.SUCCESS] * 300 and pulls.built == 300

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_a_pull_that_creates_its_group_runs_off_the_event_loop():
    """A group's first pull creates it, which writes a whole metadata file (JSON store): not on the loop, where a
    stream of pulls naming fresh groups held up every other call."""
    pulls = FakePulls()
    groups = pulls.subscription_group_manager
    groups.auto_create = True

    async def scenario() -> int:
        broker = servicer(pulls, PullRequestHoldService(asyncio.get_running_loop(), lambda topic, queue_id: 0))
        await broker._pull(pull_request(1, suspend_ms=0))  # group "g" is new
        groups.subscription_group_table["g"] = object()
        await broker._pull(pull_request(2, suspend_ms=0))  # now known: on the loop, as every pull
        return threading.get_ident()

    loop_thread = asyncio.run(scenario())
    assert pulls.threads[0] != loop_thread and pulls.threads[1] == loop_thread


def test_a_parked_pull_answers_at_once_when_the_broker_stops():
    pulls = FakePulls()

    async def scenario() -> None:
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda topic, queue_id: 0)
        parked = asyncio.ensure_future(servicer(pulls, hold)._pull(pull_request(1)))
        await until(lambda: (TOPIC, 0) in hold._waiters)
        hold.wake_all()  # the broker stops
        outcome = await asyncio.wait_for(parked, 2)  # not after its 30 s
        assert outcome.response.code == ResponseCode.PULL_NOT_FOUND
        assert await asyncio.wait_for(servicer(pulls, hold)._pull(pull_request(2)), 2) is not None  # parks no more

    asyncio.run(scenario())


class FakePops:
    """A POP processor whose queue stays empty; counts its pops."""

    def __init__(self) -> None:
        self.pops = 0
        self.service = SimpleNamespace(held_if_free=self._free)

    @staticmethod
    def _free():
        from contextlib import nullcontext
        return nullcontext(True)

    def pop_runs_inline(self, request: pop_pb2.PopMessageRequest) -> bool:
        return True

    def pop(self, request: pop_pb2.PopMessageRequest) -> PopOutcome:
        self.pops += 1
        return PopOutcome(popped=[], scan_offsets={0: 0}, next_expiry_ms=None)


def test_a_parked_pop_answers_at_once_when_the_broker_stops():
    pops = FakePops()

    async def scenario() -> None:
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda topic, queue_id: 0)
        pop = PopServicer(pops, hold, max_suspend_ms=30_000)  # type: ignore[arg-type]
        parked = asyncio.ensure_future(pop._pop(pop_pb2.PopMessageRequest(topic=TOPIC, group="g",
                                                                          poll_time_ms=30_000)))
        await until(lambda: (TOPIC, 0) in hold._waiters)
        hold.wake_all()
        response, _ = await asyncio.wait_for(parked, 2)
        assert response.code == ResponseCode.PULL_NOT_FOUND and pops.pops == 2  # woken once, not spinning
        pop._worker.shutdown()

    asyncio.run(scenario())

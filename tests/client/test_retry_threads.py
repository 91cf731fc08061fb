"""Retries and the name server (``client/retry_threads.py``). A send's or a pull's retry looks the route up again,
maybe on the name server (a blocking call), so it must not run on the thread that completed the failed attempt:
that is the broker stream's reader, and the stream's other answers would wait for the name server meanwhile (a
stalled name server would time out every request on that stream). And when no name server answers, a send's retry
still has the last route to pick another broker from."""

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import grpc
import pytest

from client.errors import MQClientError
from client.producer import Producer
from client.pull_consumer import PullConsumer
from client.results import PullStatus
from client.retry_threads import ClientClosed, RetryThreads
from common.message import Message
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME as MOCK
from proto import broker_pb2
from tests.client.fakes import (
    STALL_LIMIT_S,
    FakeBroker,
    FakeCluster,
    FakeRpcError,
    FakeStaticTopic,
    FlakyNameServer,
    normal_route,
)


class StalledNameServer(FlakyNameServer):
    """Answers a topic's first route fetch; every later one waits until :meth:`recover`."""

    def __init__(self, fake: FakeCluster) -> None:
        super().__init__(fake)
        self.hold.clear()
        self.seen: set[str] = set()

    def stalls(self, topic: str) -> bool:
        seen = topic in self.seen
        self.seen.add(topic)
        return seen and super().stalls(topic)

    def recover(self) -> None:
        self.hold.set()


def answered_while_the_name_server_stalls(namesrv: StalledNameServer, other_sent: threading.Event,
                                          retried: Future, other: Future) -> tuple[Any, Any]:
    """``retried``'s first answer (held until ``other`` is on the same stream) needs a retry, whose route look-up
    waits for the stalled name server; ``other`` is answered meanwhile. Their results: ``other``'s, and
    ``retried``'s once the name server answers again."""
    other_sent.set()
    assert namesrv.held.wait(5), "the retry did not look the route up"
    other_result = other.result(timeout=5)  # the stream's reader is not the one waiting for the name server
    assert not retried.done()
    namesrv.recover()
    return other_result, retried.result(timeout=5)


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster("broker-a", "broker-b")


@pytest.fixture
def producer(fake: FakeCluster) -> Iterator[Producer]:
    p = Producer("fake-namesrv:9876", group="pg", retry_times=2)  # on streams, the default
    fake.install(p.client)
    yield p
    p.close()


def stall(fake: FakeCluster, user: Producer | PullConsumer) -> StalledNameServer:
    namesrv = StalledNameServer(fake)
    user.client._fetch_route = namesrv.fetch_route  # type: ignore[method-assign]
    return namesrv


def hold_first_call(broker: FakeBroker, method: str, until: threading.Event) -> None:
    """``broker`` answers its first ``method`` call only once ``until`` is set: the requests after it are on the
    stream by then, so the first answer's retry happens while they wait for theirs."""
    invoke = broker.invoke
    held: list[bool] = []

    def holding(called: str, request: object) -> object:
        if called == method and not held:
            held.append(True)
            assert until.wait(STALL_LIMIT_S), "the second request never came"
        return invoke(called, request)

    broker.invoke = holding  # type: ignore[method-assign]


def test_a_normal_topic_s_retry_does_not_hold_up_the_stream_while_the_name_server_stalls(fake, producer):
    fake.routes["N"] = normal_route("N", {"broker-a": 2})
    answered: list[int] = []

    def busy_once(req):
        answered.append(req.queue_id)
        if len(answered) == 1:
            return broker_pb2.SendMessageResponse(code=ResponseCode.SYSTEM_BUSY, remark="busy")
        return broker_pb2.SendMessageResponse(code=ResponseCode.SUCCESS, queue_id=req.queue_id, queue_offset=7)

    fake.brokers["broker-a"].handlers["SendMessage"] = busy_once
    other_sent = threading.Event()
    hold_first_call(fake.brokers["broker-a"], "SendMessage", other_sent)
    namesrv = stall(fake, producer)
    producer.client.route("N")  # cached: the sends pick their queue without the name server
    retried = producer.send_async(Message("N", b"retried"))  # SYSTEM_BUSY: retried after a route refresh
    other = producer.send_async(Message("N", b"other"), queue=MessageQueue("N", "broker-a", 1))
    other_result, retried_result = answered_while_the_name_server_stalls(namesrv, other_sent, retried, other)
    assert (other_result.queue_offset, retried_result.queue_offset) == (7, 7)
    assert len(answered) == 3


def test_a_static_topic_s_retry_does_not_hold_up_the_stream_while_the_name_server_stalls(fake, producer):
    topic = FakeStaticTopic(fake, "S", {0: "broker-a", 1: "broker-a"})
    namesrv = stall(fake, producer)
    producer.client.route("S")  # cached: broker-a leads both logic queues
    topic.remap(0, "broker-b", logic_start=10_000)  # broker-a now answers NOT_LEADER_FOR_QUEUE for 0
    other_sent = threading.Event()
    hold_first_call(fake.brokers["broker-a"], "SendMessage", other_sent)
    retried = producer.send_async(Message("S", b"retried"), queue=MessageQueue("S", MOCK, 0))
    other = producer.send_async(Message("S", b"other"), queue=MessageQueue("S", MOCK, 1))
    other_result, retried_result = answered_while_the_name_server_stalls(namesrv, other_sent, retried, other)
    assert (other_result.queue_offset, retried_result.queue_offset) == (0, 10_000)


def test_a_retry_due_after_close_fails_the_send_instead_of_leaving_it_unanswered(fake, producer):
    fake.routes["N"] = normal_route("N", {"broker-a": 1})
    fake.brokers["broker-a"].handlers["SendMessage"] = lambda req: broker_pb2.SendMessageResponse(
        code=ResponseCode.SYSTEM_BUSY, remark="busy")
    producer.client.route("N")
    producer.client.retry_threads.close()  # as close() does
    # (its first attempt failed, but such a failure, a cancelled call, may come after the broker stored it)
    with pytest.raises(MQClientError, match=r"the client was closed \(an earlier attempt may have been stored\)"):
        producer.send(Message("N", b"m"))


def test_with_no_name_server_answering_a_retry_goes_to_another_broker_of_the_last_route(fake, producer):
    fake.routes["N"] = normal_route("N", {"broker-a": 1, "broker-b": 1})

    def unavailable(req):
        raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "broker-a is gone")

    fake.brokers["broker-a"].handlers["SendMessage"] = unavailable
    fake.brokers["broker-b"].handlers["SendMessage"] = lambda req: broker_pb2.SendMessageResponse(
        code=ResponseCode.SUCCESS, queue_id=req.queue_id, queue_offset=3)
    namesrv = FlakyNameServer(fake)
    producer.client._fetch_route = namesrv.fetch_route  # type: ignore[method-assign]
    producer.client.route("N")
    namesrv.down = True
    producer._round_robin = -1  # the next pick is the first queue: broker-a's
    assert producer.send(Message("N", b"m")).queue == MessageQueue("N", "broker-b", 0)
    assert [b for b, _ in fake.all_calls("SendMessage")] == ["broker-a", "broker-b"]


def test_auto_batch_sends_what_waited_without_holding_up_the_stream_while_the_name_server_stalls(fake):
    fake.routes["N"] = normal_route("N", {"broker-a": 2})
    fake.brokers["broker-a"].handlers["SendMessage"] = lambda req: broker_pb2.SendMessageResponse(
        code=ResponseCode.SUCCESS, queue_id=req.queue_id, queue_offset=5)
    first_answer = threading.Event()
    hold_first_call(fake.brokers["broker-a"], "SendMessage", first_answer)
    with Producer("fake-namesrv:9876", auto_batch=True, batch_max_in_flight=1) as producer:
        fake.install(producer.client)
        namesrv = stall(fake, producer)
        producer.client.route("N")
        first = producer.send_async(Message("N", b"first"))  # leaves at once; broker-a holds its answer
        waiting = producer.send_async(Message("N", b"waiting"))  # waits for the first's answer
        alone = producer.send_async(Message("N", b"alone"), queue=MessageQueue("N", "broker-a", 1))
        producer.client.invalidate_route("N")  # the waiting send needs the name server now
        first_answer.set()
        assert first.result(timeout=5).queue_offset == 5
        assert namesrv.held.wait(5), "the waiting send did not look for a route"
        assert alone.result(timeout=5).queue_offset == 5  # answered while the name server stalls
        assert not waiting.done()
        namesrv.recover()
        assert waiting.result(timeout=5).queue_offset == 5


def test_a_static_pull_s_retry_does_not_hold_up_the_stream_while_the_name_server_stalls(fake):
    topic = FakeStaticTopic(fake, "S", {0: "broker-a", 1: "broker-a"})
    topic.append(1, b"m")
    with PullConsumer("fake-namesrv:9876", group="g") as consumer:  # on streams, the default
        fake.install(consumer.client)
        namesrv = stall(fake, consumer)
        consumer.client.route("S")  # cached: broker-a leads both logic queues
        topic.remap(0, "broker-b", logic_start=10_000)  # broker-a now answers NOT_LEADER_FOR_QUEUE for 0
        other_sent = threading.Event()
        hold_first_call(fake.brokers["broker-a"], "PullMessage", other_sent)
        retried = consumer.pull_async(MessageQueue("S", MOCK, 0), 10_000)
        other = consumer.pull_async(MessageQueue("S", MOCK, 1), 0)
        other_result, retried_result = answered_while_the_name_server_stalls(namesrv, other_sent, retried, other)
        assert [m.body for m in other_result.messages] == [b"m"]
        assert retried_result.status is PullStatus.NO_NEW_MSG


# -- the threads themselves ------------------------------------------------------------------------------------
def test_a_retry_that_raises_fails_its_request_with_the_error(caplog: pytest.LogCaptureFixture):
    threads = RetryThreads()
    try:
        bug, refusal = Future(), Future()

        def buggy() -> None:
            raise RuntimeError("a bug in the retry")

        def refused() -> None:
            raise MQClientError("send to T failed: the client is closed")

        threads.retry(bug, buggy)
        threads.retry(refusal, refused, delay_s=0.01)
        with pytest.raises(RuntimeError, match="a bug in the retry"):
            bug.result(timeout=5)
        with pytest.raises(MQClientError, match="the client is closed"):
            refusal.result(timeout=5)
        # a bug is logged with its traceback; a client error is only the request's answer
        assert [r.exc_info is not None for r in caplog.records if r.getMessage() == "retry_failed"] == [True]
    finally:
        threads.close()


def test_after_close_queued_and_later_retries_fail_and_the_threads_are_daemons():
    threads = RetryThreads(threads=1)
    started, release = threading.Event(), threading.Event()
    running, queued, later = Future(), Future(), Future()

    def run_until_released() -> None:
        started.set()
        release.wait(5)
        running.set_result("ran")

    threads.retry(running, run_until_released)
    assert started.wait(5)
    threads.retry(queued, lambda: queued.set_result("ran"))  # waits behind the one running
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("client-retry-"))
    threads.close()
    threads.retry(later, lambda: later.set_result("ran"))
    release.set()
    assert running.result(timeout=5) == "ran"  # the one running ends on its own
    for future in (queued, later):
        with pytest.raises(ClientClosed):
            future.result(timeout=5)

"""``LoopProducer`` (the proxy's producer, its attempts on the loop's send streams) against an in-process gRPC
server speaking the broker's send-stream frames, with a route in its cache: refused attempts, retried or not, end
without the loop's default executor (where transactional sends wait for theirs), a timed-out send says whether its
channel was connected without asking the loop, and a send in ``cache_only`` never asks the name server."""

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from client.client_instance import RouteNotCached
from client.errors import MQClientError
from common.message import Message
from common.perm import PERM_READ, PERM_WRITE
from common.response_code import ResponseCode
from proto import broker_pb2, common_pb2
from proxy.broker_channels import BrokerChannels
from proxy.broker_send_streams import BrokerSendStreams
from proxy.loop_producer import LoopProducer
from tests.proxy.test_broker_send_streams import FakeBroker, silent_until

TOPIC = "LoopProducerTopic"
UNREACHABLE_NAMESRV = "127.0.0.1:1"  # every route comes from the cache the test fills


def busy(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    for frame in frames:
        yield broker_pb2.SendStreamAnswers(responses=[broker_pb2.SendMessageResponse(
            request_id=r.request_id, code=ResponseCode.SYSTEM_BUSY, remark="busy") for r in frame.requests])


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    fake = FakeBroker(busy)
    yield fake
    fake.stop()


def cache_route(producer: LoopProducer, addr: str) -> None:
    route = common_pb2.TopicRouteData(
        queue_datas=[common_pb2.QueueData(broker_name="b", read_queue_nums=4, write_queue_nums=4,
                                          perm=PERM_READ | PERM_WRITE)],
        broker_datas=[common_pb2.BrokerData(cluster="c", broker_name="b", broker_addrs={0: addr})])
    producer.client._routes[TOPIC] = (time.monotonic(), route)


def with_producer(broker: FakeBroker, scenario: Any, send_timeout_ms: int = 2000, retry_times: int = 0) -> Any:
    async def main() -> Any:
        channels = BrokerChannels()
        streams = BrokerSendStreams(channels)
        producer = LoopProducer(asyncio.get_running_loop(), streams, UNREACHABLE_NAMESRV, group="G",
                                send_timeout_ms=send_timeout_ms, retry_times=retry_times)
        cache_route(producer, broker.addr)
        try:
            return await scenario(producer)
        finally:
            await streams.close()
            await channels.close()
            await asyncio.to_thread(producer.close)

    return asyncio.run(main())


@pytest.mark.parametrize("retry_times", [0, 2])
def test_more_refused_sends_waited_for_on_default_workers_than_there_are_workers_all_end(broker: FakeBroker,
                                                                                         retry_times: int):
    """As the proxy's transactional sends do, each waits for its outcome on a default-executor thread (here with a
    timeout, so a regression fails instead of hanging); their refusals must settle on other threads."""
    many = 2 * min(32, (os.cpu_count() or 1) + 4)  # twice the default executor's threads

    def send_and_wait(producer: LoopProducer) -> None:
        producer.send_async(Message(TOPIC, b"x")).result(timeout=10)

    async def scenario(producer: LoopProducer) -> list[BaseException | None]:
        return await asyncio.gather(*(asyncio.to_thread(send_and_wait, producer) for _ in range(many)),
                                    return_exceptions=True)

    outcomes = with_producer(broker, scenario, retry_times=retry_times)
    assert all(isinstance(o, MQClientError) and "SYSTEM_BUSY" in str(o) for o in outcomes), outcomes[:3]


def test_a_send_timed_out_on_a_connected_broker_does_not_mark_it_down(broker: FakeBroker):
    stop = threading.Event()

    broker.behaviour = silent_until(stop)

    async def scenario(producer: LoopProducer) -> tuple[BaseException | None, bool]:
        try:
            await asyncio.wrap_future(producer.send_async(Message(TOPIC, b"x")))
            error = None
        except MQClientError as exc:
            error = exc
        finally:
            stop.set()
        return error, producer.client.down.is_down(broker.addr)

    error, marked_down = with_producer(broker, scenario, send_timeout_ms=300)
    assert error is not None and "DEADLINE_EXCEEDED" in str(error)
    assert not marked_down  # a slow broker: its connection was up


def test_a_send_in_cache_only_raises_before_sending_when_the_route_is_gone(broker: FakeBroker):
    async def scenario(producer: LoopProducer) -> None:
        producer.client.invalidate_route(TOPIC)  # as a failed attempt does: stale, looked up at the next send
        with pytest.raises(RouteNotCached), producer.client.cache_only():
            producer.send_async(Message(TOPIC, b"x"))

    with_producer(broker, scenario)
    assert broker.frames == []


def test_a_send_after_the_producer_closed_fails_instead_of_hanging(broker: FakeBroker):
    async def scenario(producer: LoopProducer) -> BaseException | None:
        await producer._streams.close()
        await asyncio.to_thread(producer.close)
        try:
            await asyncio.wait_for(asyncio.wrap_future(producer.send_async(Message(TOPIC, b"x"))), 5)
        except MQClientError as exc:
            return exc
        return None

    error = with_producer(broker, scenario)
    assert error is not None and "FAILED_PRECONDITION" in str(error)


def test_a_send_in_cache_only_whose_broker_needs_a_fresher_route_fails_at_once_with_nothing_sent(broker: FakeBroker):
    async def scenario(producer: LoopProducer) -> BaseException | None:
        cached_at, route = producer.client._routes[TOPIC]
        producer.client._routes[TOPIC] = (cached_at - 1, route)  # older than a degraded group's route may be
        producer.client.down.mark(broker.addr)  # its master marked down: the producer would look at a fresher route
        with producer.client.cache_only():
            future = producer.send_async(Message(TOPIC, b"x"))
        assert future.done()  # not retried elsewhere: the caller sends again outside cache_only
        return future.exception()

    assert isinstance(with_producer(broker, scenario, retry_times=2), RouteNotCached)
    assert broker.frames == []

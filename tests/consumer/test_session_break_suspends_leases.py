"""Orderly members and broken sessions: the broker frees a member's leases when its session ends (a blip, a broker
restart), and another member may lock the queues at once; the member kept consuming them for up to 30 s on the leases
it trusted, beside the new owner (20 messages handled twice, out of order). A broken session (not a closed one)
suspends every lease of the member until it is renewed, after the session is open again."""

import threading
from collections.abc import Iterator
from typing import Any, cast

import grpc

from client import ConsumeResult, PushConsumer
from client.client_instance import ClientInstance
from client.consumer.consumer_sessions import BrokerSession
from client.consumer.process_queue import ProcessQueue
from common.message_queue import MessageQueue
from proto import consumer_pb2


class Broken(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "Socket closed"


class BreakingStub:
    """ConsumerSession streams that break as soon as they are read."""

    def ConsumerSession(self, frames: Iterator[consumer_pb2.HeartbeatFrame]) -> Any:
        def notices() -> Iterator[consumer_pb2.GroupNotice]:
            raise Broken()
            yield  # (a generator)
        return notices()


class Client:
    def stub(self, stub_class: object, addr: str) -> BreakingStub:
        return BreakingStub()


def test_a_broken_session_is_reported_with_its_broker_and_a_closed_one_is_not() -> None:
    broken: list[str] = []
    reported = threading.Event()

    def on_broken(addr: str) -> None:
        broken.append(addr)
        reported.set()

    session = BrokerSession(cast(ClientInstance, Client()), "10.0.0.9:10911", consumer_pb2.HeartbeatFrame,
                            lambda notice: None, 30.0, on_broken)
    assert reported.wait(5)
    session.close()
    assert broken[0] == "10.0.0.9:10911"


def test_a_broken_session_suspends_an_orderly_members_leases_until_renewed() -> None:
    consumer = PushConsumer("127.0.0.1:1", group="orderly-g", topic="T", orderly=True,
                            handler=lambda msg: ConsumeResult.SUCCESS)
    try:
        mqs = [MessageQueue("T", "broker-a", i) for i in range(2)]
        for mq in mqs:
            pq = ProcessQueue(mq, 0)
            pq.locked = True
            consumer.rebalance_impl.process_queues[mq] = pq
        consumer._on_session_broken("10.0.0.9:10911")
        assert not any(pq.locked for pq in consumer.rebalance_impl.process_queues.values())
        assert consumer._renew_soon.is_set()  # the lease loop asks again once the session is open
    finally:
        consumer.close()

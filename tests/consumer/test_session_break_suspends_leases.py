"""Orderly members and broken sessions: the broker frees a member's leases when its session ends (a blip, a broker
restart), and another member may lock the queues at once; the member kept consuming them for up to 30 s on the leases
it trusted, beside the new owner (20 messages handled twice, out of order). A session that broke (not a closed one,
nor a reopen refused by a broker still down) suspends the member's leases at that broker until they are renewed,
after the session is open again."""

import time
from collections.abc import Iterator
from typing import Any, cast

import grpc

from client import ConsumeResult, PushConsumer
from client.client_instance import ClientInstance
from client.consumer import consumer_sessions
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
    """ConsumerSession streams: the first lives ``first_s`` then breaks; every later one is refused at once (a broker
    still down)."""

    def __init__(self, first_s: float) -> None:
        self.opened = 0
        self.first_s = first_s

    def ConsumerSession(self, frames: Iterator[consumer_pb2.HeartbeatFrame]) -> Any:
        self.opened += 1
        lives = self.first_s if self.opened == 1 else 0.0

        def notices() -> Iterator[consumer_pb2.GroupNotice]:
            time.sleep(lives)
            raise Broken()
            yield  # (a generator)
        return notices()


class Client:
    def __init__(self, stub: BreakingStub) -> None:
        self._stub = stub

    def stub(self, stub_class: object, addr: str) -> BreakingStub:
        return self._stub


def test_a_session_that_broke_is_reported_once_not_at_every_refused_reopen(monkeypatch) -> None:
    """Each failed reopen (about one a second while the broker is down) suspended the member's leases again, before
    their renewal could come: one dead broker throttled every orderly queue for minutes."""
    monkeypatch.setattr(consumer_sessions, "REOPEN_PAUSE_S", 0.05)
    broken: list[str] = []
    stub = BreakingStub(first_s=0.2)
    session = BrokerSession(cast(ClientInstance, Client(stub)), "10.0.0.9:10911", consumer_pb2.HeartbeatFrame,
                            lambda notice: None, 30.0, broken.append)
    deadline = time.monotonic() + 5
    while stub.opened < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    session.close()
    assert stub.opened >= 6 and broken == ["10.0.0.9:10911"]


def test_a_broken_session_suspends_the_orderly_leases_held_at_that_broker_only() -> None:
    consumer = PushConsumer("127.0.0.1:1", group="orderly-g", topic="T", orderly=True,
                            handler=lambda msg: ConsumeResult.SUCCESS)
    try:
        addrs = {"broker-a": "10.0.0.9:10911", "broker-b": "10.0.0.8:10911"}
        consumer.calls.lock_addr = lambda mq: addrs[mq.broker_name]  # type: ignore[method-assign]
        for broker in addrs:
            for i in range(2):
                pq = ProcessQueue(MessageQueue("T", broker, i), 0)
                pq.locked = True
                consumer.rebalance_impl.process_queues[pq.mq] = pq
        consumer._on_session_broken("10.0.0.9:10911")
        locked = {mq.broker_name: pq.locked for mq, pq in consumer.rebalance_impl.process_queues.items()}
        assert locked == {"broker-a": False, "broker-b": True}
        assert consumer._renew_soon.is_set()  # the lease loop asks again once the session is open
    finally:
        consumer.close()

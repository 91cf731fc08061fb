"""The push consumer on a static topic against fake brokers: logic queues, remaps, a queue without leader."""

import threading
import time

from client.push_consumer import PushConsumer
from common.message import MessageExt
from tests.client.fakes import FakeCluster, FakeStaticTopic

T = "StaticT"


def wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


class Collector:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[int, int, bytes]] = []

    def __call__(self, msg: MessageExt) -> None:
        with self.lock:
            self.seen.append((msg.queue_id, msg.queue_offset, msg.body))

    def of(self, queue_id: int) -> list[tuple[int, bytes]]:
        with self.lock:
            return [(o, b) for q, o, b in self.seen if q == queue_id]


def make(fake: FakeCluster, handler: Collector) -> PushConsumer:
    push = PushConsumer("fake-namesrv:9876", group="cg", topic=T, handler=handler, consume_from_first=True)
    fake.install(push.consumer.client)
    return push


def test_push_follows_a_logic_queue_across_a_remap():
    fake = FakeCluster("broker-a", "broker-b")
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-b"})
    topic.append(0, b"a0", b"a1")
    topic.append(1, b"x0")
    got = Collector()
    push = make(fake, got)
    with push:
        wait_for(lambda: len(got.of(0)) == 2 and len(got.of(1)) == 1)
        topic.remap(0, "broker-b", logic_start=10_000)  # the consumer's cached route still says broker-a
        topic.append(0, b"b0", b"b1")
        wait_for(lambda: len(got.of(0)) == 4)
    assert got.of(0) == [(0, b"a0"), (1, b"a1"), (10_000, b"b0"), (10_001, b"b1")]
    assert got.of(1) == [(0, b"x0")]
    assert topic.offsets == {("cg", 0): 10_002, ("cg", 1): 1}  # committed in logic offsets on close


def test_push_starts_a_queue_without_leader_once_it_gets_one():
    fake = FakeCluster("broker-a", "broker-b")
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-b"})
    topic.unled = {1}
    topic.append(0, b"a0")
    topic.append(1, b"x0")
    got = Collector()
    with make(fake, got):
        wait_for(lambda: len(got.of(0)) == 1)
        assert got.of(1) == []
        topic.unled = set()  # broker-b leads queue 1 again
        wait_for(lambda: len(got.of(1)) == 1)
    assert got.of(1) == [(0, b"x0")]

"""POP on a static topic: the leaders pop their logic queues (reading older items on other brokers), messages
carry logic queue ids and offsets, and a group keeps going across a remap: every message delivered, none lost."""

import time
from collections import Counter
from collections.abc import Iterator

import pytest

from client import Message, MQClientError, Producer, SimpleConsumer
from tests.statictopic.cluster_fixture import StaticCluster, make_static_cluster
from tests.statictopic.test_static_topic_cluster import create, remap


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticCluster]:
    c = make_static_cluster(tmp_path_factory.mktemp("pop-static"))
    yield c
    c.stop()


def receive_all(consumer: SimpleConsumer, got: Counter, expected: int, ack_every: bool = True) -> list:
    seen: list = []
    errors: list[str] = []

    def done() -> bool:
        try:
            batch = consumer.receive(32, invisible_ms=20_000, wait_ms=100)
        except MQClientError as exc:  # a route moment during a remap: ask again (and say so if it lasts)
            errors.append(str(exc))
            return False
        for m in batch:
            got[m.body] += 1
        seen.extend(batch)
        if batch and ack_every:
            consumer.ack(batch)
        return sum(got.values()) >= expected

    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, f"{sum(got.values())} of {expected} popped; last error: {errors[-1:]}"
    return seen


def test_pop_on_a_static_topic_follows_a_remap(cluster: StaticCluster):
    topic, group = "PopStaticT", "pop-static"
    create(cluster, topic, 4, ["broker-a", "broker-b"])
    before = [f"before-{i}".encode() for i in range(120)]
    after = [f"after-{i}".encode() for i in range(120)]
    got: Counter = Counter()
    with Producer(cluster.addr) as producer, SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        for i, body in enumerate(before):
            producer.send(Message(topic, body), sharding_key=str(i))
        first = receive_all(consumer, got, 40)  # some consumed and acked before the remap, the rest left behind
        assert {m.queue_id for m in first} <= {0, 1, 2, 3}  # logic queue ids
        remap(cluster, topic, ["broker-c"])
        for i, body in enumerate(after):
            producer.send(Message(topic, body), sharding_key=str(i))
        receive_all(consumer, got, len(before) + len(after))
    assert set(got) == set(before) | set(after)  # the rest of the older items came from their brokers
    assert max(got.values()) == 1

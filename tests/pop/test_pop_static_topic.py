"""POP on a static topic: the leaders pop their logic queues (reading older items on other brokers), messages
carry logic queue ids and offsets, and a group keeps going across a remap: every message delivered, none lost."""

import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Admin, Message, MQClientError, Producer, SimpleConsumer
from tests.statictopic.cluster_fixture import StaticCluster, make_static_cluster
from tests.statictopic.test_drain_and_rebalance import leaders
from tests.statictopic.test_static_topic_cluster import create, epoch_of, remap


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


def test_a_tag_filter_passes_a_tail_of_other_tags_without_spinning(cluster: StaticCluster):
    """Messages of other tags at the end of a static topic's logic queue: the read past them was answered as the
    queue's end, so the group's offset stayed before them for good (lag that never cleared) and each long poll woke at
    once, popping in a loop for its whole wait (a core of the broker; the POP-static review)."""
    topic, group = "PopStaticTagTail", "pop-static-tags"
    create(cluster, topic, 1, ["broker-a"])
    with Producer(cluster.addr) as producer, SimpleConsumer(cluster.addr, group=group, topic=topic,
                                                            tags="A") as consumer:
        producer.send(Message(topic, b"a0", tags="A"))
        receive_all(consumer, Counter(), 1)
        for i in range(50):
            producer.send(Message(topic, b"b%d" % i, tags="B"))
        pid = cluster.brokers["broker-a"].proc.pid
        before = cpu_seconds(pid)
        assert consumer.receive(32, invisible_ms=20_000, wait_ms=3000) == []
        assert cpu_seconds(pid) - before < 0.5  # a long poll that waits, not a loop of pops (about 3 s of CPU)
        with Admin(cluster.addr) as admin:
            [progress] = admin.consumer_progress(group, topic)
        assert progress.consumer_offset == progress.broker_offset == 51  # past the other tags' messages


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_static_topic_is_received_while_a_moved_queue_s_old_broker_is_down(tmp_path: Path):
    """A logic queue moved from broker-a to broker-b, then broker-a died: every receive at broker-b was refused
    SYSTEM_BUSY (the group's offset and the queue's start asked of broker-a at each pop), for the queue that never
    moved too, for as long as broker-a stayed down (the POP-static review: 0 of 20 received). The queue that never
    moved is received; the moved one, whose group's position is on broker-a, once broker-a is back."""
    c = make_static_cluster(tmp_path, staticTopicCleanInterval=300)
    try:
        topic, group = "PopStaticOldDown", "pop-old-down"
        create(c, topic, 2, ["broker-a", "broker-b"])
        with Producer(c.addr) as producer, SimpleConsumer(c.addr, group=group, topic=topic) as consumer:
            for i in range(20):
                producer.send(Message(topic, b"before-%d" % i), sharding_key=str(i))
            receive_all(consumer, Counter(), 20)
            with Admin(c.addr) as admin:
                moved = next(q for q, b in leaders(admin, topic).items() if b == "broker-a")
                admin.migrate_logical_queue(topic, moved, "broker-b")
            c.wait_route_epoch(topic, epoch_of(c, topic))
            c.brokers["broker-a"].stop()  # (a SIGKILL may lose its last offset commits: those messages come again)
            sent = {body: producer.send(Message(topic, body), sharding_key=str(i)).queue.queue_id
                    for i, body in enumerate(b"after-%d" % i for i in range(20))}
            unmoved = {body for body, q in sent.items() if q != moved}
            assert unmoved and len(unmoved) < len(sent)
            got: Counter = Counter()
            receive_all(consumer, got, len(unmoved))
            assert set(got) == unmoved  # (0 before: every receive refused)
            c.start_broker("broker-a")
            receive_all(consumer, got, len(sent))
        assert set(got) == set(sent) and max(got.values()) == 1
    finally:
        c.stop()

"""A consumer group on a static topic: members split the logic queues, and keep consuming across a remap."""

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from client import Admin, Message, MessageQueue, Producer, PullConsumer, PushConsumer
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from tests.cluster import wait_until
from tests.statictopic.cluster_fixture import StaticCluster, make_static_cluster
from tests.statictopic.test_static_topic_cluster import create, remap


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticCluster]:
    c = make_static_cluster(tmp_path_factory.mktemp("static-group"))
    yield c
    c.stop()


class Collector:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, msg) -> None:
        assert msg.topic == "StaticGroupT"
        with self._lock:
            self.bodies.append(msg.body)


def test_members_split_logic_queues_and_follow_a_remap(cluster: StaticCluster):
    topic, group = "StaticGroupT", "static-members"
    create(cluster, topic, 4, ["broker-a", "broker-b"])
    handlers = [Collector(), Collector()]
    members = [PushConsumer(cluster.addr, group=group, topic=topic, handler=h, consume_from_first=True)
               for h in handlers]
    for m in members:
        m.start()
    try:
        def logic_held(m: PushConsumer) -> list[int]:
            return sorted(q.queue_id for q in m.assigned_queues() if q.topic == topic)

        wait_until(lambda: [logic_held(m) for m in members] == [[0, 1], [2, 3]] or
                   [logic_held(m) for m in members] == [[2, 3], [0, 1]], timeout=15, what="a 2/2 split")
        assert all(q.broker_name == LOGICAL_QUEUE_MOCK_BROKER_NAME for m in members for q in m.assigned_queues()
                   if q.topic == topic)
        sent: list[bytes] = []
        with Producer(cluster.addr) as producer:
            def produce(tag: str) -> None:
                for i in range(200):
                    body = f"{tag}-{i}".encode()
                    producer.send(Message(topic, body), sharding_key=str(i))
                    sent.append(body)

            produce("before")
            remap(cluster, topic, ["broker-c"])
            produce("after")
        wait_until(lambda: len(handlers[0].bodies) + len(handlers[1].bodies) >= len(sent), timeout=30,
                   what="every message")
        got = Counter(b for h in handlers for b in h.bodies)
        assert set(got) == set(sent) and max(got.values()) == 1
        with Admin(cluster.addr) as admin:
            assert sorted(m.client_id for m in admin.consumer_connection(group)) == sorted(m.client_id for m in members)
    finally:
        for m in members:
            m.close()


def test_a_push_consumer_parked_on_the_old_leader_follows_a_remap_at_once(cluster: StaticCluster):
    """A pull parked in a long poll on the physical queue a remap fenced got no arrival there again: every push
    consumer of the topic stalled for the rest of its long poll after each remap (12.6 s of a 15 s poll in the static
    topics review). The mapping update wakes the topic's parked pulls, which then hear where the queue went."""
    topic = "StaticParkedT"
    create(cluster, topic, 1, ["broker-a"])
    seen: dict[bytes, float] = {}
    consumer = PushConsumer(cluster.addr, group="static-parked", topic=topic, consume_from_first=True,
                            long_poll_ms=30_000, handler=lambda msg: seen.setdefault(msg.body, time.monotonic()))
    consumer.start()
    try:
        with Producer(cluster.addr) as producer:
            producer.send(Message(topic, b"before"))
            wait_until(lambda: b"before" in seen, timeout=20, what="the message before the remap")
            time.sleep(1)  # the consumer's next pull is parked on broker-a's queue now
            remap(cluster, topic, ["broker-b"])
            remapped = time.monotonic()
            producer.send(Message(topic, b"after"))
            wait_until(lambda: b"after" in seen, timeout=40, what="the message after the remap")
        assert seen[b"after"] - remapped < 10, f"consumed {seen[b'after'] - remapped:.1f} s after the remap"
    finally:
        consumer.close()


def test_an_orderly_queue_moved_while_its_member_consumes_is_not_given_to_another_at_once(cluster: StaticCluster):
    """Member A consumes logic queue 1 (3 s a message); the queue moves to broker-b, and member B joins and is given
    it. The new leader had no lease for it and granted B at once while A was still in a call under its lease at the
    old leader: B handled queue 1's messages during A's call, again and out of order (the push-static review: 10
    overlapping handlings). It asks the old leader who holds the queue first: B waits until A lets go."""
    topic, group = "StaticOrderlyMoveT", "static-orderly-move"
    create(cluster, topic, 2, ["broker-a"])
    calls: list[tuple[str, int, bytes, float, float]] = []  # member, logic queue, body, start, end
    lock = threading.Lock()

    def handler(name: str, slow_s: float):
        def handle(msg) -> None:
            start = time.monotonic()
            if msg.queue_id == 1:
                time.sleep(slow_s)
            with lock:
                calls.append((name, msg.queue_id, msg.body, start, time.monotonic()))
        return handle

    with Producer(cluster.addr) as producer:
        for i in range(4):
            for q in (0, 1):
                producer.send(Message(topic, b"q%d-%d" % (q, i)),
                              queue=MessageQueue(topic, LOGICAL_QUEUE_MOCK_BROKER_NAME, q))
    a = PushConsumer(cluster.addr, group=group, topic=topic, orderly=True, consume_from_first=True,
                     handler=handler("A", 3.0))
    b = PushConsumer(cluster.addr, group=group, topic=topic, orderly=True, consume_from_first=True,
                     handler=handler("B", 0.0))
    a.start()
    try:
        wait_until(lambda: any(c[0] == "A" and c[1] == 1 for c in calls), timeout=30, what="A in a call on queue 1")
        remap(cluster, topic, ["broker-b"])
        b.start()
        wait_until(lambda: {c[2] for c in calls if c[1] == 1} >= {b"q1-%d" % i for i in range(4)}, timeout=60,
                   what="every message of queue 1")
    finally:
        b.close()
        a.close()
    queue_1 = [c for c in calls if c[1] == 1]
    overlapping = [(x[2], y[2]) for x in queue_1 if x[0] == "A" for y in queue_1
                   if y[0] == "B" and y[3] < x[4] and y[4] > x[3]]
    assert overlapping == [], overlapping
    in_time = [c[2] for c in sorted(queue_1, key=lambda c: c[3])]
    assert in_time == sorted(in_time), in_time  # in order, each once it was committed


def test_consumer_progress_shows_the_live_brokers_while_an_older_link_s_broker_is_down(tmp_path):
    """consumerProgress -t of a static topic failed whole ("UNAVAILABLE", exit 1) while the broker of an older link
    was down, though the leader holding the progress answered (the push-static review): the answering brokers'
    rows are shown, and the unreachable broker is named below them."""
    from tests.admin_cli.helpers import mqadmin, ok

    c = make_static_cluster(tmp_path, staticTopicCleanInterval=300)
    try:
        topic, group = "StaticProgressDownT", "static-progress-down"
        create(c, topic, 1, ["broker-a"])
        with Producer(c.addr) as producer:
            producer.send(Message(topic, b"on-a"))
            remap(c, topic, ["broker-b"])
            producer.send(Message(topic, b"on-b"))
        with PullConsumer(c.addr, group=group) as consumer:
            [mq] = consumer.queues(topic)
            consumer.commit(mq, 2)
        c.brokers["broker-a"].stop(signal.SIGKILL)  # still registered for a while: its route names it
        out = ok(c.addr, "consumerProgress", "-g", group, "-t", topic)
        assert "broker-b" in out and "broker broker-a unreachable (its queues are not shown)" in out, out
        as_json = mqadmin(c.addr, "--json", "consumerProgress", "-g", group, "-t", topic)
        assert as_json.returncode == 0 and {row["broker_name"] for row in json.loads(as_json.stdout)} == {"broker-b"}
        assert "broker broker-a unreachable" in as_json.stderr  # a script reading the rows is told
    finally:
        c.stop()

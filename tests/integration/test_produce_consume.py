"""Produce and consume through real daemons; restarts (SIGTERM, and SIGKILL under SYNC_FLUSH) lose nothing."""

import json
import signal
from collections import defaultdict
from pathlib import Path

import pytest

from client import Message, MessageQueue, Producer, PullConsumer, PullStatus
from tests.cluster import wait_until
from tests.integration.conftest import Cluster, make_cluster


def produce(addr: str, topic: str, n: int, start: int = 0, batch: int = 50) -> set[bytes]:
    sent = set()
    with Producer(addr) as producer:
        for i in range(start, start + n, batch):
            bodies = [f"{topic}-{j}".encode() for j in range(i, min(i + batch, start + n))]
            producer.send_batch([Message(topic, b, keys=[b.decode()]) for b in bodies])
            sent.update(bodies)
    return sent


def consume_all(consumer: PullConsumer, topic: str, start: dict[MessageQueue, int] | None = None,
                commit: bool = True) -> dict[MessageQueue, list[tuple[int, bytes]]]:
    """Drain every queue from ``start`` (else the committed offset, else 0); per queue (offset, body)."""
    out: dict[MessageQueue, list[tuple[int, bytes]]] = defaultdict(list)
    for mq in consumer.queues(topic):
        offset = (start or {}).get(mq, max(consumer.committed(mq), 0))
        while True:
            result = consumer.pull(mq, offset, 64)
            if result.status is not PullStatus.FOUND:
                assert result.status is PullStatus.NO_NEW_MSG, result.status
                break
            out[mq] += [(m.queue_offset, m.body) for m in result.messages]
            offset = result.next_begin_offset
            if commit:
                consumer.commit(mq, offset)
    return out


def wait_visible(consumer: PullConsumer, topic: str, total: int) -> None:
    """An acknowledged send is in the commitlog; consumers see it once the reput dispatched it, a moment later
    (longer on a busy machine): wait until the topic's queues hold ``total`` messages."""
    wait_until(lambda: sum(consumer.max_offset(mq) for mq in consumer.queues(topic)) == total,
               what=f"{total} messages of {topic} dispatched")


def assert_in_order(per_queue: dict[MessageQueue, list[tuple[int, bytes]]]) -> None:
    for mq, items in per_queue.items():
        offsets = [o for o, _ in items]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"{mq} not contiguous"


def bodies(per_queue: dict[MessageQueue, list[tuple[int, bytes]]]) -> list[bytes]:
    return [b for items in per_queue.values() for _, b in items]


def test_10k_messages_each_read_once_and_restart_resumes(cluster: Cluster):
    topic = "ExactlyOnceT"
    cluster.create_topic(topic, queues=4)
    sent = produce(cluster.addr, topic, 10_000)
    with PullConsumer(cluster.addr, group="eo-group") as consumer:
        assert len(consumer.queues(topic)) == 8
        wait_visible(consumer, topic, 10_000)
        first = consume_all(consumer, topic)
        assert_in_order(first)
        got = bodies(first)
        assert len(got) == len(set(got)) == 10_000 and set(got) == sent
        assert {mq.broker_name for mq in first} == {"broker-a", "broker-b"}

    assert cluster.brokers["broker-a"].stop(signal.SIGTERM) == 0
    cluster.start_broker("broker-a")
    more = produce(cluster.addr, topic, 2_000, start=10_000)
    with PullConsumer(cluster.addr, group="eo-group") as consumer:
        wait_until(lambda: len(consumer.queues(topic)) == 8, what="broker-a back in the route")
        wait_visible(consumer, topic, 12_000)
        second = consume_all(consumer, topic)
        assert_in_order(second)
        assert sorted(bodies(second)) == sorted(more)  # resumed from the committed offsets: nothing twice
        again = consume_all(consumer, topic, start={mq: 0 for mq in consumer.queues(topic)}, commit=False)
        assert set(bodies(again)) == sent | more  # nothing acknowledged was lost across the restart


def _offsets_on_disk(store_root: Path, group: str, topic: str) -> dict[int, int]:
    path = store_root / "config" / "consumerOffset.json"
    if not path.exists():
        return {}
    table = json.loads(path.read_text())["offsetTable"]
    return {int(q): o for q, o in table.get(f"{topic}@{group}", {}).items()}


@pytest.mark.slow
def test_sigkill_under_sync_flush_loses_nothing(tmp_path: Path, store_type: str):
    cluster = make_cluster(tmp_path, flushDiskType="SYNC_FLUSH", flushConsumerOffsetInterval=100,
                           registerNameServerPeriod=500, storeType=store_type)
    try:
        topic = "SyncKillT"
        cluster.create_topic(topic, queues=2)
        sent = produce(cluster.addr, topic, 3_000, batch=20)
        with PullConsumer(cluster.addr, group="kill-group") as consumer:
            half = {mq: consumer.max_offset(mq) // 2 for mq in consumer.queues(topic)}
            for mq, offset in half.items():
                consumer.commit(mq, offset)
        store_a = tmp_path / "broker-a" / "store"
        expected = {mq.queue_id: o for mq, o in half.items() if mq.broker_name == "broker-a"}
        if store_type == "default":  # JSON offsets reach disk on a timer; RocksDB writes each commit at once
            wait_until(lambda: _offsets_on_disk(store_a, "kill-group", topic) == expected, what="offsets persisted")

        cluster.brokers["broker-a"].kill()
        cluster.start_broker("broker-a")
        more = produce(cluster.addr, topic, 500, start=3_000, batch=20)
        with PullConsumer(cluster.addr, group="kill-group") as consumer:
            wait_until(lambda: len(consumer.queues(topic)) == 4, what="broker-a back in the route")
            for mq, offset in half.items():
                assert consumer.committed(mq) == offset
            rest = consume_all(consumer, topic)
            assert_in_order(rest)
            everything = consume_all(consumer, topic, start={mq: 0 for mq in consumer.queues(topic)}, commit=False)
        assert set(bodies(everything)) == sent | more
        assert len(bodies(everything)) == len(sent | more)
        assert min(o for items in rest.values() for o, _ in items[:1]) > 0  # resumed mid-queue, not from 0
    finally:
        cluster.stop()


def test_a_consumer_at_an_offset_of_a_deleted_topic_reads_the_topic_made_again_from_its_first_message(
        cluster: Cluster):
    """deleteTopic and updateTopic again while a consumer holds its position (a push consumer's, in memory): its
    next pull came after the first new messages were stored and moved it to their end; it never read them."""
    from client import Admin

    topic = "RemadeT"
    cluster.create_topic(topic, 1)
    produce(cluster.addr, topic, 30)
    with PullConsumer(cluster.addr, group="remade") as consumer:
        wait_until(lambda: sum(consumer.max_offset(mq) for mq in consumer.queues(topic)) == 30,
                   what="30 messages dispatched")
        ends = {mq: len(got) for mq, got in consume_all(consumer, topic, commit=False).items()}
        assert sum(ends.values()) == 30 and max(ends.values()) > 6
        with Admin(cluster.addr) as admin:
            admin.delete_topic(topic, "DefaultCluster")
            wait_until(lambda: topic not in admin.topic_list(), what=f"{topic} deleted")
        cluster.create_topic(topic, 1)
        new = produce(cluster.addr, topic, 6, start=100, batch=1)
        wait_until(lambda: sum(consumer.max_offset(mq) for mq in consumer.queues(topic)) == 6,
                   what="the new messages dispatched")
        got: set[bytes] = set()
        for mq in consumer.queues(topic):
            if ends.get(mq, 0) > consumer.max_offset(mq):
                moved = consumer.pull(mq, ends[mq], 32)  # where the consumer was
                assert (moved.status, moved.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 0)  # was the new end
            got |= {m.body for m in consumer.pull(mq, 0, 32).messages}
        assert got == new

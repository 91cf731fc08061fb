"""A static topic's messages read through a logic queue whose older item is on another broker are counted once, by
the leader the consumer asked: the older item's broker counted them too (messages out and statsAll), so every message
of an older item was counted twice (the metrics review: 130 for 80 consumed)."""

import uuid
from collections.abc import Iterator

import pytest

from client import Message, Producer, PullConsumer
from tests.cluster import wait_until
from tests.metrics.test_metrics_daemons import PROM, metrics_port, scrape
from tests.statictopic.cluster_fixture import StaticCluster, make_static_cluster
from tests.statictopic.test_static_topic_cluster import create, drain, remap


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticCluster]:
    c = make_static_cluster(tmp_path_factory.mktemp("static-metrics"), **PROM)
    yield c
    c.stop()


def test_a_remapped_logic_queue_is_counted_once(cluster: StaticCluster) -> None:
    topic, group = f"StaticM_{uuid.uuid4().hex[:6]}", f"StaticMG_{uuid.uuid4().hex[:6]}"
    create(cluster, topic, 1, ["broker-a"])
    with Producer(cluster.addr) as producer:
        for i in range(5):
            producer.send(Message(topic, b"before-%d" % i))
        remap(cluster, topic, ["broker-b"])
        for i in range(3):
            producer.send(Message(topic, b"after-%d" % i))
    with PullConsumer(cluster.addr, group=group) as consumer:
        (mq,) = consumer.queues(topic)
        wait_until(lambda: len(drain(consumer, mq, 0)[0]) == 8, what="all 8 messages readable")
    ports = {name: metrics_port(daemon) for name, daemon in cluster.brokers.items()}
    out = {name: scrape(port).value("rocketmq_messages_out_total", topic=topic, consumer_group=group)
           for name, port in ports.items()}
    assert sum(out.values()) == out["broker-b"] >= 8, out

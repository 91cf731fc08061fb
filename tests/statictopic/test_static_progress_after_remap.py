"""A static topic's progress and lag after a remap: a group that read everything and committed on the new link
shows no lag on the old one. Each link's broker reports its physical queue on its own (consumerProgress, the
``rocketmq_consumer_lag_messages`` gauge, statsAll), and the offset the group left on the old link showed as lag
until that link was cleaned (fileReservedTime, 72 h): once the group commits on a newer link, the older links count
as consumed to their ends. A rewind into the old link shows there again."""

import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from client import Message, Producer, PullConsumer
from common.message_queue import MessageQueue
from tests.admin_cli.helpers import ok_json
from tests.cluster import Daemon, wait_until
from tests.statictopic.cluster_fixture import StaticCluster, make_static_cluster
from tests.statictopic.test_static_topic_cluster import create, drain, remap

PROM = {"metricsExporterType": "PROM", "metricsPromExporterPort": 0}
TOPIC = "StaticProgressT"
GROUP = "static-progress-g"


def lag_metric(daemon: Daemon) -> float:
    """The broker's ``rocketmq_consumer_lag_messages`` summed over GROUP's queues of TOPIC."""
    port = int(wait_until(lambda: re.search(r"metrics_exporter_started .*? port=(\d+)", daemon.log()),
                          what="metrics port").group(1))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "rocketmq_consumer_lag_messages" and s.labels.get("consumer_group") == GROUP
               and s.labels.get("topic") == TOPIC)


def progress(cluster: StaticCluster) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(broker, physical queue) -> (broker offset, consumer offset, diff) of ``consumerProgress --json``."""
    rows = ok_json(cluster.addr, "consumerProgress", "-g", GROUP, "-t", TOPIC)
    return {(r["broker_name"], r["queue_id"]): (r["broker_offset"], r["consumer_offset"], r["diff"]) for r in rows}


def stats_lag(cluster: StaticCluster) -> dict[str, int]:
    return {r["broker_name"]: r["lag"] for r in ok_json(cluster.addr, "statsAll", "-t", TOPIC) if r["group"] == GROUP}


def test_a_group_that_read_past_a_remap_shows_no_lag_on_the_old_link(tmp_path: Path) -> None:
    cluster = make_static_cluster(tmp_path, **PROM)
    try:
        create(cluster, TOPIC, 1, ["broker-a"])
        mq = MessageQueue(TOPIC, "__logical_queue_broker__", 0)
        with Producer(cluster.addr) as producer:
            for i in range(10):
                producer.send(Message(TOPIC, b"a%d" % i))
        with PullConsumer(cluster.addr, group=GROUP) as consumer:
            wait_until(lambda: consumer.max_offset(mq) == 10, what="10 messages dispatched")
            consumer.commit(mq, 4)
        remap(cluster, TOPIC, ["broker-b"])
        with Producer(cluster.addr) as producer:
            sent = [producer.send(Message(TOPIC, b"b%d" % i)) for i in range(5)]
        end = sent[-1].queue_offset + 1
        with PullConsumer(cluster.addr, group=GROUP) as consumer:
            wait_until(lambda: consumer.max_offset(mq) == end, what="the new link's messages dispatched")
            read, next_offset = drain(consumer, mq, consumer.committed(mq))
            assert next_offset == end and len(read) == 6 + 5
            consumer.commit(mq, end)
            assert consumer.committed(mq) == end

        old = ("broker-a", 0)  # the logic queue's first link: physical queue 0 of broker-a
        assert progress(cluster)[old] == (10, 10, 0)  # was (10, 4, 6): read long ago, shown as lag
        assert sum(diff for _b, _c, diff in progress(cluster).values()) == 0
        assert lag_metric(cluster.brokers["broker-a"]) == 0 and lag_metric(cluster.brokers["broker-b"]) == 0
        assert stats_lag(cluster) == {"broker-a": 0, "broker-b": 0}

        # A rewind into the old link is the group's offset there again (and the newer link's is forgotten) ...
        with PullConsumer(cluster.addr, group=GROUP) as consumer:
            consumer.commit(mq, 2)
            assert consumer.committed(mq) == 2
        assert progress(cluster)[old] == (10, 2, 8)
        assert lag_metric(cluster.brokers["broker-a"]) == 8
        # ... and reading on past the remap again marks the old link consumed again.
        with PullConsumer(cluster.addr, group=GROUP) as consumer:
            consumer.commit(mq, end)
        assert progress(cluster)[old] == (10, 10, 0)
        assert stats_lag(cluster)["broker-a"] == 0
    finally:
        cluster.stop()

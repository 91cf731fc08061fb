"""What mqadmin reads back for operators matches what happened: brokerStatus/clusterList putTps and getTps on a first
query (messages stored and messages handed out a second, over the last 10 s; getTps counted pull requests, empty
ones too, and both read 0.0 on a first query or after 10 s without one), consumerProgress's Diff never below 0 (as
the lag metric and statsAll), and statsAll counting POP deliveries as it counts pulled messages. Real daemons."""

from collections.abc import Iterator

import pytest

from client import Message, Producer, PullConsumer, SimpleConsumer
from tests.admin_cli.helpers import ok, ok_json, table_lines
from tests.cluster import Cluster, make_cluster, wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("readings"), ("broker-a",))
    try:
        yield c
    finally:
        c.stop()


def runtime(c: Cluster) -> dict[str, str]:
    return {r["key"]: r["value"] for r in ok_json(c.addr, "brokerStatus", "-b", c.brokers["broker-a"].addr)}


def test_tps_reads_right_on_a_first_query_and_get_tps_counts_messages(cluster: Cluster) -> None:
    topic = "ReadingsTps"
    cluster.create_topic(topic, 1)
    with Producer(cluster.addr) as producer:
        producer.send_batch([Message(topic, b"m%d" % i) for i in range(30)])
    with PullConsumer(cluster.addr, group="readings-tps") as consumer:
        mq = consumer.queues(topic)[0]
        wait_until(lambda: consumer.max_offset(mq) == 30, what="30 messages dispatched")
        assert len(consumer.pull(mq, offset=0, max_nums=32).messages) == 30
        for _ in range(5):  # empty pulls hand out nothing
            assert not consumer.pull(mq, offset=30, max_nums=32).messages
    first = runtime(cluster)  # no query before: the rate comes from what the broker counted meanwhile
    assert float(first["putTps"]) == pytest.approx(3.0)  # 30 messages over the 10 s window
    assert float(first["getTps"]) == pytest.approx(3.0)  # 30 messages pulled (6 pull requests)
    row = next(r for r in ok_json(cluster.addr, "clusterList") if r["broker_name"] == "broker-a")
    assert row["put_tps"] == pytest.approx(3.0) and row["get_tps"] == pytest.approx(3.0)


def test_consumer_progress_diff_is_never_negative(cluster: Cluster) -> None:
    topic, group = "ReadingsPastEnd", "readings-past-end"
    cluster.create_topic(topic, 1)
    with Producer(cluster.addr) as producer:
        for i in range(3):
            producer.send(Message(topic, b"z%d" % i))
    with PullConsumer(cluster.addr, group=group) as consumer:
        consumer.commit(consumer.queues(topic)[0], 50)  # past the queue's end (3)
    rows = ok_json(cluster.addr, "consumerProgress", "-g", group)
    assert [(r["broker_offset"], r["consumer_offset"], r["diff"]) for r in rows] == [(3, 50, 0)]  # was -47
    text = ok(cluster.addr, "consumerProgress", "-g", group)
    assert table_lines(text, topic, "3", "50", "0")
    assert "Diff Total: 0" in text
    lag = [r["lag"] for r in ok_json(cluster.addr, "statsAll", "-t", topic) if r["group"] == group]
    assert lag == [0]


def test_stats_all_counts_pop_deliveries(cluster: Cluster) -> None:
    topic, group = "ReadingsPop", "readings-pop"
    cluster.create_topic(topic, 1)
    with Producer(cluster.addr) as producer:
        producer.send_batch([Message(topic, b"p%d" % i) for i in range(8)])
    received = 0
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        deadline_rounds = 50
        while received < 8 and deadline_rounds:
            for msg in consumer.receive(16, invisible_ms=30_000):
                consumer.ack(msg)
                received += 1
            deadline_rounds -= 1
    assert received == 8
    rows = [r for r in ok_json(cluster.addr, "statsAll", "-t", topic) if r["group"] == group]
    assert [r["count_since_boot"] for r in rows] == [8]  # was 0: only pulls were counted
    assert rows[0]["tps"] > 0 and rows[0]["lag"] == 0


def test_consumer_progress_last_time_is_the_last_consumed_messages_store_time_also_after_a_restart(
        cluster: Cluster) -> None:
    topic, group = "ReadingsLastTime", "readings-last-time"
    cluster.create_topic(topic, 1)
    with Producer(cluster.addr) as producer:
        for i in range(3):
            producer.send(Message(topic, b"t%d" % i))
    with PullConsumer(cluster.addr, group=group) as consumer:
        mq = consumer.queues(topic)[0]
        wait_until(lambda: consumer.max_offset(mq) == 3, what="3 messages dispatched")
        stored = [m.store_timestamp for m in consumer.pull(mq, offset=0, max_nums=3).messages]
        consumer.commit(mq, 2)  # consumed offsets 0 and 1

    def last_time() -> int:
        rows = ok_json(cluster.addr, "consumerProgress", "-g", group)
        assert [(r["broker_offset"], r["consumer_offset"]) for r in rows] == [(3, 2)]
        return int(rows[0]["last_timestamp"])

    assert last_time() == stored[1]  # as upstream: when the last consumed message was stored, not when committed
    cluster.brokers["broker-a"].stop()
    cluster.start_broker("broker-a")
    # Read back after the restart (the time was kept in memory only, and read 0 then).
    assert wait_until(lambda: _progress_or_none(cluster, group), timeout=20, what="progress after the restart")
    assert last_time() == stored[1]


def _progress_or_none(cluster: Cluster, group: str) -> bool:
    try:
        return bool(ok_json(cluster.addr, "consumerProgress", "-g", group))
    except AssertionError:
        return False


def test_stats_all_forgets_a_deleted_topics_counts(cluster: Cluster) -> None:
    """A deleted topic's counts stayed (and every statsAll walked them for every topic): the topic made again showed
    the old topic's messages since boot."""
    from client import Admin

    topic, group = "ReadingsDeleted", "readings-deleted"
    cluster.create_topic(topic, 1)
    with Producer(cluster.addr) as producer:
        producer.send_batch([Message(topic, b"d%d" % i) for i in range(4)])
    with PullConsumer(cluster.addr, group=group) as consumer:
        mq = consumer.queues(topic)[0]
        wait_until(lambda: consumer.max_offset(mq) == 4, what="4 messages dispatched")
        assert len(consumer.pull(mq, offset=0, max_nums=32).messages) == 4

    def counts() -> dict[str, int]:
        return {r["group"]: r["count_since_boot"] for r in ok_json(cluster.addr, "statsAll", "-t", topic)}

    assert counts() == {"": 4, group: 4}
    with Admin(cluster.addr) as admin:
        admin.delete_topic(topic, "DefaultCluster")
        wait_until(lambda: topic not in admin.topic_list(), what=f"{topic} deleted")
    cluster.create_topic(topic, 1)
    assert counts() == {"": 0}  # was {"": 4, group: 4}

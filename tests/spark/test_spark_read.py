"""A topic's tier as a Spark DataFrame (issue 8; ``spark_jobs.read.tiered_dataframe`` in one module-scoped
SparkSession on local[2]) holds exactly what a pull consumer reads from offset 0: normal topics, and static topics
in logic queue ids and offsets, also after the logic queues moved to another broker."""

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, MessageQueue, Producer, PullConsumer
from client.results import PullStatus
from common.response_code import ResponseCode
from proto import tiered_pb2, tiered_pb2_grpc
from spark_jobs.broker_tier import S3Access
from spark_jobs.read import SCHEMA, tiered_dataframe
from tests.cluster import Cluster, wait_static_route, wait_until
from tests.spark.conftest import (
    Expected,
    TierBackend,
    broker_addr,
    check_contiguous,
    make_message,
    produce,
    read_queue,
    record,
    snapshot,
    tiered_cluster,
    wait_uploaded,
)

pytestmark = pytest.mark.slow

Row = tuple[int, int, bytes, str, tuple[str, ...], int]  # queue_id, queue_offset, body, tags, keys, store time


@pytest.fixture(scope="module")
def tier_backend() -> TierBackend:
    """posix here; ``test_spark_standalone`` runs these tests on the s3 tier and a standalone Spark cluster."""
    return TierBackend()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, tier_backend: TierBackend) -> Iterator[Cluster]:
    c = tiered_cluster(tmp_path_factory.mktemp("read"), ("broker-a", "broker-b"), **tier_backend.broker_conf())
    try:
        yield c
    finally:
        c.stop()


def send(cluster: Cluster, topic: str, count: int, expected: Expected, first: int) -> None:
    """``count`` messages one by one (the producer spreads them over the queues), bodies of varied sizes."""
    with Producer(cluster.addr) as producer:
        msgs = [make_message(topic, first + i, size=40 + (first + i) * 37 % 1500) for i in range(count)]
        for m, future in [(m, producer.send_async(m)) for m in msgs]:
            record(expected, [m], future.result())


def queue_status(addr: str, topic: str) -> list:
    """One broker's tiered status of ``topic`` (no queues if it has none). Asked per broker, not through
    ``Admin.tiered_status``: that fails for a static topic when a broker holds only an empty mapping."""
    with grpc.insecure_channel(addr) as channel:
        r = tiered_pb2_grpc.TieredServiceStub(channel).GetTieredStatus(tiered_pb2.TieredStatusRequest(topic=topic),
                                                                       timeout=10)
    if r.code == ResponseCode.TOPIC_NOT_EXIST:
        return []
    assert r.code == ResponseCode.SUCCESS, r
    return list(r.queues)


def wait_all_uploaded(cluster: Cluster, topic: str) -> None:
    """Every broker has uploaded every queue of ``topic`` to its tier."""
    def done() -> bool:
        return all(q.upload_lag == 0 and q.tiered_max_offset == q.local_max_offset
                   for d in cluster.brokers.values() for q in queue_status(d.addr, topic))

    wait_until(done, timeout=60, interval=0.1, what=f"upload of {topic}")


def read_from_zero(consumer: PullConsumer, mq: MessageQueue) -> Iterator:
    """Every message of ``mq`` from offset 0 to its max, following the broker's next offsets (a static topic's
    logic offsets jump where a logic queue moved to another broker)."""
    offset, end, last = 0, consumer.max_offset(mq), -1
    while offset < end:
        result = consumer.pull(mq, offset=offset, max_nums=64)
        assert result.status is PullStatus.FOUND, (mq, offset, result.status, result.next_begin_offset)
        for m in result.messages:
            assert last < m.queue_offset < result.next_begin_offset, (mq, last, m.queue_offset)
            last = m.queue_offset
            yield m
        assert result.next_begin_offset > offset, (mq, offset, result.next_begin_offset)
        offset = result.next_begin_offset
    assert offset == end, (mq, offset, end)


def pulled_rows(cluster: Cluster, topic: str) -> list[Row]:
    rows = []
    with PullConsumer(cluster.addr, group=f"read-{topic}") as consumer:
        for mq in consumer.queues(topic):
            for m in read_from_zero(consumer, mq):
                assert m.queue_id == mq.queue_id
                rows.append((m.queue_id, m.queue_offset, m.body, m.tags, tuple(m.keys), m.store_timestamp))
    return sorted(rows)


def dataframe_rows(spark, brokers: list[str], topic: str, s3: S3Access | None = None) -> list[Row]:
    df = tiered_dataframe(spark, brokers, topic, s3)
    assert df.schema == SCHEMA
    out = []
    for r in df.collect():
        assert r.topic == topic
        assert r.properties.get("TAGS") == r.tags
        out.append((r.queue_id, r.queue_offset, bytes(r.body), r.tags, tuple(r.keys), r.store_timestamp))
    return sorted(out)


def check_expected(rows: list[Row], expected: Expected) -> None:
    want = {(q, o): (body, tags, tuple(keys)) for q, msgs in expected.items() for o, (body, tags, keys) in msgs.items()}
    assert {(r[0], r[1]): r[2:5] for r in rows} == want
    assert len(rows) == len(want)


def test_dataframe_of_a_normal_topic_equals_what_a_consumer_reads(spark, cluster: Cluster,
                                                                  tier_backend: TierBackend) -> None:
    topic = "ReadNormal"
    with Admin(cluster.addr) as admin:
        admin.create_topic(topic, brokers=["broker-a"], read_queue_nums=4, write_queue_nums=4)
        wait_until(lambda: topic in admin.topic_list(), what=f"route of {topic}")
    expected: Expected = {}
    send(cluster, topic, 400, expected, 0)
    assert len(expected) == 4
    check_contiguous(expected)
    wait_all_uploaded(cluster, topic)

    pulled = pulled_rows(cluster, topic)
    check_expected(pulled, expected)
    rows = dataframe_rows(spark, [broker_addr(cluster, "broker-a")], topic, tier_backend.access)
    assert rows == pulled


def test_dataframe_of_a_static_topic_has_logic_queues_and_offsets(spark, cluster: Cluster,
                                                                   tier_backend: TierBackend) -> None:
    topic = "ReadStatic"
    expected: Expected = {}
    with Admin(cluster.addr) as admin:
        created = admin.update_static_topic(topic, 4, brokers=["broker-a"])
        # routed once broker-a registers again (broker-b's empty mapping may come first): a send before then
        # finds no leader
        wait_static_route(cluster.addr, topic, created.epoch)
        send(cluster, topic, 120, expected, 0)
        wait_all_uploaded(cluster, topic)
        # the logic queues move to broker-b: their later messages sit there at physical offsets from 0
        moved = admin.remap_static_topic(topic, brokers=["broker-b"])
        wait_static_route(cluster.addr, topic, moved.epoch)
        send(cluster, topic, 120, expected, 120)
        wait_all_uploaded(cluster, topic)
    assert sorted(expected) == [0, 1, 2, 3]
    assert all(len(msgs) > 30 for msgs in expected.values())
    # each logic queue: offsets 0.. on broker-a, then from where the move put them on broker-b
    assert all(min(msgs) == 0 and max(msgs) >= len(msgs) for msgs in expected.values()), \
        {q: (min(m), max(m), len(m)) for q, m in expected.items()}

    pulled = pulled_rows(cluster, topic)
    check_expected(pulled, expected)
    brokers = [broker_addr(cluster, "broker-a"), broker_addr(cluster, "broker-b")]
    rows = dataframe_rows(spark, brokers, topic, tier_backend.access)
    assert rows == pulled


def test_dataframe_after_cleanup_and_compaction_starts_at_the_new_min_offset(spark, tmp_path: Path,
                                                                             tier_backend: TierBackend) -> None:
    """The jobs in this process (they take the session already running): the tier loses its older half to
    expiry and cleanup, the rest is compacted; the DataFrame still equals what a consumer reads from the tier's
    new min offset (reads that start inside a flat file and span merged objects)."""
    from spark_jobs import cleanup, compact

    topic = "ReadCompacted"
    cluster = tiered_cluster(tmp_path, **tier_backend.broker_conf())
    try:
        cluster.create_topic(topic, queues=4)
        addr = broker_addr(cluster)
        expected: Expected = {}
        produce(cluster, topic, 10, expected)
        wait_uploaded(cluster, topic, expected)
        time.sleep(0.05)
        gap_ms = int(time.time() * 1000)
        time.sleep(0.05)
        produce(cluster, topic, 10, expected)
        wait_uploaded(cluster, topic, expected)

        # expire what was stored before the gap (the broker's reserve time is 72 h: ask with a clock that far on)
        with grpc.insecure_channel(addr) as channel:
            marked = tiered_pb2_grpc.TieredServiceStub(channel).MarkExpiredSegments(
                tiered_pb2.MarkExpiredRequest(now_ms=gap_ms + 72 * 3600 * 1000), timeout=30)
        assert marked.code == ResponseCode.SUCCESS and len(marked.segments) > 0, marked
        cleaned = cleanup.run(addr, None, tier_backend.access)
        assert cleaned["expired"] == cleaned["dropped"] == len(marked.segments), cleaned
        compacted = compact.run(addr, None, topic, 1 << 20, 64 << 20, 0.2, True, tier_backend.access)
        assert compacted["groups_merged"] > 0 and compacted["groups_failed"] == 0, compacted

        status = {q.queue_id: q for q in queue_status(addr, topic)}
        assert all(0 < st.tiered_min_offset < st.tiered_max_offset == len(expected[q]) for q, st in status.items())
        snap = snapshot(addr, topic)
        assert any(".c" in Path(s.path).name for s in snap.segments)  # merged objects are read
        pulled = []
        with PullConsumer(cluster.addr, group="read-compacted") as consumer:
            for mq in consumer.queues(topic):
                for m in read_queue(consumer, mq, status[mq.queue_id].tiered_min_offset, len(expected[mq.queue_id])):
                    assert (m.body, m.tags, m.keys) == expected[mq.queue_id][m.queue_offset]
                    pulled.append((m.queue_id, m.queue_offset, m.body, m.tags, tuple(m.keys), m.store_timestamp))
        assert len(pulled) == sum(len(expected[q]) - st.tiered_min_offset for q, st in status.items())
        assert dataframe_rows(spark, [addr], topic, tier_backend.access) == sorted(pulled)
    finally:
        cluster.stop()

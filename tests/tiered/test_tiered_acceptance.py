"""Tiered storage acceptance (issue 7) against real daemons: a consumer from offset 0 reads everything after the
local segments expired, and search by time spans both tiers (crashes: ``test_tiered_crash.py``)."""

import bisect
import re
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from client import Admin, Message, MessageQueue, Producer, PullConsumer
from client.results import PullStatus, SendResult
from tests.cluster import Cluster, make_cluster, wait_until

BROKER = "broker-a"
# expected[queue_id][queue_offset] = (body, key, tag)
Expected = dict[int, dict[int, tuple[bytes, str, str]]]


def tiered_cluster(workdir: Path, **conf: object) -> Cluster:
    settings: dict[str, object] = {
        "tieredStoreEnable": "true",
        "tieredBackendServiceProvider": "posix",
        "mappedFileSizeCommitLog": 1024 * 1024,
        "fileReservedTime": "0.0003",  # ~1 s
        "deleteWhen": "*",
        "cleanResourceInterval": 200,
        "tieredStoreGroupCommitAge": 100,
        "tieredStoreCommitLogMaxSize": 4 * 1024 * 1024,
        "tieredStoreConsumeQueueMaxSize": 28 * 4096,
        "registerNameServerPeriod": 1000,
    }
    settings.update(conf)
    return make_cluster(workdir, (BROKER,), **settings)


def local_commitlog_segments(cluster: Cluster) -> list[Path]:
    return sorted((cluster.workdir / BROKER / "store" / "commitlog").iterdir())


def queue_status(cluster: Cluster, topic: str) -> dict[int, object]:
    with Admin(cluster.addr) as admin:
        (status,) = admin.tiered_status(topic)
    return {q.queue_id: q for q in status.queues}


def wait_expired_and_uploaded(cluster: Cluster, topic: str, queues: int, timeout: float) -> dict[int, object]:
    """Every queue's upload lag is 0, its local min offset moved past 0, and the local commitlog is down to its
    newest segment (which never expires): nothing expires any more while the test reads."""
    def done() -> dict[int, object] | None:
        errors = broker_errors(cluster)
        assert not errors, f"the broker failed while {topic} expired and uploaded:\n{errors}"
        status = queue_status(cluster, topic)
        ok = (len(status) == queues
              and all(q.upload_lag == 0 and q.local_min_offset > 0 and q.tiered_min_offset == 0
                      and q.tiered_max_offset == q.local_max_offset for q in status.values())
              and len(local_commitlog_segments(cluster)) == 1)
        return status if ok else None

    try:
        return wait_until(done, timeout=timeout, interval=0.2, what=f"local expiry and upload of {topic}")
    except TimeoutError as exc:
        queues_now = [(q.local_min_offset, q.local_max_offset, q.tiered_max_offset)
                      for q in queue_status(cluster, topic).values()]
        raise AssertionError(f"{exc}: {len(local_commitlog_segments(cluster))} local segments, queues (local min, "
                             f"local max, tiered max) {queues_now}\n{broker_errors(cluster)}") from None


def broker_errors(cluster: Cluster) -> str:
    """The broker log's ERROR lines and exception messages, for failure messages."""
    lines = cluster.brokers[BROKER].log().splitlines()
    return "\n".join([line for line in lines if " ERROR " in line or re.match(r"\w+(Error|Exception): ", line)][:20])


def send_all(producer: Producer, batches: list[list[Message]], in_flight: int = 16) -> list[SendResult]:
    """Send every batch with up to ``in_flight`` batches outstanding; results in batch order."""
    futures: list[Future[SendResult]] = []
    results: list[SendResult] = []
    for batch in batches:
        futures.append(producer.send_batch_async(batch))
        if len(futures) - len(results) >= in_flight:
            results.append(futures[len(results)].result())
    results += [f.result() for f in futures[len(results):]]
    return results


def record_sent(expected: Expected, batch: list[Message], result: SendResult) -> None:
    queue = expected.setdefault(result.queue.queue_id, {})
    for i, m in enumerate(batch):
        assert result.queue_offset + i not in queue, f"offset {result.queue_offset + i} acknowledged twice"
        queue[result.queue_offset + i] = (m.body, m.key_list()[0], m.tags or "")


def read_queue(consumer: PullConsumer, mq: MessageQueue, end: int) -> Iterator:
    """Every message of ``mq`` from offset 0 up to ``end`` (exclusive), checking offsets are contiguous."""
    offset = 0
    while offset < end:
        result = consumer.pull(mq, offset=offset, max_nums=1024)
        assert result.status is PullStatus.FOUND, (mq, offset, result.status, result.next_begin_offset)
        for m in result.messages:
            assert m.queue_offset == offset, (mq, m.queue_offset, offset)
            offset += 1
            yield m
        assert result.next_begin_offset == offset, (mq, result.next_begin_offset, offset)


# -- 1. a consumer reads everything after local expiry ------------------------------------------------------
@pytest.mark.parametrize(("backend", "store_type"),
                         [("posix", "default"), ("memory", "default"), ("posix", "defaultRocksDB"), ("s3", "default")])
def test_consumer_reads_everything_after_local_expiry(tmp_path: Path, backend: str, store_type: str,
                                                      request: pytest.FixtureRequest) -> None:
    topic, queues, total, batch_size = "TieredAll", 8, 100_000, 256
    backend_conf: dict[str, object] = {"tieredBackendServiceProvider": backend}
    if backend == "s3":  # a real S3-protocol server process (moto's), one bucket for this test
        backend_conf = request.getfixturevalue("s3_server").broker_conf()
    cluster = tiered_cluster(tmp_path, storeType=store_type, **backend_conf)
    try:
        cluster.create_topic(topic, queues=queues)
        batches = [[Message(topic, b"body-%07d-" % i + b"%x" % (i * 2654435761 % 2**32) * 16,
                            tags=f"tag{i % 7}", keys=[f"key-{i}"])
                    for i in range(start, min(start + batch_size, total))]
                   for start in range(0, total, batch_size)]
        expected: Expected = {}
        with Producer(cluster.addr) as producer:
            for batch, result in zip(batches, send_all(producer, batches), strict=True):
                record_sent(expected, batch, result)
        assert sum(map(len, expected.values())) == total
        assert set(expected) == set(range(queues))

        status = wait_expired_and_uploaded(cluster, topic, queues, timeout=90)
        assert all(status[q].local_max_offset == len(expected[q]) for q in range(queues))

        got = 0
        with PullConsumer(cluster.addr, group="tiered-reader") as consumer:
            for mq in consumer.queues(topic):
                want = expected[mq.queue_id]
                assert consumer.min_offset(mq) == 0
                assert consumer.max_offset(mq) == len(want)
                for m in read_queue(consumer, mq, len(want)):
                    body, key, tag = want[m.queue_offset]
                    assert (m.body, m.keys, m.tags, m.topic, m.queue_id) == (body, [key], tag, topic, mq.queue_id), \
                        (mq, m.queue_offset)
                    got += 1
                # past the end: caught up, nothing more
                assert consumer.pull(mq, offset=len(want), max_nums=8).status is PullStatus.NO_NEW_MSG
        assert got == total
        # the read really spanned both tiers: the local store no longer has the start of any queue
        status = queue_status(cluster, topic)
        assert all(q.local_min_offset > 0 for q in status.values())
    finally:
        cluster.stop()


# -- 2. search by time across both tiers ------------------------------------------------------------------
def brute_force_lower(times: list[int], timestamp: int) -> int:
    """First offset stored at or after ``timestamp``; the max offset if none (offsets start at 0)."""
    return bisect.bisect_left(times, timestamp)


@pytest.mark.parametrize(("backend", "store_type"), [("posix", "default"), ("posix", "defaultRocksDB"),
                                                    ("s3", "default")])
def test_search_by_time_across_tiers_matches_brute_force(tmp_path: Path, backend: str, store_type: str,
                                                         request: pytest.FixtureRequest) -> None:
    topic, queues, bursts = "TieredSearch", 4, 40
    backend_conf: dict[str, object] = {"tieredBackendServiceProvider": backend}
    if backend == "s3":
        backend_conf = request.getfixturevalue("s3_server").broker_conf()
    cluster = tiered_cluster(tmp_path, mappedFileSizeCommitLog=64 * 1024, storeType=store_type, **backend_conf)
    try:
        cluster.create_topic(topic, queues=queues)
        gaps: list[int] = []  # wall-clock times between bursts
        with Producer(cluster.addr) as producer:
            mqs = sorted(producer.client.publish_queues(topic, refresh=True), key=lambda q: q.queue_id)
            assert len(mqs) == queues
            n = 0

            def burst(batches_per_queue: int) -> None:
                nonlocal n
                for mq in mqs:
                    for _ in range(batches_per_queue):
                        size = 5 + (n % 11)
                        producer.send_batch([Message(topic, b"s%06d-" % (n + i) + b"y" * 200, keys=[f"s{n + i}"])
                                             for i in range(size)], queue=mq)
                        n += size
                time.sleep(0.025)
                gaps.append(int(time.time() * 1000))
                time.sleep(0.025)

            for _ in range(bursts):
                burst(2)
            wait_expired_and_uploaded(cluster, topic, queues, timeout=60)
            burst(1)  # a tail in the newest local segment: each queue then has messages in both tiers
        status = wait_expired_and_uploaded(cluster, topic, queues, timeout=60)
        spanning = [q for q in status.values() if 0 < q.local_min_offset < q.local_max_offset]
        assert spanning, "no queue spans both tiers"

        with PullConsumer(cluster.addr, group="tiered-search") as consumer:
            checked = 0
            for mq in consumer.queues(topic):
                end = consumer.max_offset(mq)
                times = [m.store_timestamp for m in read_queue(consumer, mq, end)]
                assert len(times) == end > 0
                assert times == sorted(times), f"store times of {mq} go backwards"
                local_min = status[mq.queue_id].local_min_offset
                assert 0 < local_min <= end
                candidates = {0, times[0] - 1000, times[-1] + 1000, int(time.time() * 1000) + 60_000, *gaps}
                for t in set(times):
                    candidates |= {t - 1, t, t + 1}
                # around where the local store takes over
                for q in range(max(0, local_min - 3), min(end, local_min + 3)):
                    candidates |= {times[q] - 1, times[q], times[q] + 1}
                for ts in sorted(candidates):
                    assert consumer.search_offset(mq, ts) == brute_force_lower(times, ts), \
                        (mq, ts, local_min, end)
                    checked += 1
            assert checked > 4 * bursts
    finally:
        cluster.stop()

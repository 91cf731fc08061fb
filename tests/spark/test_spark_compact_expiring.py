"""Compaction while the broker's tier expiry runs: each queue's group began with its oldest sealed segments, the
broker's clean pass marked those EXPIRED while the job ran, and the compare-and-swap refused every group whole: no
run merged anything (``groups_merged=0 groups_changed=4``, run after run). Real PySpark in local mode, in process;
the clean pass is the broker's own (``MarkExpiredSegments``), run with its clock at the moment the old segments
expire, between the job's merge stage and its commits."""

import time
from pathlib import Path

import grpc
import pytest

from client import PullConsumer
from common.response_code import ResponseCode
from proto import tiered_pb2, tiered_pb2_grpc
from spark_jobs import compact
from spark_jobs.broker_tier import EXPIRED
from tests.spark.conftest import (
    Expected,
    broker_addr,
    check_broker_view,
    check_everything,
    produce,
    snapshot,
    tiered_cluster,
    wait_uploaded,
)

RESERVE_HOURS = 1  # the broker's own clean pass (its clock) expires nothing during the test
EXPIRES_WITHIN_S = 4.0  # the job's margin reaches the segments older than this at its snapshot: the first ones


def mark_expired(addr: str, now_ms: int) -> list[tiered_pb2.TieredSegment]:
    with grpc.insecure_channel(addr) as channel:
        marked = tiered_pb2_grpc.TieredServiceStub(channel).MarkExpiredSegments(
            tiered_pb2.MarkExpiredRequest(now_ms=now_ms), timeout=30)
    assert marked.code == ResponseCode.SUCCESS, marked
    return list(marked.segments)


def test_a_run_merges_what_the_broker_s_expiry_leaves_it_and_none_of_what_it_takes(
        tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = "CompactExpiring"
    cluster = tiered_cluster(tmp_path, tieredStoreFileReservedTime=RESERVE_HOURS)
    try:
        cluster.create_topic(topic, queues=2)
        addr = broker_addr(cluster)
        expected: Expected = {}
        produce(cluster, topic, 4, expected)  # per queue: 4 commitlog and 8 consume queue segments
        wait_uploaded(cluster, topic, expected)
        time.sleep(0.05)
        second_ms = int(time.time() * 1000)
        time.sleep(EXPIRES_WITHIN_S + 1)  # the second ones are younger than that at the job's snapshot
        produce(cluster, topic, 4, expected)
        wait_uploaded(cluster, topic, expected)
        before = snapshot(addr, topic).by_file()
        expiring = [s for segs in before.values() for s in segs if s.end_ms < second_ms]
        kept = sum(len(segs) - 1 for segs in before.values()) - len(expiring)  # the newest ones take appends
        assert len(before) == 4 and {(s.topic, s.queue_id, s.type) for s in expiring} == set(before)

        marked: list[tiered_pb2.TieredSegment] = []
        commit_all = compact.commit_all

        def after_the_clean_pass(*args):  # the broker's pass ran while the executors merged
            marked.extend(mark_expired(addr, second_ms + RESERVE_HOURS * 3600 * 1000))
            return commit_all(*args)

        monkeypatch.setattr(compact, "commit_all", after_the_clean_pass)
        monkeypatch.setattr(compact, "EXPIRY_MARGIN_S", RESERVE_HOURS * 3600 - EXPIRES_WITHIN_S)
        stats = compact.run(addr, "local[1]", topic, 1 << 20, 64 << 20, 0.2, True)
        assert {s.path for s in marked} == {s.path for s in expiring}
        # every queue and type: what came second, the newest segment left out (it takes appends)
        assert (stats["groups_merged"], stats["groups_changed"], stats["groups_failed"]) == (4, 0, 0), stats
        assert stats["segments_read"] == kept, stats
        after = snapshot(addr, topic)
        assert all(s.status == EXPIRED for s in after.segments if s.path in {m.path for m in marked})
        assert {key: len(segs) for key, segs in after.by_file().items()} == {
            (topic, q, t): 2 for q in range(2) for t in range(2)}  # the merged one and the newest
        check_broker_view(cluster, topic, after)
        with PullConsumer(cluster.addr, group="after-compaction") as consumer:  # the old ones from the local store
            assert check_everything(consumer, topic, expected) == 2 * 24
    finally:
        cluster.stop()

"""The cleanup job (issue 8) with real PySpark on local[2], run as ``python -m spark_jobs.cleanup``: the broker
marks what is past the tier's reserve time (tieredStoreDeleteFileEnable=false: marking only); the job deletes
exactly those objects and drops their records, touches nothing else, and a second run changes nothing."""

import struct
import subprocess
import time
from pathlib import Path

import pytest

from client import PullConsumer
from client.results import PullStatus
from spark_jobs.broker_tier import COMMIT_LOG, CONSUME_QUEUE, EXPIRED, OPEN, TierSnapshot
from spark_jobs.tier_objects import read_object
from tests.cluster import wait_until
from tests.spark.conftest import (
    Expected,
    broker_addr,
    check_broker_view,
    check_everything,
    check_no_dangling,
    parse_summary,
    produce,
    readable,
    run_job,
    snapshot,
    tier_files,
    tiered_cluster,
    tiered_status,
    wait_uploaded,
)

pytestmark = pytest.mark.slow

RESERVE_HOURS = 0.0005  # 1.8 s
CQ_UNITS = 6  # per tiered consume queue segment: two batches of three


def expected_expiry(snap: TierSnapshot) -> tuple[set[str], dict[int, int]] | None:
    """From the segment records alone (whatever their status): what the reserve time expires once everything
    sealed is older than it: per queue every consume-queue segment but the newest (the open one), then every
    commitlog segment wholly before the first message the newest one points at. Returns (paths, new min queue
    offset per queue), or None while a sealed consume queue segment is younger than the reserve time."""
    reserve_ms = RESERVE_HOURS * 3600 * 1000
    by_queue: dict[int, dict[int, list]] = {}
    for s in snap.segments:
        by_queue.setdefault(s.queue_id, {}).setdefault(s.type, []).append(s)
    paths: set[str] = set()
    new_min = {}
    for q, kinds in by_queue.items():
        cq = sorted(kinds[CONSUME_QUEUE], key=lambda s: s.base_offset)
        cl = sorted(kinds[COMMIT_LOG], key=lambda s: s.base_offset)
        assert cq[-1].status == OPEN, (q, cq[-1])
        for s in cq[:-1]:
            assert s.status != OPEN, (q, s)
            if s.end_ms >= snap.snapshot_ms - reserve_ms:
                return None
            paths.add(s.path)
        first_position = struct.unpack(">q", read_object(snap.location, cq[-1].path)[:8])[0]
        paths |= {s.path for s in cl if s.status != OPEN and s.base_offset + s.size <= first_position}
        new_min[q] = cq[-1].base_offset // 28
    return paths, new_min


def test_cleanup_deletes_exactly_the_expired_segments_and_is_idempotent(tmp_path: Path) -> None:
    cleanup_scenario(tmp_path, {}, ())


def cleanup_scenario(tmp_path: Path, tier_conf: dict[str, object], job_args: tuple[str, ...],
                     master: str = "local[2]", env: dict[str, str] | None = None,
                     ) -> list[subprocess.CompletedProcess]:
    """The test above on a broker with ``tier_conf`` (posix: {}), the job run on ``master`` with ``job_args``
    and ``env``. Returns both runs (their output)."""
    topic, queues, batches = "Expiring", 4, 20
    cluster = tiered_cluster(
        tmp_path,
        **tier_conf,
        tieredStoreFileReservedTime=RESERVE_HOURS,
        tieredStoreDeleteFileEnable="false",
        tieredStoreConsumeQueueMaxSize=28 * CQ_UNITS,
        cleanResourceInterval=300,
        # the local store expires too (down to its newest segment), so consumers see the tier's new min offset
        mappedFileSizeCommitLog=16 * 1024,
        fileReservedTime="0.0003",
        deleteWhen="*",
    )
    try:
        cluster.create_topic(topic, queues=queues)
        addr = broker_addr(cluster)
        expected: Expected = {}
        produce(cluster, topic, batches, expected)  # per queue: 20 commitlog and 10 consume queue segments
        wait_uploaded(cluster, topic, expected)
        local_commitlog = cluster.workdir / "broker-a" / "store" / "commitlog"

        def settled() -> tuple[TierSnapshot, set[str], dict[int, int]] | None:
            """The broker's own clean service marked everything due, and the local store expired."""
            snap = snapshot(addr, topic)
            due = expected_expiry(snap)
            if due is None:
                return None
            want, new_min = due
            marked = {s.path for s in snap.segments if s.status == EXPIRED}
            status = tiered_status(cluster, topic)
            local_done = len(list(local_commitlog.iterdir())) == 1 and all(
                st.local_min_offset >= new_min[q] for q, st in status.items())
            return (snap, want, new_min) if marked == want and local_done else None

        before, want, new_min = wait_until(settled, timeout=60, interval=0.2, what="expiry marking")
        assert set(new_min) == set(range(queues))
        assert all(m == batches * 3 - CQ_UNITS for m in new_min.values()), new_min
        kept_sealed = [s for s in readable(before) if s.status != OPEN]
        assert kept_sealed, "no sealed segment stays readable: the test would not show that others are untouched"
        files_before = tier_files(before)
        assert want <= set(files_before)  # marked, not deleted: the broker leaves objects to the job
        want_bytes = sum(files_before[p][0] for p in want)

        result = run_job("spark_jobs.cleanup", "--broker", addr, "--master", master, *job_args, env=env)
        assert result.returncode == 0, result.stdout + result.stderr[-4000:]
        stats = parse_summary(result.stdout, "cleanup")
        assert (stats["expired"], stats["deleted"], stats["dropped"]) == (len(want),) * 3, stats
        assert stats["bytes"] == want_bytes, stats

        after = snapshot(addr, topic)
        files_after = tier_files(after)
        assert set(files_before) - set(files_after) == want  # exactly the expired objects went
        assert set(files_after) <= set(files_before)
        assert {p: files_before[p] for p in files_after} == files_after  # the rest untouched (size, mtime)
        assert not [s for s in after.segments if s.status == EXPIRED]  # their records dropped
        assert list(after.segments) == list(readable(before))  # readable records unchanged
        check_no_dangling(after)
        check_broker_view(cluster, topic, after)

        status = tiered_status(cluster, topic)
        with PullConsumer(cluster.addr, group="after-cleanup") as consumer:
            for mq in consumer.queues(topic):
                assert status[mq.queue_id].tiered_min_offset == new_min[mq.queue_id], status[mq.queue_id]
                assert consumer.min_offset(mq) == new_min[mq.queue_id], (mq, status[mq.queue_id])
                stale = consumer.pull(mq, offset=0, max_nums=8)
                assert stale.status is not PullStatus.FOUND or stale.messages[0].queue_offset >= new_min[mq.queue_id]
            got = check_everything(consumer, topic, expected, start=new_min)
            assert got == sum(len(msgs) - new_min[q] for q, msgs in expected.items())

        # again: nothing is due, nothing changes
        time.sleep(0.5)
        runs = [result, run_job("spark_jobs.cleanup", "--broker", addr, "--master", master, *job_args, env=env)]
        result = runs[-1]
        assert result.returncode == 0, result.stdout + result.stderr[-4000:]
        stats = parse_summary(result.stdout, "cleanup")
        assert (stats["expired"], stats["deleted"], stats["dropped"], stats["bytes"]) == (0, 0, 0, 0), stats
        again = snapshot(addr, topic)
        assert tier_files(again) == files_after
        assert list(again.segments) == list(after.segments)
    finally:
        cluster.stop()
    return runs

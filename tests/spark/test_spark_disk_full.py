"""Compaction on a full tier (a combination no other test runs): the posix tier on a small tmpfs of its own, filled to
the last byte before the job runs. The job's merged objects cannot be written; it must say so and exit, without a
traceback, leaving every message readable, the tier's layout as it was and nothing the broker refers to damaged.
Once room is made, a re-run does the work. Mounting needs root (as CI and the developers' machines run)."""

import os
from pathlib import Path

import pytest

from client import PullConsumer
from spark_jobs.compact import plan
from tests.disk.tmpfs import fill_file_system, free_bytes, remove_filler, try_mount_tmpfs, unmount
from tests.spark.conftest import (
    Expected,
    broker_addr,
    check_broker_view,
    check_everything,
    check_no_dangling,
    parse_summary,
    produce,
    run_job,
    snapshot,
    streams,
    tier_files,
    tiered_cluster,
    unreferenced,
    wait_uploaded,
)
from tests.spark.test_spark_compact import BIG_TARGET, SMALL_BYTES, compact_args

pytestmark = pytest.mark.slow

TIER_SIZE = "8m"


def test_compaction_on_a_full_tier_fails_cleanly_and_a_rerun_with_room_finishes(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    tier.mkdir()
    assert try_mount_tmpfs(tier, TIER_SIZE), f"cannot mount a tmpfs on {tier} (uid {os.geteuid()}: needs root)"
    topic = "FullTier"
    cluster = None
    try:
        cluster = tiered_cluster(tmp_path / "cluster", tieredStoreFilePath=str(tier))
        cluster.create_topic(topic, queues=2)
        addr = broker_addr(cluster)
        expected: Expected = {}
        produce(cluster, topic, 20, expected)
        wait_uploaded(cluster, topic, expected)
        before = snapshot(addr, topic)
        want_streams = streams(before)
        assert plan(before, SMALL_BYTES, BIG_TARGET), "nothing to compact: the test would show nothing"

        fill_file_system(tier)
        assert free_bytes(tier) == 0
        full = run_job("spark_jobs.compact", *compact_args(addr, topic, BIG_TARGET))
        output = full.stdout + full.stderr
        assert "Traceback" not in full.stderr, full.stderr[-4000:]
        failed = full.returncode != 0 or parse_summary(full.stdout, "compact")["groups_failed"] > 0
        assert failed, f"a compaction with no room on its tier reported success:\n{output[-4000:]}"
        assert "No space left on device" in output or "disk full" in output.lower(), output[-4000:]

        after_full = snapshot(addr, topic)
        check_no_dangling(after_full)
        assert streams(after_full) == want_streams
        # a merged object cut short by the full disk is not left behind, taking room the tier has none of
        assert unreferenced(after_full, tier_files(after_full)) == []
        check_broker_view(cluster, topic, after_full)
        with PullConsumer(cluster.addr, group="after-full") as consumer:
            assert check_everything(consumer, topic, expected) == sum(map(len, expected.values()))

        remove_filler(tier)
        rerun = run_job("spark_jobs.compact", *compact_args(addr, topic, BIG_TARGET))
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr[-4000:]
        assert parse_summary(rerun.stdout, "compact")["groups_failed"] == 0, rerun.stdout
        after = snapshot(addr, topic)
        check_no_dangling(after)
        assert streams(after) == want_streams
        check_broker_view(cluster, topic, after)
        assert plan(after, SMALL_BYTES, BIG_TARGET) == []
        with PullConsumer(cluster.addr, group="after-rerun") as consumer:
            assert check_everything(consumer, topic, expected) == sum(map(len, expected.values()))
    finally:
        if cluster is not None:
            cluster.stop()
        unmount(tier)

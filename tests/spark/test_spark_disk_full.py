"""Compaction on a full disk (combinations no other test runs), filled to the last byte before the job runs:

- ``tier``: the posix tier on a small tmpfs of its own: the job's merged objects cannot be written;
- ``store``: the broker's store on one (the tier elsewhere): the merged objects are written, but the broker's commit
  of each swap, to the tier's metadata on its store, is refused.

Either way the job must say so and exit 1, without a traceback, leaving every message readable, the tier's layout as
it was, nothing the broker refers to damaged and no object it wrote left behind (the parts of a group swapped before
the refusal are retired, for the next run to delete). Once room is made (and a broker whose store filled restarted,
as a broker on a full disk asks), a re-run does the work. Mounting needs root
(as CI and the developers' machines run)."""

import os
from pathlib import Path

import pytest

from client import PullConsumer
from spark_jobs.compact import plan
from spark_jobs.tier_objects import RETIRED
from tests.disk.tmpfs import fill_file_system, free_bytes, remount_tmpfs, remove_filler, try_mount_tmpfs, unmount
from tests.spark.conftest import (
    BROKER,
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

DISK_SIZE = "24m"
MIB = 1 << 20


@pytest.mark.parametrize("full", ["tier", "store"])
def test_compaction_on_a_full_disk_fails_cleanly_and_a_rerun_with_room_finishes(tmp_path: Path, full: str) -> None:
    disk, tier = tmp_path / "disk", tmp_path / "tier"
    disk.mkdir()
    tier.mkdir()
    assert try_mount_tmpfs(disk, DISK_SIZE), f"cannot mount a tmpfs on {disk} (uid {os.geteuid()}: needs root)"
    on_disk = ({"tieredStoreFilePath": str(disk)} if full == "tier" else
               {"tieredStoreFilePath": str(tier), "storePathRootDir": str(disk / "store"),
                "mappedFileSizeCommitLog": MIB})
    topic = "FullDisk"
    cluster = None
    try:
        cluster = tiered_cluster(tmp_path / "cluster", **on_disk)
        cluster.create_topic(topic, queues=2)
        addr = broker_addr(cluster)
        expected: Expected = {}
        produce(cluster, topic, 20, expected)
        wait_uploaded(cluster, topic, expected)
        before = snapshot(addr, topic)
        want_streams = streams(before)
        assert plan(before, SMALL_BYTES, BIG_TARGET), "nothing to compact: the test would show nothing"

        fill_file_system(disk)
        assert free_bytes(disk) == 0
        job = run_job("spark_jobs.compact", *compact_args(addr, topic, BIG_TARGET))
        output = job.stdout + job.stderr
        assert "Traceback" not in job.stderr, job.stderr[-4000:]
        failed = job.returncode != 0 or parse_summary(job.stdout, "compact")["groups_failed"] > 0
        assert failed, f"a compaction with no room on the {full} disk reported success:\n{output[-4000:]}"
        assert "No space left on device" in output or "disk full" in output.lower(), output[-4000:]

        after_full = snapshot(addr, topic)
        check_no_dangling(after_full)
        assert streams(after_full) == want_streams
        # Left behind: only the retired parts of groups swapped before the refusal (garbage the next run collects,
        # as after --no-wait). Not a merged object cut short, refused or never offered, nor a refused group's markers.
        left = unreferenced(after_full, tier_files(after_full))
        markers = {p.removesuffix(RETIRED) for p in left if p.endswith(RETIRED)}
        assert {p for p in left if not p.endswith(RETIRED)} == markers, left
        check_broker_view(cluster, topic, after_full)
        with PullConsumer(cluster.addr, group="after-full") as consumer:
            assert check_everything(consumer, topic, expected) == sum(map(len, expected.values()))

        remove_filler(disk)
        remount_tmpfs(disk, "64m")  # as the disk-full daemon test: room past the broker's 90% refusal level too
        if full == "store":  # a broker whose store filled refuses writes until restarted (README: Disk usage)
            assert cluster.brokers[BROKER].stop() == 0
            cluster.start_broker(BROKER)
            addr = broker_addr(cluster)
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
        unmount(disk)

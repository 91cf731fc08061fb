"""The Spark jobs on a full disk (combinations no other test runs), filled to the last byte before the job runs.

Compaction:

- ``tier``: the posix tier on a small tmpfs of its own: the job's merged objects cannot be written;
- ``store``: the broker's store on one (the posix tier elsewhere): the merged objects are written, but the broker's
  commit of each swap, to the tier's metadata on its store, is refused;
- ``store-s3``: the same with the S3 tier (moto's server): the merged objects are S3 keys.

Either way the job must say so and exit 1, without a traceback, leaving every message readable, the tier's layout as
it was, nothing the broker refers to damaged and no object it wrote left behind (the parts of a group swapped before
the refusal are retired, for the next run to delete). Once room is made (and a broker whose store filled restarted,
as a broker on a full disk asks), a re-run does the work.

Cleanup: the broker's store on the small disk, expired segments uploaded to the posix tier, either only due (the
job's marking is the metadata write the full disk meets) or already marked by the broker's own clean service (the
job's drop of the records is). The job marks (the broker records EXPIRED), deletes, then has the broker drop the
records: whatever the full disk refuses, no object goes that the broker had not recorded EXPIRED, and no readable
record is left without its object.

Mounting needs root (as CI and the developers' machines run)."""

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import PullConsumer
from spark_jobs.broker_tier import CONSUME_QUEUE, EXPIRED, TierSnapshot
from spark_jobs.compact import plan
from spark_jobs.tier_objects import RETIRED
from tests.cluster import Cluster, wait_until
from tests.disk.tmpfs import fill_file_system, free_bytes, remount_tmpfs, remove_filler, try_mount_tmpfs, unmount
from tests.spark.conftest import (
    BROKER,
    Expected,
    TierBackend,
    broker_addr,
    check_broker_view,
    check_everything,
    check_no_dangling,
    parse_summary,
    produce,
    readable,
    run_job,
    snapshot,
    streams,
    tier_files,
    tiered_cluster,
    tiered_status,
    unreferenced,
    wait_uploaded,
)
from tests.spark.test_spark_cleanup import CQ_UNITS, RESERVE_HOURS, expected_expiry
from tests.spark.test_spark_compact import BIG_TARGET, SMALL_BYTES, compact_args

pytestmark = pytest.mark.slow

DISK_SIZE = "24m"
MIB = 1 << 20
CQ_UNIT = 28


# -- shared by the cells ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs of :data:`DISK_SIZE` on ``tmp_path/disk`` (fails, not skips, where this process may not mount)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    assert try_mount_tmpfs(disk, DISK_SIZE), f"cannot mount a tmpfs on {disk} (uid {os.geteuid()}: needs root)"
    try:
        yield disk
    finally:
        unmount(disk)


def store_on(disk: Path) -> dict[str, object]:
    """Broker settings that put its store (and the tier's metadata in it) on ``disk``."""
    return {"storePathRootDir": str(disk / "store"), "mappedFileSizeCommitLog": MIB}


def fill(disk: Path) -> None:
    fill_file_system(disk)
    assert free_bytes(disk) == 0


def restart_with_room(cluster: Cluster, disk: Path) -> str:
    """Room on the disk (past the broker's 90% refusal level too, as the disk-full daemon test makes it), and the
    broker restarted: a broker whose store filled refuses writes until then (README: Disk usage). Its address."""
    remove_filler(disk)
    remount_tmpfs(disk, "64m")
    assert cluster.brokers[BROKER].stop() == 0
    cluster.start_broker(BROKER)
    return broker_addr(cluster)


def refusal_line(job: subprocess.CompletedProcess, name: str) -> str:
    """The job failed as a refused step must: exit 1, no traceback, no summary, one line saying why."""
    output = job.stdout + job.stderr[-4000:]
    assert "Traceback" not in job.stderr, job.stderr[-4000:]
    assert job.returncode == 1, output
    assert not [line for line in job.stdout.splitlines() if line.startswith(f"{name}: ")], output
    lines = [line for line in job.stderr.splitlines() if line.startswith(f"{name}: failed: ")]
    assert len(lines) == 1, output
    return lines[0]


# -- compaction ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("full", ["tier", "store", "store-s3"])
def test_compaction_on_a_full_disk_fails_cleanly_and_a_rerun_with_room_finishes(
        tmp_path: Path, full: str, request: pytest.FixtureRequest) -> None:
    backend = TierBackend(request.getfixturevalue("s3_server") if full == "store-s3" else None)
    tier = tmp_path / "tier"
    tier.mkdir()
    topic = "FullDisk"
    with small_disk(tmp_path) as disk:
        on_disk = ({"tieredStoreFilePath": str(disk)} if full == "tier" else
                   {**store_on(disk), **(backend.broker_conf() or {"tieredStoreFilePath": str(tier)})})
        cluster = tiered_cluster(tmp_path / "cluster", **on_disk)
        try:
            cluster.create_topic(topic, queues=2)
            addr = broker_addr(cluster)
            expected: Expected = {}
            produce(cluster, topic, 20, expected)
            wait_uploaded(cluster, topic, expected)
            before = snapshot(addr, topic)
            assert before.location.is_s3 == (full == "store-s3")
            want_streams = streams(before)
            assert plan(before, SMALL_BYTES, BIG_TARGET), "nothing to compact: the test would show nothing"

            fill(disk)
            job = run_job("spark_jobs.compact", *compact_args(addr, topic, BIG_TARGET), *backend.job_args)
            output = job.stdout + job.stderr
            assert "Traceback" not in job.stderr, job.stderr[-4000:]
            if full == "tier":  # a merge that could not write its object fails its group (or the run)
                failed = job.returncode != 0 or parse_summary(job.stdout, "compact")["groups_failed"] > 0
                assert failed, f"a compaction with no room on the tier's disk reported success:\n{output[-4000:]}"
                assert "No space left on device" in output or "disk full" in output.lower(), output[-4000:]
            else:  # every merged object was written (no group failed before it), the broker refused to swap one
                line = refusal_line(job, "compact")
                assert "segment replacement" in line and "SERVICE_NOT_AVAILABLE: disk full" in line, line
                assert "compact_group_failed" not in job.stderr, job.stderr[-4000:]

            after_full = snapshot(addr, topic)
            check_no_dangling(after_full)
            assert streams(after_full) == want_streams
            # Left behind: only the retired parts of groups swapped before the refusal (garbage the next run
            # collects, as after --no-wait). Not a merged object cut short, refused or never offered, nor a refused
            # group's markers.
            left = unreferenced(after_full, tier_files(after_full))
            markers = {p.removesuffix(RETIRED) for p in left if p.endswith(RETIRED)}
            assert {p for p in left if not p.endswith(RETIRED)} == markers, left
            check_broker_view(cluster, topic, after_full)
            with PullConsumer(cluster.addr, group="after-full") as consumer:
                assert check_everything(consumer, topic, expected) == sum(map(len, expected.values()))

            if full == "tier":  # the broker's store had room all along: no restart asked
                remove_filler(disk)
                remount_tmpfs(disk, "64m")
            else:
                addr = restart_with_room(cluster, disk)
            rerun = run_job("spark_jobs.compact", *compact_args(addr, topic, BIG_TARGET), *backend.job_args)
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
            cluster.stop()


# -- cleanup ------------------------------------------------------------------------------------------------------
def served_from(snap: TierSnapshot) -> dict[int, int]:
    """Per queue, the first queue offset its readable consume-queue records serve."""
    out: dict[int, int] = {}
    for (_, queue, kind), segs in snap.by_file().items():
        if kind == CONSUME_QUEUE:
            out[queue] = segs[0].base_offset // CQ_UNIT
    return out


def check_cleanup_invariant(before: TierSnapshot, after: TierSnapshot, due: set[str],
                            files_before: dict[str, tuple[int, int]], files_after: dict[str, tuple[int, int]]) -> None:
    """What marking (the broker records EXPIRED), then deleting, then dropping the records guarantees at any point
    a run stops: an object goes only once the broker recorded its segment EXPIRED (it was due, and its record is now
    EXPIRED or dropped), a record is dropped only once its object went, the tier gets nothing new, and every other
    object is untouched."""
    records = {s.path: s for s in after.segments}
    deleted = set(files_before) - set(files_after)
    assert set(files_after) <= set(files_before), sorted(set(files_after) - set(files_before))
    assert deleted <= due, sorted(deleted - due)
    assert not [p for p in deleted if p in records and records[p].status != EXPIRED], "deleted while referenced"
    dropped = {s.path for s in before.segments} - set(records)
    assert dropped <= deleted, f"records dropped whose objects remain: {sorted(dropped - deleted)}"
    assert not [s.path for s in after.segments if s.status == EXPIRED and s.path not in due]
    assert {p: files_before[p] for p in files_after} == files_after  # the rest untouched (size, mtime)
    kept = {s.path for s in readable(after)}
    assert {s.path for s in readable(before)} - due <= kept <= {s.path for s in readable(before)}
    check_no_dangling(after)


@pytest.mark.parametrize("marked", [False, True], ids=["due", "marked"])
def test_cleanup_on_a_full_store_disk_deletes_only_what_the_broker_recorded_and_a_rerun_finishes(
        tmp_path: Path, marked: bool) -> None:
    """``due``: the segments are past the reserve time and the broker's clean service has not run (its interval is
    an hour): the job's marking writes the tier's metadata on the full disk. ``marked``: the clean service (every
    300 ms) marked them before the disk filled: the job's marking writes nothing, its deletions go ahead, and the
    drop of their records meets the full disk. The local store keeps every message (its files never expire, and are
    never deleted to make room): reads from the tier's first served offset on come from the tier (FORCE)."""
    topic, queues, batches = "ExpireOnFullDisk", 4, 20
    tier = tmp_path / "tier"
    tier.mkdir()
    with small_disk(tmp_path) as disk:
        cluster = tiered_cluster(
            tmp_path / "cluster", **store_on(disk), tieredStoreFilePath=str(tier),
            tieredStoreFileReservedTime=RESERVE_HOURS, tieredStoreDeleteFileEnable="false",
            tieredStoreConsumeQueueMaxSize=CQ_UNIT * CQ_UNITS, cleanFileForciblyEnable="false",
            cleanResourceInterval=300 if marked else 3_600_000)
        try:
            cluster.create_topic(topic, queues=queues)
            addr = broker_addr(cluster)
            expected: Expected = {}
            # per queue 20 commitlog and 10 consume queue segments; 108 due: their records' deletions (~50 bytes each
            # in RocksDB's log) cannot all fit in what the log's last page has left
            produce(cluster, topic, batches, expected)
            wait_uploaded(cluster, topic, expected)

            def settled() -> tuple[TierSnapshot, set[str], dict[int, int]] | None:
                snap = snapshot(addr, topic)
                due = expected_expiry(snap)
                if due is None:
                    return None
                recorded = {s.path for s in snap.segments if s.status == EXPIRED}
                return (snap, *due) if recorded == (due[0] if marked else set()) else None

            before, due, new_min = wait_until(settled, timeout=60, interval=0.2, what="segments due for expiry")
            assert new_min == dict.fromkeys(range(queues), batches * 3 - CQ_UNITS), new_min
            assert readable(before) and due, "nothing kept or nothing due: the test would show nothing"
            files_before = tier_files(before)
            assert due <= set(files_before)

            fill(disk)
            job = run_job("spark_jobs.cleanup", "--broker", addr)
            after_full = snapshot(addr, topic)
            files_after_full = tier_files(after_full)
            check_cleanup_invariant(before, after_full, due, files_before, files_after_full)
            if job.returncode == 0:  # the broker recorded all of it: marked, deleted, dropped
                stats = parse_summary(job.stdout, "cleanup")
                assert (stats["expired"], stats["dropped"]) == (len(due), len(due)), stats
                assert not set(files_after_full) & due and not [s for s in after_full.segments if s.status == EXPIRED]
            else:
                line = refusal_line(job, "cleanup")
                step = "dropping segment records" if marked else "marking expired segments"
                assert step in line and "SERVICE_NOT_AVAILABLE: disk full" in line, line
            check_broker_view(cluster, topic, after_full)
            with PullConsumer(cluster.addr, group="after-full") as consumer:
                start = served_from(after_full)
                assert check_everything(consumer, topic, expected, start=start) == \
                    sum(len(msgs) - start[q] for q, msgs in expected.items())

            addr = restart_with_room(cluster, disk)
            rerun = run_job("spark_jobs.cleanup", "--broker", addr)
            assert rerun.returncode == 0, rerun.stdout + rerun.stderr[-4000:]
            stats = parse_summary(rerun.stdout, "cleanup")
            left = {s.path for s in after_full.segments if s.status == EXPIRED} | (due & set(files_after_full))
            assert (stats["expired"], stats["dropped"]) == (len(left), len(left)), (stats, sorted(left))
            assert stats["bytes"] == sum(files_after_full[p][0] for p in left & set(files_after_full)), stats

            after = snapshot(addr, topic)
            files_after = tier_files(after)
            check_cleanup_invariant(before, after, due, files_before, files_after)
            assert set(files_before) - set(files_after) == due  # exactly the expired objects went
            assert not [s for s in after.segments if s.status == EXPIRED]  # and their records
            assert list(after.segments) == [s for s in before.segments if s.path not in due]
            check_broker_view(cluster, topic, after)
            status = tiered_status(cluster, topic)
            assert {q: st.tiered_min_offset for q, st in status.items()} == new_min, status
            with PullConsumer(cluster.addr, group="after-rerun") as consumer:
                assert served_from(after) == new_min
                assert check_everything(consumer, topic, expected, start=new_min) == \
                    sum(len(msgs) - new_min[q] for q, msgs in expected.items())
        finally:
            cluster.stop()

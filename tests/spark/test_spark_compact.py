"""Compaction (issue 8) with real PySpark on local[2], run as users run it (``python -m spark_jobs.compact``):
thousands of tiny tiered segments merge into a few while a consumer keeps reading them through the broker, and a
job killed at random points leaves nothing lost, nothing dangling, and a re-run finishes the work."""

import os
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest

from client import Admin, PullConsumer
from spark_jobs.broker_tier import COMMIT_LOG, CONSUME_QUEUE, SEALED
from spark_jobs.compact import plan
from spark_jobs.tier_objects import MERGED_NAME, RETIRED
from tests.cluster import wait_until
from tests.spark.conftest import (
    BROKER,
    Expected,
    broker_addr,
    check_broker_view,
    check_everything,
    check_no_dangling,
    kill_job,
    parse_summary,
    produce,
    readable,
    run_job,
    snapshot,
    start_job,
    streams,
    tier_files,
    tiered_cluster,
    unreferenced,
    wait_uploaded,
)

pytestmark = pytest.mark.slow

SMALL_BYTES = 1 << 20  # every segment of these tests is below it
BIG_TARGET = 64 << 20  # everything compactable of a queue and type fits in one merged object
GRACE_S = 1.0


class Reader(threading.Thread):
    """Reads every queue from offset 0 to its end, again and again, checking every message; keeps failures."""

    def __init__(self, namesrv: str, topic: str, expected: Expected) -> None:
        super().__init__(name="compaction-reader", daemon=True)
        self.namesrv, self.topic, self.expected = namesrv, topic, expected
        self.passes = 0
        self.errors: list[str] = []
        self._done = threading.Event()

    def run(self) -> None:
        with PullConsumer(self.namesrv, group="compaction-reader") as consumer:
            while not self._done.is_set():
                try:
                    check_everything(consumer, self.topic, self.expected)
                    self.passes += 1
                except Exception as exc:  # any failure, kept for the test to report
                    self.errors.append(f"pass {self.passes}: {type(exc).__name__}: {exc!r}")
                    if len(self.errors) > 20:
                        return

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=60)
        assert not self.is_alive(), "reader did not stop"


def compact_args(addr: str, topic: str, target: int, *more: str, master: str = "local[2]") -> list[str]:
    return ["--broker", addr, "--master", master, "--topic", topic, "--small-bytes", str(SMALL_BYTES),
            "--target-bytes", str(target), "--grace-seconds", str(GRACE_S), *more]


def test_two_thousand_segments_compact_to_a_few_under_concurrent_reads(tmp_path: Path) -> None:
    """On the posix tier. The s3 tier runs this scenario with the job on a standalone cluster
    (``test_spark_standalone``), at ~320 segments: there every request goes to moto's single server process,
    and the 2,400 here took four minutes of CI's thirty."""
    compaction_under_concurrent_reads(tmp_path, {}, ())


def compaction_under_concurrent_reads(tmp_path: Path, tier_conf: dict[str, object], job_args: tuple[str, ...],
                                      master: str = "local[2]", env: dict[str, str] | None = None,
                                      batches: int = 100) -> subprocess.CompletedProcess:
    """The scenario of the test above on a broker with ``tier_conf``, the job run on ``master`` (with ``env``);
    ``batches`` per queue (100: 2000+ segments). Returns the job's run (its output)."""
    topic, queues = "CompactMe", 8
    cluster = tiered_cluster(tmp_path, **tier_conf)
    try:
        cluster.create_topic(topic, queues=queues)
        expected: Expected = {}
        produce(cluster, topic, batches, expected)  # per queue (100): 100 commitlog + 150 consume queue segments
        status = wait_uploaded(cluster, topic, expected)
        with Admin(cluster.addr) as admin:
            assert admin.tiered_status(topic)[0].storage_level == "FORCE"  # the reader's pulls hit the tier
        addr = broker_addr(cluster)
        before = snapshot(addr, topic)
        files = before.by_file()
        assert len(files) == queues * 2
        assert len(before.segments) >= 20 * batches, len(before.segments)
        assert sum(st.commit_log_segments + st.consume_queue_segments for st in status.values()) == len(before.segments)
        compactable = [s for segs in files.values() for s in segs[:-1]]
        assert all(s.status == SEALED and s.size < SMALL_BYTES for s in compactable)
        want_streams = streams(before)

        reader = Reader(cluster.addr, topic, expected)
        reader.start()
        try:
            wait_until(lambda: reader.passes >= 1 or reader.errors, timeout=60, what="a first read pass")
            passes_before = reader.passes
            result = run_job("spark_jobs.compact", *compact_args(addr, topic, BIG_TARGET, master=master), *job_args,
                             env=env)
            passes_during = reader.passes - passes_before
            wait_until(lambda: reader.passes >= passes_before + passes_during + 2 or reader.errors, timeout=60,
                       what="read passes after the job")
        finally:
            reader.stop()
        assert result.returncode == 0, result.stdout + result.stderr[-4000:]
        assert not reader.errors, reader.errors[:5]
        assert passes_during >= 2, f"only {passes_during} read passes overlapped the job"

        stats = parse_summary(result.stdout, "compact")
        assert stats["groups_failed"] == 0, stats
        assert stats["groups_merged"] == queues * 2, stats
        assert stats["segments_read"] == len(compactable), stats

        after = snapshot(addr, topic)
        files_after = after.by_file()
        assert set(files_after) == set(files)
        for key, segs in files_after.items():
            # one merged object of everything that was sealed, then the newest segment, untouched
            assert len(segs) == 2, (key, [(s.path, s.size, s.status) for s in segs])
            assert segs[-1] == files[key][-1], key
            assert segs[0].status == SEALED and segs[0].base_offset == files[key][0].base_offset
        # "<= 20": the open newest segment of each queue and type (16 here) is never merged, so the bound holds
        # per type and for the sealed segments; together there are 2 per queue and type
        assert len(readable(after)) == queues * 2 * 2
        for kind in (COMMIT_LOG, CONSUME_QUEUE):
            assert sum(1 for s in readable(after) if s.type == kind) <= 20
        assert sum(1 for s in readable(after) if s.status == SEALED) <= 20
        assert streams(after) == want_streams  # the same bytes at the same offsets
        check_no_dangling(after)
        check_broker_view(cluster, topic, after)

        # the old objects are gone (the job waited out the grace period), and nothing unreferenced is left
        on_disk = tier_files(after)
        assert not [s.path for s in compactable if s.path in on_disk]
        assert unreferenced(after, on_disk) == []
        with PullConsumer(cluster.addr, group="after-compaction") as consumer:
            assert check_everything(consumer, topic, expected) == sum(map(len, expected.values()))

        # the merged records survive a broker restart
        cluster.brokers[BROKER].stop()
        cluster.start_broker(BROKER)
        wait_uploaded(cluster, topic, expected)
        assert streams(snapshot(broker_addr(cluster), topic)) == want_streams
        with PullConsumer(cluster.addr, group="after-restart") as consumer:
            assert check_everything(consumer, topic, expected) == sum(map(len, expected.values()))
    finally:
        cluster.stop()
    return result


def tier_state(addr: str, topic: str) -> dict[str, int]:
    snap = snapshot(addr, topic)
    files = tier_files(snap)
    return {"readable": len(readable(snap)), "markers": sum(p.endswith(RETIRED) for p in files),
            "unreferenced": len([p for p in unreferenced(snap, files) if not p.endswith(RETIRED)])}


def any_merged(addr: str, topic: str) -> bool:
    return any(".c" in Path(s.path).name for s in readable(snapshot(addr, topic)))


def test_compaction_killed_at_random_points_loses_nothing_and_a_rerun_finishes(tmp_path: Path) -> None:
    topic, queues = "KillMe", 4
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    cluster = tiered_cluster(tmp_path)
    small_target = 5 * 3500  # about five commitlog segments per merged object: many groups, a long commit phase
    history: list[str] = []
    try:
        cluster.create_topic(topic, queues=queues)
        addr = broker_addr(cluster)
        expected: Expected = {}
        produce(cluster, topic, 30, expected)

        # first kill: as soon as the broker took the first merged segment (mid-commit: some groups swapped, their
        # parts retired but not deleted, other merged objects written but not committed); it also gives the
        # typical runtime for the random kills: the commit phase comes last, before the grace-period wait
        typical = None
        for cycle in range(4):
            if cycle:
                produce(cluster, topic, 8, expected)  # fresh small segments: every run has work
            wait_uploaded(cluster, topic, expected)
            before = snapshot(addr, topic)
            want_streams = streams(before)
            log = tmp_path / f"compact-{cycle}.log"
            started = time.monotonic()
            proc, tag = start_job("spark_jobs.compact", *compact_args(addr, topic, small_target), log=log)
            if cycle == 0:
                # The wait ends if the job exits too: its bound only catches a hung job (a slow machine under four
                # test workers took more than 180 s to reach the first merge).
                wait_until(lambda p=proc: p.poll() is not None or any_merged(addr, topic),
                           timeout=420, interval=0.01, what="the first committed merge")
                delay = time.monotonic() - started
                typical = delay + 1.5  # the commit phase and the grace-period wait
            else:
                assert typical is not None
                span = (typical - 0.5) / 3  # one random point in each third of [0.5 s, typical runtime]
                delay = rng.uniform(0.5 + (cycle - 1) * span, 0.5 + cycle * span)
                time.sleep(max(0.0, delay - (time.monotonic() - started)))
            exited_before_kill = proc.poll()
            kill_job(proc, tag)
            state = tier_state(addr, topic)
            history.append(f"cycle {cycle}: killed at {delay:.2f}s (exit before kill: {exited_before_kill}) {state}")
            context = f"seed={seed} " + "; ".join(history)

            after = snapshot(addr, topic)
            check_no_dangling(after)
            assert streams(after) == want_streams, context
            check_broker_view(cluster, topic, after)
            with PullConsumer(cluster.addr, group=f"after-kill-{cycle}") as consumer:
                assert check_everything(consumer, topic, expected) == sum(map(len, expected.values())), context

        # a full run finishes the work and leaves no garbage
        wait_uploaded(cluster, topic, expected)
        before = snapshot(addr, topic)
        want_streams = streams(before)
        result = run_job("spark_jobs.compact", *compact_args(addr, topic, BIG_TARGET))
        context = f"seed={seed} " + "; ".join(history)
        assert result.returncode == 0, context + result.stdout + result.stderr[-4000:]
        stats = parse_summary(result.stdout, "compact")
        assert stats["groups_failed"] == 0, (stats, context)

        after = snapshot(addr, topic)
        check_no_dangling(after)
        assert streams(after) == want_streams, context
        check_broker_view(cluster, topic, after)
        for key, segs in after.by_file().items():
            assert len(segs) == 2, (key, [(s.path, s.size) for s in segs], context)
        assert plan(after, SMALL_BYTES, BIG_TARGET) == []
        on_disk = tier_files(after)
        now = time.time()
        # (a killed run's merged objects it never committed stay for UNCOMMITTED_MERGED_S: they could be another
        # run's, about to be committed)
        leftovers = [p for p in unreferenced(after, on_disk)
                     if not (p.endswith(RETIRED) and now - on_disk[p][1] / 1e9 < GRACE_S)
                     and not (MERGED_NAME.search(p) and p + RETIRED not in on_disk)]
        assert leftovers == [], context
        with PullConsumer(cluster.addr, group="after-rerun") as consumer:
            assert check_everything(consumer, topic, expected) == sum(map(len, expected.values()))
        print(context)
    finally:
        cluster.stop()


def test_a_kill_between_deleting_an_object_and_its_marker_leaves_no_garbage(tmp_path: Path) -> None:
    """``delete_object`` removes a retired part, then its ``.retired`` marker: a job killed between the two (the
    end-of-run collection deletes hundreds of parts, so random kills do land there) leaves a marker whose object
    is gone. The next run's collection must remove it like any other garbage older than the grace period."""
    topic = "OrphanMarker"
    cluster = tiered_cluster(tmp_path)
    try:
        cluster.create_topic(topic, queues=1)
        addr = broker_addr(cluster)
        expected: Expected = {}
        produce(cluster, topic, 4, expected)
        wait_uploaded(cluster, topic, expected)
        snap = snapshot(addr, topic)
        part = Path(snap.root / snap.by_file()[(topic, 0, COMMIT_LOG)][0].path)
        # the state a kill inside delete_object leaves: a retired part's object gone, its marker still there
        orphan = part.with_name("00000000000000900000" + RETIRED)
        orphan.write_bytes(str(time.time() - 60).encode())
        old = time.time() - 60
        os.utime(orphan, (old, old))
        # and ordinary garbage beside it: an unreferenced retired part with its marker, both past the grace period
        garbage = part.with_name("00000000000000800000")
        garbage.write_bytes(b"x" * 100)
        garbage.with_name(garbage.name + RETIRED).write_bytes(b"0")
        for f in (garbage, garbage.with_name(garbage.name + RETIRED)):
            os.utime(f, (old, old))

        # nothing to merge (every segment counts as big): the run only collects garbage, without Spark
        result = run_job("spark_jobs.compact", "--broker", addr, "--topic", topic, "--small-bytes", "1",
                         "--grace-seconds", str(GRACE_S))
        assert result.returncode == 0, result.stdout + result.stderr[-4000:]
        after = snapshot(addr, topic)
        assert list(after.segments) == list(snap.segments)
        check_no_dangling(after)
        assert not garbage.exists() and not garbage.with_name(garbage.name + RETIRED).exists()
        assert unreferenced(after, tier_files(after)) == [], "a marker whose object is gone is never collected"
    finally:
        cluster.stop()

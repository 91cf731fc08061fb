"""Spark tiered compaction benchmarks (issue 8): a name server and one broker (``tieredStoreEnable=true``,
``tieredBackendServiceProvider=posix`` under its store directory, tiered commitlog segments of
``SEGMENT_BYTES`` so that the data spans many small sealed segments) as real processes, the SDK here, 1 KiB
bodies, two topics of 8 queues holding the same amount of data (one per compaction below: a compaction
consumes the small segments it merges), everything uploaded (upload lag 0) before anything is timed.

- plan: a metadata snapshot of each topic and ``spark_jobs.compact.plan`` with the job's own sizes: the
  groups of segments the compactor merges;
- the compaction job as it is run: ``python -m spark_jobs.compact --broker ADDR --master local[2]
  --grace-seconds 0 --no-wait --topic A`` as a subprocess; its wall time (interpreter, imports, Spark session
  start, snapshot, merges, commits) and the bytes of its summary line, MB/s = bytes / wall time;
- here, one Spark session with the jobs' settings (``spark_jobs.session``, ``local[2]``), its start timed, and a
  warm-up job that starts the Python workers and imports the modules both jobs use;
- bare: a Spark job over the same groups, as many partitions as the compactor uses, that only reads each
  group's parts and writes their concatenation to a scratch directory (no fsync, no read-back, no verify, no
  broker calls); MB/s = bytes / time of the Spark action;
- compaction, session up: ``spark_jobs.compact.run`` in this process on topic B with the session already
  started (its ``getOrCreate`` returns it), timed whole (garbage listing, snapshot, plan, merges, commits);
  a long grace period so that it deletes nothing (B's parts stay on disk). MB/s = merged bytes / that time;
  target >= 0.7x bare. The bare job runs just before it (A's groups) and just after it (B's), and its figure
  is the mean of the two, so that drift in the machine's load hits both sides alike.

- the S3 tier (issue 18): moto's S3 server as a child process on loopback (``cluster/s3_server.py``, as the
  tests start it) and a second broker with the same segment sizes on ``tieredBackendServiceProvider=s3`` (a new
  bucket), two topics of ``MESSAGES_S3`` (moto keeps every object in its memory). In the same session: bare, a
  Spark job over the same groups, partitioned alike, that reads each group's parts and writes their
  concatenation as one new object through the tier's own S3 client (``spark_jobs.tier_objects``, exactly the
  calls the compactor's executors make; no verify, no size check, no broker calls; the copies are deleted
  after the timing); compaction, ``spark_jobs.compact.run`` on the S3 broker with the signing keys
  (``S3Access``), timed whole as above. Bare before (topic A's groups) and after (B's), mean of the two;
  target >= 0.5x bare. Without moto (or a server that does not start) these rows say "not run" and why.

Every planned group must be merged (bytes equal to the plan's) or the scenario fails. Smoke mode sets up the
brokers and plans, and skips the rows: a Spark session alone takes longer than the smoke budget.
"""

import contextlib
import functools
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from bench.daemons import REPO, start_broker, start_namesrv, stop_all, wait_until
from bench.harness import BODY, Config, Metric, Recorder, Target
from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider
from client import Admin, Message, Producer
from cluster.s3_server import ACCESS_KEY, SECRET_KEY, moto_missing, s3_server_process
from spark_jobs import compact, tier_objects
from spark_jobs.broker_tier import BrokerTier, S3Access

TOPICS = ("SparkBenchA", "SparkBenchB")  # A: the job as a subprocess; B: the compaction in this process
BROKER = "broker-spark"
TOPICS_S3 = ("SparkBenchS3A", "SparkBenchS3B")  # A: bare before; B: the compaction (and bare after)
BROKER_S3 = "broker-spark-s3"
MESSAGES_S3 = {"smoke": 1_000, "quick": 32_000, "full": 128_000}  # a topic: ~36 MB (quick), ~145 MB (full)
S3_JOB_ACCESS = S3Access("", ACCESS_KEY, SECRET_KEY)  # the broker never sends its keys: the job brings them
QUEUES = 8
MESSAGES = {"smoke": 2_000, "quick": 128_000, "full": 384_000}  # a topic: ~145 MB (quick), ~440 MB (full)
PRODUCE_BATCH = 128
MAX_IN_FLIGHT = 32
SEGMENT_BYTES = 1 << 20  # tiered commitlog segment: many small sealed segments
CQ_SEGMENT_BYTES = 28 * 4096  # tiered consume queue segment: 4096 entries
SMALL_BYTES = 2 << 20  # segments below this are merged (all sealed ones here)
TARGET_BYTES = 8 << 20  # into objects of up to this
MASTER = "local[2]"
JOB_TIMEOUT_S = 600
BROKER_SETTINGS: dict[str, Any] = dict(registerNameServerPeriod=1000, tieredStoreEnable="true",
                                       tieredBackendServiceProvider="posix", tieredStoreCommitLogMaxSize=SEGMENT_BYTES,
                                       tieredStoreConsumeQueueMaxSize=CQ_SEGMENT_BYTES)
SUMMARY = re.compile(r"^compact: (.*)$", re.MULTILINE)

METRICS = [
    Metric("spark.concat", "bare Spark job concatenating the same files", "MB/s", echo="batch", issue=8,
           short="bare Spark"),
    Metric("spark.compaction", "Spark tiered compaction, session up", "MB/s", echo="batch", vs="spark.concat",
           target=Target(">=", 0.7, of="spark.concat"), issue=8),
    Metric("spark.compaction_job", "compaction job incl. session start", "MB/s", echo="batch", vs="spark.concat",
           issue=8),
    Metric("spark.wall", "compaction job wall time incl. session start", "s", issue=8),
    Metric("spark.session", "Spark session start, local[2]", "s", issue=8),
    Metric("spark.concat_s3", "bare Spark job copying the same S3 objects (moto)", "MB/s", echo="batch", issue=18,
           short="bare Spark on S3"),
    Metric("spark.compaction_s3", "Spark compaction on the S3 tier (moto), session up", "MB/s", echo="batch",
           vs="spark.concat_s3", target=Target(">=", 0.5, of="spark.concat_s3"), issue=18),
]
S3_METRICS = ("spark.concat_s3", "spark.compaction_s3")


# -- executor functions (by reference: workers import this module) --------------------------------------------
def warm(_: int) -> int:
    """Import what both jobs' tasks use, in each Python worker."""
    from spark_jobs import compact as _compact  # noqa: F401
    from spark_jobs import tier_objects  # noqa: F401

    return os.getpid()


def concat(task: tuple[str, list[tuple[str, int]], str]) -> int:
    """Read the parts (each object up to its recorded size), write their concatenation; returns its bytes."""
    root, parts, out = task
    chunks = []
    for path, size in parts:
        with open(os.path.join(root, path), "rb") as f:
            chunks.append(f.read()[:size])
    data = b"".join(chunks)
    with open(out, "wb") as f:
        f.write(data)
    return len(data)


def copy_objects(task: tuple[tier_objects.TierLocation, list[tuple[str, int]], str]) -> int:
    """The S3 bare task: read the parts (each up to its recorded size) and write their concatenation as one new
    object, through the tier's own client; returns its bytes."""
    location, parts, out = task
    data = b"".join(tier_objects.read_run(location, parts))  # as the job reads a group
    tier_objects.write_object(location, out, data)
    return len(data)


# -- set-up ----------------------------------------------------------------------------------------------------
def produce(producer: Producer, topic: str, count: int) -> None:
    """``count`` messages of 1 KiB in SDK batches, ``MAX_IN_FLIGHT`` batches in flight, as fast as it goes."""
    msgs = [Message(topic, BODY) for _ in range(PRODUCE_BATCH)]
    in_flight: deque[Future] = deque()
    sent = acked = 0
    while sent < count:
        if len(in_flight) >= MAX_IN_FLIGHT:
            acked += in_flight.popleft().result().count
        n = min(PRODUCE_BATCH, count - sent)
        in_flight.append(producer.send_batch_async(msgs[:n]))
        sent += n
    while in_flight:
        acked += in_flight.popleft().result().count
    if acked != count:
        raise RuntimeError(f"{topic}: {acked:,} of {count:,} messages acknowledged")


def uploaded(admin: Admin, topic: str) -> bool:
    return all(q.upload_lag == 0 for r in admin.tiered_status(topic) for q in r.queues)


def planned(tier: BrokerTier, topic: str) -> tuple[str, list[list]]:
    """(tier root, groups) as ``spark_jobs.compact`` plans them for ``topic`` with this scenario's sizes."""
    snapshot = tier.snapshot(topic)
    if snapshot.provider is not TieredBackendServiceProvider.POSIX:
        raise RuntimeError(f"tier backend is {snapshot.provider}, expected posix")
    return str(snapshot.root), compact.plan(snapshot, SMALL_BYTES, TARGET_BYTES)


def planned_s3(tier: BrokerTier, topic: str) -> tuple[tier_objects.TierLocation, list[list]]:
    """(the tier's location with the job's keys, groups) for ``topic`` on the S3 broker."""
    snapshot = tier.snapshot(topic)
    if snapshot.provider is not TieredBackendServiceProvider.S3:
        raise RuntimeError(f"tier backend is {snapshot.provider}, expected s3")
    return snapshot.location, compact.plan(snapshot, SMALL_BYTES, TARGET_BYTES)


def group_bytes(groups: list[list]) -> int:
    return sum(s.size for g in groups for s in g)


# -- the measurements --------------------------------------------------------------------------------------------
def run_job(broker_addr: str, topic: str) -> tuple[float, dict[str, float]]:
    """The compaction job as a subprocess: (wall seconds, its summary line's figures)."""
    argv = [sys.executable, "-m", "spark_jobs.compact", "--broker", broker_addr, "--master", MASTER, "--topic", topic,
            "--small-bytes", str(SMALL_BYTES), "--target-bytes", str(TARGET_BYTES), "--grace-seconds", "0",
            "--no-wait"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    wall = time.perf_counter() - t0
    found = SUMMARY.search(proc.stdout)
    if proc.returncode or not found:
        raise RuntimeError(f"spark_jobs.compact exited {proc.returncode}: {proc.stdout[-500:]} {proc.stderr[-2000:]}")
    return wall, {k: float(v) for k, v in (kv.split("=", 1) for kv in found.group(1).split())}


def bare_concat(sc, root: str, groups: list[list], scratch: Path) -> tuple[int, float]:
    """The bare job over ``groups``, partitioned as the compactor partitions its tasks: (bytes, action seconds)."""
    scratch.mkdir(parents=True, exist_ok=True)
    tasks = [(root, [(s.path, s.size) for s in g], str(scratch / f"g{i}")) for i, g in enumerate(groups)]
    slices = max(1, min(len(tasks), sc.defaultParallelism * 4))
    t0 = time.perf_counter()
    written = sum(sc.parallelize(tasks, slices).map(concat).collect())
    seconds = time.perf_counter() - t0
    shutil.rmtree(scratch, ignore_errors=True)
    if written != group_bytes(groups):
        raise RuntimeError(f"bare job wrote {written:,} bytes, the groups hold {group_bytes(groups):,}")
    return written, seconds


def bare_copy_s3(sc, location: tier_objects.TierLocation, groups: list[list]) -> tuple[int, float]:
    """The S3 bare job over ``groups``, partitioned as the compactor partitions its tasks: (bytes, action
    seconds). Its objects are deleted afterwards (not timed)."""
    scratch = f"bench-scratch/{uuid.uuid4().hex[:12]}"
    tasks = [(location, [(s.path, s.size) for s in g], f"{scratch}/g{i}") for i, g in enumerate(groups)]
    slices = max(1, min(len(tasks), sc.defaultParallelism * 4))
    t0 = time.perf_counter()
    written = sum(sc.parallelize(tasks, slices).map(copy_objects).collect())
    seconds = time.perf_counter() - t0
    for _, _, out in tasks:
        tier_objects.delete_object(location, out)
    if written != group_bytes(groups):
        raise RuntimeError(f"bare S3 job wrote {written:,} bytes, the groups hold {group_bytes(groups):,}")
    return written, seconds


def stop_session(spark) -> None:
    """Stop the session and its JVM (this process started it), so that nothing idles through the next runs."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = SparkContext._jvm = None
    if proc is not None:
        proc.stdin.close()  # the gateway server exits when its stdin closes
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def timing(module, names: tuple[str, ...], spent: dict[str, float]):
    """Add the time spent in ``module.<name>`` calls (driver side) to ``spent[name]`` while in the block."""
    originals = {n: getattr(module, n) for n in names}

    def wrap(name, fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0

        return timed

    for n, fn in originals.items():
        setattr(module, n, wrap(n, fn))
    try:
        yield spent
    finally:
        for n, fn in originals.items():
            setattr(module, n, fn)


def check_merged(stats: dict[str, float], groups: list[list], what: str) -> None:
    if stats["groups_failed"] or stats["groups_merged"] != len(groups) or stats["bytes"] != group_bytes(groups):
        raise RuntimeError(f"{what}: {stats}; planned {len(groups)} groups of {group_bytes(groups):,} bytes")


def _s3_setup(cfg: Config, workdir: Path, ns_addr: str, stack: contextlib.ExitStack, daemons: list,
              rec: Recorder) -> tuple[str, tuple, tuple] | None:
    """moto's server (closed by ``stack``), a broker on it, its two topics produced and uploaded and planned:
    (broker address, (location, groups) of A, of B); None (the rows say "not run" and why) without moto."""
    why = moto_missing()
    server = None
    if not why:
        try:
            server = stack.enter_context(s3_server_process())
        except Exception as exc:  # no server: the S3 rows are not run, the posix ones still are
            why = f"moto's S3 server did not start: {exc}"
    if server is None:
        for metric_id in S3_METRICS:
            rec.skip(metric_id, f"no S3 server: {why}")
        return None
    broker = start_broker(workdir, BROKER_S3, ns_addr, **{**BROKER_SETTINGS, **server.broker_conf()})
    daemons.insert(0, broker)
    with Admin(ns_addr) as admin:
        for topic in TOPICS_S3:
            admin.create_topic(topic, brokers=[BROKER_S3], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        wait_until(lambda: set(TOPICS_S3) <= set(admin.topic_list()), what="topic routes")
        with Producer(ns_addr) as producer:
            for topic in TOPICS_S3:
                produce(producer, topic, MESSAGES_S3[cfg.mode])
        for topic in TOPICS_S3:
            wait_until(functools.partial(uploaded, admin, topic), timeout=180, interval=0.2,
                       what=f"{topic} uploaded to S3")
    with BrokerTier(broker.addr, S3_JOB_ACCESS) as tier:
        return broker.addr, planned_s3(tier, TOPICS_S3[0]), planned_s3(tier, TOPICS_S3[1])


def scenario(cfg: Config, rec: Recorder) -> None:
    with contextlib.ExitStack() as stack:  # moto's server, if started: stopped after the brokers
        _scenario(cfg, rec, stack)


def _scenario(cfg: Config, rec: Recorder, stack: contextlib.ExitStack) -> None:
    workdir = cfg.workdir / "spark"
    ns = start_namesrv(workdir)
    daemons = [ns]
    try:
        broker = start_broker(workdir, BROKER, ns.addr, **BROKER_SETTINGS)
        daemons.insert(0, broker)
        with Admin(ns.addr) as admin:
            for topic in TOPICS:
                admin.create_topic(topic, brokers=[BROKER], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            wait_until(lambda: set(TOPICS) <= set(admin.topic_list()), what="topic routes")
            with Producer(ns.addr) as producer:
                for topic in TOPICS:
                    produce(producer, topic, MESSAGES[cfg.mode])
            for topic in TOPICS:
                wait_until(functools.partial(uploaded, admin, topic), timeout=120, interval=0.2,
                           what=f"{topic} uploaded")
        with BrokerTier(broker.addr) as tier:
            (root, groups_a), (_, groups_b) = planned(tier, TOPICS[0]), planned(tier, TOPICS[1])
        s3 = _s3_setup(cfg, workdir, ns.addr, stack, daemons, rec)
        if cfg.smoke:
            s3_groups = f", S3 {len(s3[1][1]) + len(s3[2][1])}" if s3 else ""
            why = (f"smoke: set-up and plan only ({len(groups_a) + len(groups_b)} groups{s3_groups}); a Spark "
                   "session start alone exceeds the smoke budget")
            for m in METRICS:
                if m.id not in rec.status:  # the S3 rows may already say why they are not run
                    rec.skip(m.id, why)
            return
        if not groups_a or not groups_b:
            raise RuntimeError(f"nothing to compact: {len(groups_a)} / {len(groups_b)} groups planned")
        if s3 and (not s3[1][1] or not s3[2][1]):
            raise RuntimeError(f"nothing to compact on S3: {len(s3[1][1])} / {len(s3[2][1])} groups planned")
        sizes = f"{QUEUES} queues, {SEGMENT_BYTES >> 20} MiB segments into <= {TARGET_BYTES >> 20} MiB"

        # -- the job as it is run (before this process starts a JVM of its own)
        wall, stats = run_job(broker.addr, TOPICS[0])
        check_merged(stats, groups_a, "spark_jobs.compact")
        job_mb = stats["bytes"] / 1e6
        rec.record("spark.wall", wall, f"{job_mb:.0f} MB, {len(groups_a)} groups; job's own timer "
                   f"{stats['seconds']:.1f} s (after imports, incl. session start)")
        rec.record("spark.compaction_job", job_mb / wall, f"{job_mb:.0f} MB / {wall:.1f} s wall")

        # -- one session here: bare job and compaction with the Python workers warm
        from spark_jobs.session import spark_session

        old_path = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), old_path]))  # workers import bench
        t0 = time.perf_counter()
        spark = spark_session("tiered-compact", MASTER)
        rec.record("spark.session", time.perf_counter() - t0, "getOrCreate in this process")
        try:
            sc = spark.sparkContext
            t0 = time.perf_counter()
            sc.parallelize(range(sc.defaultParallelism * 4), sc.defaultParallelism * 4).map(warm).collect()
            warm_s = time.perf_counter() - t0
            slices = max(1, min(len(groups_b), sc.defaultParallelism * 4))
            t0 = time.perf_counter()
            sc.parallelize(range(slices), slices).map(warm).collect()
            empty_s = time.perf_counter() - t0
            runs = [bare_concat(sc, root, groups_a, workdir / "concat")]
            with timing(compact, ("collect_garbage", "commit"), {}) as spent:
                t0 = time.perf_counter()
                stats = compact.run(broker.addr, MASTER, TOPICS[1], SMALL_BYTES, TARGET_BYTES, 3600.0, False)
                seconds = time.perf_counter() - t0
            check_merged(stats, groups_b, "spark_jobs.compact.run")
            runs.append(bare_concat(sc, root, groups_b, workdir / "concat"))
            rates = [n / 1e6 / s for n, s in runs]
            rec.record("spark.concat", statistics.mean(rates),
                       "mean of before / after: " + " / ".join(f"{n / 1e6:.0f} MB in {s:.2f} s" for n, s in runs)
                       + f"; {sizes}; worker warm-up {warm_s:.1f} s, then a job of {slices} empty partitions "
                       f"{empty_s:.2f} s")
            mb = stats["bytes"] / 1e6
            driver = sum(spent.values())
            rec.record("spark.compaction", mb / seconds, f"{mb:.0f} MB, {len(groups_b)} groups in {seconds:.2f} s: "
                       f"commits {spent.get('commit', 0):.2f} s, garbage listing {spent.get('collect_garbage', 0):.2f}"
                       f" s, Spark merges (+ snapshot, plan) {seconds - driver:.2f} s")
            if s3:
                s3_addr, (loc_a, s3_groups_a), (loc_b, s3_groups_b) = s3
                runs = [bare_copy_s3(sc, loc_a, s3_groups_a)]
                with timing(compact, ("collect_garbage", "commit"), {}) as spent:
                    t0 = time.perf_counter()
                    stats = compact.run(s3_addr, MASTER, TOPICS_S3[1], SMALL_BYTES, TARGET_BYTES, 3600.0, False,
                                        S3_JOB_ACCESS)
                    seconds = time.perf_counter() - t0
                check_merged(stats, s3_groups_b, "spark_jobs.compact.run (s3)")
                runs.append(bare_copy_s3(sc, loc_b, s3_groups_b))
                rates = [n / 1e6 / s for n, s in runs]
                rec.record("spark.concat_s3", statistics.mean(rates),
                           "mean of before / after: " + " / ".join(f"{n / 1e6:.0f} MB in {s:.2f} s" for n, s in runs)
                           + f"; {sizes}; parts and copies through the tier's S3 client")
                mb = stats["bytes"] / 1e6
                driver = sum(spent.values())
                rec.record("spark.compaction_s3", mb / seconds,
                           f"{mb:.0f} MB, {len(s3_groups_b)} groups in {seconds:.2f} s: commits "
                           f"{spent.get('commit', 0):.2f} s, garbage listing {spent.get('collect_garbage', 0):.2f} s, "
                           f"Spark merges (+ snapshot, plan) {seconds - driver:.2f} s")
        finally:
            stop_session(spark)
            if old_path is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old_path
    finally:
        stop_all(daemons)


if __name__ == "__main__":
    from bench.runner import main

    raise SystemExit(main(["--only", "spark", *sys.argv[1:]]))

"""Shared pieces of the Spark job acceptance tests (issue 8): a broker with tiny tiered segments, messages sent
with known expectations and read back through the broker, the tier's objects and metadata, and the jobs run
the way users run them (``python -m spark_jobs.X`` as a child process, real PySpark on ``local[2]``).

Helpers are plain functions here (the test modules import them) plus one fixture: a module-scoped in-process
SparkSession for the DataFrame tests."""

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

from client import Admin, Message, MessageQueue, Producer, PullConsumer
from client.results import PullStatus, SendResult
from spark_jobs import tier_objects
from spark_jobs.broker_tier import COMMIT_LOG, CONSUME_QUEUE, EXPIRED, BrokerTier, S3Access, TierSnapshot
from tests.cluster import REPO, Cluster, make_cluster, wait_until
from tests.s3_server import ACCESS_KEY, SECRET_KEY, S3Server, s3_server

__all__ = ["s3_server"]  # the fixture, for the s3 tier's runs
S3_JOB_ARGS = ("--s3-access-key", ACCESS_KEY, "--s3-secret-key", SECRET_KEY)  # the broker never sends its keys

BROKER = "broker-a"
PYTHON = sys.executable
JOB_TAG = "PYROCKETMQ_SPARK_TEST_JOB"  # marks every process of one job run (driver, JVM, Python workers)
CL_SEGMENT = 4096  # tiered commitlog segment: three of our ~1.15 KB records fill one
CQ_SEGMENT = 56  # tiered consume queue segment: two units
BODY = 1000

# expected[queue_id][queue_offset] = (body, tags, keys)
Expected = dict[int, dict[int, tuple[bytes, str, list[str]]]]


@dataclass(frozen=True)
class TierBackend:
    """Where a test's brokers keep their tier: posix (no server), or buckets on moto's S3 server."""

    server: S3Server | None = None

    def broker_conf(self) -> dict[str, object]:
        """Broker settings for this tier (s3: a new bucket per call)."""
        return self.server.broker_conf() if self.server else {}

    @property
    def access(self) -> S3Access | None:
        """What a job adds to reach the tier (s3: the keys the broker never sends)."""
        return S3Access(access_key=ACCESS_KEY, secret_key=SECRET_KEY) if self.server else None

    @property
    def job_args(self) -> tuple[str, ...]:
        return S3_JOB_ARGS if self.server else ()


# -- the broker -----------------------------------------------------------------------------------------------
def tiered_cluster(workdir: Path, broker_names: tuple[str, ...] = (BROKER,), **conf: object) -> Cluster:
    """A name server and brokers whose tier (posix) takes uploads quickly in tiny segments; reads hit the tier
    whenever it has the data (FORCE)."""
    settings: dict[str, object] = {
        "tieredStoreEnable": "true",
        "tieredBackendServiceProvider": "posix",
        "tieredStorageLevel": "FORCE",
        "tieredStoreGroupCommitAge": 50,
        "tieredStoreGroupCommitCount": 64,
        "tieredStoreCommitLogMaxSize": CL_SEGMENT,
        "tieredStoreConsumeQueueMaxSize": CQ_SEGMENT,
        "registerNameServerPeriod": 1000,
    }
    settings.update(conf)
    return make_cluster(workdir, broker_names, **settings)


def broker_addr(cluster: Cluster, name: str = BROKER) -> str:
    return cluster.brokers[name].addr


def body_of(topic: str, n: int, size: int = BODY) -> bytes:
    head = f"{topic}-{n:07d}-".encode()
    filler = bytes((n * 131 + i * 7) % 251 for i in range(size - len(head)))
    return head + filler


def make_message(topic: str, n: int, size: int = BODY) -> Message:
    return Message(topic, body_of(topic, n, size), tags=f"tag{n % 3}", keys=[f"key-{n}", f"group-{n % 5}"])


def record(expected: Expected, batch: list[Message], result: SendResult) -> None:
    queue = expected.setdefault(result.queue.queue_id, {})
    for i, m in enumerate(batch):
        assert result.queue_offset + i not in queue, f"offset {result.queue_offset + i} acknowledged twice"
        queue[result.queue_offset + i] = (m.body, m.tags or "", m.key_list())


def produce(cluster: Cluster, topic: str, batches_per_queue: int, expected: Expected, batch: int = 3,
            size: int = BODY) -> None:
    """``batches_per_queue`` batches of ``batch`` messages to every queue (a batch of three ~1.15 KB records
    fills one 4 KiB tiered commitlog segment); what was acknowledged goes into ``expected``."""
    first = sum(len(q) for q in expected.values())
    with Producer(cluster.addr) as producer:
        mqs = sorted(producer.client.publish_queues(topic, refresh=True), key=lambda q: q.queue_id)
        sent: list[tuple[list[Message], Future[SendResult]]] = []
        n = first
        for _ in range(batches_per_queue):
            for mq in mqs:
                msgs = [make_message(topic, n + i, size) for i in range(batch)]
                n += batch
                sent.append((msgs, producer.send_batch_async(msgs, queue=mq)))
        for msgs, future in sent:
            record(expected, msgs, future.result())
    check_contiguous(expected)


def check_contiguous(expected: Expected) -> None:
    for q, msgs in expected.items():
        assert sorted(msgs) == list(range(len(msgs))), f"queue {q}: acknowledged offsets are not 0..n-1"


def tiered_status(cluster: Cluster, topic: str) -> dict[int, object]:
    with Admin(cluster.addr) as admin:
        (status,) = admin.tiered_status(topic)
    return {q.queue_id: q for q in status.queues}


def wait_uploaded(cluster: Cluster, topic: str, expected: Expected, timeout: float = 60.0) -> dict[int, object]:
    """Every message the test sent is in the tier."""
    def done() -> dict[int, object] | None:
        status = tiered_status(cluster, topic)
        ok = all(q in status and status[q].upload_lag == 0 and status[q].tiered_max_offset == len(msgs)
                 for q, msgs in expected.items())
        return status if ok else None

    return wait_until(done, timeout=timeout, interval=0.1, what=f"upload of {topic} to the tier")


# -- reading through the broker -------------------------------------------------------------------------------
def read_queue(consumer: PullConsumer, mq: MessageQueue, start: int, end: int, max_nums: int = 64) -> Iterator:
    """Every message of ``mq`` in ``[start, end)``, checking offsets are contiguous."""
    offset = start
    while offset < end:
        result = consumer.pull(mq, offset=offset, max_nums=max_nums)
        assert result.status is PullStatus.FOUND, (mq, offset, result.status, result.next_begin_offset,
                                                   result.min_offset, result.max_offset)
        for m in result.messages:
            assert m.queue_offset == offset, (mq, m.queue_offset, offset)
            offset += 1
            yield m
        assert result.next_begin_offset == offset, (mq, result.next_begin_offset, offset)


def check_everything(consumer: PullConsumer, topic: str, expected: Expected, start: dict[int, int] | None = None,
                     ) -> int:
    """Read every queue of ``topic`` from ``start`` (default 0) to its expected end: every message, in order,
    with its original offset, body, tags and keys, and nothing more. Returns messages read."""
    got = 0
    queues = consumer.queues(topic)
    assert sorted(mq.queue_id for mq in queues) == sorted(expected), (queues, sorted(expected))
    for mq in queues:
        want = expected[mq.queue_id]
        first = (start or {}).get(mq.queue_id, 0)
        for m in read_queue(consumer, mq, first, len(want)):
            body, tags, keys = want[m.queue_offset]
            assert (m.body, m.tags, m.keys, m.topic) == (body, tags, keys, topic), (mq, m.queue_offset)
            got += 1
        tail = consumer.pull(mq, offset=len(want), max_nums=8)
        assert tail.status is PullStatus.NO_NEW_MSG, (mq, len(want), tail.status)
    return got


# -- the tier -------------------------------------------------------------------------------------------------
def snapshot(addr: str, topic: str = "") -> TierSnapshot:
    with BrokerTier(addr, S3Access(access_key=ACCESS_KEY, secret_key=SECRET_KEY)) as tier:  # keys: s3 tier only
        return tier.snapshot(topic)


def readable(snap: TierSnapshot) -> list:
    return [s for s in snap.segments if s.status != EXPIRED]


def tier_files(snap: TierSnapshot) -> dict[str, tuple[int, int]]:
    """Every file under the broker's tier directory (or key prefix): relative path -> (size, mtime_ns)."""
    if snap.location.is_s3:
        listing = snap.location.factory().list_objects(snap.broker_name)
        return {p: (tier_objects.object_size(snap.location, p), int(t * 1e9)) for p, t in listing.items()}
    base = snap.root / snap.broker_name
    out = {}
    for file in base.rglob("*"):
        if file.is_file():
            st = file.stat()
            out[str(file.relative_to(snap.root))] = (st.st_size, st.st_mtime_ns)
    return out


def streams(snap: TierSnapshot) -> dict[tuple[str, int, int], bytes]:
    """Per (topic, queue, type): the bytes the readable segments serve, checked to be contiguous."""
    out = {}
    for key, segs in snap.by_file().items():
        parts = []
        for prev, seg in itertools.pairwise(segs):
            assert prev.base_offset + prev.size == seg.base_offset, (key, prev.path, seg.path)
        for seg in segs:
            data = tier_objects.read_object(snap.location, seg.path)
            assert len(data) >= seg.size, f"{seg.path}: {len(data)} bytes, record says {seg.size}"
            parts.append(data[: seg.size])
        out[key] = b"".join(parts)
    return out


def check_no_dangling(snap: TierSnapshot) -> None:
    """Every readable segment record's object exists and holds at least its recorded size."""
    for seg in readable(snap):
        size = tier_objects.object_size(snap.location, seg.path) if snap.location.is_s3 else -1
        if not snap.location.is_s3:
            file = snap.root / seg.path
            assert file.is_file(), f"segment record {seg.path} has no object"
            size = file.stat().st_size
        assert size >= seg.size, f"{seg.path}: {size} < recorded {seg.size} (no object?)"


def check_broker_view(cluster: Cluster, topic: str, snap: TierSnapshot) -> None:
    """The broker serves the segments its metadata records (its in-memory lists agree with the snapshot)."""
    status = tiered_status(cluster, topic)
    files = snap.by_file()
    for q, st in status.items():
        counts = (len(files.get((topic, q, COMMIT_LOG), [])), len(files.get((topic, q, CONSUME_QUEUE), [])))
        assert (st.commit_log_segments, st.consume_queue_segments) == counts, (q, st, counts)


def unreferenced(snap: TierSnapshot, files: dict[str, tuple[int, int]]) -> list[str]:
    referenced = {s.path for s in snap.segments}
    return sorted(p for p in files if p not in referenced)


# -- jobs -----------------------------------------------------------------------------------------------------
def job_command(module: str, *args: str) -> list[str]:
    return [PYTHON, "-m", module, *args]


JOB_TIMEOUT_S = 480.0  # a hung job's bound, not a speed check: the cluster compaction took 175 s in CI, over 240 s here


def run_job(module: str, *args: str, timeout: float = JOB_TIMEOUT_S, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess:
    """``env``: the job's environment (default this process's; a standalone cluster's for a ``spark://`` master)."""
    return subprocess.run(job_command(module, *args), capture_output=True, text=True, cwd=REPO, timeout=timeout,
                          env=env)


SUMMARY = re.compile(r"^(\w+): ((?:\w+=\S+ ?)+)$")


def parse_summary(stdout: str, job: str) -> dict[str, float]:
    """The numbers of a job's summary line (on a cluster it also names the master and application: those are in
    :func:`summary_fields`)."""
    return {k: float(v) for k, v in summary_fields(stdout, job).items() if k not in ("master", "app_id")}


def summary_fields(stdout: str, job: str) -> dict[str, str]:
    lines = [line for line in stdout.splitlines() if line.startswith(f"{job}: ")]
    assert len(lines) == 1, f"want one summary line of {job}, stdout was:\n{stdout}"
    match = SUMMARY.match(lines[0])
    assert match, lines[0]
    return dict(kv.split("=", 1) for kv in match.group(2).split())


def start_job(module: str, *args: str, log: Path) -> tuple[subprocess.Popen, str]:
    """A job in its own session (its JVM child joins its process group); every process it starts inherits a
    tag in its environment so the test can wait for all of them to be gone after a kill."""
    tag = uuid.uuid4().hex
    env = {**os.environ, JOB_TAG: tag}
    with open(log, "wb") as out:
        proc = subprocess.Popen(job_command(module, *args), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, tag


def tagged_pids(tag: str) -> list[int]:
    needle = f"{JOB_TAG}={tag}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            try:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                pids.append(int(entry.name))
    return pids


def kill_job(proc: subprocess.Popen, tag: str) -> None:
    """SIGKILL the job's whole process group (driver and JVM), then wait until every process of the run is gone
    (PySpark's worker daemon has its own group and exits when the JVM's pipe closes)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while (pids := tagged_pids(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in tagged_pids(tag):  # the run's own leftovers, by id
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not tagged_pids(tag), timeout=10, what=f"processes of job run {tag} to exit ({pids})")


# -- the in-process session -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark():
    from spark_jobs.session import spark_session

    session = spark_session("tests-spark", "local[2]")
    try:
        yield session
    finally:
        session.stop()

"""Tiered storage benchmarks (issue 7): a name server and one broker (``tieredStoreEnable=true``,
``tieredBackendServiceProvider=posix`` under its store directory, default group commit: 2048 messages,
8 MiB or 500 ms a queue) as real processes, the SDK here, 1 KiB bodies, one topic of 8 queues.

- upload lag: SDK batches of ``PRODUCE_BATCH`` (``send_batch_async``, round-robin over the 8 queues) paced at
  ``RATE`` msgs/s (one batch every ``PRODUCE_BATCH / RATE`` s, at most ``MAX_IN_FLIGHT`` batches in flight: a
  producer that cannot keep up falls behind and the achieved rate is reported) for ``PRODUCE_SECONDS`` of the
  mode. A thread samples ``Admin.tiered_status`` every ``SAMPLE_S`` (its own connection): the lag is the sum
  over queues of ``upload_lag`` (local max - tiered max offset). Rows: the peak while producing, the lag
  ``AFTER_S`` after the last send was acknowledged, the achieved produce rate. "Bounded" (judged here): the
  lag 1 s after producing stopped is at most one group commit a queue (it caught up), and the peak of the
  second half of the produce phase is not above the first half's by more than one group commit a queue (it
  did not grow with time);
- reads: the same messages (everything produced above, all in the tier once the lag is 0) read once each
  with ``tieredStorageLevel=DISABLE`` (local) and once with ``FORCE`` (every pull served from the tier),
  restarting the broker on the same store with the changed broker.conf, in alternating rounds (local, tier,
  local, tier, ...; the mean of each) so drift hits both alike. A read keeps ``Config.window`` pulls of 64 in
  flight round-robin over the queues (as the cluster bench's consume), every queue from its min offset to its
  max, a short answer pulling the rest of its range again; every message is counted exactly once.
- the S3 tier (issue 18): moto's S3 server as a child process on loopback (``cluster/s3_server.py``, as the
  tests start it) and a second broker beside the first (``tieredBackendServiceProvider=s3`` into a new bucket,
  ``tieredStorageLevel=FORCE``, the same group commit), its own topic of 8 queues. Produce as above for
  ``S3_PRODUCE_SECONDS`` of the mode (the achieved rate is the row; the note says how long the tier took to
  catch up after the last acknowledgement), then, once everything is uploaded, every round of the reads above
  also reads all of that topic once from the S3 tier (local, tier, S3 tier, local, ...): target >= 0.3x the
  local read of the same rounds. Without moto (or a server that does not start) these rows say "not run" and
  why.
"""

import contextlib
import statistics
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from bench.daemons import Daemon, start_broker, start_namesrv, stop_all, wait_until
from bench.harness import BATCH, BODY, MET, NOT_MET, Config, Metric, Recorder, Target
from client import Admin, Message, Producer, PullConsumer
from cluster.s3_server import S3Server, moto_missing, s3_server_process
from common.message_queue import MessageQueue

TOPIC = "TieredBenchT"
BROKER = "broker-tiered"
TOPIC_S3 = "TieredBenchS3T"
BROKER_S3 = "broker-tiered-s3"
S3_PRODUCE_SECONDS = {"smoke": 0.3, "quick": 2.0, "full": 10.0}  # moto keeps every object in its memory
S3_CATCH_UP_S = 180
QUEUES = 8
RATE = 50_000  # msgs/s asked of the producer
PRODUCE_BATCH = 128
MAX_IN_FLIGHT = 32  # batches
PRODUCE_SECONDS = {"smoke": 0.5, "quick": 5.0, "full": 10.0}
READ_ROUNDS = {"smoke": 1, "quick": 2, "full": 3}
SAMPLE_S = 0.1
AFTER_S = 1.0
GROUP_COMMIT_COUNT = 2048  # the broker's default, set explicitly so the "bounded" judgement matches it
BROKER_SETTINGS: dict[str, Any] = dict(registerNameServerPeriod=1000, tieredStoreEnable="true",
                                       tieredBackendServiceProvider="posix",
                                       tieredStoreGroupCommitCount=GROUP_COMMIT_COUNT)

METRICS = [
    Metric("tiered.produce_rate", "produce at a fixed rate, SDK batches of 128", "msgs/s", echo="batch",
           target=Target(">=", RATE * 0.98, text=f">= {RATE:,} asked"), issue=7),
    Metric("tiered.upload_lag", "tiered upload lag peak while producing", "msgs", issue=7, target_note="bounded"),
    Metric("tiered.upload_lag_after", "tiered upload lag 1 s after producing stopped", "msgs", issue=7,
           target_note="bounded"),
    Metric("tiered.read_local", "read local data (tieredStorageLevel=DISABLE)", "msgs/s", echo="batch", issue=7,
           short="local"),
    Metric("tiered.read", "read from the tier (tieredStorageLevel=FORCE)", "msgs/s", echo="batch",
           vs="tiered.read_local", target=Target(">=", 0.5, of="tiered.read_local"), issue=7),
    Metric("tiered.produce_rate_s3", "produce at a fixed rate, S3 tier (moto), SDK batches of 128", "msgs/s",
           echo="batch", issue=18),
    Metric("tiered.read_s3", "read from the S3 tier (moto, tieredStorageLevel=FORCE)", "msgs/s", echo="batch",
           vs="tiered.read_local", target=Target(">=", 0.3, of="tiered.read_local"), issue=18),
]
S3_METRICS = ("tiered.produce_rate_s3", "tiered.read_s3")


# -- upload lag ----------------------------------------------------------------------------------------
class LagSampler:
    """Sum of the topic's ``upload_lag`` every ``SAMPLE_S`` in a thread: (seconds since start, lag) samples."""

    def __init__(self, ns_addr: str) -> None:
        self.admin = Admin(ns_addr)
        self.samples: list[tuple[float, int]] = []
        self.errors = 0
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tiered-lag-sampler", daemon=True)

    def lag(self) -> int:
        return sum(q.upload_lag for r in self.admin.tiered_status(TOPIC) for q in r.queues)

    def _run(self) -> None:
        next_at = time.perf_counter()
        while not self._stop.is_set():
            try:
                lag = self.lag()
            except Exception:  # counted: a status call that failed under load is itself a finding
                self.errors += 1
            else:
                self.samples.append((time.perf_counter() - self.t0, lag))
            next_at += SAMPLE_S
            self._stop.wait(max(0.0, next_at - time.perf_counter()))

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.admin.close()

    def peak(self, start: float, end: float) -> int:
        return max((lag for t, lag in self.samples if start <= t <= end), default=0)


def produce_paced(producer: Producer, rate: int, seconds: float, topic: str = TOPIC) -> tuple[int, float]:
    """Batches at ``rate`` msgs/s (behind schedule: as fast as ``MAX_IN_FLIGHT`` allows) until ``seconds`` have
    passed; (messages acknowledged, seconds from the first send to the last acknowledgement)."""
    msgs = [Message(topic, BODY) for _ in range(PRODUCE_BATCH)]
    interval = PRODUCE_BATCH / rate
    in_flight: deque[Future] = deque()
    acked = 0
    t0 = time.perf_counter()
    stop = t0 + seconds
    i = 0
    while True:
        while in_flight and (in_flight[0].done() or len(in_flight) >= MAX_IN_FLIGHT):
            acked += in_flight.popleft().result().count
        due = t0 + i * interval
        if due >= stop:
            break
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        elif time.perf_counter() >= stop:
            break
        in_flight.append(producer.send_batch_async(msgs))
        i += 1
    while in_flight:
        acked += in_flight.popleft().result().count
    return acked, time.perf_counter() - t0


# -- reads ---------------------------------------------------------------------------------------------
def read_all(consumer: PullConsumer, ranges: dict[MessageQueue, tuple[int, int]], window: int) -> tuple[int, float]:
    """Every message in ``ranges`` once: ``window`` pulls of up to 64 in flight, round-robin over the queues;
    (messages read, seconds)."""
    todo: dict[MessageQueue, deque[tuple[int, int]]] = {
        mq: deque((o, min(BATCH, end - o)) for o in range(start, end, BATCH)) for mq, (start, end) in ranges.items()}
    order = [mq for mq in todo if todo[mq]]
    expected = sum(end - start for start, end in ranges.values())
    turn = 0
    in_flight: deque[tuple[MessageQueue, int, int, Future]] = deque()

    def submit() -> bool:
        nonlocal turn
        for _ in range(len(order)):
            mq = order[turn % len(order)]
            turn += 1
            if todo[mq]:
                offset, n = todo[mq].popleft()
                in_flight.append((mq, offset, n, consumer.pull_async(mq, offset, n)))
                return True
        return False

    read = 0
    t0 = time.perf_counter()
    for _ in range(window):
        submit()
    while in_flight:
        mq, offset, n, future = in_flight.popleft()
        result = future.result()
        got = len(result.messages)
        if got == 0:
            raise RuntimeError(f"read {mq.queue_id}@{offset}: nothing ({result.status}) below the end it reported")
        read += got
        if got < n:  # a short answer (byte limit): the rest of this range next
            todo[mq].appendleft((offset + got, n - got))
        submit()
    seconds = time.perf_counter() - t0
    if read != expected:
        raise RuntimeError(f"read {read:,} messages, expected {expected:,}")
    return read, seconds


def _start(workdir: Path, ns_addr: str, level: str) -> Daemon:
    return start_broker(workdir, BROKER, ns_addr, tieredStorageLevel=level, **BROKER_SETTINGS)


def _wait_routed(admin: Admin, broker: Daemon) -> None:
    def routed() -> bool:
        route = admin.client.route(TOPIC, refresh=True)
        return any(bd.broker_addrs.get(0) == broker.addr for bd in route.broker_datas)

    wait_until(routed, timeout=15, what=f"the route of {TOPIC} to the restarted broker")


def _read_round(ns_addr: str, level: str, cfg: Config, topic: str = TOPIC) -> float:
    with Admin(ns_addr) as admin:
        status = admin.tiered_status(topic)[0]
        if status.storage_level != level:
            raise RuntimeError(f"broker reads at level {status.storage_level}, expected {level}")
        if level == "FORCE" and any(q.tiered_min_offset > q.local_min_offset or q.upload_lag for q in status.queues):
            raise RuntimeError(f"the tier does not hold every message: {status}")
    with PullConsumer(ns_addr, group="bench") as consumer:
        queues = consumer.queues(topic)
        ranges = {mq: (consumer.min_offset(mq), consumer.max_offset(mq)) for mq in queues}
        read, seconds = read_all(consumer, ranges, cfg.window)
    return read / seconds


def _s3_lag(admin: Admin) -> int:
    return sum(q.upload_lag for r in admin.tiered_status(TOPIC_S3) for q in r.queues)


def _s3_produce(cfg: Config, workdir: Path, ns_addr: str, stack: contextlib.ExitStack, daemons: list[Daemon],
                rec: Recorder) -> int:
    """moto's server (closed by ``stack``) and a broker on it at FORCE; produce to it paced and wait until the
    tier holds everything. Returns the messages in its topic; 0 (the rows say "not run" and why) without moto."""
    why = moto_missing()
    server: S3Server | None = None
    if not why:
        try:
            server = stack.enter_context(s3_server_process())
        except Exception as exc:  # no server: the S3 rows are not run, the posix ones still are
            why = f"moto's S3 server did not start: {exc}"
    if server is None:
        for metric_id in S3_METRICS:
            rec.skip(metric_id, f"no S3 server: {why}")
        return 0
    settings = {**BROKER_SETTINGS, **server.broker_conf(), "tieredStorageLevel": "FORCE"}
    broker = start_broker(workdir, BROKER_S3, ns_addr, **settings)
    daemons.insert(0, broker)
    seconds = S3_PRODUCE_SECONDS[cfg.mode]
    with Admin(ns_addr) as admin:
        admin.create_topic(TOPIC_S3, brokers=[BROKER_S3], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        wait_until(lambda: TOPIC_S3 in set(admin.topic_list()), what="topic route")
        with Producer(ns_addr) as producer:
            producer.send_batch([Message(TOPIC_S3, BODY)] * PRODUCE_BATCH)  # route and connection
            acked, took = produce_paced(producer, RATE, seconds, TOPIC_S3)
        t0 = time.perf_counter()
        lag_at_end = _s3_lag(admin)
        wait_until(lambda: _s3_lag(admin) == 0, timeout=S3_CATCH_UP_S, interval=0.1,
                   what="the S3 tier to catch up")
        caught_up = time.perf_counter() - t0
    rate = acked / took
    rec.record("tiered.produce_rate_s3", rate,
               f"{RATE:,} asked for {seconds:g} s; lag {lag_at_end:,} at the last ack, all in the S3 tier "
               f"{caught_up:.1f} s later")
    return acked + PRODUCE_BATCH


def scenario(cfg: Config, rec: Recorder) -> None:
    with contextlib.ExitStack() as stack:  # moto's server, if started: stopped after the brokers
        _scenario(cfg, rec, stack)


def _scenario(cfg: Config, rec: Recorder, stack: contextlib.ExitStack) -> None:
    workdir = cfg.workdir / "tiered"
    ns = start_namesrv(workdir)
    daemons = [ns]
    try:
        broker = _start(workdir, ns.addr, "DISABLE")
        daemons.insert(0, broker)
        with Admin(ns.addr) as admin:
            admin.create_topic(TOPIC, brokers=[BROKER], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            wait_until(lambda: TOPIC in set(admin.topic_list()), what="topic route")

        # -- upload keeps pace with produce
        seconds = PRODUCE_SECONDS[cfg.mode]
        sampler = LagSampler(ns.addr)
        sampler.lag()  # the first status call (connection, route) before sampling starts
        with Producer(ns.addr) as producer:
            producer.send_batch([Message(TOPIC, BODY)] * PRODUCE_BATCH)  # route and connection
            sampler.start()
            try:
                start = time.perf_counter() - sampler.t0
                acked, took = produce_paced(producer, RATE, seconds)
                end = time.perf_counter() - sampler.t0
                time.sleep(AFTER_S)
            finally:
                sampler.stop()
        after = min(sampler.samples, key=lambda s: abs(s[0] - (end + AFTER_S)))[1] if sampler.samples else None
        if after is None:
            raise RuntimeError(f"no tiered status sample ({sampler.errors} calls failed)")
        peak = sampler.peak(start, end)
        mid = (start + end) / 2
        first_half, second_half = sampler.peak(start, mid), sampler.peak(mid, end)
        one_commit = GROUP_COMMIT_COUNT * QUEUES
        rate = acked / took
        rec.record("tiered.produce_rate", rate, f"{RATE:,} asked for {seconds:g} s"
                   + ("" if rate >= RATE * 0.98 else ": the most this producer reached against this broker"))
        rec.record("tiered.upload_lag", peak,
                   f"halves {first_half:,} / {second_half:,}; {len(sampler.samples)} samples"
                   + (f", {sampler.errors} failed" if sampler.errors else ""))
        rec.record("tiered.upload_lag_after", after, f"<= {one_commit:,} (1 group commit a queue) = caught up")
        bounded = after <= one_commit and second_half <= first_half + one_commit
        rec.status["tiered.upload_lag"] = rec.status["tiered.upload_lag_after"] = MET if bounded else NOT_MET
        with Admin(ns.addr) as admin:
            wait_until(lambda: sum(q.upload_lag for q in admin.tiered_status(TOPIC)[0].queues) == 0, timeout=60,
                       interval=0.1, what="the tier to catch up")

        # -- the S3 tier: a second broker, produced to while the first one idles
        s3_total = _s3_produce(cfg, workdir, ns.addr, stack, daemons, rec)

        # -- reading from the tier vs local: the same messages, the broker restarted at each level
        rates: dict[str, list[float]] = {"DISABLE": [], "FORCE": [], "S3": []}
        for r in range(READ_ROUNDS[cfg.mode]):
            for level in ("DISABLE", "FORCE"):
                if r or level != "DISABLE":
                    broker.stop()
                    daemons.remove(broker)
                    broker = _start(workdir, ns.addr, level)
                    daemons.insert(0, broker)
                    with Admin(ns.addr) as admin:
                        _wait_routed(admin, broker)
                rates[level].append(_read_round(ns.addr, level, cfg))
            if s3_total:  # the S3 broker stays at FORCE: its whole topic from the tier
                rates["S3"].append(_read_round(ns.addr, "FORCE", cfg, TOPIC_S3))
        n = len(rates["DISABLE"])
        total = acked + PRODUCE_BATCH
        for metric_id, level in (("tiered.read_local", "DISABLE"), ("tiered.read", "FORCE")):
            each = " / ".join(f"{x / 1000:.1f}k" for x in rates[level])
            rec.record(metric_id, statistics.mean(rates[level]),
                       f"{total:,} msgs, mean of {n}: {each}" if n > 1 else f"{total:,} msgs")
        if s3_total:
            each = " / ".join(f"{x / 1000:.1f}k" for x in rates["S3"])
            rec.record("tiered.read_s3", statistics.mean(rates["S3"]),
                       f"{s3_total:,} msgs (its own topic), mean of {n}: {each}" if n > 1 else f"{s3_total:,} msgs")
    finally:
        stop_all(daemons)


if __name__ == "__main__":
    import sys

    from bench.runner import main

    raise SystemExit(main(["--only", "tiered", *sys.argv[1:]]))

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
"""

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
from common.message_queue import MessageQueue

TOPIC = "TieredBenchT"
BROKER = "broker-tiered"
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
]


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


def produce_paced(producer: Producer, rate: int, seconds: float) -> tuple[int, float]:
    """Batches at ``rate`` msgs/s (behind schedule: as fast as ``MAX_IN_FLIGHT`` allows) until ``seconds`` have
    passed; (messages acknowledged, seconds from the first send to the last acknowledgement)."""
    msgs = [Message(TOPIC, BODY) for _ in range(PRODUCE_BATCH)]
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


def _read_round(ns_addr: str, level: str, cfg: Config) -> float:
    with Admin(ns_addr) as admin:
        status = admin.tiered_status(TOPIC)[0]
        if status.storage_level != level:
            raise RuntimeError(f"broker reads at level {status.storage_level}, expected {level}")
        if level == "FORCE" and any(q.tiered_min_offset > q.local_min_offset or q.upload_lag for q in status.queues):
            raise RuntimeError(f"the tier does not hold every message: {status}")
    with PullConsumer(ns_addr, group="bench") as consumer:
        queues = consumer.queues(TOPIC)
        ranges = {mq: (consumer.min_offset(mq), consumer.max_offset(mq)) for mq in queues}
        read, seconds = read_all(consumer, ranges, cfg.window)
    return read / seconds


def scenario(cfg: Config, rec: Recorder) -> None:
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

        # -- reading from the tier vs local: the same messages, the broker restarted at each level
        rates: dict[str, list[float]] = {"DISABLE": [], "FORCE": []}
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
        n = len(rates["DISABLE"])
        total = acked + PRODUCE_BATCH
        for metric_id, level in (("tiered.read_local", "DISABLE"), ("tiered.read", "FORCE")):
            each = " / ".join(f"{x / 1000:.1f}k" for x in rates[level])
            rec.record(metric_id, statistics.mean(rates[level]),
                       f"{total:,} msgs, mean of {n}: {each}" if n > 1 else f"{total:,} msgs")
    finally:
        stop_all(daemons)


if __name__ == "__main__":
    import sys

    from bench.runner import main

    raise SystemExit(main(["--only", "tiered", *sys.argv[1:]]))

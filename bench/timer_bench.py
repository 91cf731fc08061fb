"""Delayed and timed messages (issue 15 item 5): a name server and one broker (ASYNC_FLUSH, default store) as real
processes, the SDK here.

``TIMERS`` of the mode (100,000 in quick and full mode) are sent as timed messages (``deliver_at_ms``; 1 KiB
bodies that carry their own due time, batches of 64, ``--window`` batches in flight) with due times spread evenly
over ``SPAN_S`` seconds that start ``LEAD_S`` seconds after the first send: every timer is pending before the
first is due (else the restart's note says so). Then:

- delayed send rate: msgs/s of those sends (re-encoded by the broker into the timer topic), beside the batch echo;
- broker restart with every timer pending: the broker is SIGKILLed once all are pending (``timerPending`` of its
  runtime info), and restarted on its store; seconds from launching the process to its ready line (imports,
  store recovery with the timer store's replay and count, name-server registration). The note shows what it
  loaded (``timer_loaded pending=N``);
- delivery lateness p50 / p99: a consumer here long-polls every queue at once; lateness = the time a message
  reached the consumer minus its due time (from its body). The note gives the broker's share: store time minus
  due (p99). A message that arrived before its due time fails the scenario.

Both machines' clocks are this one's. Numbers from a shared 2-core machine are noisy: compare ratios within one
run, and the lateness against the echo round trip of the same run.
"""

import struct
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path

from bench.daemons import Daemon, start_broker, start_namesrv, stop_all, wait_until
from bench.harness import BATCH, BODY, SCALED, Config, Metric, Recorder, Target, percentile
from client import Admin, Message, Producer, PullConsumer, PullResult
from common.message_queue import MessageQueue

BROKER = "broker-timer"
TOPIC = "BenchTimer"
QUEUES = 8
TIMERS = {"smoke": 2_000, "quick": 100_000, "full": 100_000}
LEAD_S = {"smoke": 4.0, "quick": 10.0, "full": 16.0}  # from the first send to the first due time
SPAN_S = {"smoke": 1.0, "quick": 10.0, "full": 10.0}  # due times spread over this
TARGET_TIMERS = 100_000
DUE = struct.Struct(">qq")  # due ms, message number: the head of each body

METRICS = [
    Metric("timer.send", "delayed send (deliver_at_ms), 64 a batch", "msgs/s", echo="batch", issue=15),
    Metric("timer.restart", "broker restart after SIGKILL, 100k timers pending", "s", echo="p50",
           target=Target("<=", 5), issue=15),
    Metric("timer.lateness_p50", "delivery lateness p50, 100k timers pending", "ms", echo="p50", issue=15),
    Metric("timer.lateness_p99", "delivery lateness p99, 100k timers pending", "ms", echo="p99",
           target=Target("<=", 1000, text="<= 1 s"), issue=15),
]


def _start(workdir: Path, ns_addr: str) -> tuple[Daemon, float]:
    t0 = time.perf_counter()
    broker = start_broker(workdir, BROKER, ns_addr, registerNameServerPeriod=1000)
    return broker, time.perf_counter() - t0


def _runtime(ns_addr: str, broker: Daemon) -> dict[str, str]:
    with Admin(ns_addr) as admin:
        return admin.broker_runtime_info(broker.addr)


def _stored_timers(ns_addr: str, broker: Daemon) -> int:
    """Pending and delivered: on a machine too slow to send them all within the lead, some are due already."""
    info = _runtime(ns_addr, broker)
    return int(info["timerPending"]) + int(info["timerDelivered"])


def _send(ns_addr: str, count: int, first_due_ms: int, span_ms: int, window: int) -> float:
    """Send ``count`` timed messages, ``window`` batches in flight; msgs/s."""
    pad = BODY[DUE.size:]
    with Producer(ns_addr) as producer:
        in_flight: list[Future] = []
        t0 = time.perf_counter()
        for start in range(0, count, BATCH):
            msgs = []
            for i in range(start, min(start + BATCH, count)):
                due = first_due_ms + i * span_ms // count
                msgs.append(Message(TOPIC, DUE.pack(due, i) + pad, deliver_at_ms=due))
            in_flight.append(producer.send_batch_async(msgs))
            if len(in_flight) >= window:
                in_flight.pop(0).result(timeout=60)
        for f in in_flight:
            f.result(timeout=60)
        return count / (time.perf_counter() - t0)


def _receive(ns_addr: str, count: int, timeout_s: float) -> tuple[list[float], list[float]]:
    """Long-poll every queue until ``count`` distinct messages came; each one's lateness at the consumer and in
    the store (ms past its due time). Raises if one came early."""
    lateness: dict[int, float] = {}
    stored: dict[int, float] = {}
    early: list[tuple[int, float, int]] = []  # message number, ms arrived and ms stored past its due time
    with PullConsumer(ns_addr, group="bench-timer") as consumer:
        queues = consumer.queues(TOPIC)
        offsets = {mq: 0 for mq in queues}
        pulls: dict[MessageQueue, Future[PullResult]] = {}
        arrived_ms: dict[Future[PullResult], float] = {}  # stamped as each pull completes, not when looked at
        deadline = time.monotonic() + timeout_s
        while len(lateness) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(lateness):,} of {count:,} delayed messages came within {timeout_s:.0f} s")
            for mq in queues:
                if mq not in pulls:
                    pulls[mq] = consumer.pull_async(mq, offsets[mq], 256, suspend_ms=200)
                    pulls[mq].add_done_callback(lambda f: arrived_ms.__setitem__(f, time.time() * 1000))
            wait(list(pulls.values()), timeout=1, return_when=FIRST_COMPLETED)
            for mq, pull in list(pulls.items()):
                if not pull.done():
                    continue
                del pulls[mq]
                arrived = arrived_ms.pop(pull, time.time() * 1000)  # (done, its callback not yet run: now)
                result = pull.result()
                offsets[mq] = result.next_begin_offset
                for m in result.messages:
                    due, number = DUE.unpack_from(m.body)
                    if number not in lateness:
                        lateness[number] = arrived - due
                        stored[number] = m.store_timestamp - due
                        if arrived < due or m.store_timestamp < due:
                            early.append((number, round(arrived - due, 1), m.store_timestamp - due))
        for pull in pulls.values():
            pull.result()
    if early:
        raise AssertionError(f"{len(early)} delivered before due (number, arrived - due ms, stored - due ms), "
                             f"e.g. {early[:3]}")
    return list(lateness.values()), list(stored.values())


def scenario(cfg: Config, rec: Recorder) -> None:
    workdir = cfg.workdir / "timer"
    count, lead_s, span_s = TIMERS[cfg.mode], LEAD_S[cfg.mode], SPAN_S[cfg.mode]
    ns = start_namesrv(workdir)
    daemons = [ns]
    try:
        broker, _ = _start(workdir, ns.addr)
        daemons.insert(0, broker)
        with Admin(ns.addr) as admin:
            admin.create_topic(TOPIC, brokers=[BROKER], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            wait_until(lambda: TOPIC in admin.topic_list(), what=f"route of {TOPIC}")
        first_due = int(time.time() * 1000 + lead_s * 1000)
        rate = _send(ns.addr, count, first_due, int(span_s * 1000), cfg.window)
        rec.record("timer.send", rate, f"{count:,} timed messages")
        wait_until(lambda: _stored_timers(ns.addr, broker) >= count, timeout=60, what=f"{count:,} timers stored")

        broker.kill()
        daemons.remove(broker)
        log_from = broker.log_path.stat().st_size
        broker, ready_s = _start(workdir, ns.addr)
        daemons.insert(0, broker)
        with broker.log_path.open(errors="replace") as f:
            f.seek(log_from)
            loaded = next((line.split("timer_loaded ", 1)[1] for line in f if "timer_loaded " in line), "?")
        late_start = time.time() * 1000 > first_due
        rec.record("timer.restart", ready_s, f"loaded {loaded.split(' first_due')[0].strip()}"
                   + ("; ready after the first due time" if late_start else ""))

        lateness, stored = _receive(ns.addr, count, lead_s + span_s + 60)
        rec.record("timer.lateness_p50", percentile(lateness, 50), f"{len(lateness):,} messages over {span_s:g} s")
        rec.record("timer.lateness_p99", percentile(lateness, 99),
                   f"max {max(lateness):,.0f} ms; store time past due p99 {percentile(stored, 99):,.0f} ms")
        if count < TARGET_TIMERS:
            rec.status.update({m: SCALED for m in ("timer.restart", "timer.lateness_p99")})
    finally:
        stop_all(daemons)


if __name__ == "__main__":
    import sys

    from bench.runner import main

    raise SystemExit(main(["--only", "timer", *sys.argv[1:]]))

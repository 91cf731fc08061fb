"""POP (issue 17): a name server and one broker (ASYNC_FLUSH) as real processes, the consumers in this process.

- pull, one consumer: the messages (1 KiB, 8 queues) read once each with ``--window`` pulls of 64 in flight, every
  message decoded (``bench/group_bench.py``'s measurement);
- pull 32 a pull: the same, in POP's batch. A receive reads and answers what a pull of 32 does, and adds a receipt
  handle a message, the state it writes and an ack, on the same client: this row bounds what POP can reach;
- POP receive+ack: the same messages through one ``SimpleConsumer`` of a fresh group, ``--window`` threads each
  receiving 32 (POP's most) and acking what it got in one call (``ack_async``: the next receive does not wait
  for it; every ack is waited for before the clock stops); msgs/s until every message was acked once.
  Target: >= 0.7x the pull rate of the same run.
"""

import threading
import time

from bench.daemons import start_broker, start_namesrv, stop_all, wait_until
from bench.group_bench import _fill, _pull_once
from bench.harness import BATCH, Config, Metric, Recorder, Target
from broker.processor.pop_message_processor import MAX_POP_NUMS
from client import Admin, SimpleConsumer

BROKER = "broker-group"
TOPIC = "BenchGroup"  # what bench/group_bench.py's _fill writes
QUEUES = 8
MESSAGES = {"smoke": 5_000, "quick": 100_000, "full": 200_000}
RUN_LIMIT_S = 120.0  # a POP run that has not acked every message by then failed

METRICS = [
    Metric("pop.pull", "consume once, one pull consumer, 64 a pull", "msgs/s", echo="batch", issue=17,
           short="pull"),
    Metric("pop.pull32", "the same, 32 a pull (POP's batch)", "msgs/s", echo="batch", vs="pop.pull", issue=17,
           short="pull 32"),
    Metric("pop.receive_ack", "POP receive 32 + ack, 8 threads", "msgs/s", echo="batch", vs="pop.pull",
           target=Target(">=", 0.7, of="pop.pull"), issue=17),
]


def _pop_once(ns_addr: str, count: int, threads: int) -> float:
    lock = threading.Lock()
    acked = [0]
    failures: list[BaseException] = []

    deadline = time.monotonic() + RUN_LIMIT_S

    def worker(consumer: SimpleConsumer) -> None:
        pending: list = []
        try:
            while acked[0] < count and time.monotonic() < deadline:  # (a lost message: reported, not waited for)
                batch = consumer.receive(MAX_POP_NUMS, invisible_ms=60_000, wait_ms=100)
                if batch:
                    pending.append(consumer.ack_async(batch))  # the next receive need not wait for this ack
                    with lock:
                        acked[0] += sum(len(m.body) > 0 for m in batch)
            for ack in pending:
                ack.result()
        except BaseException as exc:  # reported after the join
            failures.append(exc)

    consumer = SimpleConsumer(ns_addr, group="bench-pop", topic=TOPIC)  # one client: its streams carry every thread
    try:
        consumer.receive(1, invisible_ms=1, wait_ms=0)  # routes and channels up before the clock starts
        start = time.perf_counter()
        workers = [threading.Thread(target=worker, args=(consumer,)) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(RUN_LIMIT_S + 30)
        if failures:
            raise failures[0]
        if acked[0] < count:
            raise RuntimeError(f"POP acked {acked[0]:,} of {count:,} messages in {RUN_LIMIT_S:.0f} s")
        return acked[0] / (time.perf_counter() - start)
    finally:
        consumer.close()


def scenario(cfg: Config, rec: Recorder) -> None:
    workdir = cfg.workdir / "pop"
    count = MESSAGES[cfg.mode] // BATCH * BATCH
    ns = start_namesrv(workdir)
    daemons = [ns]
    try:
        daemons.insert(0, start_broker(workdir, BROKER, ns.addr, registerNameServerPeriod=1000))
        with Admin(ns.addr) as admin:
            admin.create_topic(TOPIC, brokers=[BROKER], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            wait_until(lambda: TOPIC in admin.topic_list(), what=f"route of {TOPIC}")
        _fill(ns.addr, count)
        note = f"{count:,} messages"
        rec.record("pop.pull", _pull_once(ns.addr, count, cfg.window), note)
        rec.record("pop.pull32", _pull_once(ns.addr, count, cfg.window, MAX_POP_NUMS), note)
        rec.record("pop.receive_ack", _pop_once(ns.addr, count, cfg.window), note)
    finally:
        stop_all(daemons)

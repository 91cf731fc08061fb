"""Consumer groups (issue 15): a name server and one broker (ASYNC_FLUSH, default store) as real processes, the
consumers in this process.

- pull, one consumer: ``MESSAGES`` of the mode (1 KiB, 8 queues) read once each by a ``PullConsumer`` keeping
  ``--window`` pulls of 64 in flight, every message decoded and its body read (what a handler is given); msgs/s;
- push, a group of two members: the same messages (a fresh group, from the first offset) through two
  ``PushConsumer``s of one group whose handlers only count; msgs/s from the first message handled to the last
  (the members' start-up, routes and rebalance, is not counted: the pull consumer's is not either). Target:
  >= 0.9x the pull rate of the same run;
- rebalance after a clean leave / a join, p50 and p99 over ``CHANGES`` of each: two members hold the topic, a
  third joins (time from its ``start()`` until the three hold disjoint shares covering every queue) and leaves
  (time from its ``close()`` returning until the two remaining hold every queue again).
"""

import itertools
import threading
import time
from concurrent.futures import Future

from bench.daemons import start_broker, start_namesrv, stop_all, wait_until
from bench.harness import BATCH, BODY, Config, Metric, Recorder, Target, percentile
from client import Admin, Message, Producer, PullConsumer, PushConsumer
from common.message_queue import MessageQueue

BROKER = "broker-group"
TOPIC = "BenchGroup"
QUEUES = 8
MESSAGES = {"smoke": 5_000, "quick": 200_000, "full": 400_000}
CHANGES = {"smoke": 2, "quick": 20, "full": 20}

METRICS = [
    Metric("group.pull", "consume once, one pull consumer, 64 a pull", "msgs/s", echo="batch", issue=15,
           short="pull"),
    Metric("group.push2", "consume once, push group of 2 members", "msgs/s", echo="batch", vs="group.pull",
           target=Target(">=", 0.9, of="group.pull"), issue=15),
    Metric("group.rebalance_leave_p50", "rebalance after a clean leave, p50", "ms", echo="p50",
           target=Target("<=", 1000, text="<= 1 s"), issue=15),
    Metric("group.rebalance_leave_p99", "rebalance after a clean leave, p99", "ms", echo="p99",
           target=Target("<=", 2000, text="<= 2 s"), issue=15),
    Metric("group.rebalance_join_p50", "rebalance after a join, p50", "ms", echo="p50", issue=15),
    Metric("group.rebalance_join_p99", "rebalance after a join, p99", "ms", echo="p99", issue=15),
]


def _fill(ns_addr: str, count: int) -> None:
    msgs = [Message(TOPIC, BODY) for _ in range(BATCH)]
    with Producer(ns_addr) as producer:
        pending = [producer.send_batch_async(msgs) for _ in range(count // BATCH)]
        for p in pending:
            p.result()


def _queue_ends(consumer: PullConsumer, queues: list[MessageQueue], count: int,
                timeout_s: float = 10.0) -> dict[MessageQueue, int]:
    """Each queue's end once the ``count`` messages sent are all there: a send is answered when appended, and a
    queue's end moves when the message is dispatched, a moment later."""
    deadline = time.monotonic() + timeout_s
    while True:
        ends = {mq: consumer.max_offset(mq) for mq in queues}
        if sum(ends.values()) >= count or time.monotonic() > deadline:
            return ends
        time.sleep(0.01)


def _pull_once(ns_addr: str, count: int, window: int, batch: int = BATCH) -> float:
    """The ``count`` messages read once by one pull consumer, ``batch`` a pull, ``window`` pulls in flight."""
    with PullConsumer(ns_addr, group=f"bench-pull-{batch}") as consumer:
        queues = consumer.queues(TOPIC)
        ends = _queue_ends(consumer, queues, count)
        cursor = {mq: 0 for mq in queues}
        in_flight: dict[MessageQueue, Future] = {}
        got = 0
        start = time.perf_counter()
        while got < count:
            for mq in queues:
                if mq not in in_flight and cursor[mq] < ends[mq] and len(in_flight) < window:
                    in_flight[mq] = consumer.pull_async(mq, cursor[mq], batch)
            if not in_flight:
                raise RuntimeError(f"the queues hold {got:,} of the {count:,} messages sent")
            mq, future = next(iter(in_flight.items()))
            result = future.result()
            del in_flight[mq]
            for msg in result.messages:  # consumed: each message decoded and its body read, as a handler would
                got += len(msg.body) > 0
            cursor[mq] = result.next_begin_offset
        return got / (time.perf_counter() - start)


def _push_group(ns_addr: str, count: int) -> float:
    counter = itertools.count(1)  # next() on it is atomic: the handlers count without a lock to contend for
    first = [0.0]
    done = threading.Event()

    def handler(_msg) -> None:
        n = next(counter)
        if n == 1:
            first[0] = time.perf_counter()
        if n >= count:
            done.set()

    members = [PushConsumer(ns_addr, group="bench-push", topic=TOPIC, handler=handler, consume_from_first=True)
               for _ in range(2)]
    for m in members:
        m.start()
    try:
        if not done.wait(300):
            raise RuntimeError(f"push group handled {next(counter) - 1:,} of {count:,} in 300 s")
        return (count - 1) / (time.perf_counter() - first[0])
    finally:
        for m in members:
            m.close()


def _share(m: PushConsumer) -> set[MessageQueue]:
    return {q for q in m.assigned_queues() if q.topic == TOPIC}


def _covering(members: list[PushConsumer], queues: set[MessageQueue]) -> bool:
    shares = [_share(m) for m in members]
    return all(shares) and sum(map(len, shares)) == len(queues) and set().union(*shares) == queues


def _rebalances(ns_addr: str, changes: int) -> tuple[list[float], list[float]]:
    joins: list[float] = []
    leaves: list[float] = []
    noop = lambda _msg: None  # noqa: E731
    stable = [PushConsumer(ns_addr, group="bench-rebalance", topic=TOPIC, handler=noop) for _ in range(2)]
    for m in stable:
        m.start()
    try:
        queues = set(stable[0].consumer.queues(TOPIC))
        wait_until(lambda: _covering(stable, queues), timeout=30, what="two members to split the topic")
        for _ in range(changes):
            third = PushConsumer(ns_addr, group="bench-rebalance", topic=TOPIC, handler=noop)
            t0 = time.perf_counter()
            third.start()
            wait_until(lambda: _covering([*stable, third], queues),  # noqa: B023 - waited for in this iteration
                       timeout=30, interval=0.005,
                       what="three members to split the topic")
            joins.append((time.perf_counter() - t0) * 1000)
            third.close()
            t0 = time.perf_counter()
            wait_until(lambda: _covering(stable, queues), timeout=30, interval=0.005,
                       what="two members to take the leaver's queues")
            leaves.append((time.perf_counter() - t0) * 1000)
    finally:
        for m in stable:
            m.close()
    return joins, leaves


def scenario(cfg: Config, rec: Recorder) -> None:
    workdir = cfg.workdir / "group"
    count = MESSAGES[cfg.mode] // BATCH * BATCH
    ns = start_namesrv(workdir)
    daemons = [ns]
    try:
        daemons.insert(0, start_broker(workdir, BROKER, ns.addr, registerNameServerPeriod=1000))
        with Admin(ns.addr) as admin:
            admin.create_topic(TOPIC, brokers=[BROKER], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            wait_until(lambda: TOPIC in admin.topic_list(), what=f"route of {TOPIC}")
        _fill(ns.addr, count)
        rec.record("group.pull", _pull_once(ns.addr, count, cfg.window), f"{count:,} messages")
        rec.record("group.push2", _push_group(ns.addr, count), f"{count:,} messages, from the first handled")
        joins, leaves = _rebalances(ns.addr, CHANGES[cfg.mode])
        note = f"{len(leaves)} changes"
        rec.record("group.rebalance_leave_p50", percentile(leaves, 50), note)
        rec.record("group.rebalance_leave_p99", percentile(leaves, 99), note)
        rec.record("group.rebalance_join_p50", percentile(joins, 50), note)
        rec.record("group.rebalance_join_p99", percentile(joins, 99), note)
    finally:
        stop_all(daemons)

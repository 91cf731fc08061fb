"""Static topic benchmarks (issue 4): three brokers and a name server as real processes, the SDK here, SDK
batches of 64 x 1 KiB and pulls of 64, ``Config.window`` calls in flight.

- send to a static topic (8 logic queues) vs a normal topic (8 queues) on the same broker: measured in
  alternating rounds (normal, static, normal, static, ...; the median of each) so drift on a shared machine
  hits both alike; target >= 0.95x;
- pull through a remote older item vs a local pull: all 8 logic queues are remapped from broker-a to
  broker-b, more is sent (the new, local items on broker-b), then pulls of the old range (served from
  broker-a's item through broker-b) and of the new item's range alternate; target >= 0.6x;
- a remap of 64 logic queues from one broker over all 3; target < 5 s;
- draining a broker (``Admin.drain_broker``, issue 19): 50 static topics of 20 logic queues each, all on
  broker-c (a batch sent to a few of them, so their old items hold data), then every one of those 1,000 logic
  queues is moved onto broker-a and broker-b; timed until the call returns, then checked: 1,000 moves and
  broker-c leads nothing. Remap64T is first remapped off broker-c so the drain moves exactly those. Smoke
  runs 5 topics of 4 queues (shown, not judged: ``SCALED``); target <= 10 s.
"""

import statistics
import time
from concurrent.futures import Future

from bench.daemons import start_broker, start_namesrv, stop_all, wait_until
from bench.harness import BATCH, BODY, SCALED, Config, Metric, Recorder, Target, windowed_rate
from client import Admin, Message, Producer, PullConsumer
from common.message_queue import MessageQueue

BROKERS = ("broker-a", "broker-b", "broker-c")
NORMAL, STATIC, REMAP = "NormalT", "StaticT", "Remap64T"
ROUNDS = 4
DRAINED = "broker-c"
DRAIN_SIZES = {"smoke": (5, 4), "quick": (50, 20), "full": (50, 20)}  # static topics, logic queues each
DRAIN_SENT_TO = 5  # topics that get a batch before the drain

METRICS = [
    Metric("static.send_normal", "send, normal topic, 8 queues", "msgs/s", echo="batch", issue=4, short="normal"),
    Metric("static.send_static", "send, static topic, 8 logic queues", "msgs/s", echo="batch",
           vs="static.send_normal", target=Target(">=", 0.95, of="static.send_normal"), issue=4),
    Metric("static.pull_local", "pull static topic, local item", "msgs/s", echo="batch", issue=4, short="local"),
    Metric("static.pull_remote", "pull static topic, remote older item", "msgs/s", echo="batch",
           vs="static.pull_local", target=Target(">=", 0.6, of="static.pull_local"), issue=4),
    Metric("static.remap64", "remap 64 logic queues over 3 brokers", "s", echo="p50", target=Target("<", 5),
           issue=4),
    Metric("static.drain1000", "drain a broker leading 1,000 logic queues", "s", echo="p50",
           target=Target("<=", 10), issue=19),
]


def _send(producer: Producer, topic: str, cfg: Config, seconds: float, warmup: float) -> float:
    msgs = [Message(topic, BODY) for _ in range(BATCH)]
    return windowed_rate(lambda: producer.send_batch_async(msgs), lambda r: r.count, cfg.window, seconds, warmup)


def _pull(consumer: PullConsumer, ranges: dict[MessageQueue, tuple[int, int]], cfg: Config, seconds: float,
          warmup: float) -> float:
    """Pull 64 at a time round-robin over the queues, each within [start, end), wrapping to its start."""
    queues = [mq for mq, (start, end) in ranges.items() if end > start]
    if not queues:
        raise RuntimeError("nothing to pull")
    cursor = {mq: ranges[mq][0] for mq in queues}
    turn = [0]

    def submit() -> Future:
        mq = queues[turn[0] % len(queues)]
        turn[0] += 1
        offset = cursor[mq]
        start, end = ranges[mq]
        cursor[mq] = offset + BATCH if offset + BATCH < end else start
        return consumer.pull_async(mq, offset, BATCH)

    return windowed_rate(submit, lambda r: len(r.messages), cfg.window, seconds, warmup)


def _alternate(measures: list, cfg: Config) -> list[float]:
    """Run each measure ``ROUNDS`` times, interleaved, ``seconds / ROUNDS`` each (warm-up on the first only);
    the median of each."""
    rates: list[list[float]] = [[] for _ in measures]
    for r in range(ROUNDS):
        for i, measure in enumerate(measures):
            rates[i].append(measure(cfg.seconds / ROUNDS, cfg.warmup if r == 0 else 0.0))
    return [statistics.median(r) for r in rates]


def _drain(admin: Admin, producer: Producer, cfg: Config, rec: Recorder) -> None:
    """Static topics whose logic queues all sit on ``DRAINED``, then the time to drain it."""
    n_topics, n_queues = DRAIN_SIZES[cfg.mode]
    topics = [f"Drain{i:02d}T" for i in range(n_topics)]
    for topic in topics:
        admin.update_static_topic(topic, n_queues, brokers=[DRAINED])
    sent_to = topics[:DRAIN_SENT_TO]
    wait_until(lambda: set(sent_to) <= set(admin.topic_list()), what="the drain topics' routes")
    for topic in sent_to:
        producer.send_batch([Message(topic, BODY) for _ in range(BATCH)])
    leads = admin.drain_status(DRAINED).leads
    expected = {t: list(range(n_queues)) for t in topics}
    assert leads == expected, f"{DRAINED} leads {leads}, expected only the drain topics"

    t0 = time.perf_counter()
    result = admin.drain_broker(DRAINED)
    elapsed = time.perf_counter() - t0
    assert len(result.moves) == n_topics * n_queues, f"{len(result.moves)} moves, expected {n_topics * n_queues}"
    left = admin.drain_status(DRAINED).leads
    assert left == {}, f"{DRAINED} still leads {left}"
    rec.record("static.drain1000", elapsed, f"{len(result.moves):,} logic queues over {result.topics} topics")
    if n_topics * n_queues < 1000:
        rec.status["static.drain1000"] = SCALED


def scenario(cfg: Config, rec: Recorder) -> None:
    workdir = cfg.workdir / "static"
    ns = start_namesrv(workdir)
    daemons = [ns]
    try:
        brokers = {}
        for name in BROKERS:
            brokers[name] = start_broker(workdir, name, ns.addr, registerNameServerPeriod=1000)
            daemons.insert(0, brokers[name])
        with Admin(ns.addr) as admin, Producer(ns.addr) as producer, PullConsumer(ns.addr, group="bench") as cons:
            admin.create_topic(NORMAL, brokers=["broker-a"], read_queue_nums=8, write_queue_nums=8)
            admin.update_static_topic(STATIC, 8, brokers=["broker-a"])
            wait_until(lambda: {NORMAL, STATIC} <= set(admin.topic_list()), what="topic routes")

            normal, static = _alternate([lambda s, w: _send(producer, NORMAL, cfg, s, w),
                                         lambda s, w: _send(producer, STATIC, cfg, s, w)], cfg)
            rec.record("static.send_normal", normal)
            rec.record("static.send_static", static)

            queues = cons.queues(STATIC)
            old_ends = {mq: cons.max_offset(mq) for mq in queues}
            admin.remap_static_topic(STATIC, brokers=["broker-b"])  # broker-a's items become remote, older
            wait_until(lambda: set(cons.client.logic_leaders(STATIC, refresh=True).values()) == {"broker-b"},
                       what="the remapped route")
            _send(producer, STATIC, cfg, cfg.seconds / ROUNDS, cfg.warmup)  # fills the new, local items
            # the new items start at a logic offset rounded up past the old end (STATIC_TOPIC.md, remap step 3)
            status = admin.static_topic_status(STATIC)
            assert status is not None, f"{STATIC} lost its mapping"
            new_starts = {q.logic_id: max(q.items, key=lambda i: i.gen).logic_offset for q in status.queues}
            remote = {mq: (cons.min_offset(mq), old_ends[mq]) for mq in queues}
            local = {mq: (new_starts[mq.queue_id], cons.max_offset(mq)) for mq in queues}
            local_rate, remote_rate = _alternate([lambda s, w: _pull(cons, local, cfg, s, w),
                                                  lambda s, w: _pull(cons, remote, cfg, s, w)], cfg)
            rec.record("static.pull_local", local_rate)
            rec.record("static.pull_remote", remote_rate)

            admin.update_static_topic(REMAP, 64, brokers=["broker-a"])
            t0 = time.perf_counter()
            admin.remap_static_topic(REMAP, brokers=list(BROKERS))
            rec.record("static.remap64", time.perf_counter() - t0)

            # broker-c now leads about a third of Remap64T: move those off so the drain moves only its own topics
            admin.remap_static_topic(REMAP, brokers=["broker-a", "broker-b"])
            _drain(admin, producer, cfg, rec)
    finally:
        stop_all(daemons)


if __name__ == "__main__":
    import sys

    from bench.runner import main

    raise SystemExit(main(["--only", "static", *sys.argv[1:]]))

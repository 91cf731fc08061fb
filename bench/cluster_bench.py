"""Cluster benchmarks (issue 3): one name server and one broker (ASYNC_FLUSH) as real processes, the SDK in
this process, 1 KiB bodies, ``Config.window`` calls in flight from one thread (as for the echo).

- produce: SDK batches of 64 with async sends (on the SDK's send stream: vs the stream echo of the same frames,
  issue 14 asks for >= 0.5x; and vs the same sends to a broker that stores nothing, ``bench/storeless_broker.py``:
  what the store's append costs them), and single async sends (vs the unary echo); single async sends again with 64 in
  flight, by a plain producer and by one with ``auto_batch=True`` (``client/send_accumulator.py``);
- consume: pull 64 at a time round-robin over 8 queues, re-reading each queue from 0 at its end;
- latency: one message every 1/rate s with synchronous sends, a long-polling consumer (suspend 1 s) records
  send-to-receive times; p50 / p99 beside the echo's round trip at the same rate (a send and a pull response
  are two hops, so about 2x the echo is the floor);
- the broker's RSS at the end, beside the echo server's (issue 14's target: <= 200 MiB after the bench).

``bench/peers_bench.py`` measures the SDK beside Redis and NATS with this module's ``one_broker``,
``produce_rate`` and ``consume_rate``.
"""

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

from bench.daemons import Daemon, broker_conf, start_daemon, start_namesrv, stop_all, wait_until
from bench.harness import BATCH, BODY, Config, Metric, Recorder, Target, paced, percentile, windowed_rate
from client import Admin, Message, Producer, PullConsumer

TOPIC, LAT_TOPIC = "BenchT", "LatT"

METRICS = [
    Metric("cluster.produce_batch", "produce, SDK batches of 64, async", "msgs/s", echo="stream",
           vs="cluster.produce_storeless", target=Target(">=", 0.5, of="echo.stream"), issue=14),
    Metric("cluster.produce_storeless", "the same, to a broker that stores nothing", "msgs/s", echo="stream",
           issue=14, short="storeless"),
    Metric("cluster.produce_single", "produce, single async sends", "calls/s", echo="unary", issue=3),
    Metric("cluster.produce_single64", "produce, single async sends, 64 in flight", "msgs/s", echo="unary",
           issue=14, short="single @64"),
    Metric("cluster.produce_single_auto64", "produce, single async sends, 64 in flight, auto_batch", "msgs/s",
           echo="unary", vs="cluster.produce_single64", issue=14, short="auto_batch @64"),
    Metric("cluster.consume", "consume, pull 64", "msgs/s", echo="pull", target=Target(">=", 200_000), issue=3),
    Metric("cluster.latency_p50", "send-to-receive p50, long polling", "ms", echo="p50", issue=3),
    Metric("cluster.latency_p99", "send-to-receive p99, long polling", "ms", echo="p99",
           target=Target("<=", 5), issue=3),
    Metric("cluster.broker_rss", "broker RSS after the above", "MiB", echo="rss", target=Target("<=", 200),
           issue=14),
]


def produce_rate(producer: Producer, topic: str, cfg: Config, batch: int = BATCH) -> float:
    msgs = [Message(topic, BODY) for _ in range(batch)]
    if batch == 1:
        return windowed_rate(lambda: producer.send_async(msgs[0]), lambda r: r.count, cfg.window, cfg.seconds,
                             cfg.warmup)
    return windowed_rate(lambda: producer.send_batch_async(msgs), lambda r: r.count, cfg.window, cfg.seconds,
                         cfg.warmup)


def consume_rate(consumer: PullConsumer, topic: str, cfg: Config) -> float:
    queues = [mq for mq in consumer.queues(topic) if consumer.max_offset(mq) > 0]
    if not queues:
        raise RuntimeError(f"nothing to consume in {topic}")
    ends = {mq: consumer.max_offset(mq) for mq in queues}
    cursor = {mq: 0 for mq in queues}
    turn = [0]

    def submit() -> Future:
        mq = queues[turn[0] % len(queues)]
        turn[0] += 1
        offset = cursor[mq]
        cursor[mq] = offset + BATCH if offset + BATCH < ends[mq] else 0
        return consumer.pull_async(mq, offset, BATCH)

    return windowed_rate(submit, lambda r: len(r.messages), cfg.window, cfg.seconds, cfg.warmup)


def latency_ms(producer: Producer, consumer: PullConsumer, topic: str, cfg: Config) -> tuple[float, float]:
    mq = consumer.queues(topic)[0]
    start_offset = consumer.max_offset(mq)
    expected = max(1, int(cfg.latency_rate * cfg.latency_seconds))
    samples: list[float] = []
    done = threading.Event()

    def receive() -> None:
        offset = start_offset
        while len(samples) < expected and not done.is_set():
            result = consumer.pull(mq, offset, 64, suspend_ms=1000)
            now = time.perf_counter_ns()
            samples.extend((now - int(m.body)) / 1e6 for m in result.messages)
            offset = result.next_begin_offset

    receiver = threading.Thread(target=receive, name="latency-receiver")
    receiver.start()
    paced(cfg.latency_rate, cfg.latency_seconds,
          lambda i: producer.send(Message(topic, str(time.perf_counter_ns()).encode()), queue=mq))
    receiver.join(10)
    done.set()
    if len(samples) < expected:
        raise RuntimeError(f"latency: received {len(samples)} of {expected} messages")
    return percentile(samples, 50), percentile(samples, 99)


@contextlib.contextmanager
def one_broker(workdir: Path, topics: dict[str, int], module: str = "broker.main") -> Iterator[tuple[Daemon, Daemon]]:
    """A name server and ``broker-a`` (ASYNC_FLUSH; run by ``module``) as processes under ``workdir``, with
    ``topics`` (name: queue count) routed; yields (name server, broker) and stops both on the way out."""
    ns = start_namesrv(workdir)
    daemons = [ns]
    try:
        conf = broker_conf(workdir, "broker-a", ns.addr, registerNameServerPeriod=1000)
        broker = start_daemon("broker-a", module, ["-c", str(conf)], workdir / "broker-a")
        daemons.insert(0, broker)
        with Admin(ns.addr) as admin:
            for topic, queues in topics.items():
                admin.create_topic(topic, brokers=["broker-a"], read_queue_nums=queues, write_queue_nums=queues)
            wait_until(lambda: set(topics) <= set(admin.topic_list()), what="topic routes")
        yield ns, broker
    finally:
        stop_all(daemons)


def scenario(cfg: Config, rec: Recorder) -> None:
    with one_broker(cfg.workdir / "cluster", {TOPIC: 8, LAT_TOPIC: 1}) as (ns, broker):
        with Producer(ns.addr) as producer, PullConsumer(ns.addr, group="bench") as consumer:
            rec.record("cluster.produce_batch", produce_rate(producer, TOPIC, cfg))
            rec.record("cluster.produce_single", produce_rate(producer, TOPIC, cfg, batch=1))
            rec.record("cluster.produce_single64", produce_rate(producer, TOPIC, replace(cfg, window=64), batch=1))
            with Producer(ns.addr, auto_batch=True) as batching:
                rec.record("cluster.produce_single_auto64",
                           produce_rate(batching, TOPIC, replace(cfg, window=64), batch=1))
            rec.record("cluster.consume", consume_rate(consumer, TOPIC, cfg))
            p50, p99 = latency_ms(producer, consumer, LAT_TOPIC, cfg)
            note = f"{cfg.latency_rate:,} msgs/s"
            rec.record("cluster.latency_p50", p50, note)
            rec.record("cluster.latency_p99", p99, note)
        rec.record("cluster.broker_rss", broker.rss_mib())
    with one_broker(cfg.workdir / "storeless", {TOPIC: 8}, module="bench.storeless_broker") as (ns, _), \
            Producer(ns.addr) as producer:
        rec.record("cluster.produce_storeless", produce_rate(producer, TOPIC, cfg))


if __name__ == "__main__":
    import sys

    from bench.runner import main

    raise SystemExit(main(["--only", "cluster", *sys.argv[1:]]))

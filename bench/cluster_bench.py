"""Cluster benchmarks (issue 3): one name server and one broker (ASYNC_FLUSH) as real processes, the SDK in
this process, 1 KiB bodies. Each figure is reported beside a bare gRPC echo measured in the same run with
the same client concurrency (``--window`` calls in flight from one thread): unary echo of one 1 KiB payload,
and of a batch of 64 (64 KiB)."""

import argparse
import statistics
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import grpc

from bench.echo_server import METHOD
from client import Admin, Message, Producer, PullConsumer
from tests.cluster import start_broker, start_daemon, start_namesrv

BODY = b"x" * 1024
BATCH = 64


def _windowed_rate(submit: Callable[[], Future], count: Callable[[object], int], window: int,
                   seconds: float) -> float:
    """Keep ``window`` calls in flight from one thread for ``seconds``; completed items per second."""
    stop = time.monotonic() + seconds
    in_flight: deque[Future] = deque(submit() for _ in range(window))
    done = 0
    start = time.perf_counter()
    while in_flight:
        done += count(in_flight.popleft().result())
        if time.monotonic() < stop:
            in_flight.append(submit())
    return done / (time.perf_counter() - start)


def echo_rates(addr: str, window: int, seconds: float) -> tuple[float, float]:
    channel = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 64 << 20)])
    echo = channel.unary_unary(METHOD)
    batch = BODY * BATCH
    unary = _windowed_rate(lambda: echo.future(BODY, timeout=10), lambda r: 1, window, seconds)
    batched = _windowed_rate(lambda: echo.future(batch, timeout=10), lambda r: BATCH, window, seconds)
    channel.close()
    return unary, batched


def produce_rate(addr: str, topic: str, window: int, seconds: float) -> float:
    msgs = [Message(topic, BODY) for _ in range(BATCH)]
    with Producer(addr) as producer:
        return _windowed_rate(lambda: producer.send_batch_async(msgs), lambda r: r.count, window, seconds)


def consume_rate(addr: str, topic: str, window: int, seconds: float) -> float:
    """Pull 64 at a time round-robin over the queues, re-reading a queue from 0 once it is drained."""
    with PullConsumer(addr, group="bench") as consumer:
        queues = consumer.queues(topic)
        ends = {mq: consumer.max_offset(mq) for mq in queues}
        cursor = {mq: 0 for mq in queues}
        turn = [0]

        def submit() -> Future:
            mq = queues[turn[0] % len(queues)]
            turn[0] += 1
            offset = cursor[mq]
            cursor[mq] = offset + BATCH if offset + BATCH < ends[mq] else 0
            return consumer.pull_async(mq, offset, BATCH)

        return _windowed_rate(submit, lambda r: len(r.messages), window, seconds)


def latency_ms(addr: str, topic: str, rate_per_s: int, seconds: float) -> tuple[float, float]:
    """Send one message every 1/rate s; a long-polling consumer records send-to-receive times."""
    samples: list[float] = []
    with Producer(addr) as producer, PullConsumer(addr, group="lat") as consumer:
        mq = consumer.queues(topic)[0]
        start_offset = consumer.max_offset(mq)
        n = int(rate_per_s * seconds)
        done = threading.Event()

        def receive() -> None:
            offset = start_offset
            while len(samples) < n and not done.is_set():
                result = consumer.pull(mq, offset, 64, suspend_ms=1000)
                now = time.perf_counter_ns()
                samples.extend((now - int(m.body)) / 1e6 for m in result.messages)
                offset = result.next_begin_offset

        t = threading.Thread(target=receive)
        t.start()
        t0 = time.perf_counter()
        for i in range(n):
            delay = t0 + i / rate_per_s - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.send(Message(topic, str(time.perf_counter_ns()).encode()), queue=mq)
        t.join(10)
        done.set()
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def run(seconds: float = 5.0, window: int = 8) -> list[tuple[str, float, str, str]]:
    workdir = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    echo = start_daemon("echo", "bench.echo_server", [], workdir)
    ns = start_namesrv(workdir / "ns")
    broker = start_broker(workdir, "broker-a", ns.addr)
    try:
        with Admin(ns.addr) as admin:
            admin.create_topic("BenchT", brokers=["broker-a"], read_queue_nums=8, write_queue_nums=8)
            admin.create_topic("LatT", brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
        time.sleep(1.5)  # the route reaches the name server with the next registration
        unary, batched = echo_rates(echo.addr, window, seconds)
        produce = produce_rate(ns.addr, "BenchT", window, seconds)
        consume = consume_rate(ns.addr, "BenchT", window, seconds)
        p50, p99 = latency_ms(ns.addr, "LatT", 1000, seconds)
        return [
            ("gRPC echo unary 1 KiB (calls/s)", unary, "", "1.00 (unary)"),
            ("gRPC echo batch of 64 x 1 KiB (msgs/s)", batched, "", "1.00 (batch)"),
            ("produce, SDK batches of 64 (msgs/s)", produce, ">= 150,000", f"{produce / batched:.2f} x batch"),
            ("consume, pull 64 (msgs/s)", consume, ">= 200,000", f"{consume / batched:.2f} x batch"),
            ("send-to-receive p50 at 1,000 msgs/s (ms)", p50, "", ""),
            ("send-to-receive p99 at 1,000 msgs/s (ms)", p99, "<= 5", ""),
        ]
    finally:
        for d in (broker, ns, echo):
            d.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--window", type=int, default=8, help="calls in flight")
    args = parser.parse_args()
    rows = run(args.seconds, args.window)
    print(f"{'scenario':44} {'value':>12} {'target':>12}  ratio")
    for name, value, target, ratio in rows:
        print(f"{name:44} {value:12,.1f} {target:>12}  {ratio}")


if __name__ == "__main__":
    main()

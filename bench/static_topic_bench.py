"""Static topic benchmarks (issue 4): three brokers and a name server as real processes, the SDK here.

- send to a static topic vs a normal topic with the same queue count (target >= 0.95x);
- pull through a remote (older) item vs a local pull (target >= 0.6x);
- a remap of 64 logic queues over 3 brokers (target < 5 s).
"""

import argparse
import tempfile
import time
from pathlib import Path

from bench.cluster_bench import BATCH, BODY, _windowed_rate
from client import Admin, Message, Producer, PullConsumer
from tests.cluster import start_broker, start_namesrv, wait_until

BROKERS = ("broker-a", "broker-b", "broker-c")


def _send_rate(addr: str, topic: str, window: int, seconds: float) -> float:
    msgs = [Message(topic, BODY) for _ in range(BATCH)]
    with Producer(addr) as producer:
        return _windowed_rate(lambda: producer.send_batch_async(msgs), lambda r: r.count, window, seconds)


def _pull_rate(addr: str, topic: str, window: int, seconds: float,
               ends_by_queue: dict[int, int] | None = None) -> tuple[float, dict[int, int]]:
    """Pull 64 at a time round-robin over the queues, wrapping to each queue's start at its end (by default
    its max offset). Returns the rate and the ends used."""
    with PullConsumer(addr, group="bench") as consumer:
        queues = consumer.queues(topic)
        starts = {mq: consumer.min_offset(mq) for mq in queues}
        ends = {mq: (ends_by_queue or {}).get(mq.queue_id) or consumer.max_offset(mq) for mq in queues}
        cursor = dict(starts)
        turn = [0]

        def submit():
            mq = queues[turn[0] % len(queues)]
            turn[0] += 1
            offset = cursor[mq]
            cursor[mq] = offset + BATCH if offset + BATCH < ends[mq] else starts[mq]
            return consumer.pull_async(mq, offset, BATCH)

        rate = _windowed_rate(submit, lambda r: len(r.messages), window, seconds)
        return rate, {mq.queue_id: end for mq, end in ends.items()}


def run(seconds: float = 4.0, window: int = 8) -> list[tuple[str, float, str, str]]:
    workdir = Path(tempfile.mkdtemp(prefix="static-bench-"))
    ns = start_namesrv(workdir / "ns")
    brokers = [start_broker(workdir, b, ns.addr, registerNameServerPeriod=1000) for b in BROKERS]
    try:
        with Admin(ns.addr) as admin:
            admin.create_topic("NormalT", brokers=["broker-a"], read_queue_nums=8, write_queue_nums=8)
            admin.update_static_topic("StaticT", 8, brokers=["broker-a"])
            wait_until(lambda: "NormalT" in admin.topic_list() and "StaticT" in admin.topic_list(), timeout=15)
        normal = _send_rate(ns.addr, "NormalT", window, seconds)
        static = _send_rate(ns.addr, "StaticT", window, seconds)
        local_pull, data_ends = _pull_rate(ns.addr, "StaticT", window, seconds)
        with Admin(ns.addr) as admin:  # move every queue off broker-a: its data becomes the remote older item
            admin.remap_static_topic("StaticT", brokers=["broker-b"])
        time.sleep(2)  # registration carries the new leaders to the name server
        remote_pull, _ = _pull_rate(ns.addr, "StaticT", window, seconds, data_ends)
        with Admin(ns.addr) as admin:
            admin.update_static_topic("Remap64T", 64, brokers=["broker-a"])
            t0 = time.perf_counter()
            admin.remap_static_topic("Remap64T", brokers=list(BROKERS))
            remap_s = time.perf_counter() - t0
        return [
            ("send, normal topic 8 queues (msgs/s)", normal, "", "1.00"),
            ("send, static topic 8 logic queues (msgs/s)", static, ">= 0.95x", f"{static / normal:.2f} x normal"),
            ("pull, local item (msgs/s)", local_pull, "", "1.00"),
            ("pull, remote older item (msgs/s)", remote_pull, ">= 0.6x", f"{remote_pull / local_pull:.2f} x local"),
            ("remap 64 logic queues over 3 brokers (s)", remap_s, "< 5", ""),
        ]
    finally:
        for d in [*brokers, ns]:
            d.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--window", type=int, default=8)
    args = parser.parse_args()
    print(f"{'scenario':46} {'value':>12} {'target':>10}  ratio")
    for name, value, target, ratio in run(args.seconds, args.window):
        print(f"{name:46} {value:12,.2f} {target:>10}  {ratio}")


if __name__ == "__main__":
    main()

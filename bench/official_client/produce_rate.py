"""The official RocketMQ 5 Python client's produce rate through mqproxy (``bench/proxy_bench.py``): single async
sends of ``--size`` bytes, ``--window`` in flight from one thread (as ``bench.harness.windowed_rate`` keeps them),
the first ``--warmup`` seconds not counted, then ``--seconds`` measured; sends in flight at the end are waited for
and counted.

Runs in the client's own venv (``cluster/official_client.py``), never with this repository on the path; not
type-checked with the repository (its ``rocketmq`` package is not installed there). Prints ``@@ {json}`` lines: the
rate, then ``{"done": true}``."""

import argparse
import json
import os
import sys
import time
from collections import deque
from concurrent.futures import Future

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def emit(**fields: object) -> None:
    print("@@", json.dumps(fields), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    body = b"x" * args.size

    def message() -> Message:  # a new one per send: the client stamps each with its message id
        msg = Message()
        msg.topic = args.topic
        msg.body = body
        return msg

    producer = Producer(ClientConfiguration(args.endpoint, Credentials()), (args.topic,))
    producer.startup()
    try:
        producer.send(message())  # route and channel up before the clock starts
        failed = 0
        warm_until = time.perf_counter() + args.warmup
        in_flight: deque[Future] = deque(producer.send_async(message()) for _ in range(args.window))
        start = stop = None
        done = 0
        while in_flight:
            try:
                in_flight.popleft().result()
                ok = 1
            except Exception as exc:  # counted and shown, not fatal: the rate is of sends that succeeded
                ok = 0
                if not failed:
                    emit(event="send-failed", error=repr(exc)[:500])
                failed += 1
            now = time.perf_counter()
            if start is None:
                if now >= warm_until:
                    start, stop = now, now + args.seconds
            else:
                done += ok
            if stop is None or now < stop:
                in_flight.append(producer.send_async(message()))
        assert start is not None
        elapsed = time.perf_counter() - start
        emit(rate=done / elapsed, sent=done, failed=failed, seconds=elapsed, window=args.window)
    finally:
        producer.shutdown()
    emit(done=True)


if __name__ == "__main__":
    main()
    # Leave without finalizing: the client's daemon threads may still write then, which can abort the interpreter
    # (exit -6) after a clean run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

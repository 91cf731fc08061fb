"""Consume with the official RocketMQ 5 Python client's PushConsumer, through mqproxy: the listener counts each
delivery (and fails the first delivery of every message whose body ends in ``--fail-suffix``, so it comes again;
takes ``--slow-s`` seconds over each whose body ends in ``--slow-suffix``);
stops once ``--expect`` distinct messages were consumed successfully and ``--linger`` s passed, or at ``--budget``.

Prints ``@@ {json}`` per delivery and ``@@ {"done": true, ...}`` at the end. Runs in the client's own venv."""

import argparse
import json
import os
import sys
import threading
import time

from rocketmq import ClientConfiguration, ConsumeResult, Credentials, FilterExpression, MessageListener, PushConsumer

START = time.monotonic()


def emit(**fields: object) -> None:
    print("@@", json.dumps(fields), flush=True)


class Listener(MessageListener):
    def __init__(self, fail_suffix: str | None, slow_suffix: str | None, slow_s: float) -> None:
        self.fail_suffix = fail_suffix
        self.slow_suffix = slow_suffix
        self.slow_s = slow_s
        self.lock = threading.Lock()
        self.consumed: set[str] = set()
        self.failed: set[str] = set()

    def consume(self, message) -> ConsumeResult:
        body = message.body.decode()
        if self.slow_suffix and body.endswith(self.slow_suffix):
            emit(event="slow-start", message_id=message.message_id, t=round(time.monotonic() - START, 3))
            time.sleep(self.slow_s)
        with self.lock:
            fail = bool(self.fail_suffix) and body.endswith(self.fail_suffix) and message.message_id not in self.failed
            emit(event="delivered", message_id=message.message_id, body=body, attempt=message.delivery_attempt,
                 result="failure" if fail else "success", t=round(time.monotonic() - START, 3))
            if fail:
                self.failed.add(message.message_id)
                return ConsumeResult.FAILURE
            self.consumed.add(message.message_id)
            return ConsumeResult.SUCCESS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--linger", type=float, default=0.0)
    parser.add_argument("--fail-suffix")
    parser.add_argument("--slow-suffix")
    parser.add_argument("--slow-s", type=float, default=0.0)
    args = parser.parse_args()

    listener = Listener(args.fail_suffix, args.slow_suffix, args.slow_s)
    consumer = PushConsumer(ClientConfiguration(args.endpoint, Credentials()), args.group, listener,
                            {args.topic: FilterExpression()})
    consumer.startup()
    try:
        while len(listener.consumed) < args.expect and time.monotonic() - START < args.budget:
            time.sleep(0.1)
        time.sleep(args.linger)
    finally:
        consumer.shutdown()
    emit(done=True, consumed=len(listener.consumed))


if __name__ == "__main__":
    main()
    # Leave without finalizing: the client's daemon threads may still write then, which can abort the interpreter
    # (exit -6) after a clean run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

"""Receive with the official RocketMQ 5 Python client's SimpleConsumer, through mqproxy.

Scenarios (the first argument after the endpoint, group and topic):

- ``drain --expect N``: receive and ack until N distinct messages came, then keep receiving for ``--linger`` s to
  see that nothing comes again; each delivery is one line.
- ``redeliver``: receive one message and do not ack it; receive until it comes again (its invisible time passed),
  then ack it.
- ``change-invisible --to S``: receive one message, change its invisible duration to S s, then receive until it
  comes again; an ack with the handle from before the change must fail, one with the new delivery's succeeds.
- ``ack-some --expect N --ack K``: receive until N distinct messages came, ack K of them (every other one first,
  so both sets span the queues), print ``@@ {"event": "acked-some", "acked": [...], "unacked": [...]}``, then wait
  for a line on stdin before shutting down (the test kills brokers meanwhile, while the rest are in flight). A
  message received twice before all N came is reported (``early``): its invisible time was too short.

Every delivery prints ``@@ {json}`` with its id, body, attempt and the seconds since the first receive; the last
line is ``@@ {"done": true, ...}``. Runs in the client's own venv, never with this repository on the path."""

import argparse
import json
import os
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

START = time.monotonic()


def emit(**fields: object) -> None:
    print("@@", json.dumps(fields), flush=True)


def delivery(msg, event: str) -> None:
    emit(event=event, message_id=msg.message_id, body=msg.body.decode(), attempt=msg.delivery_attempt,
         tag=msg.tag, keys=sorted(msg.keys), properties=dict(msg.properties), group=msg.message_group,
         corrupted=msg.corrupted, t=round(time.monotonic() - START, 3))


def receive_until(consumer, deadline_s: float, invisible_s: int, want=lambda m: True, batch: int = 32):
    """Receive until a message ``want`` takes arrives (returned with the others received) or the deadline."""
    while time.monotonic() - START < deadline_s:
        messages = consumer.receive(batch, invisible_s)
        hits = [m for m in messages if want(m)]
        if hits:
            return hits[0], messages
    return None, []


def drain(consumer, args) -> None:
    seen: dict[str, int] = {}
    while len(seen) < args.expect and time.monotonic() - START < args.budget:
        for msg in consumer.receive(args.batch, args.invisible):
            delivery(msg, "received")
            seen[msg.message_id] = seen.get(msg.message_id, 0) + 1
            consumer.ack(msg)
    linger_until = time.monotonic() + args.linger
    while time.monotonic() < linger_until:
        for msg in consumer.receive(args.batch, args.invisible):
            delivery(msg, "received-again")
            seen[msg.message_id] = seen.get(msg.message_id, 0) + 1
            consumer.ack(msg)
    emit(done=True, distinct=len(seen), deliveries=sum(seen.values()))


def redeliver(consumer, args) -> None:
    first, _ = receive_until(consumer, args.budget, args.invisible, batch=1)
    if first is None:
        emit(done=True, error="nothing received")
        return
    delivery(first, "received")  # not acked
    again, others = receive_until(consumer, args.budget, args.invisible, lambda m: m.message_id == first.message_id)
    for msg in others:
        if msg is not again:
            consumer.ack(msg)
    if again is None:
        emit(done=True, error="not redelivered")
        return
    delivery(again, "redelivered")
    consumer.ack(again)
    emit(done=True)


def change_invisible(consumer, args) -> None:
    first, _ = receive_until(consumer, args.budget, args.invisible, batch=1)
    if first is None:
        emit(done=True, error="nothing received")
        return
    delivery(first, "received")
    old_handle = first.receipt_handle
    consumer.change_invisible_duration(first, args.to)
    emit(event="changed", new_handle_differs=first.receipt_handle != old_handle, t=round(time.monotonic() - START, 3))
    again, others = receive_until(consumer, args.budget, args.invisible, lambda m: m.message_id == first.message_id)
    for msg in others:
        if msg is not again:
            consumer.ack(msg)
    if again is None:
        emit(done=True, error="not redelivered")
        return
    delivery(again, "redelivered")
    again_handle = again.receipt_handle
    again.receipt_handle = old_handle
    try:
        consumer.ack(again)
        emit(event="old-handle-ack", ok=True)
    except Exception as exc:
        emit(event="old-handle-ack", ok=False, error=f"{type(exc).__name__}: {exc}")
    again.receipt_handle = again_handle
    consumer.ack(again)
    emit(done=True)


def ack_some(consumer, args) -> None:
    received: list = []
    early: list[str] = []
    while len(received) < args.expect and time.monotonic() - START < args.budget:
        for msg in consumer.receive(args.batch, args.invisible):
            delivery(msg, "received")
            if any(m.message_id == msg.message_id for m in received):
                early.append(msg.message_id)
            else:
                received.append(msg)
    received_all = round(time.monotonic() - START, 3)
    chosen = (received[::2] + received[1::2])[:args.ack]
    for msg in chosen:
        consumer.ack(msg)
    chosen_ids = {m.message_id for m in chosen}
    emit(event="acked-some", acked=[m.message_id for m in chosen],
         unacked=[m.message_id for m in received if m.message_id not in chosen_ids], early=early,
         received_all=received_all, t=round(time.monotonic() - START, 3))
    sys.stdin.readline()  # the test's go-ahead ("exit", or the end of stdin)
    emit(done=True, distinct=len(received))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("scenario", choices=("drain", "redeliver", "change-invisible", "ack-some"))
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--invisible", type=int, default=10, help="seconds")
    parser.add_argument("--ack", type=int, default=0, help="ack-some: how many of the received to ack")
    parser.add_argument("--to", type=int, default=10, help="change-invisible: the new duration, seconds")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds for the whole scenario")
    parser.add_argument("--linger", type=float, default=0.0, help="drain: seconds to keep receiving at the end")
    parser.add_argument("--await-s", type=int, default=2, help="long polling of one receive, seconds")
    args = parser.parse_args()

    consumer = SimpleConsumer(ClientConfiguration(args.endpoint, Credentials()), args.group,
                              {args.topic: FilterExpression()}, await_duration=args.await_s)
    consumer.startup()
    try:
        scenarios = {"drain": drain, "redeliver": redeliver, "change-invisible": change_invisible, "ack-some": ack_some}
        scenarios[args.scenario](consumer, args)
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    main()
    # Leave without finalizing: the client's daemon threads may still write then, which can abort the interpreter
    # (exit -6) after a clean run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

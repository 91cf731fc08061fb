"""Transactional sends with the official RocketMQ 5 Python client through mqproxy.

- ``explicit`` (default): one half message committed, one rolled back, by the producer itself. Prints
  ``@@ {json}`` per transaction.
- ``--leave-open commit|rollback``: one half message neither committed nor rolled back; the broker's check comes
  back through the proxy to this producer's ``TransactionChecker``, which answers as told and prints
  ``@@ {"event": "checked", ...}`` with what it was shown. The script then runs until a line ``exit`` on stdin (or
  stdin's end, or ``--budget`` seconds), so the check's answer can be seen by whoever started it.

``@@ {"done": true}`` at the end."""

import argparse
import json
import os
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker
from rocketmq.grpc_protocol import TransactionResolution

ANSWERS = {"commit": TransactionResolution.COMMIT, "rollback": TransactionResolution.ROLLBACK}


def emit(**fields: object) -> None:
    print("@@", json.dumps(fields), flush=True)


class BodyChecker(TransactionChecker):
    """Answers by the body ``tx-<outcome>`` / ``tx-open-<outcome>``: a late explicit end checked first still ends
    the same way."""

    def check(self, message: Message) -> TransactionResolution:
        outcome = message.body.decode(errors="replace").rsplit("-", 1)[-1]
        emit(event="checked", topic=message.topic, body=message.body.decode(errors="replace"),
             message_id=message.message_id, tag=message.tag, keys=sorted(message.keys),
             properties=dict(message.properties), message_type=message.message_type, corrupted=message.corrupted,
             answer=outcome, t=time.time())
        return ANSWERS.get(outcome, TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)


def half_message(topic: str, body: str) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body.encode()
    msg.tag = "TagT"
    msg.keys = f"key-{body}"
    msg.add_property("color", "blue")
    return msg


def explicit(producer: Producer, topic: str) -> None:
    for outcome in ("commit", "rollback"):
        transaction = producer.begin_transaction()
        receipt = producer.send(half_message(topic, f"tx-{outcome}"), transaction)
        getattr(transaction, outcome)()
        emit(outcome=outcome, message_id=receipt.message_id, transaction_id=receipt.transaction_id)


def leave_open(producer: Producer, topic: str, answer: str, budget_s: float) -> None:
    told = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "exit":
                break
        told.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    transaction = producer.begin_transaction()
    receipt = producer.send(half_message(topic, f"tx-open-{answer}"), transaction)
    emit(outcome="open", message_id=receipt.message_id, transaction_id=receipt.transaction_id, t=time.time())
    if not told.wait(budget_s):
        emit(event="budget-spent", budget_s=budget_s)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    parser.add_argument("--leave-open", choices=sorted(ANSWERS), help="what the checker answers")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds to wait for 'exit' at most")
    args = parser.parse_args()
    producer = Producer(ClientConfiguration(args.endpoint, Credentials()), (args.topic,), BodyChecker())
    producer.startup()
    try:
        if args.leave_open:
            leave_open(producer, args.topic, args.leave_open, args.budget)
        else:
            explicit(producer, args.topic)
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

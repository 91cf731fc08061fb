"""Send messages with the official RocketMQ 5 Python client (rocketmq-python-client), through mqproxy.

Runs in the client's own venv (tests/proxy/conftest.py), never with this repository on the path. Prints one line
per message sent, ``@@ {json}``, and ``@@ {"done": true}`` at the end."""

import argparse
import json
import os
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def emit(**fields: object) -> None:
    print("@@", json.dumps(fields), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    parser.add_argument("count", type=int)
    parser.add_argument("--mode", choices=("sync", "async"), default="sync")
    parser.add_argument("--prefix", default="body")
    parser.add_argument("--tag")
    parser.add_argument("--keys", action="store_true", help="key-<i> on message i")
    parser.add_argument("--property", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--delay-s", type=int, default=0, help="deliver this many seconds after the send")
    parser.add_argument("--recall-first", type=int, default=0,
                        help="recall the first N (delayed) messages once all were sent, then each of them again")
    parser.add_argument("--message-group")
    parser.add_argument("--ak", default="", help="sign with Credentials(ak, sk) (ACL)")
    parser.add_argument("--sk", default="")
    parser.add_argument("--expect-error", action="store_true",
                        help="a failure to start or send is a line {error: ...} (and done), not a crash")
    args = parser.parse_args()
    if args.expect_error:
        try:
            produce(args)
        except Exception as exc:
            emit(error=f"{type(exc).__name__}: {exc}")
            emit(done=True)
        return
    produce(args)


def produce(args: argparse.Namespace) -> None:
    producer = Producer(ClientConfiguration(args.endpoint, Credentials(args.ak, args.sk)), (args.topic,))
    producer.startup()
    try:
        receipts = send_all(producer, args)
        for i in range(min(args.recall_first, len(receipts))):
            emit(recalled=producer.recall_message(args.topic, receipts[i].recall_handle), i=i)
        for i in range(min(args.recall_first, len(receipts))):  # no longer pending: refused
            try:
                producer.recall_message(args.topic, receipts[i].recall_handle)
                emit(recalled_again=i)
            except Exception as exc:
                emit(recall_again_error=f"{type(exc).__name__}: {exc}", i=i)
    finally:
        producer.shutdown()
    emit(done=True)


def send_all(producer: Producer, args: argparse.Namespace) -> list:
    """Each message's receipt, in order."""
    receipts = []
    pending = []
    for i in range(args.count):
        msg = Message()
        msg.topic = args.topic
        msg.body = f"{args.prefix}-{i}".encode()
        if args.tag:
            msg.tag = args.tag
        if args.keys:
            msg.keys = f"key-{i}"
        for prop in args.property:
            name, _, value = prop.partition("=")
            msg.add_property(name, value)
        if args.message_group:
            msg.message_group = args.message_group
        if args.delay_s:
            # The client puts this value into the Timestamp's seconds (its examples pass epoch seconds).
            msg.delivery_timestamp = int(time.time()) + args.delay_s
        sent_at = time.time()
        if args.mode == "sync":
            receipt = producer.send(msg)
            receipts.append(receipt)
            emit(i=i, body=msg.body.decode(), message_id=receipt.message_id, offset=receipt.offset,
                 sent_at=sent_at, deliver_at=msg.delivery_timestamp, recall_handle=receipt.recall_handle)
        else:
            pending.append((i, msg, sent_at, producer.send_async(msg)))
    for i, msg, sent_at, future in pending:
        receipt = future.result(timeout=30)
        receipts.append(receipt)
        emit(i=i, body=msg.body.decode(), message_id=receipt.message_id, offset=receipt.offset, sent_at=sent_at,
             deliver_at=msg.delivery_timestamp, recall_handle=receipt.recall_handle)
    return receipts


if __name__ == "__main__":
    main()
    # Leave without finalizing: the client's daemon threads may still write then, which can abort the interpreter
    # (exit -6) after a clean run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

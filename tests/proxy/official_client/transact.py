"""Transactional sends with the official RocketMQ 5 Python client through mqproxy: one committed, one rolled
back. Prints ``@@ {json}`` per transaction and ``@@ {"done": true}`` at the end."""

import argparse
import json

from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker
from rocketmq.grpc_protocol import TransactionResolution


def emit(**fields: object) -> None:
    print("@@", json.dumps(fields), flush=True)


class CommitChecker(TransactionChecker):
    def check(self, message: Message) -> TransactionResolution:
        return TransactionResolution.COMMIT


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    args = parser.parse_args()
    producer = Producer(ClientConfiguration(args.endpoint, Credentials()), (args.topic,), CommitChecker())
    producer.startup()
    try:
        for outcome in ("commit", "rollback"):
            msg = Message()
            msg.topic = args.topic
            msg.body = f"tx-{outcome}".encode()
            transaction = producer.begin_transaction()
            receipt = producer.send(msg, transaction)
            getattr(transaction, outcome)()
            emit(outcome=outcome, message_id=receipt.message_id, transaction_id=receipt.transaction_id)
    finally:
        producer.shutdown()
    emit(done=True)


if __name__ == "__main__":
    main()

"""A SimpleConsumer over two brokers, one paused (SIGSTOP: its connection stays, it never answers): a receive that
asked it first failed with DEADLINE_EXCEEDED, though the other broker had messages (half of all receives failed).
It now skips a broker that does not answer in time, asks it last for a while, and raises only when no broker
answered (as the README says). Real daemons."""

import os
import signal
import time
from pathlib import Path

from client import Message, Producer, SimpleConsumer
from tests.cluster import make_cluster

TOPIC = "PausedT"


def test_receives_skip_a_paused_broker(tmp_path: Path) -> None:
    c = make_cluster(tmp_path, ("broker-a", "broker-b"), registerNameServerPeriod=1000)
    paused = c.brokers["broker-b"]
    try:
        c.create_topic(TOPIC, 1)
        with Producer(c.addr) as producer, SimpleConsumer(c.addr, group="paused-g", topic=TOPIC,
                                                          rpc_timeout_ms=2000) as consumer:
            consumer.receive(1)  # routes and streams to both brokers up
            on_a = next(mq for mq in producer.client.publish_queues(TOPIC) if mq.broker_name == "broker-a")
            os.kill(paused.proc.pid, signal.SIGSTOP)
            try:
                got = 0
                for i in range(6):
                    producer.send(Message(TOPIC, b"m%d" % i), queue=on_a)
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline:  # each receive succeeds (was: every other one raised)
                        if batch := consumer.receive(8):
                            consumer.ack(batch)
                            got += len(batch)
                            break
                assert got == 6
            finally:
                os.kill(paused.proc.pid, signal.SIGCONT)
    finally:
        c.stop()

"""Callbacks on the SDK's futures run on its callback pool, not on the stream reader that settled the future: an
SDK call that waits, made in a callback (a send in a send's callback, an ack in an ack's, a pull in a pull's), waited
for an answer only that reader could give: the send timed out and was retried (stored three times, its caller told
it failed), the ack hung for good with every later ack to that broker. Real daemons."""

from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from client import Message, Producer, PullConsumer, SimpleConsumer
from tests.cluster import Cluster, make_cluster, wait_until

TOPIC = "CallbackT"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("callbacks"), ("broker-a",), registerNameServerPeriod=1000)
    try:
        c.create_topic(TOPIC, 1)
        yield c
    finally:
        c.stop()


def bodies(cluster: Cluster) -> list[bytes]:
    with PullConsumer(cluster.addr, group="callbacks-reader") as consumer:
        mq = consumer.queues(TOPIC)[0]
        return [m.body for m in consumer.pull(mq, 0, 256).messages]


def test_a_send_in_a_send_callback_goes_once(cluster: Cluster) -> None:
    outcome: Future[str] = Future()
    with Producer(cluster.addr, send_timeout_ms=3000) as producer:
        def callback(_done: Future) -> None:
            try:
                producer.send(Message(TOPIC, b"from-callback"))
                outcome.set_result("ok")
            except Exception as exc:  # reported to the test thread
                outcome.set_result(f"{type(exc).__name__}: {exc}")

        producer.send_async(Message(TOPIC, b"first")).add_done_callback(callback)
        assert outcome.result(30) == "ok"  # was: DEADLINE_EXCEEDED after 9 s
    wait_until(lambda: b"from-callback" in bodies(cluster), what="the callback's message stored")
    assert bodies(cluster).count(b"from-callback") == 1  # was 3


def test_an_ack_in_an_ack_callback_returns_and_later_acks_go_on(cluster: Cluster) -> None:
    with Producer(cluster.addr) as producer:
        for i in range(4):
            producer.send(Message(TOPIC, b"ack-%d" % i))
    with SimpleConsumer(cluster.addr, group="callbacks-acks", topic=TOPIC) as consumer:
        received: list = []
        wait_until(lambda: received.extend(consumer.receive(16, 60_000, wait_ms=200)) or len(received) >= 4,
                   what="the topic's messages received")
        outcome: Future[str] = Future()

        def callback(_done: Future) -> None:
            try:
                consumer.ack(received[1])
                outcome.set_result("ok")
            except Exception as exc:
                outcome.set_result(f"{type(exc).__name__}: {exc}")

        consumer.ack_async(received[0]).add_done_callback(callback)
        assert outcome.result(20) == "ok"  # was: hung
        consumer.ack(received[2:])  # later acks to the broker are not held up either

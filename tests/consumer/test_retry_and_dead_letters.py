"""Failed messages: retried with growing delays through %RETRY%<group>, then dead-lettered in %DLQ%<group>, while
the messages behind them keep flowing. The brokers run short delay levels so the test takes seconds."""

import itertools
import threading
import time
from collections.abc import Iterator

import pytest

from client import Admin, Message, MQClientError, Producer, PullConsumer, PullStatus, PushConsumer
from client.consumer.consume_result import ConsumeResult
from common.group_topics import dlq_topic
from common.message_properties import PROPERTY_RECONSUME_TIME, PROPERTY_RETRY_TOPIC
from tests.cluster import Cluster, make_cluster, wait_until

LEVELS = "1s 1s 1s 2s 3s"  # retries wait level 3 + n: 1 s, 2 s, 3 s, 3 s, ...


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("retry"), registerNameServerPeriod=1000, messageDelayLevel=LEVELS)
    yield c
    c.stop()


def dead_letters(cluster: Cluster, group: str) -> list:
    out = []
    with PullConsumer(cluster.addr, group="dlq-reader") as reader:
        try:
            queues = reader.queues(dlq_topic(group))
        except MQClientError:  # no dead letter yet: the topic is created by the first
            return []
        for mq in queues:
            result = reader.pull(mq, 0, 64)
            if result.status is PullStatus.FOUND:
                out += result.messages
    return out


def test_a_poison_message_is_retried_then_dead_lettered_and_blocks_nothing(cluster: Cluster):
    topic, group = "PoisonT", "poison"
    with Admin(cluster.addr) as admin:  # one queue: the poison and everything behind it share it
        admin.create_topic(topic, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: topic in admin.topic_list(), what=f"route of {topic}")
    deliveries: list[tuple[float, int]] = []  # (time, reconsume_times) of each poison delivery
    good: set[bytes] = set()
    lock = threading.Lock()

    def handler(msg):
        if msg.body == b"poison":
            assert msg.topic == topic  # a retried message shows its own topic
            with lock:
                deliveries.append((time.monotonic(), msg.reconsume_times))
            raise RuntimeError("cannot handle this one")
        with lock:
            good.add(msg.body)
        return ConsumeResult.SUCCESS

    bodies = [f"m{i}".encode() for i in range(10_000)]
    with PushConsumer(cluster.addr, group=group, topic=topic, handler=handler, consume_from_first=True,
                      max_reconsume_times=3):
        with Producer(cluster.addr) as producer:
            producer.send(Message(topic, b"poison", keys="poison-key", tags="bad"))
            for i in range(0, len(bodies), 64):
                producer.send_batch([Message(topic, b) for b in bodies[i:i + 64]])
        wait_until(lambda: len(good) == len(bodies), timeout=60, what="the 10,000 messages behind the poison")
        wait_until(lambda: dead_letters(cluster, group), timeout=30, what="the poison in the dead letters")
    assert [times for _, times in deliveries] == [0, 1, 2, 3]  # max_reconsume_times=3: four deliveries
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(deliveries)]
    assert gaps[0] >= 0.9 and gaps[1] >= 1.9 and gaps[2] >= 2.9, gaps  # never early, growing
    [dead] = dead_letters(cluster, group)
    assert dead.body == b"poison" and dead.keys == ["poison-key"] and dead.tags == "bad"
    assert dead.properties[PROPERTY_RETRY_TOPIC] == topic and dead.properties[PROPERTY_RECONSUME_TIME] == "3"
    with Admin(cluster.addr) as admin:
        found = admin.query_msg_by_key(dlq_topic(group), "poison-key")
    assert [m.body for m in found] == [b"poison"]


def test_max_reconsume_times_zero_dead_letters_at_the_first_failure(cluster: Cluster):
    topic, group = "NoRetryT", "no-retry"
    cluster.create_topic(topic, queues=2)
    calls = []

    def handler(msg):
        calls.append(msg.reconsume_times)
        return ConsumeResult.LATER

    with PushConsumer(cluster.addr, group=group, topic=topic, handler=handler, consume_from_first=True,
                      max_reconsume_times=0):
        with Producer(cluster.addr) as producer:
            producer.send(Message(topic, b"once", keys="k0"))
        wait_until(lambda: dead_letters(cluster, group), timeout=20, what="the dead letter")
    assert calls == [0]


def test_an_orderly_dead_letter_counts_the_tries_made_in_place(cluster: Cluster):
    """An orderly member tries a failing message again in place, so the message's own count never grew: its dead
    letter said RECONSUME_TIME 0 after four tries (the concurrent path's says 3 for the same limit)."""
    topic, group = "OrderlyPoisonT", "orderly-poison"
    cluster.create_topic(topic, queues=1)
    tries: list[int] = []

    def handler(msg):
        tries.append(msg.reconsume_times)
        return ConsumeResult.LATER

    with PushConsumer(cluster.addr, group=group, topic=topic, handler=handler, consume_from_first=True,
                      orderly=True, max_reconsume_times=3):
        with Producer(cluster.addr) as producer:
            producer.send(Message(topic, b"poison", keys="orderly-poison-key"))
        wait_until(lambda: dead_letters(cluster, group), timeout=30, what="the orderly dead letter")
    assert tries == [0, 1, 2, 3]
    [dead] = dead_letters(cluster, group)
    assert dead.body == b"poison" and dead.keys == ["orderly-poison-key"]
    assert dead.properties[PROPERTY_RECONSUME_TIME] == "3"

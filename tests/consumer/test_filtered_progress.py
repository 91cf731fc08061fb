"""A push consumer's progress moves past the messages its subscription's tags skip (upstream's correctTagsOffset):
they showed as lag in consumerProgress (and the lag gauge) for as long as the members ran, and a queue that only
ever received other tags had a lag that grew without bound. Found by the rebalance review."""

import threading
from collections.abc import Iterator

import pytest

from client import Message, Producer, PullConsumer, PushConsumer
from tests.cluster import Cluster, make_cluster, wait_until
from tests.consumer.test_consumer_groups import held


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("filtered"), registerNameServerPeriod=1000)
    yield c
    c.stop()


def test_what_the_tags_skip_is_committed_as_consumed(cluster: Cluster):
    topic, group = "FilteredProgressT", "filtered-progress"
    cluster.create_topic(topic, queues=2)
    handled: list[bytes] = []
    lock = threading.Lock()

    def handler(msg) -> None:  # type: ignore[no-untyped-def]
        with lock:
            handled.append(msg.body)

    with PushConsumer(cluster.addr, group=group, topic=topic, tags="TagA", handler=handler) as consumer:
        queues = wait_until(lambda: len(held(consumer, topic)) == 4 and held(consumer, topic), timeout=30,
                            what="the member to take every queue")
        with Producer(cluster.addr) as producer:
            for mq in queues:
                producer.send_batch([Message(topic, b"a", tags="TagA")] * 2, queue=mq)
                producer.send_batch([Message(topic, b"b", tags="TagB")] * 25, queue=mq)
        wait_until(lambda: len(handled) == 2 * len(queues), timeout=30, what="the TagA messages handled")
        with PullConsumer(cluster.addr, group=group) as reader:
            ends = {mq: reader.max_offset(mq) for mq in queues}
            wait_until(lambda: {mq: reader.committed(mq) for mq in queues} == ends, timeout=15,
                       what="every queue committed to its end (the TagB messages passed over)")
    assert handled == [b"a"] * 2 * len(queues)

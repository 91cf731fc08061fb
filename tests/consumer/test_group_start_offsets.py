"""Where a clustering group's members start and commit (found by the rebalance review, real daemons): a start
nobody committed is committed before the first pull, so a member taking the queue a moment later starts there and
not at the queue's end by then; queues added to a topic start at their first message for the groups that consume
it (both skipped messages without any failure); and progress moves past the messages the subscription's tags skip
(upstream's correctTagsOffset: they showed as lag for as long as the members ran)."""

import threading
from collections.abc import Iterator

import pytest

from client import Admin, Message, MessageQueue, Producer, PullConsumer, PushConsumer
from tests.cluster import Cluster, make_cluster, wait_until
from tests.consumer.test_consumer_groups import held, send


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("start-offsets"), registerNameServerPeriod=1000)
    yield c
    c.stop()


def test_a_start_the_group_had_not_committed_is_committed_before_the_first_pull(cluster: Cluster):
    """A new group's member took queue 2 at offset 56; the next member, joining 0.4 s later, found nothing committed
    and started at 66; the first released it at 62: 62..65 were never handled (16 lost in 3 rounds)."""
    topic, group = "StartCommittedT", "start-committed"
    cluster.create_topic(topic, queues=2)
    send(cluster, topic, 40)
    with PushConsumer(cluster.addr, group=group, topic=topic, handler=lambda _msg: None) as consumer:
        queues = wait_until(lambda: len(held(consumer, topic)) == 4 and held(consumer, topic), timeout=30,
                            what="the member to take every queue")
        with PullConsumer(cluster.addr, group=group) as reader:
            committed = {mq: reader.committed(mq) for mq in queues}  # at once: the commit loop runs every second
            assert committed == {mq: reader.max_offset(mq) for mq in queues}, committed


def test_queues_added_to_a_topic_start_at_their_first_message_for_a_group_that_consumes_it(cluster: Cluster):
    """updateTopic from 2 to 4 queues under a running group: the new queues were taken with nothing committed on
    them, at their end by then, and what producers had written there meanwhile was never handled."""
    topic, group, other = "AddedQueuesT", "added-queues", "added-queues-never"
    cluster.create_topic(topic, queues=2)
    with PullConsumer(cluster.addr, group=group) as consumer:
        for broker in cluster.brokers:
            consumer.commit(MessageQueue(topic, broker, 0), 0)
        cluster.create_topic(topic, queues=4)
        send(cluster, topic, 40)
        for broker in cluster.brokers:
            added = [MessageQueue(topic, broker, q) for q in (2, 3)]
            assert [consumer.committed(mq) for mq in added] == [0, 0]
            assert consumer.committed(MessageQueue(topic, broker, 1)) == -1  # an old queue: as before
    with PullConsumer(cluster.addr, group=other) as never:  # a group with no offsets on the topic: none made
        assert never.committed(MessageQueue(topic, next(iter(cluster.brokers)), 2)) == -1
    with Admin(cluster.addr) as admin:
        assert admin.topic_route(topic).queue_datas[0].read_queue_nums == 4


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

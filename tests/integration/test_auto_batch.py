"""``Producer(auto_batch=True)`` through real daemons: a burst of single sends leaves in far fewer requests, and
each send's result names exactly where its own message is stored, on a normal topic and on a static one (whose
sends are answered in logic terms). Both store types."""

from collections.abc import Callable
from concurrent.futures import Future

from client import Admin, Message, Producer, PullConsumer, PullStatus, SendResult
from common.message_queue import MessageQueue
from tests.cluster import static_route_mappings, wait_until
from tests.integration.conftest import Cluster

BURST = 3000


def counting_requests(producer: Producer) -> list[int]:
    """Wraps what the producer's accumulator sends with; the list gets each request's message count."""
    accumulator = producer._accumulator
    assert accumulator is not None
    counts: list[int] = []
    send: Callable[[list[Message]], Future[SendResult]] = accumulator._send_batch

    def counted(msgs: list[Message]) -> Future[SendResult]:
        counts.append(len(msgs))
        return send(msgs)

    accumulator._send_batch = counted
    return counts


def stored(consumer: PullConsumer, topic: str) -> dict[tuple[MessageQueue, int], tuple[bytes, str]]:
    """Every message of ``topic``: (queue, offset) -> (body, msg_id)."""
    out = {}
    for mq in consumer.queues(topic):
        offset = 0
        while (result := consumer.pull(mq, offset, 64)).status is PullStatus.FOUND:
            out.update({(mq, m.queue_offset): (m.body, m.msg_id) for m in result.messages})
            offset = result.next_begin_offset
    return out


def burst(producer: Producer, topic: str) -> dict[bytes, SendResult]:
    bodies = [b"%s-%05d" % (topic.encode(), i) for i in range(BURST)]
    sent = {body: producer.send_async(Message(topic, body)) for body in bodies}  # all at once, one thread
    return {body: future.result(timeout=60) for body, future in sent.items()}


def test_a_burst_of_single_sends_leaves_in_batches_and_each_result_names_its_own_message(cluster: Cluster):
    topic = "AutoBatchT"
    cluster.create_topic(topic, queues=4)
    with Producer(cluster.addr, auto_batch=True) as producer, PullConsumer(cluster.addr, group="ab") as consumer:
        requests = counting_requests(producer)
        results = burst(producer, topic)
        assert sum(requests) == BURST and len(requests) < BURST / 4, requests[:50]  # batched, every send once
        in_store = stored(consumer, topic)
        assert sorted(body for body, _ in in_store.values()) == sorted(results)  # each message stored once
        for body, result in results.items():
            assert in_store[(result.queue, result.queue_offset)] == (body, result.msg_id), body
        # Sends that must go alone still do: a keyed one to its key's queue, each on its own.
        keyed = [producer.send(Message(topic, b"keyed-%d" % i), sharding_key="user-7") for i in range(3)]
        assert len({r.queue for r in keyed}) == 1 and [r.queue_offset for r in keyed] == \
            list(range(keyed[0].queue_offset, keyed[0].queue_offset + 3))


def test_a_static_topic_s_batched_sends_are_each_answered_with_their_logic_queue(cluster: Cluster):
    topic = "AutoBatchStaticT"
    with Admin(cluster.addr) as admin:
        admin.update_static_topic(topic, 2, brokers=["broker-a", "broker-b"])
        wait_until(lambda: len(static_route_mappings(admin, topic)) == 2, what=f"route of {topic}")
    with Producer(cluster.addr, auto_batch=True) as producer, PullConsumer(cluster.addr, group="ab-s") as consumer:
        requests = counting_requests(producer)
        results = burst(producer, topic)
        assert sum(requests) == BURST and len(requests) < BURST / 4
        assert {r.queue.queue_id for r in results.values()} <= {0, 1}  # logic queues
        in_store = stored(consumer, topic)
        assert sorted(body for body, _ in in_store.values()) == sorted(results)
        by_id = {msg_id: (mq, body) for (mq, _), (body, msg_id) in in_store.items()}
        for body, result in results.items():
            assert by_id[result.msg_id] == (result.queue, body), body

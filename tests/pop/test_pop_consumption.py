"""Broker-side POP with real daemons (SimpleConsumer): every message once with acks, redelivery after the
invisible time with the reconsume count raised, changing the invisible time, dead letters after retryMaxTimes,
FIFO message groups, and in-flight state that survives a SIGKILL."""

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from client import Admin, Message, MessageQueue, MQClientError, Producer, PullConsumer, PullStatus, SimpleConsumer
from common.group_topics import dlq_topic
from common.message_codec import decode_records
from common.message_properties import PROPERTY_SHARDING_KEY
from common.response_code import ResponseCode
from proto import broker_pb2, broker_pb2_grpc, pop_pb2
from proto.pop_pb2_grpc import PopServiceStub
from tests.cluster import Cluster, make_cluster, wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("pop"), registerNameServerPeriod=1000)
    yield c
    c.stop()


def create(cluster: Cluster, topic: str, queues: int = 4, brokers: tuple[str, ...] = ("broker-a", "broker-b"),
           ) -> None:
    with Admin(cluster.addr) as admin:
        admin.create_topic(topic, brokers=list(brokers), read_queue_nums=queues, write_queue_nums=queues)
        wait_until(lambda: {q.broker_name for q in admin.topic_route(topic).queue_datas} >= set(brokers)
                   if topic in admin.topic_list() else False, what=f"route of {topic}")


def create_fifo(cluster: Cluster, topic: str, group: str) -> None:
    """One queue on broker-a, consumed by a FIFO group (consumeMessageOrderly)."""
    create(cluster, topic, queues=1, brokers=("broker-a",))
    with Admin(cluster.addr) as admin:
        admin.update_subscription_group(group, brokers=["broker-a"], consume_message_orderly=True)


def produce(cluster: Cluster, topic: str, bodies: list[bytes], **props: str) -> None:
    with Producer(cluster.addr) as producer:
        for body in bodies:
            producer.send(Message(topic, body, properties=dict(props)))


def drain(consumer: SimpleConsumer, expected: int, invisible_ms: int = 30_000, deadline_s: float = 20,
          restarted: bool = False) -> list:
    """Receive and ack until ``expected`` messages came (or the deadline). ``restarted``: the broker was just
    restarted, and a receive may fail while the route still names the old process's address."""
    got: list = []
    deadline = time.monotonic() + deadline_s
    while len(got) < expected and time.monotonic() < deadline:
        try:
            batch = consumer.receive(32, invisible_ms, wait_ms=200 if not restarted else 500)
        except MQClientError:
            if not restarted:
                raise
            continue
        if batch:
            consumer.ack(batch)
            got += batch
    return got


def test_every_message_once_across_two_brokers_and_two_members(cluster: Cluster):
    topic, group = "PopOnceT", "pop-once"
    create(cluster, topic)
    bodies = [f"m{i}".encode() for i in range(300)]
    produce(cluster, topic, bodies)
    got: list = []
    lock = threading.Lock()

    def member() -> None:
        with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
            mine = drain(consumer, len(bodies), deadline_s=10)
            with lock:
                got.extend(mine)

    threads = [threading.Thread(target=member) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(m.body for m in got) == sorted(bodies)  # each exactly once between the two members
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        assert consumer.receive(32, 1000) == []
    with PullConsumer(cluster.addr, group=group) as reader:  # progress is the group's committed offset
        assert sum(reader.committed(mq) for mq in reader.queues(topic)) == len(bodies)


def test_unacked_message_comes_back_after_its_invisible_time_with_its_count_raised(cluster: Cluster):
    topic, group = "PopRetryT", "pop-retry"
    create(cluster, topic, queues=1, brokers=("broker-a",))
    produce(cluster, topic, [b"again"])
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        started = time.monotonic()
        first = consumer.receive(1, invisible_ms=5000)  # long enough that the next receive is surely within it
        assert [m.body for m in first] == [b"again"] and first[0].reconsume_times == 0
        assert consumer.receive(1, invisible_ms=1000) == []  # invisible meanwhile
        second = consumer.receive(1, invisible_ms=30_000, wait_ms=20_000)
        # Long polling woke when it came due (5 s after the pop), not when its 20 s were up.
        assert time.monotonic() - started < 12
        assert [m.body for m in second] == [b"again"] and second[0].reconsume_times == 1
        assert second[0].msg_id == first[0].msg_id
        with pytest.raises(MQClientError, match="INVALID_RECEIPT_HANDLE"):
            consumer.ack_async(first).result(timeout=10)  # the first delivery's handle is void
        consumer.ack_async(second).result(timeout=10)
        assert consumer.receive(1, invisible_ms=500, wait_ms=1000) == []


def test_one_ack_request_with_stale_and_garbage_handles_acks_the_good_ones(cluster: Cluster):
    """An ack request may carry many consumers' acks (the SDK merges them): a handle that is stale or does not
    decode is refused alone, the others are acked, and only the refused ones are listed; a handle given twice gets
    its first copy's outcome (answers name handles by their text)."""
    topic, group = "PopMixedAckT", "pop-mixed-ack"
    create(cluster, topic, queues=1, brokers=("broker-a",))
    produce(cluster, topic, [b"a", b"b", b"c"])
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        got = drain_unacked(consumer, 3)
        consumer.ack(got[0])
        handles = [got[0].receipt_handle, "v1|broker-a|x|1|2|3|4", got[1].receipt_handle, got[2].receipt_handle,
                   got[1].receipt_handle]
        addr = consumer.client.master_addr(topic, "broker-a")
        response = PopServiceStub(consumer.client.channel(addr)).AckMessage(
            pop_pb2.AckMessageRequest(group=group, topic=topic, receipt_handles=handles), timeout=10)
        assert response.code == ResponseCode.INVALID_RECEIPT_HANDLE
        assert [r.receipt_handle for r in response.results] == handles[:2]  # acked already; not one of ours
        assert "2 of 4" in response.remark
        assert consumer.receive(3, invisible_ms=500, wait_ms=1500) == []  # b and c were acked


def drain_unacked(consumer: SimpleConsumer, expected: int) -> list:
    got: list = []
    deadline = time.monotonic() + 10
    while len(got) < expected and time.monotonic() < deadline:
        got += consumer.receive(32, 30_000, wait_ms=200)
    assert len(got) == expected
    return got


def test_change_invisible_time_gives_a_new_handle_and_delays_redelivery(cluster: Cluster):
    topic, group = "PopChangeT", "pop-change"
    create(cluster, topic, queues=1, brokers=("broker-a",))
    produce(cluster, topic, [b"slow"])
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        [msg] = consumer.receive(1, invisible_ms=5000)  # the change surely comes within it
        popped = time.monotonic()  # after the broker popped it: the old invisible time ends by popped + 5 s
        old = msg.receipt_handle
        consumer.change_invisible(msg, 30_000)
        assert msg.receipt_handle != old
        # Not back after the first 5 s: a long poll wakes when an in-flight message comes due, so the old
        # invisible time, had it stayed, would show within the second to spare.
        while (left_s := popped + 6 - time.monotonic()) > 0:
            assert consumer.receive(1, invisible_ms=1000, wait_ms=int(left_s * 1000) + 1) == []
        consumer.ack(msg)
        with pytest.raises(MQClientError, match="INVALID_RECEIPT_HANDLE"):
            consumer.change_invisible(msg, 1000)  # acked: nothing to change


def test_message_dead_lettered_after_retry_max_times(cluster: Cluster):
    topic, group = "PopDlqT", "pop-dlq"
    create(cluster, topic, queues=1, brokers=("broker-a",))
    with Admin(cluster.addr) as admin:
        admin.update_subscription_group(group, brokers=["broker-a"], retry_max_times=2)
    produce(cluster, topic, [b"poison", b"fine"])
    deliveries = []
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for msg in consumer.receive(2, invisible_ms=300, wait_ms=300):
                if msg.body == b"poison":
                    deliveries.append(msg.reconsume_times)
                else:
                    consumer.ack(msg)
            if len(deliveries) == 3 and dead_letter_bodies(cluster, group):
                break
    assert deliveries == [0, 1, 2]  # retryMaxTimes=2: three deliveries, then the dead letters
    [dead] = dead_letter_bodies(cluster, group)
    assert dead.body == b"poison" and dead.properties["RETRY_TOPIC"] == topic


def dead_letter_bodies(cluster: Cluster, group: str) -> list:
    with PullConsumer(cluster.addr, group="dlq-reader") as reader:
        try:
            queues = reader.queues(dlq_topic(group))
        except MQClientError:
            return []
        out = []
        for mq in queues:
            result = reader.pull(mq, 0, 32)
            if result.status is PullStatus.FOUND:
                out += result.messages
        return out


def test_fifo_group_keeps_each_message_group_in_order_and_groups_in_parallel(cluster: Cluster):
    topic, group = "PopFifoT", "pop-fifo"
    create_fifo(cluster, topic, group)
    with Producer(cluster.addr) as producer:
        for i in range(100):
            g = "g0" if i % 2 == 0 else "g1"
            producer.send(Message(topic, f"{g}-{i}".encode(), properties={PROPERTY_SHARDING_KEY: g}))
    order: dict[str, list[int]] = {"g0": [], "g1": []}
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        first = consumer.receive(32, invisible_ms=800)
        assert sorted(m.body.split(b"-")[0] for m in first) == [b"g0", b"g1"]  # one per message group at a time
        # Not acking the g0 message holds g0 back; g1 goes on.
        held = next(m for m in first if m.body.startswith(b"g0"))
        consumer.ack([m for m in first if m is not held])
        order["g1"].append(int(next(m for m in first if m is not held).body.split(b"-")[1]))
        deadline = time.monotonic() + 30
        while sum(map(len, order.values())) < 100 and time.monotonic() < deadline:
            for msg in consumer.receive(32, invisible_ms=800, wait_ms=200):
                g, i = msg.body.decode().split("-")
                order[g].append(int(i))
                consumer.ack(msg)
    assert order["g0"] == list(range(0, 100, 2))  # the held one came back first, then the rest in order
    assert order["g1"] == list(range(1, 100, 2))


def test_a_receive_parked_behind_a_fifo_group_gets_its_next_message_when_the_group_is_acked(cluster: Cluster):
    """A receive parked in a long poll while a FIFO message group's head was in flight woke only for a new message,
    an expiry or its poll's end: a FIFO PushConsumer with a backlog (whose next receive goes while its handler runs)
    got one message per group every 20 s (the proxy review). An ack wakes it."""
    topic, group = "PopFifoParkT", "pop-fifo-park"
    create_fifo(cluster, topic, group)
    with Producer(cluster.addr) as producer:
        for i in range(2):
            producer.send(Message(topic, b"g-%d" % i, properties={PROPERTY_SHARDING_KEY: "g"}))
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        [head] = consumer.receive(32, invisible_ms=60_000)
        parked: list[tuple[float, list]] = []

        def receive() -> None:
            started = time.monotonic()
            got = consumer.receive(32, invisible_ms=60_000, wait_ms=15_000)
            parked.append((time.monotonic() - started, got))

        waiter = threading.Thread(target=receive)
        waiter.start()
        time.sleep(1)  # parked now: the group's next message waits for its head
        consumer.ack(head)
        waiter.join(20)
    took, got = parked[0]
    assert [m.body for m in got] == [b"g-1"]
    assert took < 6, f"the parked receive got the group's next message {took:.1f} s after it asked"


@pytest.mark.parametrize("settings", [{}, {"flushDiskType": "SYNC_FLUSH", "storeType": "defaultRocksDB"}],
                         ids=["calls-on-the-loop", "sync-flush-rocksdb-calls-on-the-worker"])
def test_in_flight_state_survives_a_sigkill(tmp_path, settings: dict[str, str]):
    c = make_cluster(tmp_path, broker_names=("broker-a",), registerNameServerPeriod=1000, **settings)
    try:
        topic, group = "PopCrashT", "pop-crash"
        create(c, topic, queues=2, brokers=("broker-a",))
        bodies = [f"c{i}".encode() for i in range(40)]
        produce(c, topic, bodies)
        with SimpleConsumer(c.addr, group=group, topic=topic) as consumer:
            received = []
            while len(received) < 40:
                received += consumer.receive(32, invisible_ms=2000)
            acked = received[:25]
            consumer.ack(acked)
        c.brokers["broker-a"].kill()
        c.start_broker("broker-a")
        with SimpleConsumer(c.addr, group=group, topic=topic) as consumer:
            got = drain(consumer, 15, restarted=True)
            assert consumer.receive(32, invisible_ms=1000, wait_ms=300) == []
        assert sorted(m.body for m in got) == sorted(m.body for m in received[25:])  # un-acked: back, acked: never
    finally:
        c.stop()


@pytest.mark.parametrize("settings", [
    {"flushDiskType": "SYNC_FLUSH"}, {"storeType": "defaultRocksDB"},
    {"kvEnable": "true", "tieredStoreEnable": "true", "tieredBackendServiceProvider": "memory",
     "tieredStorageLevel": "FORCE"}], ids=["sync-flush", "rocksdb-store", "kv-and-tiered-force"])
def test_pop_under_sync_flush_the_rocksdb_store_and_kv_with_tiered_reads(tmp_path, settings: dict[str, str]):
    c = make_cluster(tmp_path, broker_names=("broker-a",), registerNameServerPeriod=1000, **settings)
    try:
        topic, group = "PopComboT", "pop-combo"
        create(c, topic, queues=2, brokers=("broker-a",))
        produce(c, topic, [f"s{i}".encode() for i in range(20)])
        with SimpleConsumer(c.addr, group=group, topic=topic) as consumer:
            first = consumer.receive(32, invisible_ms=500)
            while len(first) < 20:
                first += consumer.receive(32, invisible_ms=500)
            consumer.ack(first[:10])
            again = drain(consumer, 10, invisible_ms=30_000)  # the 10 un-acked come back, once each
        assert sorted(m.body for m in again) == sorted(m.body for m in first[10:])
        assert all(m.reconsume_times == 1 for m in again)
    finally:
        c.stop()


def test_a_dead_broker_is_skipped_and_receives_go_on_from_the_others(tmp_path):
    """One of two brokers SIGKILLed: no receive fails, and the other broker's messages all come; with both dead
    the receive says so."""
    c = make_cluster(tmp_path, registerNameServerPeriod=1000)
    try:
        topic, group = "PopDeadBrokerT", "pop-dead-broker"
        create(c, topic)
        with SimpleConsumer(c.addr, group=group, topic=topic) as consumer:
            assert consumer.receive(32, wait_ms=0) == []  # the route, and a stream to each broker
            c.brokers["broker-a"].kill()
            bodies = [b"alive-%02d" % i for i in range(40)]
            with Producer(c.addr) as producer:
                for i, body in enumerate(bodies):
                    producer.send(Message(topic, body), queue=MessageQueue(topic, "broker-b", i % 4))
            got: list = []
            deadline = time.monotonic() + 20
            while len(got) < len(bodies) and time.monotonic() < deadline:
                batch = consumer.receive(32, invisible_ms=30_000, wait_ms=200)  # raises nothing
                if batch:
                    consumer.ack(batch)
                got += batch
            assert sorted(m.body for m in got) == bodies

            c.brokers["broker-b"].kill()
            with pytest.raises(MQClientError, match="UNAVAILABLE"):
                consumer.receive(32, invisible_ms=30_000, wait_ms=200)
    finally:
        c.stop()


def test_reset_offset_restarts_a_pop_group_from_the_reset_point(cluster: Cluster):
    topic, group = "PopResetT", "pop-reset"
    create(cluster, topic, queues=1, brokers=("broker-a",))
    bodies = [f"r{i}".encode() for i in range(10)]
    produce(cluster, topic, bodies)
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        first = consumer.receive(6, invisible_ms=30_000)
        consumer.ack(first)
        held = consumer.receive(2, invisible_ms=30_000)  # in flight when the reset comes
        assert [m.body for m in first + held] == bodies[:8]
        with Admin(cluster.addr) as admin:
            admin.reset_offset_by_time(group, topic, 0)  # back to the first message
        with pytest.raises(MQClientError, match="INVALID_RECEIPT_HANDLE"):
            consumer.ack(held)  # the reset forgot what was in flight
        again = drain(consumer, 10, invisible_ms=30_000)
    assert [m.body for m in again] == bodies  # all of them again, in order, once


def test_a_group_popping_again_after_pulling_goes_on_from_what_the_pulls_committed(cluster: Cluster):
    """A group that popped a queue, then consumed it by pull (a push consumer of the group) and went back to POP:
    POP started where its own scan had stopped, and handed out again everything the pulls consumed."""
    topic, group = "PopAfterPullT", "pop-after-pull"
    create(cluster, topic, queues=1, brokers=("broker-a",))
    produce(cluster, topic, [b"pop-0", b"pop-1"])
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        assert [m.body for m in drain(consumer, 2)] == [b"pop-0", b"pop-1"]
    produce(cluster, topic, [b"pull-2", b"pull-3"])
    with PullConsumer(cluster.addr, group=group) as puller:
        mq = puller.queues(topic)[0]
        assert puller.committed(mq) == 2
        wait_until(lambda: puller.max_offset(mq) == 4, what="4 messages dispatched")
        assert [m.body for m in puller.pull(mq, 2, 32).messages] == [b"pull-2", b"pull-3"]
        puller.commit(mq, 4)
    produce(cluster, topic, [b"pop-4"])
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        assert [m.body for m in drain(consumer, 1)] == [b"pop-4"]
        assert not consumer.receive(32, 30_000, wait_ms=300)  # was pull-2 and pull-3 again


def test_a_topic_deleted_and_made_again_is_popped_from_its_first_message(cluster: Cluster):
    """POP kept the deleted topic's queue state (where the next fresh message is, what is in flight): the topic
    made again starts at queue offset 0, and its first messages were never handed out."""
    topic, group = "PopDeletedT", "pop-deleted"
    create(cluster, topic, queues=1, brokers=("broker-a",))
    produce(cluster, topic, [b"old-0", b"old-1", b"old-2"])
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        assert len(drain(consumer, 2, invisible_ms=30_000)) >= 2
        with Admin(cluster.addr) as admin:
            admin.delete_topic(topic, "DefaultCluster")
            wait_until(lambda: topic not in admin.topic_list(), what=f"{topic} gone")
    create(cluster, topic, queues=1, brokers=("broker-a",))
    produce(cluster, topic, [b"new-0", b"new-1"])
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        assert [m.body for m in drain(consumer, 2, invisible_ms=30_000)] == [b"new-0", b"new-1"]


def test_a_message_whose_properties_cannot_be_decoded_is_dead_lettered_and_pop_goes_on(cluster: Cluster):
    """Sends check a properties block's size and that it is text, not its pairs: a message stored with a stray
    separator in a value (or, before sends refused them, bytes that are not UTF-8) failed its dead-lettering at every
    pop after its last retry, and every pop of the group and topic failed from then on (INTERNAL), for good: its
    state is on disk. Its dead letter now carries the properties repaired, and the group goes on."""
    topic, group = "PopPoisonT", "pop-poison"
    create(cluster, topic, queues=1, brokers=("broker-a",))
    with Admin(cluster.addr) as admin:
        admin.update_subscription_group(group, brokers=["broker-a"], retry_max_times=1)
    channel = grpc.insecure_channel(cluster.brokers["broker-a"].addr)
    try:
        sent = broker_pb2_grpc.BrokerServiceStub(channel).SendMessage(broker_pb2.SendMessageRequest(
            topic=topic, queue_id=0, bodies=[b"poison"], properties=[b"TAGS\x01a\x01b\x02"]), timeout=10)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        pop = PopServiceStub(channel)

        def receive() -> list[tuple[bytes, str]]:
            answer = pop.PopMessage(pop_pb2.PopMessageRequest(group=group, topic=topic, queue_id=-1, max_msg_nums=32,
                                                              invisible_time_ms=300, poll_time_ms=300), timeout=10)
            assert answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), answer.remark
            bodies = [m.body for m in decode_records(answer.records)] if answer.records else []
            return list(zip(bodies, [p.receipt_handle for p in answer.popped], strict=True))

        deliveries = 0
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not dead_letter_bodies(cluster, group):
            deliveries += sum(body == b"poison" for body, _ in receive())  # never acked
        assert deliveries == 2 and [m.body for m in dead_letter_bodies(cluster, group)] == [b"poison"]
        produce(cluster, topic, [b"after"])
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while b"after" not in got and time.monotonic() < deadline:
            got += [body for body, _ in receive()]
        assert got == [b"after"]
    finally:
        channel.close()

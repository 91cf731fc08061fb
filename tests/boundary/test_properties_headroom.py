"""A producer's property block leaves room for what the broker adds to it (MAX_USER_PROPERTIES_SIZE): a retry, a
dead letter, a delay, a half message and its discarded copy add properties of their own, and a block the send took
at the store's limit (32767 bytes) could then be neither retried, dead-lettered nor discarded. Sends are refused
above the user limit at every entry point (the SDK, the broker's send, the v2 proxy through the SDK's rule), with
an error that names that limit, and a block at it goes through every one of the broker's rewrites."""

import time
from collections.abc import Iterator

import grpc
import pytest

from broker.timer.delay_router import MAX_DUE_MS, DelayRouter
from broker.transaction.half_message import discard_record, half_properties
from client import (
    Admin,
    Message,
    MQClientError,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    TransactionResolution,
)
from client.message_encoding import wire_properties
from client.simple_consumer import SimpleConsumer
from common.group_topics import dlq_topic
from common.message_codec import decode_record, record_parts
from common.message_properties import (
    BROKER_PROPERTIES_HEADROOM,
    HALF_MESSAGE_PROPERTIES,
    MAX_PROPERTIES_SIZE,
    MAX_USER_PROPERTIES_SIZE,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    decode_properties,
    encode_properties,
)
from common.transaction_topic import PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_PREPARED, TRANS_CHECK_MAX_TIME_TOPIC
from proto import broker_pb2, broker_pb2_grpc
from tests.cluster import Cluster, make_cluster, wait_until

USER_LIMIT = f"at most {MAX_USER_PROPERTIES_SIZE}"
KEY = "0" * 28  # as long as the SDK's unique keys
TOPIC = "H" * 127  # the longest topic: its name is in RETRY_TOPIC and REAL_TOPIC
PUSH_TOPIC = "P" * 127  # the push consumer's alone (a refused send that was stored would show up there)
GROUP = "G" * 120  # the longest group: %RETRY%<group> is a REAL_TOPIC of 127 chars


def at_limit(topic: str, extra: int = 0, delay_level: int = 0, **props: str) -> Message:
    """A message whose wire block (with the SDK's unique key) is the user limit plus ``extra`` bytes."""
    base = len(wire_properties(Message(topic, b"x", properties={"big": "", **props}, delay_level=delay_level), KEY,
                               HALF_MESSAGE_PROPERTIES))
    return Message(topic, b"x", properties={"big": "x" * (MAX_USER_PROPERTIES_SIZE - base + extra), **props},
                   delay_level=delay_level)


def raw_block(size: int, **props: str) -> bytes:
    """A block as another client may send it, past the SDK's own check."""
    base = len(encode_properties({"UNIQ_KEY": KEY, "big": "", **props}))
    return encode_properties({"UNIQ_KEY": KEY, "big": "x" * (size - base), **props})


def test_the_headroom_covers_every_property_the_broker_adds():
    """Every rewrite at once, each value at its largest, through the broker's own functions: a half message's
    routing and its discard's count, then a retry's properties and the timer's, on a block at the user limit."""
    assert MAX_USER_PROPERTIES_SIZE == MAX_PROPERTIES_SIZE - BROKER_PROPERTIES_HEADROOM == 32200
    user = wire_properties(at_limit(TOPIC, **{PROPERTY_TRANSACTION_PREPARED: "true", PROPERTY_PRODUCER_GROUP: "pg"}),
                           KEY, HALF_MESSAGE_PROPERTIES)[:-1]  # no separator at its end: the broker adds one
    assert len(user) == MAX_USER_PROPERTIES_SIZE - 1
    int32 = 2**31 - 1
    [half] = half_properties([user], TOPIC, int32, static=False)
    record = b"".join(record_parts(b"T", 0, [b"x"], [half], born_timestamp=1, born_host=bytes(8)))
    discarded = decode_record(discard_record(decode_record(record), int32, bytes(8)))
    assert discarded.properties["TRANSACTION_CHECK_TIMES"] == str(int32)  # it had room
    props = decode_properties(discarded.raw_properties)
    props.update({PROPERTY_RETRY_TOPIC: TOPIC, PROPERTY_ORIGIN_MESSAGE_ID: "i" * 128,
                  PROPERTY_RECONSUME_TIME: str(int32)})
    timer = DelayRouter([1000], 1000).timer_properties(encode_properties(props), "%RETRY%" + GROUP, int32, MAX_DUE_MS,
                                                        int32)
    assert len(timer) <= MAX_PROPERTIES_SIZE


def test_the_sdk_refuses_a_block_over_the_user_limit_naming_it():
    assert len(wire_properties(at_limit("T"), KEY)) == MAX_USER_PROPERTIES_SIZE
    for msg in (at_limit("T", 1), at_limit("T", 1, delay_level=1)):
        with pytest.raises(MQClientError, match=f"are {MAX_USER_PROPERTIES_SIZE + 1} bytes: {USER_LIMIT} "):
            wire_properties(msg, KEY)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("headroom"), broker_names=("broker-a",), registerNameServerPeriod=1000,
                     messageDelayLevel="1s 1s 1s", transactionTimeOut=500, transactionCheckInterval=500,
                     transactionCheckMax=1)
    try:  # a setup that fails part-way must not leave the daemons running
        c.create_topic(TOPIC, queues=1)
        c.create_topic(PUSH_TOPIC, queues=1)
        yield c
    finally:
        c.stop()


def test_the_broker_refuses_a_block_over_the_user_limit_naming_it(cluster: Cluster):
    """A client that is not this SDK: the broker's send is the entry point. A delayed message's refusal named the
    size with the timer's properties added (32819 bytes exceed 32767), a half message's with its routing."""
    over = MAX_USER_PROPERTIES_SIZE + 1
    blocks = {"plain": raw_block(over), "delayed": raw_block(over, DELAY="1"),
              "half": raw_block(over, **{PROPERTY_TRANSACTION_PREPARED: "true", PROPERTY_PRODUCER_GROUP: "pg"})}
    channel = grpc.insecure_channel(cluster.brokers["broker-a"].addr)
    try:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        for kind, props in blocks.items():
            with pytest.raises(grpc.RpcError) as err:
                stub.SendMessage(broker_pb2.SendMessageRequest(topic=TOPIC, queue_id=0, bodies=[b"x"],
                                                               properties=[props]), timeout=10)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, kind
            assert f"are {len(props)} bytes: {USER_LIMIT} " in err.value.details(), (kind, err.value.details())
    finally:
        channel.close()


def pulled(cluster: Cluster, topic: str) -> list:
    with PullConsumer(cluster.addr, group="headroom-reader") as reader:
        try:
            queues = reader.queues(topic)
        except MQClientError:  # created by its first message
            return []
        return [m for mq in queues if (r := reader.pull(mq, 0, 32)).status is PullStatus.FOUND for m in r.messages]


def test_a_block_at_the_user_limit_is_delayed_retried_and_dead_lettered(cluster: Cluster):
    calls: list[int] = []

    def handler(msg) -> None:
        calls.append(msg.reconsume_times)
        raise RuntimeError("fail")

    with PushConsumer(cluster.addr, group=GROUP, topic=PUSH_TOPIC, handler=handler, consume_from_first=True,
                      max_reconsume_times=1):
        with Producer(cluster.addr) as producer:
            producer.send(at_limit(PUSH_TOPIC, delay_level=1))
        wait_until(lambda: pulled(cluster, dlq_topic(GROUP)), timeout=20, what="the dead letter")
    assert calls == [0, 1]
    [dead] = pulled(cluster, dlq_topic(GROUP))
    assert dead.properties[PROPERTY_RETRY_TOPIC] == PUSH_TOPIC and dead.properties[PROPERTY_RECONSUME_TIME] == "1"
    assert PROPERTY_ORIGIN_MESSAGE_ID in dead.properties  # nothing left out: the send kept room for it all


def test_a_pop_message_at_the_user_limit_is_dead_lettered_whole(cluster: Cluster):
    group = "P" * 120
    with Admin(cluster.addr) as admin:
        admin.update_subscription_group(group, cluster="DefaultCluster", retry_max_times=0)
    topic = "HeadroomPop"
    cluster.create_topic(topic, queues=1)
    with Producer(cluster.addr) as producer:
        producer.send(at_limit(topic))
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not pulled(cluster, dlq_topic(group)):
            consumer.receive(4, invisible_ms=300)  # never acked
            time.sleep(0.2)
    [dead] = pulled(cluster, dlq_topic(group))
    assert {PROPERTY_RETRY_TOPIC, PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RECONSUME_TIME} <= set(dead.properties)


def test_a_half_message_at_the_user_limit_is_discarded_with_its_count(cluster: Cluster):
    with Producer(cluster.addr, group="headroom-tx", transaction_checker=lambda m: TransactionResolution.UNKNOWN,
                  topics=[TOPIC]) as producer:
        producer.begin_transaction().send(at_limit(TOPIC, **{PROPERTY_TRANSACTION_PREPARED: "true",
                                                             PROPERTY_PRODUCER_GROUP: "headroom-tx"}))
        wait_until(lambda: pulled(cluster, TRANS_CHECK_MAX_TIME_TOPIC), timeout=20, what="the discarded copy")
    [copy] = pulled(cluster, TRANS_CHECK_MAX_TIME_TOPIC)
    assert copy.properties["TRANSACTION_CHECK_TIMES"] == "1" and copy.properties["REAL_TOPIC"] == TOPIC

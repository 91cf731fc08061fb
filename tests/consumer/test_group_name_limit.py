"""Consumer group names are at most 120 chars: a group's retry topic is ``%RETRY%<group>`` and its dead letters
``%DLQ%<group>``, both topics (at most 127 chars). Groups of 121-127 chars were taken everywhere, and then a push
consumer's session broke every second (its retry topic refused) and POP's dead-lettering answered SYSTEM_ERROR.
Now every entry point refuses them with a clear error, and a group at the limit retries and dead-letters."""

import time
from collections.abc import Iterator

import grpc
import pytest

from client import Admin, Message, MQClientError, Producer, PullConsumer, PullStatus, PushConsumer
from client.simple_consumer import SimpleConsumer
from common.group_topics import dlq_topic
from common.message_properties import PROPERTY_RECONSUME_TIME, PROPERTY_RETRY_TOPIC
from proto import broker_pb2, broker_pb2_grpc, consumer_pb2, consumer_pb2_grpc, pop_pb2, pop_pb2_grpc
from tests.cluster import Cluster, make_cluster, wait_until

LONGEST = "L" * 120  # %RETRY% + 120 = 127 chars
TOO_LONG = "T" * 121
REFUSAL = "group is 121 chars, longer than 120"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("group-names"), broker_names=("broker-a",),
                     registerNameServerPeriod=1000, messageDelayLevel="1s 1s 1s")
    yield c
    c.stop()


def dead_letters(cluster: Cluster, group: str) -> list:
    with PullConsumer(cluster.addr, group="dlq-reader") as reader:
        try:
            queues = reader.queues(dlq_topic(group))
        except MQClientError:  # created by the first dead letter
            return []
        out = []
        for mq in queues:
            result = reader.pull(mq, 0, 32)
            if result.status is PullStatus.FOUND:
                out += result.messages
        return out


def test_the_sdk_refuses_a_group_name_too_long_for_its_retry_topic(cluster: Cluster):
    with Admin(cluster.addr) as admin, pytest.raises(MQClientError, match=REFUSAL):
        admin.update_subscription_group(TOO_LONG, cluster="DefaultCluster")
    for make in (lambda: PushConsumer(cluster.addr, group=TOO_LONG, topic="T", handler=print),
                 lambda: SimpleConsumer(cluster.addr, group=TOO_LONG, topic="T"),
                 lambda: PullConsumer(cluster.addr, group=TOO_LONG)):
        with pytest.raises(MQClientError, match=REFUSAL):
            make().close()


def test_the_broker_refuses_it_at_every_entry_point(cluster: Cluster):
    """What the SDK refuses first, the broker refuses for any other client: INVALID_ARGUMENT naming the limit."""
    channel = grpc.insecure_channel(cluster.brokers["broker-a"].addr)
    calls = [
        lambda: broker_pb2_grpc.BrokerServiceStub(channel).UpdateAndCreateSubscriptionGroup(
            broker_pb2.SubscriptionGroupConfig(group_name=TOO_LONG, consume_enable=True, retry_max_times=1),
            timeout=10),
        lambda: consumer_pb2_grpc.ConsumerServiceStub(channel).ConsumerSendMsgBack(consumer_pb2.SendMsgBackRequest(
            group=TOO_LONG, topic="T", body=b"x", max_reconsume_times=-1), timeout=10),
        lambda: pop_pb2_grpc.PopServiceStub(channel).PopMessage(pop_pb2.PopMessageRequest(
            group=TOO_LONG, topic="T", queue_id=-1, max_msg_nums=1, invisible_time_ms=1000), timeout=10),
        lambda: broker_pb2_grpc.BrokerServiceStub(channel).PullMessage(broker_pb2.PullMessageRequest(
            consumer_group=TOO_LONG, topic="T", max_msg_nums=1), timeout=10),
    ]
    try:
        for call in calls:
            with pytest.raises(grpc.RpcError) as err:
                call()
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and REFUSAL in err.value.details()
    finally:
        channel.close()


def test_a_group_at_the_limit_retries_and_dead_letters(cluster: Cluster):
    topic = "LongGroupT"
    cluster.create_topic(topic, queues=1)
    calls: list[int] = []

    def handler(msg) -> None:
        assert msg.topic == topic
        calls.append(msg.reconsume_times)
        raise RuntimeError("fail")

    with PushConsumer(cluster.addr, group=LONGEST, topic=topic, handler=handler, consume_from_first=True,
                      max_reconsume_times=1):
        with Producer(cluster.addr) as producer:
            producer.send(Message(topic, b"fail-me"))
        wait_until(lambda: dead_letters(cluster, LONGEST), timeout=20, what="the dead letter of the push consumer")
    assert calls == [0, 1]  # delivered, retried through %RETRY%<group> (127 chars), then dead-lettered
    [dead] = dead_letters(cluster, LONGEST)
    assert dead.properties[PROPERTY_RETRY_TOPIC] == topic and dead.properties[PROPERTY_RECONSUME_TIME] == "1"


def test_a_pop_group_at_the_limit_dead_letters(cluster: Cluster):
    topic, group = "LongPopT", "P" * 120
    cluster.create_topic(topic, queues=1)
    with Admin(cluster.addr) as admin:
        admin.update_subscription_group(group, cluster="DefaultCluster", retry_max_times=0)
    with Producer(cluster.addr) as producer:
        producer.send(Message(topic, b"pop-me"))
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        deadline = time.monotonic() + 15
        received = []
        while time.monotonic() < deadline and not dead_letters(cluster, group):
            received += [m.body for m in consumer.receive(4, invisible_ms=300)]  # never acked
            time.sleep(0.2)
    assert received == [b"pop-me"] and [m.body for m in dead_letters(cluster, group)] == [b"pop-me"]

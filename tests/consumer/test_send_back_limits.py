"""Send-backs at the limits. The broker (SendMsgBackProcessor on a real store in this process): a message whose
property block has no room for the retry's properties (stored before sends kept that room) is dead-lettered at
once, and a full one is dead-lettered with what does not fit left out; both were refused INVALID_ARGUMENT at every
try. The consumer (real daemons): a send-back the broker refuses for good is logged and skipped, not tried again
every 5 s forever with the queue's offset held behind it."""

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.send_msg_back_processor import SendMsgBackProcessor
from broker.store.config import MessageStoreConfig
from broker.store.message_store import MessageStore
from broker.timer.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, DEFAULT_TIMER_MAX_DELAY_SEC, parse_delay_levels
from broker.timer.delay_router import DelayRouter
from client import Message, MessageQueue, Producer, PullConsumer, PushConsumer
from common.group_topics import dlq_topic
from common.message_codec import decode_record, record_size
from common.message_properties import (
    MAX_PROPERTIES_SIZE,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    encode_properties,
)
from common.response_code import ResponseCode
from common.timer_topic import TIMER_TOPIC
from proto import consumer_pb2
from tests.cluster import Cluster, make_cluster, wait_until

TOPIC, GROUP = "BackLimits", "back-limits"


class Broker:
    def __init__(self, root: Path) -> None:
        self.store = MessageStore(MessageStoreConfig(str(root), mapped_file_size_commit_log=1 << 20,
                                                     flush_interval_commit_log_ms=10, destroy_mapped_file_grace_ms=0))
        self.store.start()
        topics = TopicConfigManager(root / "config")
        topics.load()
        groups = SubscriptionGroupManager(root / "config")
        groups.load()
        router = DelayRouter(parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL), DEFAULT_TIMER_MAX_DELAY_SEC * 1000)
        self.processor = SendMsgBackProcessor(topics, groups, self.store, router, lambda: None)

    def send_back(self, props: bytes, reconsume_times: int = 0, body: bytes = b"failed",
                  ) -> consumer_pb2.SendMsgBackResponse:
        if reconsume_times:
            props += f"{PROPERTY_RECONSUME_TIME}\x01{reconsume_times}\x02".encode()
        return self.processor.send_back(consumer_pb2.SendMsgBackRequest(
            group=GROUP, topic=TOPIC, body=body, properties=props, born_host="127.0.0.1:1",
            msg_id="C0FFEE0000000000000000000000", max_reconsume_times=3))

    def messages(self, topic: str) -> list:
        self.store.wait_dispatched(self.store.commit_log.max_offset())
        return [decode_record(r) for r in self.store.get_message(topic, 0, 0, 32).messages]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.store.shutdown()


def block(size: int) -> bytes:
    base = len(encode_properties({"UNIQ_KEY": "C0FFEE0000000000000000000000", "big": ""}))
    props = encode_properties({"UNIQ_KEY": "C0FFEE0000000000000000000000", "big": "x" * (size - base)})
    assert len(props) == size
    return props


def test_a_block_with_room_is_retried_through_the_timer(broker: Broker):
    answer = broker.send_back(block(1000))
    assert (answer.code, answer.topic, answer.reconsume_times) == (ResponseCode.SUCCESS, f"%RETRY%{GROUP}", 1)
    [timer] = broker.messages(TIMER_TOPIC)
    assert timer.properties[PROPERTY_RETRY_TOPIC] == TOPIC and timer.properties[PROPERTY_RECONSUME_TIME] == "1"


def test_a_block_without_room_for_the_retry_is_dead_lettered_at_once(broker: Broker, caplog):
    """100 bytes under the limit: the retry's properties and the timer's (138 bytes here) do not fit, the dead
    letter's (70) do."""
    with caplog.at_level(logging.INFO):
        answer = broker.send_back(block(MAX_PROPERTIES_SIZE - 100 - len("RECONSUME_TIME\x011\x02")), reconsume_times=1)
    assert (answer.code, answer.topic, answer.reconsume_times) == (ResponseCode.SUCCESS, dlq_topic(GROUP), 1)
    assert broker.messages(TIMER_TOPIC) == []
    [dead] = broker.messages(dlq_topic(GROUP))
    assert dead.properties[PROPERTY_RETRY_TOPIC] == TOPIC and dead.properties[PROPERTY_RECONSUME_TIME] == "1"
    assert dead.properties[PROPERTY_ORIGIN_MESSAGE_ID] == "C0FFEE0000000000000000000000"
    assert "send_back_dead_lettered_early" in caplog.text and "message_dead_lettered" in caplog.text


def test_a_message_whose_retry_record_exceeds_a_segment_is_dead_lettered_at_once(broker: Broker, caplog):
    """A body that fit the 1 MiB segment as sent: the retry's record (the timer's topic and properties added)
    does not, and it was refused INVALID_ARGUMENT, which a push consumer skips: the message was lost."""
    props = block(100)
    body = bytes(broker.store.commit_log.max_record_size() - record_size(len(TOPIC), len(props), 0) - 20)
    with caplog.at_level(logging.WARNING):
        answer = broker.send_back(props, body=body)
    assert (answer.code, answer.topic) == (ResponseCode.SUCCESS, dlq_topic(GROUP))
    assert [m.body for m in broker.messages(dlq_topic(GROUP))] == [body]
    assert "the retry record exceeds the commitlog segment size" in caplog.text


def test_a_full_block_is_dead_lettered_with_what_does_not_fit_left_out(broker: Broker, caplog):
    with caplog.at_level(logging.WARNING):
        answer = broker.send_back(block(MAX_PROPERTIES_SIZE))
    assert (answer.code, answer.topic) == (ResponseCode.SUCCESS, dlq_topic(GROUP))
    [dead] = broker.messages(dlq_topic(GROUP))
    assert dead.raw_properties == block(MAX_PROPERTIES_SIZE) and dead.body == b"failed"
    assert "dead_letter_properties_trimmed" in caplog.text and "ORIGIN_MESSAGE_ID" in caplog.text


# -- the consumer -----------------------------------------------------------------------------------------------------
@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = make_cluster(tmp_path / "cluster", broker_names=("broker-a",), registerNameServerPeriod=1000)
    yield c
    c.stop()


def lower_max_message_size(cluster: Cluster, topic: str, size: int) -> None:
    """As an operator who lowered maxMessageSize: messages stored before stay larger than it."""
    cluster.brokers["broker-a"].stop()
    cluster.settings["maxMessageSize"] = size
    cluster.start_broker("broker-a")
    with PullConsumer(cluster.addr, group="route-check") as consumer:
        wait_until(lambda: consumer.queues(topic), timeout=15, what=f"route of {topic} again")


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_a_send_back_refused_for_good_is_skipped_and_the_offset_moves(cluster: Cluster, orderly: bool, caplog):
    topic, group = "BackRefused", "back-refused"
    cluster.create_topic(topic, queues=1)
    with Producer(cluster.addr) as producer:
        producer.send(Message(topic, b"x" * 2048))
        producer.send(Message(topic, b"after"))
    lower_max_message_size(cluster, topic, 1024)  # its retry and its dead letter are refused: body too large
    handled: list[bytes] = []

    def handler(msg) -> None:
        handled.append(msg.body[:8])
        if msg.body.startswith(b"x"):
            raise RuntimeError("cannot handle this one")

    mq = MessageQueue(topic, "broker-a", 0)
    with caplog.at_level(logging.ERROR), PushConsumer(
            cluster.addr, group=group, topic=topic, handler=handler, consume_from_first=True, orderly=orderly,
            max_reconsume_times=0), PullConsumer(cluster.addr, group=group) as offsets:
        wait_until(lambda: offsets.committed(mq) == 2, timeout=15, what="the offset past the refused message")
    time.sleep(0.2)
    assert handled.count(b"x" * 8) == 1 and b"after" in handled  # not handled again every few seconds
    assert ("dead_letter_refused" if orderly else "send_back_refused") in caplog.text
    assert "action=skipped" in caplog.text

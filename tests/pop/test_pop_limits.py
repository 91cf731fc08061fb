"""POP at its limits, over the real PopService, PopMessageProcessor's dead-letter step and SendMsgBackProcessor on a
real message store in this process (the clock injected): a message whose property block is full (stored before
sends kept room for the broker's properties) is dead-lettered, not a refusal that aborted every pop of the group;
a dead letter the store refuses for good is dropped, logged, and the pop goes on; a pop's answer stays within its
byte budget however large the messages are."""

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.pop.pop_service import MAX_POP_BYTES, PopQuery, PopService
from broker.pop.pop_state_store import PopStateStore
from broker.processor.pop_message_processor import PopMessageProcessor
from broker.processor.send_msg_back_processor import SendMsgBackProcessor
from broker.store.config import MessageStoreConfig
from broker.store.get_message_result import GetMessageResult, GetMessageStatus
from broker.store.message_store import MessageStore
from broker.timer.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, DEFAULT_TIMER_MAX_DELAY_SEC, parse_delay_levels
from broker.timer.delay_router import DelayRouter
from common.group_topics import dlq_topic
from common.message_codec import decode_record, record_parts
from common.message_properties import (
    MAX_PROPERTIES_SIZE,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_UNIQUE_KEY,
    encode_properties,
)
from common.topic_config import TopicConfig

TOPIC, GROUP = "PopLimits", "pop-limits"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Broker:
    """A store with one topic, and POP wired to the consumer groups' dead-letter path as the broker wires it."""

    def __init__(self, root: Path) -> None:
        self.clock = Clock()
        self.store = MessageStore(MessageStoreConfig(str(root), mapped_file_size_commit_log=1 << 20,
                                                     flush_interval_commit_log_ms=10, destroy_mapped_file_grace_ms=0))
        self.store.start()
        self.topics = TopicConfigManager(root / "config")
        self.topics.load()
        self.topics.update(TopicConfig(TOPIC, 1, 1))
        groups = SubscriptionGroupManager(root / "config")
        groups.load()
        router = DelayRouter(parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL), DEFAULT_TIMER_MAX_DELAY_SEC * 1000)
        send_back = SendMsgBackProcessor(self.topics, groups, self.store, router, lambda: None)
        self.processor = PopMessageProcessor(
            topic_config_manager=self.topics, subscription_group_manager=groups, consumer_offset_manager=None,
            static_topics=None, store=self.store, pop=None, send_back=send_back,  # type: ignore[arg-type]
            refusal=lambda: None)
        self.pop = PopService("broker-a", PopStateStore(root / "pop", sync=False),
                              lambda *a: self.processor.dead_letter(*a), lambda *a: None, clock_ms=self.clock)

    def put(self, body: bytes, props: bytes) -> None:
        result = self.store.put_messages(TOPIC, 0, [body], [props])
        assert result.ok and self.store.wait_dispatched(result.append.end_offset)

    def receive(self, retries: int = 0) -> list[bytes]:
        query = PopQuery(self.store, GROUP, TOPIC, [0], 32, 1000, None, False, retries)
        return [decode_record(p.record).body for p in self.pop.pop(query, lambda q: 0).popped]

    def dead_letters(self) -> list:
        topic = dlq_topic(GROUP)
        self.store.wait_dispatched(self.store.commit_log.max_offset())
        result = self.store.get_message(topic, 0, 0, 32)
        return [decode_record(r) for r in result.messages]

    def close(self) -> None:
        self.pop.close()
        self.store.shutdown()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.close()


def full_block(unique_key: str) -> bytes:
    """A property block of exactly the store's limit: what sends accepted before they kept room for the broker."""
    base = len(encode_properties({PROPERTY_UNIQUE_KEY: unique_key, "big": ""}))
    props = encode_properties({PROPERTY_UNIQUE_KEY: unique_key, "big": "x" * (MAX_PROPERTIES_SIZE - base)})
    assert len(props) == MAX_PROPERTIES_SIZE
    return props


def test_a_full_property_block_is_dead_lettered_and_the_group_goes_on(broker: Broker, caplog):
    """It was refused (the dead letter's RETRY_TOPIC, ORIGIN_MESSAGE_ID and RECONSUME_TIME passed the limit), and
    the refusal aborted every pop of the group from then on: nothing new was delivered."""
    broker.put(b"full", full_block("FULL-KEY"))
    assert broker.receive() == [b"full"]
    broker.clock.now += 2000  # due again, with no retry left: for the dead letters
    broker.put(b"after", encode_properties({PROPERTY_UNIQUE_KEY: "AFTER-KEY"}))
    with caplog.at_level(logging.INFO):
        assert broker.receive() == [b"after"]
    [dead] = broker.dead_letters()
    assert dead.body == b"full" and dead.unique_key == "FULL-KEY" and len(dead.raw_properties) <= MAX_PROPERTIES_SIZE
    assert "dead_letter_properties_trimmed" in caplog.text and "message_dead_lettered" in caplog.text
    assert broker.pop.in_flight_count(GROUP, TOPIC) == 1  # only "after"


def test_a_block_with_room_keeps_the_dead_letters_properties(broker: Broker):
    broker.put(b"small", encode_properties({PROPERTY_UNIQUE_KEY: "SMALL-KEY"}))
    assert broker.receive() == [b"small"]
    broker.clock.now += 2000
    assert broker.receive() == []
    [dead] = broker.dead_letters()
    assert dead.properties["RETRY_TOPIC"] == TOPIC and dead.properties["ORIGIN_MESSAGE_ID"] == "SMALL-KEY"
    assert dead.properties[PROPERTY_RECONSUME_TIME] == "0"


def test_a_dead_letter_refused_for_good_is_dropped_and_the_pop_goes_on(broker: Broker, caplog):
    """A refusal that comes again at every try (here: the body is over a maxMessageSize lowered since it was stored)
    aborted every pop; now it is logged and that message dropped."""
    broker.put(b"x" * 2048, encode_properties({PROPERTY_UNIQUE_KEY: "BIG-BODY"}))
    assert broker.receive() == [b"x" * 2048]
    broker.store.config.max_message_size = 1024
    broker.clock.now += 2000
    broker.put(b"after", encode_properties({PROPERTY_UNIQUE_KEY: "AFTER-KEY"}))
    with caplog.at_level(logging.ERROR):
        assert broker.receive() == [b"after"]
    assert "pop_dead_letter_refused" in caplog.text and "action=dropped" in caplog.text
    assert broker.dead_letters() == [] and broker.pop.in_flight_count(GROUP, TOPIC) == 1


def test_a_dead_letter_that_may_pass_still_leaves_the_message_owed(broker: Broker, monkeypatch):
    """Only a refusal for good drops the message: a failure that may pass aborts the pop as before."""
    broker.put(b"owed", encode_properties({PROPERTY_UNIQUE_KEY: "OWED"}))
    assert broker.receive() == [b"owed"]
    broker.clock.now += 2000

    def disk_full(*_a) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(broker.processor, "dead_letter", disk_full)
    with pytest.raises(OSError):
        broker.receive()
    assert broker.pop.in_flight_count(GROUP, TOPIC) == 1


# -- the answer's byte budget ----------------------------------------------------------------------------------------
BIG = 20 * 1024 * 1024  # five of them: 100 MiB, more than a pop's 64 MiB


def big_record(offset: int) -> bytes:
    return b"".join(record_parts(TOPIC.encode(), 0, [bytes([65 + offset]) * BIG], [b""], born_timestamp=1,
                                 born_host=bytes(8), queue_offset=offset))


class BigQueue:
    """A queue of large records (as a store with maxMessageSize raised answers: one record per read at least)."""

    def __init__(self, count: int) -> None:
        self.records = [big_record(o) for o in range(count)]

    def get_message(self, topic, queue_id, offset, max_msg_nums, max_total_bytes=4 << 20, tags_codes=None):
        end = len(self.records)
        if offset >= end:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, 0, end)
        found = [self.records[offset]]  # the first always, the rest within max_total_bytes
        for record in self.records[offset + 1: offset + max_msg_nums]:
            if sum(map(len, found)) + len(record) > max_total_bytes:
                break
            found.append(record)
        return GetMessageResult(GetMessageStatus.FOUND, offset + len(found), 0, end, found)


def test_a_pop_answer_stays_within_its_byte_budget(tmp_path: Path):
    """32 messages of 16 MiB passed gRPC's 256 MiB answer limit: every receive failed while its messages were
    marked in flight. A pop stops adding messages at MAX_POP_BYTES (always one), fresh ones and due ones alike."""
    clock = Clock()
    pop = PopService("broker-a", PopStateStore(tmp_path / "pop", sync=False), lambda *a: None, lambda *a: None,
                     clock_ms=clock)
    queue = BigQueue(5)
    query = PopQuery(queue, GROUP, TOPIC, [0], 32, 1000, None, False, 16)
    answers = []
    for _ in range(3):
        answers.append([p.handle.queue_offset for p in pop.pop(query, lambda q: 0).popped])
    assert answers == [[0, 1, 2], [3, 4], []]
    clock.now += 2000  # all five due again: handed out again within the budget too
    again = pop.pop(query, lambda q: 0).popped
    assert [p.handle.queue_offset for p in again] == [0, 1, 2]
    assert sum(len(p.record) for p in again) <= MAX_POP_BYTES
    assert [p.handle.reconsume_times for p in again] == [1, 1, 1]
    assert pop.in_flight_count(GROUP, TOPIC) == 5
    pop.close()


def test_a_message_larger_than_the_budget_is_handed_out_alone(tmp_path: Path):
    pop = PopService("broker-a", PopStateStore(tmp_path / "pop", sync=False), lambda *a: None, lambda *a: None,
                     clock_ms=Clock())
    query = PopQuery(BigQueue(3), GROUP, TOPIC, [0], 32, 1000, None, False, 16, max_bytes=BIG // 2)
    assert [[p.handle.queue_offset for p in pop.pop(query, lambda q: 0).popped] for _ in range(4)] == [
        [0], [1], [2], []]
    pop.close()

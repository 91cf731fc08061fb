"""A send checked just before a deleteTopic and appended after it stores nothing.

deleteTopic appends a deletion record, after which the topic's queues start again at offset 0 for a topic made
again under the name. A send checks its topic, then appends: a delete that ran whole between the two left the
send's records after the deletion record, so a topic created again later began with a message no one sent to it.
The append now asks whether the topic still exists under the commitlog's lock, where the deletion record appends.
"""

from pathlib import Path

import pytest

from broker.processor.send_message_processor import SendLimits, SendMessageProcessor
from broker.statictopic.static_topic_service import StaticTopicService
from broker.store.config import StoreType
from common.message_properties import encode_properties
from common.refusal import Refusal
from common.response_code import ResponseCode
from common.timer_topic import TIMER_QUEUE_ID, TIMER_TOPIC
from common.topic_config import TopicConfig
from common.wire_batch import encode_wire_batch
from proto import broker_pb2
from tests.metadata.test_delete_topic_refused import TOPIC, Broker


def send_request(records: bool, delayed: bool) -> broker_pb2.SendMessageRequest:
    props = encode_properties({"DELAY": "3"} if delayed else {})
    if records:
        return broker_pb2.SendMessageRequest(topic=TOPIC, queue_id=0, records=encode_wire_batch(
            TOPIC.encode(), [b"late"], [props], born_timestamp=1, born_host=bytes(8)))
    return broker_pb2.SendMessageRequest(topic=TOPIC, queue_id=0, bodies=[b"late"], properties=[props])


@pytest.mark.parametrize("delayed", [False, True], ids=["now", "delayed"])
@pytest.mark.parametrize("records", [True, False], ids=["records", "bodies"])
@pytest.mark.parametrize("store_type", list(StoreType))
def test_a_send_checked_before_a_delete_that_then_ran_whole_stores_nothing(tmp_path: Path, store_type: StoreType,
                                                                           records: bool, delayed: bool) -> None:
    """``delayed``: a delayed message, stored in the timer's topic, was not asked again (the timers review): its
    timer, recorded after the deletion, would be delivered into a topic made again under the name."""
    broker = Broker(tmp_path, store_type)
    try:
        broker.topics.update(TopicConfig(TOPIC, 1, 1))
        send = SendMessageProcessor(SendLimits(4 * 1024 * 1024, False, 1), broker.topics,
                                    StaticTopicService("broker-a", broker.mappings, broker.offsets, broker.store,
                                                       None),  # type: ignore[arg-type]
                                    broker.store, lambda: None)
        select = broker.topics.select
        deleted: list[int] = []

        def select_then_delete(topic: str) -> TopicConfig | None:
            """The send's own check passes; the whole delete runs before the send goes on to its append."""
            config = select(topic)
            if not deleted:
                broker.topics.select = select  # type: ignore[method-assign]
                deleted.append(broker.admin.delete_topic(broker_pb2.TopicRequest(topic=TOPIC)).code)
            return config

        broker.topics.select = select_then_delete  # type: ignore[method-assign]
        with pytest.raises(Refusal) as refused:
            send.send(send_request(records, delayed))
        assert deleted == [ResponseCode.SUCCESS]
        assert refused.value.code == ResponseCode.TOPIC_NOT_EXIST, refused.value.remark
        assert broker.store.wait_dispatched(broker.store.commit_log.max_offset())
        assert broker.store.max_offset(TIMER_TOPIC, TIMER_QUEUE_ID) == 0  # no timer recorded

        broker.topics.update(TopicConfig(TOPIC, 1, 1))  # made again: it starts empty
        assert broker.store.wait_dispatched(broker.store.commit_log.max_offset())
        assert broker.store.max_offset(TOPIC, 0) == 0
        answer = send.send(send_request(records, delayed))
        assert answer.code == ResponseCode.SUCCESS and answer.queue_offset == (-1 if delayed else 0)
    finally:
        broker.close()

"""Admin changes made of several writes, on a broker whose disk refuses one of them: each retry of the
operator's does the whole change again.

- ``deleteTopic``: the topic's config goes last, so the topic is still there for the retry. (Deleted first, the
  retry was told the topic does not exist, and the queues, offsets and mapping left behind came back at a
  restart: a topic created again under that name would go on from the old offsets.)
- ``updateTopicQueueMapping`` reusing a physical queue: the queue's old offsets are forgotten before the mapping
  is stored. (Stored first, the retry saw the mapping applied and forgot nothing: a group would read past what
  the new link holds.)"""

import errno
import os
from pathlib import Path

import pytest

from broker.broker_config import BrokerConfig
from broker.broker_stats import BrokerStats
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.admin_broker_processor import AdminBrokerProcessor
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.config import StoreType
from broker.store.message_store import MessageStore
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.mapping_codec import detail_to_proto
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import TopicConfig
from proto import broker_pb2
from tests.store.conftest import store_config

TOPIC = "DeletedT"


def refused(*_args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class Broker:
    def __init__(self, root: Path, store_type: StoreType) -> None:
        self.root = root
        self.store = MessageStore(store_config(root / "store", store_type=store_type))
        self.store.start()
        config_dir = root / "config"
        self.topics = TopicConfigManager(config_dir)
        self.offsets = ConsumerOffsetManager(config_dir)
        self.mappings = TopicQueueMappingManager(config_dir, "broker-a")
        for manager in (self.topics, self.offsets, self.mappings):
            manager.load()
        self.admin = AdminBrokerProcessor(
            config=BrokerConfig(store_path_root_dir=str(root / "store")), broker_addr="127.0.0.1:0",
            topic_config_manager=self.topics, subscription_group_manager=SubscriptionGroupManager(config_dir),
            consumer_offset_manager=self.offsets, mapping_manager=self.mappings, store=self.store,
            local_store=self.store, stats=BrokerStats(), boot_timestamp=0, on_topics_changed=lambda: None)

    def close(self) -> None:
        self.offsets.persist()
        self.store.shutdown()


@pytest.mark.parametrize("store_type", list(StoreType))
def test_a_delete_whose_offsets_step_was_refused_is_finished_by_the_retry(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          store_type: StoreType) -> None:
    broker = Broker(tmp_path, store_type)
    broker.topics.update(TopicConfig(TOPIC, 1, 1))
    put = broker.store.put_messages(TOPIC, 0, [b"m"], [b""])
    # In its queue before the delete: a record dispatched after the delete creates its queue again (a race of its
    # own, in the session note; this test is about the refused step).
    assert put.ok and put.append is not None and broker.store.wait_dispatched(put.append.end_offset)
    broker.offsets.commit_offset("g", TOPIC, 0, 1)
    broker.offsets.persist()

    monkeypatch.setattr(broker.offsets, "delete_topic", refused)
    with pytest.raises(OSError):
        broker.admin.delete_topic(broker_pb2.TopicRequest(topic=TOPIC))
    assert broker.topics.select(TOPIC) is not None  # still there: the retry is a delete, not "does not exist"
    monkeypatch.undo()
    answer = broker.admin.delete_topic(broker_pb2.TopicRequest(topic=TOPIC))
    assert answer.code == ResponseCode.SUCCESS
    broker.close()
    again = Broker(tmp_path, store_type)
    try:
        assert again.topics.select(TOPIC) is None
        assert again.offsets.query_offset("g", TOPIC, 0) == -1
        assert again.store.max_offset(TOPIC, 0) == 0
    finally:
        again.close()


@pytest.mark.parametrize("store_type", list(StoreType))
def test_a_queue_reused_while_its_offsets_could_not_be_forgotten_is_reused_again_by_the_retry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_type: StoreType) -> None:
    """Logic queue 0 comes back to broker-a onto its physical queue 0 (one message there from before, and a group's
    offset on it), after broker-b led it."""
    broker = Broker(tmp_path, store_type)
    put = broker.store.put_messages(TOPIC, 0, [b"before"], [b""])
    assert put.ok and put.append is not None and broker.store.wait_dispatched(put.append.end_offset)  # in its queue
    broker.offsets.commit_offset("g", TOPIC, 0, 1)
    broker.offsets.persist()
    chain = [LogicQueueMappingItem(gen=1, queue_id=0, bname="broker-b", logic_offset=0, end_offset=5),
             LogicQueueMappingItem(gen=2, queue_id=0, bname="broker-a", logic_offset=10_000, start_offset=1)]
    request = broker_pb2.UpdateTopicQueueMappingRequest(
        detail=detail_to_proto(TopicQueueMappingDetail(TOPIC, 1, "broker-a", 3, hosted_queues={0: chain})))

    monkeypatch.setattr(broker.offsets, "delete_queues", refused)
    with pytest.raises(OSError):
        broker.admin.update_mapping(request)
    assert broker.mappings.get(TOPIC) is None  # not applied: the retry is a change again
    monkeypatch.undo()
    assert broker.admin.update_mapping(request).code == ResponseCode.SUCCESS
    broker.close()
    again = Broker(tmp_path, store_type)
    try:
        assert again.mappings.get(TOPIC) is not None
        assert again.offsets.query_offset("g", TOPIC, 0) == -1  # the old link's offset is gone
    finally:
        again.close()


@pytest.mark.parametrize("store_type", list(StoreType))
def test_a_send_stored_while_the_topic_was_being_deleted_does_not_outlive_it(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             store_type: StoreType) -> None:
    """A send that passed its topic check before the config went stores its record after the queues were dropped:
    the delete drops them again once the config is gone, so a topic created again under the name starts empty."""
    broker = Broker(tmp_path, store_type)
    broker.topics.update(TopicConfig(TOPIC, 1, 1))
    assert broker.store.put_messages(TOPIC, 0, [b"before"], [b""]).ok
    delete_config = broker.topics.delete

    def a_send_lands_first(topic: str, announce: bool = False) -> None:
        assert broker.store.put_messages(TOPIC, 0, [b"during"], [b""]).ok
        delete_config(topic, announce=announce)

    monkeypatch.setattr(broker.topics, "delete", a_send_lands_first)
    assert broker.admin.delete_topic(broker_pb2.TopicRequest(topic=TOPIC)).code == ResponseCode.SUCCESS
    broker.topics.update(TopicConfig(TOPIC, 1, 1))
    again = broker.store.put_messages(TOPIC, 0, [b"after"], [b""])
    assert again.ok and again.queue_offset == 0
    assert again.append is not None and broker.store.wait_dispatched(again.append.end_offset)
    assert broker.store.max_offset(TOPIC, 0) == 1
    broker.close()

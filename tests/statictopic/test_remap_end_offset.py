"""Where a remap closes the old leader's link: at the physical queue's offset for its next message, counting every
acknowledged message, dispatched or not. It read the consume queue's max, so a send appended just before the remap
and not yet dispatched (a busy broker) fell outside the link: the clean service then saw an empty link, dropped it,
and its messages were lost to the logic queue (a consumer at offset 0 was told OFFSET_ILLEGAL)."""

from pathlib import Path

import pytest

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.consumer_manage_processor import ConsumerManageProcessor
from broker.statictopic.static_topic_service import StaticTopicService
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.config import StoreType
from broker.store.message_store import MessageStore
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import TopicConfig
from proto import broker_pb2
from tests.store.conftest import held_dispatch, store_config

STATIC, PLAIN = "RemapEndT", "PlainT"


@pytest.mark.parametrize("store_type", tuple(StoreType), ids=["files", "rocksdb"])
def test_the_old_leader_s_max_counts_sends_not_yet_dispatched(tmp_path: Path, store_type: StoreType) -> None:
    store = MessageStore(store_config(tmp_path / "store", store_type=store_type))
    store.start()
    try:
        config_dir = tmp_path / "config"
        topics, offsets = TopicConfigManager(config_dir), ConsumerOffsetManager(config_dir)
        mappings = TopicQueueMappingManager(config_dir, "broker-a")
        for manager in (topics, offsets, mappings):
            manager.load()
        for topic in (STATIC, PLAIN):
            topics.update(TopicConfig(topic, 1, 1))
        mappings.update(TopicQueueMappingDetail(STATIC, 1, "broker-a", 1, hosted_queues={
            0: [LogicQueueMappingItem(gen=0, queue_id=0, bname="broker-a", logic_offset=0)]}))
        processor = ConsumerManageProcessor(topics, offsets, StaticTopicService("broker-a", mappings, offsets, store,
                                                                                None), store)  # type: ignore[arg-type]
        gate = held_dispatch(store)
        for topic in (STATIC, PLAIN):
            assert store.put_messages(topic, 0, [b"a", b"b", b"c"], [b"", b"", b""]).ok

        def physical_max(topic: str) -> int:
            return processor.max_offset(broker_pb2.QueueRequest(topic=topic, queue_id=0,
                                                                addressing=broker_pb2.PHYSICAL)).offset

        assert physical_max(STATIC) == 3  # acknowledged, not dispatched: inside the link the remap closes
        assert physical_max(PLAIN) == 0  # a plain queue's max is what a pull can read now
        gate.set()
        assert store.wait_dispatched(store.commit_log.max_offset())
        assert physical_max(STATIC) == physical_max(PLAIN) == 3
    finally:
        store.shutdown()

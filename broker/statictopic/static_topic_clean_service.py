"""Trims static-topic chains: a leader drops the earliest items whose physical queues held data that has
all expired; a previous leader drops a chain it lost once the new leader's logic offset is decided.

An item that never held data is kept: consumer offsets committed in it (at its start) are only found
through it, and dropping it would make such a group look as if it had never committed."""

import logging
from collections.abc import Callable

from broker.out.peer_brokers import PeerBrokerError
from broker.statictopic.static_topic_service import StaticTopicService
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.periodic_service import PeriodicService
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail

log = logging.getLogger(__name__)


class StaticTopicCleanService(PeriodicService):
    def __init__(self, mapping_manager: TopicQueueMappingManager, static_topics: StaticTopicService,
                 on_topics_changed: Callable[[], None], interval_ms: int) -> None:
        super().__init__("static-topic-clean", interval_ms / 1000)
        self.mapping_manager = mapping_manager
        self.static_topics = static_topics
        self.on_topics_changed = on_topics_changed  # re-register with the name servers

    def run_once(self) -> int:
        """One pass over every mapping; returns how many items and chains were dropped."""
        dropped = 0
        for topic in list(self.mapping_manager.mapping_table):
            detail = self.mapping_manager.get(topic)
            if detail is None:
                continue
            trimmed, n = self._trim(detail)
            if n:
                self.mapping_manager.replace(trimmed)
                dropped += n
        if dropped:
            self.on_topics_changed()
        return dropped

    def _trim(self, detail: TopicQueueMappingDetail) -> tuple[TopicQueueMappingDetail, int]:
        trimmed = detail.copy()
        dropped = 0
        for global_id, items in list(trimmed.hosted_queues.items()):
            leader = items[-1]
            if leader.bname != detail.bname:
                if leader.logic_offset_decided():  # the new leader is confirmed: this copy is no longer needed
                    del trimmed.hosted_queues[global_id]
                    dropped += 1
                    log.info("static_chain_dropped topic=%s queue=%d leader=%s", detail.topic, global_id, leader.bname)
                continue
            while len(items) > 1 and items[0].end_offset_decided() and self._holds_no_data(detail.topic, items[0]):
                gone = items.pop(0)
                dropped += 1
                log.info("static_item_dropped topic=%s queue=%d gen=%d broker=%s physical_queue=%d", detail.topic,
                         global_id, gone.gen, gone.bname, gone.queue_id)
        return trimmed, dropped

    def _holds_no_data(self, topic: str, item: LogicQueueMappingItem) -> bool:
        try:
            lo = self.static_topics.physical_offset(item, "GetMinOffset", topic)
            hi = self.static_topics.physical_offset(item, "GetMaxOffset", topic)
        except PeerBrokerError as exc:
            log.warning("static_clean_skipped topic=%s broker=%s reason=%s", topic, item.bname, exc)
            return False
        return item.start_offset < lo >= hi  # had data, and all of it is gone

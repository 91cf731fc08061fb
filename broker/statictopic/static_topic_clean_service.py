"""Trims static-topic chains: a previous leader drops a chain it lost once the new leader's logic offset is
decided; a leader drops the older items that are Expired (no readable data left) on brokers that lead no logic
queue of the topic any more (a drained broker: its rows go, so it can be removed), and those with a newer link
of the chain on the same broker (only the newest is ever reused).

An expired item on a broker that still leads some logic queue of the topic stays in the chain: moving the logic
queue back there reuses its physical queue (seed 004). The KV store's shards never expire: their older items
hold state in RocksDB that reads fall back to, whatever the commitlog's retention. Before a link goes, the consumer
offsets stored on it are carried to the next link (:mod:`consumer_offset_carry`)."""

import logging
from collections.abc import Callable

from broker.out.peer_brokers import PeerBrokerError
from broker.statictopic.consumer_offset_carry import ConsumerOffsetCarry
from broker.statictopic.static_topic_service import StaticTopicService
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.periodic_service import PeriodicService
from common.kv_shard import KV_TOPIC
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.mapping_codec import detail_from_proto
from common.statictopic.queue_status import holds_readable_data
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from proto import broker_pb2

log = logging.getLogger(__name__)


class StaticTopicCleanService(PeriodicService):
    def __init__(self, mapping_manager: TopicQueueMappingManager, static_topics: StaticTopicService,
                 on_topics_changed: Callable[[], None], interval_ms: int,
                 is_master: Callable[[], bool] = lambda: True) -> None:
        super().__init__("static-topic-clean", interval_ms / 1000)
        self.mapping_manager = mapping_manager
        self.static_topics = static_topics
        self.on_topics_changed = on_topics_changed  # re-register with the name servers
        self.offsets = ConsumerOffsetCarry(static_topics)
        self.is_master = is_master  # a slave copies its master's mappings and offsets: it trims nothing itself
        self._leads: dict[tuple[str, str], bool] = {}  # (broker, topic) -> leads a logic queue of it (this pass)
        self._unreachable: set[tuple[str, str]] = set()  # (topic, broker) skipped since its broker did not answer

    def run_once(self) -> int:
        """One pass over every mapping; returns how many items and chains were dropped."""
        dropped = 0
        if not self.is_master():
            return 0
        self.offsets.reset()
        self._leads.clear()
        for topic in list(self.mapping_manager.mapping_table):
            detail = self.mapping_manager.get(topic)
            if detail is None:
                continue
            trimmed, n = self._trim(detail)
            if n and self.mapping_manager.replace(trimmed, expected=detail):
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
            going = {i for i, item in enumerate(items[:-1])
                     if self._forgettable(detail, item, any(later.bname == item.bname for later in items[i + 1:]))}
            kept: list[LogicQueueMappingItem] = []
            for i, item in enumerate(items):
                if i in going:  # the leader never goes: a successor exists
                    successor = next(later for j, later in enumerate(items) if j > i and j not in going)
                    if successor.logic_offset_decided() and self.offsets.carry(detail.topic, item, successor):
                        dropped += 1
                        log.info("static_item_dropped topic=%s queue=%d gen=%d broker=%s physical_queue=%d "
                                 "reason=expired", detail.topic, global_id, item.gen, item.bname, item.queue_id)
                        continue
                kept.append(item)
            trimmed.hosted_queues[global_id] = kept
        return trimmed, dropped

    def _forgettable(self, detail: TopicQueueMappingDetail, item: LogicQueueMappingItem, newer_there: bool) -> bool:
        """Expired, and either not the newest link of the chain on its broker (a move back reuses the newest) or
        on a broker that leads no logic queue of the topic."""
        if detail.topic == KV_TOPIC or not item.end_offset_decided():
            return False
        try:
            physical_min = self.static_topics.physical_offset(item, "GetMinOffset", detail.topic)
            self._unreachable.discard((detail.topic, item.bname))
            if holds_readable_data(item, physical_min):
                return False
            if newer_there and item.end_offset > item.start_offset:
                return True  # (an empty link stays: a commit at its start reads back as it was; it goes with its
                # broker, below, its offsets carried then)
            if item.bname == detail.bname:
                return False
            return not self._leads_some(item.bname, detail.topic)
        except PeerBrokerError as exc:
            if (detail.topic, item.bname) not in self._unreachable:  # once while it lasts, not at every pass
                self._unreachable.add((detail.topic, item.bname))
                log.warning("static_clean_skipped topic=%s broker=%s reason=%s", detail.topic, item.bname, exc)
            return False

    def _leads_some(self, bname: str, topic: str) -> bool:
        """Whether ``bname`` leads a logic queue of ``topic`` (asked once a pass; an unclear answer: yes)."""
        key = (bname, topic)
        if key not in self._leads:
            response = self.static_topics.peer_brokers.call(bname, "GetTopicQueueMapping",
                                                            broker_pb2.TopicRequest(topic=topic))
            self._leads[key] = response.code != ResponseCode.SUCCESS or (
                response.HasField("detail") and bool(detail_from_proto(response.detail).led_queues()))
        return self._leads[key]

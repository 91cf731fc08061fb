"""A slave copies its master's topic configs, subscription groups and consumer offsets (upstream's
SlaveSynchronize): every ``SYNC_INTERVAL_S`` and as soon as the master's address is known. Topics the master no
longer has are deleted here too. Offsets are as of the last copy: a consumer reading from the slave while the
master is down may read again what was committed since (at-least-once)."""

import logging
import threading
from collections.abc import Callable

import grpc

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.subscription_group_config import SubscriptionGroupConfig
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from common.topic_config_codec import topic_config_from_proto
from proto import broker_pb2_grpc, common_pb2

log = logging.getLogger(__name__)

SYNC_INTERVAL_S = 10.0
RPC_TIMEOUT_S = 30.0


class SlaveSynchronize(threading.Thread):
    def __init__(self, master_addr: Callable[[], str], topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 offsets: ConsumerOffsetManager, on_topics_changed: Callable[[], None]) -> None:
        super().__init__(name="slave-synchronize", daemon=True)
        self.master_addr = master_addr
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.on_topics_changed = on_topics_changed
        self._stopped = threading.Event()
        self._synced_from = ""

    def run(self) -> None:
        while not self._stopped.wait(0.2 if not self._synced_from else SYNC_INTERVAL_S):
            addr = self.master_addr()
            if not addr:
                continue
            try:
                self.sync_all(addr)
                self._synced_from = addr
            except grpc.RpcError as exc:
                log.warning("slave_sync_failed master=%s status=%s", addr, exc.code().name)

    def sync_all(self, addr: str) -> None:
        with grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 1 << 30)]) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            configs = stub.GetAllTopicConfig(common_pb2.Empty(), timeout=RPC_TIMEOUT_S).configs
            groups = stub.GetAllSubscriptionGroup(common_pb2.Empty(), timeout=RPC_TIMEOUT_S).groups
            offsets = stub.GetAllConsumerOffsets(common_pb2.Empty(), timeout=RPC_TIMEOUT_S).offsets
        masters = {c.topic_name: topic_config_from_proto(c) for c in configs}
        mine = {c.topic_name: c for c in self.topics.all_configs()}
        changed = [c for name, c in masters.items() if mine.get(name) != c]
        gone = [name for name in mine if name not in masters]
        if changed:
            self.topics.update_many(changed)
        for name in gone:
            self.topics.delete(name)
        for g in groups:
            config = SubscriptionGroupConfig(g.group_name, g.consume_enable, g.consume_broadcast_enable,
                                             g.retry_queue_nums, g.retry_max_times, g.broker_id)
            if self.groups.subscription_group_table.get(g.group_name) != config:
                self.groups.update(config)
        for o in offsets:
            if self.offsets.query_offset(o.group, o.topic, o.queue_id) != o.offset and o.offset >= 0:
                self.offsets.commit_offset(o.group, o.topic, o.queue_id, o.offset)
        if changed or gone:
            log.info("slave_synced master=%s topics_changed=%d topics_deleted=%d groups=%d", addr, len(changed),
                     len(gone), len(groups))
            self.on_topics_changed()

    def shutdown(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=5)

"""A slave copies its master's topic configs and subscription groups (upstream's SlaveSynchronize): every
``SYNC_INTERVAL_S`` and as soon as the master's address is known. What the master no longer has is deleted here
too. Consumer offsets are not copied yet: a slave promoted by hand starts groups from their defaults."""

import logging
import threading
from collections.abc import Callable

import grpc

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
                 on_topics_changed: Callable[[], None]) -> None:
        super().__init__(name="slave-synchronize", daemon=True)
        self.master_addr = master_addr
        self.topics = topics
        self.groups = groups
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
        if changed or gone:
            log.info("slave_synced master=%s topics_changed=%d topics_deleted=%d groups=%d", addr, len(changed),
                     len(gone), len(groups))
            self.on_topics_changed()

    def shutdown(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=5)

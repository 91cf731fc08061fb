"""Wires the broker together: store, metadata, processors, gRPC server, name server registration."""

import asyncio
import logging
import threading
import time
from pathlib import Path

import grpc

from broker.broker_config import BrokerConfig
from broker.broker_servicer import BrokerServicer
from broker.broker_stats import BrokerStats
from broker.kv.kv_store import KvStore
from broker.kv_servicer import KvServicer
from broker.longpolling.pull_request_hold_service import PullRequestHoldService
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.metadata_store import open_metadata_stores
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.out.namesrv_registrar import BrokerIdentity, NamesrvRegistrar
from broker.out.peer_brokers import PeerBrokers
from broker.processor.admin_broker_processor import AdminBrokerProcessor
from broker.processor.consumer_manage_processor import ConsumerManageProcessor
from broker.processor.kv_processor import KvProcessor
from broker.processor.pull_message_processor import PullMessageProcessor
from broker.processor.query_message_processor import QueryMessageProcessor
from broker.processor.send_message_processor import SendMessageProcessor
from broker.processor.tiered_processor import TieredProcessor
from broker.statictopic.static_topic_clean_service import StaticTopicCleanService
from broker.statictopic.static_topic_service import StaticTopicService
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.message_store import MessageStore
from broker.tiered.tiered_store import TieredStore
from broker.tiered_servicer import TieredServicer
from common.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC, DEFAULT_TOPIC_PERM, TopicConfig
from proto import broker_pb2_grpc, kv_pb2_grpc, tiered_pb2_grpc

log = logging.getLogger(__name__)

GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
]


class BrokerController:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        config_dir = Path(config.store_path_root_dir) / "config"
        # storeType: JSON files under config/ ("default") or one RocksDB under metadata/ ("defaultRocksDB")
        self.metadata = open_metadata_stores(config.store_type, Path(config.store_path_root_dir))
        self.topic_config_manager = TopicConfigManager(self.metadata.topics)
        self.subscription_group_manager = SubscriptionGroupManager(self.metadata.groups)
        self.consumer_offset_manager = ConsumerOffsetManager(self.metadata.offsets)
        self.topic_queue_mapping_manager = TopicQueueMappingManager(config_dir, config.broker_name)
        self.static_topics = StaticTopicService(self)
        self.peer_brokers: PeerBrokers
        self.static_topic_clean_service: StaticTopicCleanService | None = None
        self.send_processor = SendMessageProcessor(self)
        self.pull_processor = PullMessageProcessor(self)
        self.consumer_manage_processor = ConsumerManageProcessor(self)
        self.query_processor = QueryMessageProcessor(self)
        self.admin_processor = AdminBrokerProcessor(self)
        self.kv: KvStore | None = None
        if config.kv_enable:
            self.kv = KvStore(config.kv_store_type, Path(config.store_path_root_dir) / "kv",
                              config.kv_snapshot_interval / 1000, config.broker_name)
        self.kv_processor = KvProcessor(self)
        self.tiered: TieredStore | None = None
        self.tiered_processor = TieredProcessor(self)
        self.stats = BrokerStats()
        self.boot_timestamp = int(time.time() * 1000)
        self.broker_addr = ""
        self.store: MessageStore
        self.hold_service: PullRequestHoldService
        self.registrar: NamesrvRegistrar | None = None
        self._server: grpc.aio.Server | None = None
        self._offset_flusher = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> str:
        """Bind, recover the store, load metadata, serve, register. Returns ``host:port``."""
        c = self.config
        server = grpc.aio.server(options=GRPC_OPTIONS)
        try:
            port = server.add_insecure_port(f"{c.broker_ip1}:{c.listen_port}")
        except RuntimeError as exc:  # gRPC's way of saying the address is taken or not ours
            raise OSError(f"cannot listen on {c.broker_ip1}:{c.listen_port}: {exc}") from None
        self.broker_addr = f"{c.broker_ip1}:{port}"
        self.peer_brokers = PeerBrokers(c.namesrv_addrs, c.broker_name, self.broker_addr)
        self.store = local_store = MessageStore(c.store_config(self.broker_addr))
        if c.tiered_store_enable:  # processors read through the tiered facade; it registers its uploader
            self.tiered = TieredStore(c, local_store)
            self.store = self.tiered.store  # type: ignore[assignment]
        self.hold_service = PullRequestHoldService(asyncio.get_running_loop(), self.store.max_offset)
        self.store.reput.arrival_listeners.append(self.hold_service.on_arrivals)
        if self.kv is not None:  # before the store starts: recovery replays the commitlog into it
            self.kv.attach(local_store, asyncio.get_running_loop(), lambda: self.peer_brokers)
        await asyncio.to_thread(self._load)
        if self.tiered is not None:
            self.tiered.start()
        broker_pb2_grpc.add_BrokerServiceServicer_to_server(BrokerServicer(self), server)
        kv_pb2_grpc.add_KvServiceServicer_to_server(KvServicer(self), server)
        tiered_pb2_grpc.add_TieredServiceServicer_to_server(TieredServicer(self), server)
        await server.start()
        self._server = server
        if c.namesrv_addrs:
            self.registrar = NamesrvRegistrar(
                BrokerIdentity(c.broker_cluster_name, c.broker_name, c.broker_id, self.broker_addr),
                c.namesrv_addrs, self.topic_config_manager, c.register_name_server_period,
                c.broker_not_active_timeout_millis, self.topic_queue_mapping_manager.infos)
            await asyncio.to_thread(self.registrar.register_all)
            self.registrar.start()
        threading.Thread(target=self._flush_offsets_periodically, name="offset-flush", daemon=True).start()
        self.static_topic_clean_service = StaticTopicCleanService(self, c.static_topic_clean_interval)
        self.static_topic_clean_service.start()
        log.info("broker_started cluster=%s broker=%s id=%d addr=%s store=%s topics=%d", c.broker_cluster_name,
                 c.broker_name, c.broker_id, self.broker_addr, c.store_path_root_dir,
                 len(self.topic_config_manager.topic_config_table))
        return self.broker_addr

    def _load(self) -> None:
        self.topic_queue_mapping_manager.load()  # the source of truth for static topics: first
        self.topic_config_manager.load()
        self._ensure_default_topic()
        self.subscription_group_manager.load()
        self.consumer_offset_manager.load()
        self.store.start()

    def _ensure_default_topic(self) -> None:
        """Serve (or stop serving) TBW102, the route producers borrow for topics created on first send."""
        manager, c = self.topic_config_manager, self.config
        has = manager.select(AUTO_CREATE_TOPIC_KEY_TOPIC) is not None
        if c.auto_create_topic_enable and not has:
            n = c.default_topic_queue_nums
            manager.update(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, n, n, DEFAULT_TOPIC_PERM))
        elif has and not c.auto_create_topic_enable:
            manager.delete(AUTO_CREATE_TOPIC_KEY_TOPIC)

    def _flush_offsets_periodically(self) -> None:
        while not self._offset_flusher.wait(self.config.flush_consumer_offset_interval / 1000):
            try:
                self.consumer_offset_manager.persist()
            except OSError:
                log.exception("consumer_offset_persist_failed")

    async def shutdown(self) -> None:
        """Stop accepting, finish in-flight calls, unregister, flush everything."""
        log.info("broker_stopping addr=%s", self.broker_addr)
        if self._server is not None:
            self.hold_service.wake_all()
            await self._server.stop(grace=5)
        self._offset_flusher.set()
        if self.static_topic_clean_service is not None:
            self.static_topic_clean_service.shutdown()
        if self.registrar is not None:
            await asyncio.to_thread(self.registrar.shutdown)
        await asyncio.to_thread(self._flush_and_close)
        log.info("broker_stopped addr=%s", self.broker_addr)

    def _flush_and_close(self) -> None:
        self.peer_brokers.close()
        self.consumer_offset_manager.persist()
        self.metadata.close()
        if self.tiered is not None:
            self.tiered.shutdown()
        self.store.shutdown()
        if self.tiered is not None:
            self.tiered.close()
        if self.kv is not None:
            self.kv.close()

    # -- topic changes (they re-register with the name servers) ------------------------------------
    def update_topic(self, config: TopicConfig) -> None:
        self.topic_config_manager.update(config)
        if self.registrar is not None:
            self.registrar.trigger()

    def delete_topic(self, topic: str) -> bool:
        had_mapping = self.topic_queue_mapping_manager.get(topic) is not None
        if not self.topic_config_manager.delete(topic, announce=had_mapping) and not had_mapping:
            return False
        self.topic_queue_mapping_manager.delete(topic)
        self.store.consume_queue_store.delete_topic(topic)
        self.consumer_offset_manager.delete_topic(topic)
        if self.registrar is not None:
            self.registrar.trigger()
        return True

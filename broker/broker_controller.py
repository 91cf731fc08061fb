"""Wires the broker together: store, metadata, processors, gRPC server, name server registration."""

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import grpc

from broker.acl_manager import AclManager, AclServicer
from broker.broker_config import BrokerConfig
from broker.broker_metrics import BrokerMetrics, BrokerStateCollector
from broker.broker_servicer import BrokerServicer
from broker.broker_stats import BrokerStats
from broker.client.consumer_manager import ConsumerManager
from broker.client.rebalance_lock_manager import RebalanceLockManager
from broker.consumer_servicer import ConsumerServicer
from broker.flush_waiters import FlushWaiters
from broker.ha.epoch_file import FILE_NAME as EPOCH_FILE_NAME
from broker.ha.epoch_file import EpochFile
from broker.ha.ha_service import GroupIdentity, HAService
from broker.ha.ha_servicer import HaServicer
from broker.ha.replica_services import ReplicaServices
from broker.ha.replicas_manager import ReplicaIdentity, ReplicasManager
from broker.ha.slave_synchronize import SlaveSynchronize
from broker.ha.state_copy import CopiedStore
from broker.kv.kv_disabled_hold import disabled_kv_hold
from broker.kv.kv_provisioner import KvProvisioner
from broker.kv.kv_store import KvStore
from broker.kv_servicer import KvServicer
from broker.longpolling.pull_request_hold_service import PullRequestHoldService
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.metadata_store import open_metadata_stores
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.out.namesrv_registrar import BrokerIdentity, NamesrvRegistrar
from broker.out.peer_brokers import PeerBrokers
from broker.pop.pop_service import PopService
from broker.pop.pop_state_store import PopStateStore
from broker.pop_servicer import PopServicer
from broker.processor.admin_broker_processor import AdminBrokerProcessor
from broker.processor.consumer_group_processor import ConsumerGroupProcessor
from broker.processor.consumer_manage_processor import ConsumerManageProcessor
from broker.processor.kv_processor import KvProcessor
from broker.processor.pop_message_processor import PopMessageProcessor
from broker.processor.pull_message_processor import PullMessageProcessor
from broker.processor.query_message_processor import QueryMessageProcessor
from broker.processor.recall_message_processor import RecallMessageProcessor
from broker.processor.send_message_processor import SendLimits, SendMessageProcessor
from broker.processor.send_msg_back_processor import SendMsgBackProcessor
from broker.processor.tiered_processor import TieredProcessor
from broker.statictopic.static_topic_clean_service import StaticTopicCleanService
from broker.statictopic.static_topic_service import StaticTopicService
from broker.statictopic.timer_delivery_route import StaticTopicDeliveryRoute
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.config import FlushDiskType
from broker.store.message_store import MessageStore
from broker.store.message_store_reader import MessageStoreReader
from broker.store.periodic_service import FailedPassLog
from broker.store.store_lock import StoreLock
from broker.tiered.replica.tier_role import TierRole
from broker.tiered.tiered_store import TieredStore
from broker.tiered_servicer import TieredServicer
from broker.timer.delay_levels import parse_delay_levels
from broker.timer.timer_service import TimerService
from broker.transaction.transaction_service import TransactionConfig, TransactionService
from broker.transaction_servicer import TransactionServicer
from common import grpc_keepalive
from common.acl import (
    SUPER,
    AclInterceptor,
    Authority,
    User,
    parse_user,
    set_inner_credentials,
    warn_authorization_without_authentication,
)
from common.kv_shard import KV_TOPIC
from common.metrics import (
    Health,
    MetricsExporterType,
    PromExporter,
    add_health_and_reflection,
    set_health,
    start_exporter,
)
from common.refusal import NOT_GROUP_MASTER, Refusal
from common.response_code import ResponseCode
from common.rpc_boundary import GenericHandlersOnly, RequestDecoding
from common.shutdown_steps import ShutdownStep, run_shutdown_steps
from common.tls import add_port
from common.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC, DEFAULT_TOPIC_PERM, TopicConfig
from proto import (
    acl_pb2,
    acl_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    consumer_pb2,
    consumer_pb2_grpc,
    ha_pb2_grpc,
    kv_pb2,
    kv_pb2_grpc,
    pop_pb2,
    pop_pb2_grpc,
    tiered_pb2,
    tiered_pb2_grpc,
    transaction_pb2,
    transaction_pb2_grpc,
)
from proto.broker_pb2 import LOGIC

log = logging.getLogger(__name__)

HEALTH_POLL_S = 0.5  # how soon health follows the store's write refusals
STARTUP_DISPATCH_WAIT_S = 30.0  # a master's start waits this long for dispatch before fitting POP state
# what grpc.health.v1.Health and reflection name (the client port's services)
SERVICE_NAMES = tuple(module.DESCRIPTOR.services_by_name[name].full_name for module, name in (
    (broker_pb2, "BrokerService"), (kv_pb2, "KvService"), (tiered_pb2, "TieredService"),
    (consumer_pb2, "ConsumerService"), (transaction_pb2, "TransactionService"), (pop_pb2, "PopService")))

ACL_SERVICE_NAME = acl_pb2.DESCRIPTOR.services_by_name["AclService"].full_name  # served when ACL is on

GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
    *grpc_keepalive.SERVER_OPTIONS,
]


class BrokerController:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        # First, before anything under the store directory is opened: a second broker on it exits here.
        self.store_lock = StoreLock(Path(config.store_path_root_dir)).acquire()
        config_dir = Path(config.store_path_root_dir) / "config"
        # storeType: JSON files under config/ ("default") or one RocksDB under metadata/ ("defaultRocksDB")
        self.metadata = open_metadata_stores(config.store_type, Path(config.store_path_root_dir))
        self.topic_config_manager = TopicConfigManager(self.metadata.topics)
        self.subscription_group_manager = SubscriptionGroupManager(self.metadata.groups)
        self.consumer_offset_manager = ConsumerOffsetManager(self.metadata.offsets)
        # ACL (off by default): users and policies in the metadata store; inner credentials sign outgoing calls
        set_inner_credentials(config.inner_credentials)
        self.acl: AclManager | None = None
        if config.acl_enabled and self.metadata.users is not None and self.metadata.acls is not None:
            self.acl = AclManager(self.metadata.users, self.metadata.acls, config.inner_credentials,
                                  kept_dir=Path(config.store_path_root_dir) / "config")
        self.topic_queue_mapping_manager = TopicQueueMappingManager(config_dir, config.broker_name)
        self.peer_brokers: PeerBrokers
        self.static_topics: StaticTopicService
        self.static_topic_clean_service: StaticTopicCleanService | None = None
        self.kv: KvStore | None = None
        if config.kv_enable:
            self.kv = KvStore(config.kv_store_type, Path(config.store_path_root_dir) / "kv",
                              config.kv_snapshot_interval / 1000, config.broker_name)
        self.kv_provisioner = (KvProvisioner(config.namesrv_addrs, config.broker_cluster_name, config.broker_name,
                                             config.inner_credentials) if config.kv_enable else None)
        self.tiered: TieredStore | None = None
        self.timer = TimerService(Path(config.store_path_root_dir) / "timer",
                                  parse_delay_levels(config.message_delay_level), config.timer_max_delay_sec * 1000)
        self.transactions = TransactionService(config.broker_name, TransactionConfig(
            config.transaction_time_out, config.transaction_check_interval, config.transaction_check_max),
            config.channel_expired_timeout)
        self.stats = BrokerStats()
        self.boot_timestamp = int(time.time() * 1000)
        self.broker_addr = ""
        self.local_store: MessageStore  # writes, lifecycle, commitlog: this broker's own store
        self.store: MessageStoreReader  # reads: the local store, or the tiered facade over it
        self.hold_service: PullRequestHoldService
        # Built in start(), once the store (maybe the tiered facade) and the peer brokers exist.
        self.broker_servicer: BrokerServicer
        self.kv_servicer: KvServicer
        self.tiered_servicer: TieredServicer
        self.consumer_servicer: ConsumerServicer
        self.transaction_servicer: TransactionServicer
        self.pop_servicer: PopServicer
        self.pop_state: PopStateStore | None = None
        self.pop_service: PopService | None = None
        self.consumer_manager = ConsumerManager(config.channel_expired_timeout)
        self.rebalance_locks = RebalanceLockManager(config.rebalance_lock_max_live_time)
        self._housekeeping: asyncio.Task | None = None
        self.registrar: NamesrvRegistrar | None = None
        self._server: grpc.aio.Server | None = None
        self.ha: HAService | None = None  # a master's replication
        self.replicas: ReplicasManager | None = None  # controller mode
        self.replica_services: ReplicaServices  # a slave's replication and metadata copy, in either mode
        self._ha_server: grpc.aio.Server | None = None
        self.ha_server_addr = ""
        self._offset_flusher = threading.Event()
        self.rejoin_reason = ""  # controller mode: set when this replica must restart to follow a new master
        self.on_rejoin: Callable[[], None] = lambda: None
        # metricsExporterType=PROM: counters moved by the servicer, gauges read at scrape time
        self.metrics: BrokerMetrics | None = None
        if config.metrics_exporter_type is MetricsExporterType.PROM:
            self.metrics = BrokerMetrics()
            self.metrics.registry.register(BrokerStateCollector(self))
        self.metrics_exporter: PromExporter | None = None
        self.health: Health | None = None
        self._health_watch: asyncio.Task | None = None

    def _copied_stores(self) -> dict[str, CopiedStore]:
        """The stores an empty replica copies from its master besides the log (``broker/ha/state_copy.py``)."""
        stores: dict[str, CopiedStore] = {}
        if self.kv is not None:
            stores["kv"] = self.kv
        if self.timer.store is not None:
            stores["timer"] = self.timer.store
        return stores

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> str:
        """Bind, recover the store, load metadata, serve, register. Returns ``host:port``."""
        c = self.config
        acl = ([AclInterceptor(self.acl, c.authentication_enabled, c.authorization_enabled)]
               if self.acl is not None else [])
        warn_authorization_without_authentication(c.authentication_enabled, c.authorization_enabled,
                                                  f"broker={c.broker_name} port={c.listen_port}")
        server = grpc.aio.server(options=GRPC_OPTIONS, interceptors=[*acl, RequestDecoding()])
        try:
            port = add_port(server, f"{c.broker_ip1}:{c.listen_port}", c.tls_server())
        except RuntimeError as exc:  # gRPC's way of saying the address is taken or not ours
            raise OSError(f"cannot listen on {c.broker_ip1}:{c.listen_port}: {exc}") from None
        self.broker_addr = f"{c.broker_ip1}:{port}"
        self.peer_brokers = PeerBrokers(c.namesrv_addrs, c.broker_name, self.broker_addr)
        self.local_store = local_store = MessageStore(c.store_config(self.broker_addr))
        self.store = local_store
        if c.tiered_store_enable and (c.broker_role.is_master or c.enable_controller_mode):
            # processors read through its facade; it registers its uploader. In controller mode a replica's tier
            # follows its master's, or uploads to a backend of its own (broker/tiered/replica/tier_role.py).
            self.tiered = TieredStore(c, local_store, TierRole.WAITING if c.enable_controller_mode else TierRole.MASTER)
            self.store = self.tiered.store
        elif c.tiered_store_enable:
            # A slave never uploads (its master does) and is never promoted without a restart. Its uploader, never
            # started, would hold every replicated record in memory and the commitlog's expiry at its checkpoint:
            # the slave kept every segment until its disk filled.
            log.info("tiered_store_off broker=%s reason=slave: the master uploads; this copy expires by "
                     "fileReservedTime", self.broker_addr)
        self.hold_service = PullRequestHoldService(asyncio.get_running_loop(), self.store.max_offset)
        local_store.reput.arrival_listeners.append(self.hold_service.on_arrivals)
        local_store.reput.dispatch_on(threading.get_ident(), asyncio.get_running_loop().call_soon)
        if self.kv is not None:  # before the store starts: recovery replays the commitlog into it
            self.kv.attach(local_store, asyncio.get_running_loop(), lambda: self.peer_brokers, self._kv_led_partitions)
        elif (hold := disabled_kv_hold(Path(c.store_path_root_dir) / "kv")) is not None:
            local_store.register_dispatcher(hold)
        self.timer.attach(local_store)  # the same: pending timers are replayed into it
        # Half messages still needed outlive their segments' fileReservedTime (holds only where the check service runs)
        local_store.register_dispatcher(self.transactions.half_hold(local_store))
        identity = GroupIdentity(c.broker_cluster_name, c.broker_name, c.broker_id, self.broker_addr,
                                 c.mapped_file_size_commit_log)
        epochs = EpochFile(Path(c.store_path_root_dir) / EPOCH_FILE_NAME)
        self.replica_services = ReplicaServices(
            identity, local_store, epochs if c.enable_controller_mode else None, self._slave_synchronize,
            self._start_master_services, lambda: self.registrar, self._rejoin, on_follow=self._forget_pop_state,
            on_promoted=self._promoted)
        if c.enable_controller_mode:  # every replica may serve slaves; what it is comes from the controller
            local_store.keeps_confirm_checkpoint = True
            self.ha = HAService(c.broker_role, identity, local_store.commit_log, asyncio.get_running_loop(),
                                c.sync_flush_timeout / 1000, epochs=epochs,
                                max_not_catchup_ms=c.ha_max_time_slave_not_catchup)
            local_store.running_flags.set_replica("this replica waits for the controller to name its role")
        elif c.broker_role.is_master:  # before the store starts: a SYNC_MASTER's confirm offset waits for acks
            self.ha = HAService(c.broker_role, identity, local_store.commit_log, asyncio.get_running_loop(),
                                c.sync_flush_timeout / 1000, in_sync_replicas=c.in_sync_replicas)
        else:
            local_store.commit_log.replication_gated = True  # a slave shows only what its master confirmed
            # Any put (a KV write, a sent-back message, ...) would break the byte-for-byte copy: refused below the
            # processors, once for all of them.
            local_store.running_flags.set_replica(f"broker {self.broker_addr} is a slave (brokerRole=SLAVE): its "
                                                  "commitlog is its master's copy; write to the master")
        self.replica_services.copied_stores = self._copied_stores()
        if self.ha is not None:
            self.ha.copied_stores = self.replica_services.copied_stores
        await asyncio.to_thread(self._load)
        if c.enable_controller_mode:
            pass  # master services start when the controller names this replica master
        elif c.broker_role.is_master:  # a slave never writes: its master delivers timers and uploads to the tier
            self._start_master_services()
        else:
            self.replica_services.follow(c.ha_master_address, master_epoch=0)
        self._wire_processors()
        handlers = GenericHandlersOnly(server)
        broker_pb2_grpc.add_BrokerServiceServicer_to_server(self.broker_servicer, handlers)
        kv_pb2_grpc.add_KvServiceServicer_to_server(self.kv_servicer, handlers)
        tiered_pb2_grpc.add_TieredServiceServicer_to_server(self.tiered_servicer, handlers)
        consumer_pb2_grpc.add_ConsumerServiceServicer_to_server(self.consumer_servicer, handlers)
        transaction_pb2_grpc.add_TransactionServiceServicer_to_server(self.transaction_servicer, handlers)
        pop_pb2_grpc.add_PopServiceServicer_to_server(self.pop_servicer, handlers)
        if self.acl is not None:
            acl_pb2_grpc.add_AclServiceServicer_to_server(AclServicer(self.acl), handlers)
        self.health = await add_health_and_reflection(server, self._service_names())
        await server.start()
        self._server = server
        self._health_watch = asyncio.create_task(self._watch_health(self.health))
        if self.metrics is not None:
            self.metrics_exporter = start_exporter(c.metrics_exporter_type, c.metrics_prom_exporter_host or
                                                   c.broker_ip1, c.metrics_prom_exporter_port,
                                                   self.metrics.registry, "broker")
        if self.ha is not None:
            await self._start_ha_server()
        if c.namesrv_addrs:
            self.registrar = NamesrvRegistrar(
                BrokerIdentity(c.broker_cluster_name, c.broker_name, c.broker_id, self.broker_addr),
                c.namesrv_addrs, self.topic_config_manager, c.register_name_server_period,
                c.broker_not_active_timeout_millis, self.topic_queue_mapping_manager.infos)
            await asyncio.to_thread(self.registrar.register_all)
            self.registrar.start()
        if c.enable_controller_mode:
            self._start_replicas_manager(epochs)
        threading.Thread(target=self._flush_offsets_periodically, name="offset-flush", daemon=True).start()
        self._housekeeping = asyncio.create_task(self._expire_consumers())
        self.static_topic_clean_service = StaticTopicCleanService(
            self.topic_queue_mapping_manager, self.static_topics, self._announce, c.static_topic_clean_interval,
            is_master=self._is_master)
        self.static_topic_clean_service.start()
        log.info("broker_started cluster=%s broker=%s id=%d addr=%s store=%s topics=%d", c.broker_cluster_name,
                 c.broker_name, c.broker_id, self.broker_addr, c.store_path_root_dir,
                 len(self.topic_config_manager.topic_config_table))
        return self.broker_addr

    def _service_names(self) -> tuple[str, ...]:
        """What health and reflection name: the client port's services, AclService among them when ACL is on."""
        return (*SERVICE_NAMES, ACL_SERVICE_NAME) if self.acl is not None else SERVICE_NAMES

    async def _watch_health(self, health: Health) -> None:
        """NOT_SERVING while the store refuses writes for its own sake (a fail-stop, a full disk), or a replica
        stopped copying its master for good; SERVING again when that ends. A slave's refusal of writes (it copies
        its master) is its normal state: still SERVING."""
        serving = True
        while True:
            flags = self.local_store.running_flags
            following = self.replica_services.ha_client
            why = flags.fail_stop_reason or flags.disk_full_reason or (
                f"replication stopped: {following.refusal}" if following is not None and following.stopped else "")
            if (not why) != serving:
                serving = not why
                await set_health(health, self._service_names(), serving)
                log.warning("health_status status=%s reason=%r", "SERVING" if serving else "NOT_SERVING", why)
            await asyncio.sleep(HEALTH_POLL_S)

    def _kv_led_partitions(self) -> Collection[int] | None:
        """What this broker leads of the KV topic. A slave leads nothing (its copy of the mapping may predate a
        remap): it answers an older item's read (its master down) once what it replicated is applied."""
        detail = self.topic_queue_mapping_manager.get(KV_TOPIC)
        if detail is None:
            return None
        return detail.led_queues().values() if self._is_master() else ()

    def _is_master(self) -> bool:
        c = self.config
        return self.replicas.role == "MASTER" if self.replicas is not None else c.broker_role.is_master

    def _pull_refusal(self) -> str | None:
        if self.config.slave_read_enable:
            return None
        return None if self._is_master() else (f"broker {self.broker_addr} is a slave and slaveReadEnable=false: pull "
                                       "from its master")

    def _start_master_services(self) -> None:
        route = StaticTopicDeliveryRoute(self.config.broker_name, self.topic_queue_mapping_manager, self.peer_brokers,
                                         self.local_store.config.max_message_size)
        self.timer.start(self.local_store, self._queue_exists, route,
                         lambda topic: self.topic_config_manager.select(topic) is not None)
        self.transactions.start(self.local_store, self.consumer_offset_manager, self.topic_config_manager,
                                self._announce)
        if self.tiered is not None:
            self.tiered.start()

    def _start_replicas_manager(self, epochs: EpochFile) -> None:
        c = self.config
        assert self.ha is not None
        self.replicas = ReplicasManager(
            ReplicaIdentity(c.broker_cluster_name, c.broker_name, c.broker_id, self.broker_addr,
                            c.broker_election_priority),
            self.local_store, self.ha, epochs, [a.strip() for a in c.controller_addr.split(";") if a.strip()],
            c.controller_heart_beat_timeout_mills, self.replica_services, lambda: self.ha_server_addr)
        self.replicas.start()

    def _slave_synchronize(self, master_addr: Callable[[], str]) -> SlaveSynchronize:
        return SlaveSynchronize(master_addr, self.topic_config_manager, self.subscription_group_manager,
                                self.consumer_offset_manager, self._announce, self.topic_queue_mapping_manager,
                                _PopStateCopies(self), self.tiered, self.acl)

    def _rejoin(self, why: str) -> None:
        self.rejoin_reason = why
        self.on_rejoin()

    def _ha_info(self) -> dict[str, str]:
        info = {"brokerRole": self.config.broker_role.value, "haServerAddr": self.ha_server_addr}
        if self.ha is not None:
            info["haReplicatedOffset"] = str(self.ha.replicated_offset())
            info["haSlaves"] = str(len(self.ha.slave_acks()))
        following = self.replica_services.ha_client
        if following is not None:
            info["haMasterAddress"] = following.master_ha_addr
            info["haRefusal"] = following.refusal
        if self.replicas is not None:
            info.update(self.replicas.info())
            info["brokerRole"] = self.replicas.role  # MASTER, SLAVE, or FENCED while the controller decides
        if self.tiered is not None:
            info["tieredRole"] = self.tiered.role.value  # a replica's: waiting, own or shared (replica/tier_role.py)
        return info

    async def _start_ha_server(self) -> None:
        """Replication on its own port (haListenPort; 0 = a free one), so bulk catch-up never queues behind
        clients' calls."""
        assert self.ha is not None
        c = self.config
        acl = [self._ha_acl()] if self.acl is not None else []
        server = grpc.aio.server(options=GRPC_OPTIONS, interceptors=[*acl, RequestDecoding()])
        try:
            port = add_port(server, f"{c.broker_ip1}:{c.ha_listen_port}", c.tls_server())
        except RuntimeError as exc:
            raise OSError(f"cannot listen for replication on {c.broker_ip1}:{c.ha_listen_port}: {exc}") from None
        ha_pb2_grpc.add_HaServiceServicer_to_server(HaServicer(self.ha), GenericHandlersOnly(server))
        await server.start()
        self._ha_server = server
        self.ha_server_addr = f"{c.broker_ip1}:{port}"
        log.info("ha_listening addr=%s role=%s", self.ha_server_addr,
                 "controller-assigned" if c.enable_controller_mode else c.broker_role)

    def _ha_acl(self) -> AclInterceptor:
        """Replication hands out the whole commitlog: with ACL on in any form (authorization alone included, where
        the client port trusts a named user), only a call signed with the inner credentials, verified, is served."""
        inner = self.config.inner_credentials
        if inner is None:
            log.warning("ha_acl_no_inner_credentials: ACL is on without innerClientAuthenticationCredentials; the "
                        "replication port refuses every slave")
        return AclInterceptor(Authority([User(inner[0], inner[1], SUPER)] if inner else []), True, True)

    def _wire_processors(self) -> None:
        """Processors and services get the collaborators they use (none gets the controller), and the
        servicers get the processors."""
        c = self.config
        self.static_topics = StaticTopicService(c.broker_name, self.topic_queue_mapping_manager,
                                                self.consumer_offset_manager, self.store, self.peer_brokers)
        limits = SendLimits(c.max_message_size, c.auto_create_topic_enable, c.default_topic_queue_nums)
        sync_flush = c.flush_disk_type is FlushDiskType.SYNC_FLUSH  # sends wait for their fsync on the loop
        self.broker_servicer = BrokerServicer(
            send=SendMessageProcessor(limits, self.topic_config_manager, self.static_topics, self.local_store,
                                      self._announce, delay_router=self.timer.router,
                                      slave=not c.broker_role.is_master, waits_for_flush=not sync_flush),
            pull=PullMessageProcessor(self.topic_config_manager, self.subscription_group_manager,
                                      self.consumer_offset_manager, self.static_topics, self.store,
                                      refusal=self._pull_refusal, is_replica=lambda: self._not_master() is not None),
            consumer_manage=ConsumerManageProcessor(self.topic_config_manager, self.consumer_offset_manager,
                                                    self.static_topics, self.store),
            query=QueryMessageProcessor(self.store),
            admin=AdminBrokerProcessor(
                config=c, broker_addr=self.broker_addr, topic_config_manager=self.topic_config_manager,
                subscription_group_manager=self.subscription_group_manager,
                consumer_offset_manager=self.consumer_offset_manager,
                mapping_manager=self.topic_queue_mapping_manager, store=self.store, local_store=self.local_store,
                stats=self.stats, boot_timestamp=self.boot_timestamp, on_topics_changed=self._announce,
                timer_info=lambda: {**self.timer.runtime_info(), **self.transactions.runtime_info()},
                ha_info=self._ha_info, producers=self.transactions.producers,
                send_processor=lambda: self.broker_servicer.send,
                ensure_default_topic=self._ensure_default_topic,
                on_leadership_gained=self._forget_pop_queues, on_topic_deleted=self._forget_deleted_topic,
                on_group_deleted=self._forget_deleted_group,
                on_mapping_changed=self.hold_service.wake_topic,
                acl_version=lambda: self.acl.data_version if self.acl is not None else None),
            recall=RecallMessageProcessor(c.broker_name, lambda: self.timer.store, self.local_store,
                                          self._is_master),
            hold_service=self.hold_service, stats=self.stats, ha=self.ha, metrics=self.metrics,
            long_polling_max_suspend_ms=c.long_polling_max_suspend_ms,
            sync_flush=sync_flush,
            flush_waiters=FlushWaiters(self.local_store.flush_service) if sync_flush else None)
        self.kv_servicer = KvServicer(KvProcessor(c.broker_name, self.kv, self.kv_provisioner,
                                                  self.topic_queue_mapping_manager, self.static_topics,
                                                  self.local_store))
        self.tiered_servicer = TieredServicer(TieredProcessor(c.broker_name, self.tiered, self.topic_config_manager))
        # POP: its in-flight state in its own RocksDB; an offset reset restarts a POP group's queues there too.
        self.pop_state = PopStateStore(Path(c.store_path_root_dir) / "pop",
                                       sync=c.flush_disk_type is FlushDiskType.SYNC_FLUSH)
        pop_service = PopService(
            c.broker_name, self.pop_state, lambda *a: self.pop_servicer.processor.dead_letter(*a), self._pop_progress)
        if not c.enable_controller_mode and not c.broker_role.is_master:
            pop_service.forget("brokerRole=SLAVE")  # before a copy of its master's can be installed
        self.pop_service = pop_service
        if not c.enable_controller_mode and c.broker_role.is_master:  # perhaps a slave, restarted as master
            self._clamp_started_master()
        self.consumer_groups = ConsumerGroupProcessor(
            broker_name=c.broker_name, manager=self.consumer_manager, locks=self.rebalance_locks,
            topic_config_manager=self.topic_config_manager, subscription_group_manager=self.subscription_group_manager,
            consumer_offset_manager=self.consumer_offset_manager, static_topics=self.static_topics, store=self.store,
            on_topics_changed=self._announce,
            takes_writes=lambda: self.local_store.running_flags.replica_reason is None,
            on_offsets_reset=pop_service.reset)
        send_back = SendMsgBackProcessor(self.topic_config_manager, self.subscription_group_manager,
                                         self.local_store, self.timer.router, self._announce)
        self.consumer_servicer = ConsumerServicer(self.consumer_groups, send_back, self.ha)
        end_processor = self.transactions.processor(self.local_store, self.topic_config_manager,
                                                    self._topic_deleted_at, self._not_master)
        self.transaction_servicer = TransactionServicer(end_processor, self.transactions.producers, self.ha)
        self.pop_servicer = self._pop_servicer(pop_service, send_back)

    def _topic_deleted_at(self, topic: str) -> int:
        """Where the topic's latest deletion record is in the commitlog (-1: none), as the timer store notes it."""
        return self.timer.store.deleted_at(topic) if self.timer.store is not None else -1

    def _pop_servicer(self, pop_service: PopService, send_back: SendMsgBackProcessor) -> PopServicer:
        """POP's requests; its dead letters go through the consumer groups' path."""
        c = self.config
        processor = PopMessageProcessor(
            topic_config_manager=self.topic_config_manager, subscription_group_manager=self.subscription_group_manager,
            consumer_offset_manager=self.consumer_offset_manager, static_topics=self.static_topics, store=self.store,
            pop=pop_service, send_back=send_back, refusal=self._pop_refusal,
            replicated=functools.partial(self._wait_replicated, asyncio.get_running_loop()),
            never_waits=c.flush_disk_type is not FlushDiskType.SYNC_FLUSH and not self._writes_wait_for_slaves())
        return PopServicer(processor, self.hold_service, c.long_polling_max_suspend_ms, self.metrics, self.stats)

    def _forget_pop_queues(self, topic: str, logic_ids: list[int]) -> None:
        """Logic queues this broker leads again: what POP kept from the last time is stale (they were popped
        elsewhere meanwhile); groups start again from their committed offsets."""
        if self.pop_service is not None:
            self.pop_service.forget_queues(topic, logic_ids, "leader_again")

    def _forget_deleted_topic(self, topic: str) -> None:
        """A deleted topic: a topic made again under the name starts at queue offset 0 (POP's state), and its
        metrics' series go."""
        if self.pop_service is not None:
            self.pop_service.forget_queues(topic, None, "topic_deleted")
        if self.metrics is not None:
            self.metrics.forget_topic(topic)

    def _forget_deleted_group(self, group: str) -> None:
        """A deleted group: what POP had in flight for it is owed to nobody, and its metrics' series go (its
        committed offsets stay, as upstream's without removeOffset)."""
        if self.pop_service is not None:
            self.pop_service.forget_group(group, "group_deleted")
        if self.metrics is not None:
            self.metrics.forget_group(group)

    def _wait_replicated(self, loop: asyncio.AbstractEventLoop) -> None:
        """From a worker thread: until the slaves have the commitlog to its end now (at once but for a
        SYNC_MASTER); a Refusal when they do not in time."""
        ha = self.ha
        if ha is None or not self._writes_wait_for_slaves():  # (POP's calls may then run on the loop)
            return
        if _on_loop(loop):
            raise RuntimeError("waiting for slaves on the event loop would never end")
        end = self.local_store.commit_log.max_offset()
        code = asyncio.run_coroutine_threadsafe(ha.wait_replicated(end, ha.slave_timeout_s), loop).result()
        if code != ResponseCode.SUCCESS:
            raise Refusal(ResponseCode(code), "the write is not on the slaves yet")

    def _writes_wait_for_slaves(self) -> bool:
        """Whether a write may wait for slaves: a SYNC_MASTER's, or any in controller mode (roles change). Fixed
        for the broker's life otherwise (role and inSyncReplicas come from its config)."""
        return self.ha is not None and (self.ha.waits_for_slaves() or self.config.enable_controller_mode)

    def _promoted(self) -> None:
        self._clamp_pop_state()
        if self.acl is not None and self.acl.unconfirmed:
            log.warning("acl_tables_unconfirmed broker=%s reason='elected with ACL tables never copied from its "
                        "master (which predates GetAclCopy): users made only there are unknown here; create them "
                        "here (mqadmin createUser -b)'",
                        self.config.broker_name)

    def _clamp_pop_state(self) -> None:
        """Runs as this broker becomes master (promoted, or started as one): a failure must not keep it from that."""
        if self.pop_service is None:
            return
        try:
            self.pop_service.clamp(self._pop_queue_end)
        except Exception:
            log.exception("pop_state_not_fitted: POP state kept as copied")

    def _clamp_started_master(self) -> None:
        """A master on fixed roles may be a slave an operator restarted as master, with its master's POP state: fitted
        as a promoted one is, once dispatch has reached the log's end (before, the queues' ends are not yet known).
        The end is what is confirmed: what the start recovered is; what timers due at the start appended since
        is not, on a SYNC_MASTER, until its slave copies it, and the slave can connect only after this (waiting
        for it held every start with timers due 30 s, nothing served)."""
        commit_log = self.local_store.commit_log
        end = min(commit_log.max_offset(), commit_log.confirm_offset)
        if self.local_store.wait_dispatched(end, STARTUP_DISPATCH_WAIT_S):
            self._clamp_pop_state()
        else:
            log.warning("pop_state_not_fitted reason=dispatch_behind end=%d", end)

    def _pop_queue_end(self, topic: str, queue_id: int) -> int | None:
        """Where a queue POP keeps state of ends here now (a static topic's logic queue: by its latest item, when
        that is on this broker); None when not known here."""
        if self.topic_queue_mapping_manager.get(topic) is None:
            return self.local_store.max_offset(topic, queue_id)
        try:
            ctx = self.static_topics.context(topic, queue_id, LOGIC)
        except Refusal:
            return None
        if ctx is None or not ctx.decided or not self.static_topics.is_local(ctx.decided[-1]):
            return None
        latest = ctx.decided[-1]
        return latest.logic_strictly(self.local_store.max_offset(topic, latest.queue_id))

    def _forget_pop_state(self) -> None:
        if self.pop_service is not None:  # a static slave follows before POP is wired: forgotten when it is
            self.pop_service.forget("this broker follows a master")

    def _pop_progress(self, group: str, topic: str, queue_id: int, consumed: int) -> None:
        """POP's progress is the group's committed offset too (lag, consumerProgress, a failover's restart; a
        static topic's in logic terms, where its pulls and the next leader's pops look for it)."""
        if self.topic_queue_mapping_manager.get(topic) is not None:
            try:
                ctx = self.static_topics.context(topic, queue_id, LOGIC)
                if ctx is not None:
                    self.static_topics.commit_offset(ctx, group, consumed)
            except Refusal as exc:  # no longer the leader, or an older item's broker is down: committed later
                log.warning("pop_commit_offset_failed group=%s topic=%s queue=%d offset=%d error=%s", group, topic,
                            queue_id, consumed, exc.remark)
            return
        if self.consumer_offset_manager.query_offset(group, topic, queue_id) != consumed:
            self.consumer_offset_manager.commit_offset(group, topic, queue_id, consumed)

    def _not_master(self) -> str | None:
        """Why this broker is not its group's master now (a slave, a deposed master), or None."""
        c = self.config
        if not self._is_master() or self.local_store.running_flags.replica_reason is not None:
            return f"broker {c.broker_name} {NOT_GROUP_MASTER}"
        return None

    def _pop_refusal(self) -> str | None:
        why = self._not_master()
        if why is None:
            return None
        return f"{why}: POP state lives on the master (pop from the broker the route names as id 0)"

    async def _expire_consumers(self) -> None:
        """Members whose heartbeats stopped without their stream ending (a half-open connection) leave."""
        interval_s = min(5.0, self.config.channel_expired_timeout / 3000)
        while True:
            await asyncio.sleep(interval_s)
            self.consumer_groups.expire_members()
            self.transactions.producers.expire()

    def _queue_exists(self, topic: str, queue_id: int) -> bool:
        """Whether a due message can still go to this queue of this broker (the timer's delivery asks)."""
        config = self.topic_config_manager.select(topic)
        return config is not None and 0 <= queue_id < max(config.read_queue_nums, config.write_queue_nums)

    def _announce(self) -> None:
        """Topics or mappings changed: re-register with the name servers soon."""
        if self.registrar is not None:
            self.registrar.trigger()

    def _load(self) -> None:
        self.topic_queue_mapping_manager.load()  # the source of truth for static topics: first
        self.topic_config_manager.load()
        self._ensure_default_topic()
        self.subscription_group_manager.load()
        self.consumer_offset_manager.load()
        if self.acl is not None:
            c = self.config
            self.acl.load(parse_user(c.init_authentication_user) if c.init_authentication_user else None)
        self.local_store.start()

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
        failures = FailedPassLog(log, "metadata_persist_failed")  # a full disk: one line, once while it lasts
        while not self._offset_flusher.wait(self.config.flush_consumer_offset_interval / 1000):
            try:
                self.consumer_offset_manager.persist()
                self.subscription_group_manager.persist()  # groups a pull created while the disk was full
                if self.local_store.keeps_confirm_checkpoint:
                    self.local_store.write_confirm_checkpoint()
                failures.succeeded()
            except Exception as exc:
                failures.failed(exc)

    async def shutdown(self) -> None:
        """Stop accepting, finish in-flight calls, unregister, flush everything."""
        log.info("broker_stopping addr=%s", self.broker_addr)
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        if self._health_watch is not None:
            self._health_watch.cancel()
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        if self.metrics_exporter is not None:
            await asyncio.to_thread(self.metrics_exporter.stop)
        # Before the server's grace: checks sent while producers' answers are refused (the server stops taking
        # calls) used up check counts, and transactions on their last check were discarded.
        await asyncio.to_thread(self.transactions.shutdown)
        if self._server is not None:
            self.hold_service.wake_all()
            # A deposed master cuts its clients' calls at once (UNAVAILABLE, which the SDK takes as a failover and
            # retries at the new master): through a grace its open streams went on answering refusals for 5 s,
            # which reached users as errors (the failover review: 48 receives, KV writes, sends).
            await self._server.stop(grace=0 if self.rejoin_reason else 5)
        if self._ha_server is not None:
            await self._ha_server.stop(grace=1)
        if self.replicas is not None:
            await self.replicas.close()
        await asyncio.to_thread(self.replica_services.stop_following)
        self._offset_flusher.set()
        if self.static_topic_clean_service is not None:
            self.static_topic_clean_service.shutdown()
        if self.registrar is not None:
            await asyncio.to_thread(self.registrar.shutdown)
        await asyncio.to_thread(self._flush_and_close)
        log.info("broker_stopped addr=%s", self.broker_addr)

    def _flush_and_close(self) -> None:
        """Every step runs even if one before it failed (a full disk): what can be flushed is, the store lock is
        released, and the daemon exits 0. A store step that failed leaves the store marked as not cleanly shut."""
        run_shutdown_steps(self._shutdown_steps(), log)

    def _shutdown_steps(self) -> Iterator[ShutdownStep]:
        yield "transaction_check", self.transactions.shutdown  # it writes to the store
        yield "timer_delivery", self.timer.stop_delivery  # it writes to the store
        yield "peer_brokers", self.peer_brokers.close
        yield "consumer_offsets", self.consumer_offset_manager.persist
        yield "subscription_groups", self.subscription_group_manager.persist
        yield "metadata", self.metadata.close
        if self.pop_state is not None:
            yield "pop_state", self.pop_state.close
        if self.tiered is not None:
            yield "tiered", self.tiered.shutdown
        yield "store", self.local_store.shutdown
        if self.tiered is not None:
            yield "tiered_close", self.tiered.close
        if self.kv is not None:
            yield "kv", self.kv.close
        yield "timer", self.timer.close
        yield "store_lock", self.store_lock.release


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class _PopStateCopies:
    """A slave's copy of its master's POP state, kept by its POP service (none yet: a static slave copies before
    POP is wired, and the next copy installs)."""

    def __init__(self, broker: BrokerController) -> None:
        self._broker = broker

    def copied_from(self) -> str:
        service = self._broker.pop_service
        return service.copied_from() if service is not None else ""

    def install(self, snapshot: bytes, still_following: Callable[[], bool], version: str) -> bool:
        service = self._broker.pop_service
        return service.install(snapshot, still_following, version) if service is not None else False

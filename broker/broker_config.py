"""broker.conf: Java-properties format with RocketMQ's key names.

Every key is declared once below with its type, default and check. Unknown keys log a warning naming
the key; a bad value raises :class:`ConfigError` naming the key (the broker refuses to start).
"""

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from broker.ha.broker_role import BrokerRole
from broker.kv.kv_state_store import KvStoreType
from broker.store.config import FlushDiskType, MessageStoreConfig, StoreType
from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider
from broker.tiered.tiered_storage_level import TieredStorageLevel
from broker.timer.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, DEFAULT_TIMER_MAX_DELAY_SEC, parse_delay_levels
from common.acl import parse_credentials, parse_user
from common.address import check_address
from common.message_codec import BLANK_MIN_LENGTH, MAX_TOPIC_BYTES, record_size
from common.message_properties import MAX_PROPERTIES_SIZE
from common.metrics import MetricsExporterType
from common.tls import ServerTls, TlsError, server_tls
from common.wait_limits import MAX_SUSPEND_MS

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A broker.conf value is invalid; the message names the key."""


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(f"{raw!r} is not true or false")


E = TypeVar("E", bound=StrEnum)


def _choice(kind: type[E]) -> Callable[[str], E]:
    """A choice key: its values are the enum's values (the broker.conf spellings)."""
    def parse(raw: str) -> E:
        try:
            return kind(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not one of {', '.join(kind)}") from None
    return parse


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not an integer") from None
        if not lo <= value <= hi:
            raise ValueError(f"{value} is outside {lo}..{hi}")
        return value
    return parse


def _float_at_least(lo: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a number") from None
        if value < lo:
            raise ValueError(f"{value} is below {lo}")
        return value
    return parse


def _delay_levels(raw: str) -> str:
    parse_delay_levels(raw)  # checked at start; kept as written
    return raw


def _delete_when(raw: str) -> str:
    """Hours of the day, 0..23, separated by ';' (upstream's form), or '*': any other token never matched, and
    expired segments were never deleted (until the disk was nearly full)."""
    for hour in raw.split(";"):
        hour = hour.strip()
        if hour and hour != "*" and not (re.fullmatch(r"\d{1,2}", hour) and int(hour) <= 23):
            raise ValueError(f"{raw!r} is not hours 0..23 separated by ';' (or *)")
    return raw


def _name(raw: str) -> str:
    if not re.fullmatch(r"[%a-zA-Z0-9_-]{1,127}", raw):
        raise ValueError(f"{raw!r} must be 1-127 characters of [%a-zA-Z0-9_-]")
    return raw


def _addresses(raw: str) -> str:
    for addr in filter(None, raw.split(";")):
        check_address(addr.strip())  # (gRPC would take port 99999 modulo 65536)
    return raw


def _json_user(raw: str) -> str:
    parse_user(raw)  # checked here; kept as written
    return raw


def _json_credentials(raw: str) -> str:
    parse_credentials(raw)
    return raw


_INT = int
_STR = str
MAX_PORT = 65535
MAX_TIMER_DELAY_SEC = 10 * 365 * 86_400  # no wheel to size: the bound is only a sanity check

# key -> (attribute, parser, default)
# broker.conf key -> (BrokerConfig attribute, parser that raises ValueError on a bad value)
KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "brokerClusterName": ("broker_cluster_name", _name),
    "brokerName": ("broker_name", _name),
    "brokerId": ("broker_id", _int_in(0, 1 << 20)),
    "namesrvAddr": ("namesrv_addr", _addresses),
    "brokerIP1": ("broker_ip1", _STR),
    "listenPort": ("listen_port", _int_in(0, MAX_PORT)),
    "storePathRootDir": ("store_path_root_dir", _STR),
    "flushDiskType": ("flush_disk_type", _choice(FlushDiskType)),
    "mappedFileSizeCommitLog": ("mapped_file_size_commit_log", _int_in(4096, 1 << 40)),
    "mappedFileSizeConsumeQueue": ("mapped_file_size_consume_queue", _int_in(20, 1 << 32)),
    "fileReservedTime": ("file_reserved_time", _float_at_least(0)),
    "deleteWhen": ("delete_when", _delete_when),
    "diskMaxUsedSpaceRatio": ("disk_max_used_space_ratio", _int_in(10, 95)),
    "diskSpaceCleanForciblyRatio": ("disk_space_clean_forcibly_ratio", _int_in(10, 99)),
    "diskSpaceWarningLevelRatio": ("disk_space_warning_level_ratio", _int_in(10, 99)),
    "cleanFileForciblyEnable": ("clean_file_forcibly_enable", _bool),
    "maxMessageSize": ("max_message_size", _int_in(1, 1 << 30)),
    "flushIntervalCommitLog": ("flush_interval_commit_log", _int_in(1, 60_000)),
    "flushIntervalConsumeQueue": ("flush_interval_consume_queue", _int_in(1, 60_000)),
    "syncFlushTimeout": ("sync_flush_timeout", _int_in(1, 600_000)),
    "messageIndexEnable": ("message_index_enable", _bool),
    "autoCreateTopicEnable": ("auto_create_topic_enable", _bool),
    "defaultTopicQueueNums": ("default_topic_queue_nums", _int_in(1, 1024)),
    "registerNameServerPeriod": ("register_name_server_period", _int_in(100, 3_600_000)),
    "brokerNotActiveTimeoutMillis": ("broker_not_active_timeout_millis", _int_in(0, 86_400_000)),
    "flushConsumerOffsetInterval": ("flush_consumer_offset_interval", _int_in(10, 3_600_000)),
    "longPollingMaxSuspendMs": ("long_polling_max_suspend_ms", _int_in(0, MAX_SUSPEND_MS)),
    "cleanResourceInterval": ("clean_resource_interval", _int_in(10, 3_600_000)),
    "staticTopicCleanInterval": ("static_topic_clean_interval", _int_in(10, 86_400_000)),
    "brokerRole": ("broker_role", _choice(BrokerRole)),
    "haListenPort": ("ha_listen_port", _int_in(0, MAX_PORT)),
    "haMasterAddress": ("ha_master_address", _addresses),
    "slaveReadEnable": ("slave_read_enable", _bool),
    "enableControllerMode": ("enable_controller_mode", _bool),
    "controllerAddr": ("controller_addr", _addresses),
    "controllerHeartBeatTimeoutMills": ("controller_heart_beat_timeout_mills", _int_in(1000, 600_000)),
    "haMaxTimeSlaveNotCatchup": ("ha_max_time_slave_not_catchup", _int_in(100, 3_600_000)),
    "brokerElectionPriority": ("broker_election_priority", _int_in(0, 1 << 30)),
    "allAckInSyncStateSet": ("all_ack_in_sync_state_set", _bool),
    "inSyncReplicas": ("in_sync_replicas", _int_in(0, 64)),
    "channelExpiredTimeout": ("channel_expired_timeout", _int_in(100, 86_400_000)),
    "rebalanceLockMaxLiveTime": ("rebalance_lock_max_live_time", _int_in(100, 86_400_000)),
    "storeType": ("store_type", _choice(StoreType)),
    "kvEnable": ("kv_enable", _bool),
    "metricsExporterType": ("metrics_exporter_type", _choice(MetricsExporterType)),
    "metricsPromExporterPort": ("metrics_prom_exporter_port", _int_in(0, MAX_PORT)),
    "metricsPromExporterHost": ("metrics_prom_exporter_host", _STR),
    "tlsEnable": ("tls_enable", _bool),
    "tlsServerCertPath": ("tls_server_cert_path", _STR),
    "tlsServerKeyPath": ("tls_server_key_path", _STR),
    "tlsClientCaPath": ("tls_client_ca_path", _STR),
    "tlsClientTrustCertPath": ("tls_client_ca_path", _STR),  # upstream's name for the same file
    "kvStoreType": ("kv_store_type", _choice(KvStoreType)),
    "kvSnapshotInterval": ("kv_snapshot_interval", _int_in(100, 86_400_000)),
    "tieredStoreEnable": ("tiered_store_enable", _bool),
    "tieredBackendServiceProvider": ("tiered_backend_service_provider", _choice(TieredBackendServiceProvider)),
    "tieredStoreFilePath": ("tiered_store_file_path", _STR),
    "tieredStoreS3Endpoint": ("tiered_store_s3_endpoint", _STR),
    "tieredStoreS3Bucket": ("tiered_store_s3_bucket", _STR),
    "tieredStoreS3Region": ("tiered_store_s3_region", _STR),
    "tieredStoreS3AccessKey": ("tiered_store_s3_access_key", _STR),
    "tieredStoreS3SecretKey": ("tiered_store_s3_secret_key", _STR),
    "tieredStoreS3Prefix": ("tiered_store_s3_prefix", _STR),
    "tieredStorageLevel": ("tiered_storage_level", _choice(TieredStorageLevel)),
    "tieredStoreFileReservedTime": ("tiered_store_file_reserved_time", _float_at_least(0)),
    "tieredStoreDeleteFileEnable": ("tiered_store_delete_file_enable", _bool),
    "tieredStoreCommitLogMaxSize": ("tiered_store_commit_log_max_size", _int_in(4096, 1 << 40)),
    "tieredStoreConsumeQueueMaxSize": ("tiered_store_consume_queue_max_size", _int_in(28, 1 << 40)),
    "tieredStoreGroupCommitCount": ("tiered_store_group_commit_count", _int_in(1, 1 << 24)),
    "tieredStoreGroupCommitSize": ("tiered_store_group_commit_size", _int_in(1, 1 << 34)),
    "tieredStoreGroupCommitAge": ("tiered_store_group_commit_age", _int_in(1, 3_600_000)),
    "messageDelayLevel": ("message_delay_level", _delay_levels),
    "timerMaxDelaySec": ("timer_max_delay_sec", _int_in(1, MAX_TIMER_DELAY_SEC)),
    "transactionTimeOut": ("transaction_time_out", _int_in(1, 86_400_000)),
    "transactionCheckInterval": ("transaction_check_interval", _int_in(10, 86_400_000)),
    "transactionCheckMax": ("transaction_check_max", _int_in(0, 10_000)),
    "authenticationEnabled": ("authentication_enabled", _bool),
    "authorizationEnabled": ("authorization_enabled", _bool),
    "initAuthenticationUser": ("init_authentication_user", _json_user),
    "innerClientAuthenticationCredentials": ("inner_client_authentication_credentials", _json_credentials),
}


@dataclass
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    namesrv_addr: str = ""
    broker_ip1: str = "127.0.0.1"
    listen_port: int = 10911
    store_path_root_dir: str = str(Path.home() / "store")
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    mapped_file_size_commit_log: int = 1 << 30
    mapped_file_size_consume_queue: int = 300_000 * 20
    file_reserved_time: float = 72.0
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75  # percent of disk use above which expired files go at any hour
    disk_space_clean_forcibly_ratio: int = 85  # above it the oldest files go, expired or not
    disk_space_warning_level_ratio: int = 90  # above it writes are refused
    clean_file_forcibly_enable: bool = True
    max_message_size: int = 4 * 1024 * 1024
    flush_interval_commit_log: int = 500
    flush_interval_consume_queue: int = 1000
    sync_flush_timeout: int = 5000
    message_index_enable: bool = True
    auto_create_topic_enable: bool = False
    default_topic_queue_nums: int = 8
    register_name_server_period: int = 30_000
    broker_not_active_timeout_millis: int = 0
    flush_consumer_offset_interval: int = 1000
    long_polling_max_suspend_ms: int = 30_000
    clean_resource_interval: int = 10_000
    static_topic_clean_interval: int = 60_000
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    ha_listen_port: int = 0  # replication (masters): 0 = a free port, shown as haServerAddr in the runtime info
    ha_master_address: str = ""  # a slave's master's replication address (host:haListenPort)
    slave_read_enable: bool = False  # a slave serves pulls (of what its master confirmed)
    # Controller mode: the controller (a name server with --enable-controller) names the master; brokerRole and
    # haMasterAddress are not used.
    enable_controller_mode: bool = False
    controller_addr: str = ""
    controller_heart_beat_timeout_mills: int = 10_000  # silence before an election; the lease is a bit shorter
    ha_max_time_slave_not_catchup: int = 15_000  # ms behind before a slave leaves the in-sync set
    broker_election_priority: int = 0  # lower wins among equally up-to-date replicas
    all_ack_in_sync_state_set: bool = True  # a send waits for every in-sync replica (the only mode built)
    in_sync_replicas: int = 0  # static SYNC_MASTER: replicas (master included) a send needs; 0: every connected one
    channel_expired_timeout: int = 30_000  # ms: a consumer silent this long leaves its groups
    rebalance_lock_max_live_time: int = 60_000  # ms: an orderly queue lease not renewed this long ends
    store_type: StoreType = StoreType.DEFAULT
    # Prometheus text on http://metricsPromExporterHost:metricsPromExporterPort/metrics (0 = a free port, logged as
    # metrics_exporter_started); empty host = brokerIP1
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    metrics_prom_exporter_port: int = 5557
    metrics_prom_exporter_host: str = ""
    # TLS: tlsEnable serves the broker's ports (clients' and haListenPort) TLS only with this certificate and key;
    # tlsClientCaPath (alias tlsClientTrustCertPath): the CA the broker's own connections (name servers, peer
    # brokers, its master, the controller) trust, which then all use TLS. Each on its own: a plaintext broker may
    # register with TLS name servers and the other way round.
    tls_enable: bool = False
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_client_ca_path: str = ""
    kv_enable: bool = False
    kv_store_type: KvStoreType = KvStoreType.ROCKSDB  # applied KV state: RocksDB, or memory with snapshots
    kv_snapshot_interval: int = 10_000  # ms between snapshots of the in-memory KV store
    tiered_store_enable: bool = False
    tiered_backend_service_provider: TieredBackendServiceProvider = TieredBackendServiceProvider.POSIX
    tiered_store_file_path: str = ""
    # tieredBackendServiceProvider=s3: the server (empty: AWS for the region), bucket (required; created if
    # missing), signing keys (empty: boto3's default chain) and the key prefix every object goes under
    tiered_store_s3_endpoint: str = ""
    tiered_store_s3_bucket: str = ""
    tiered_store_s3_region: str = "us-east-1"
    tiered_store_s3_access_key: str = ""
    tiered_store_s3_secret_key: str = ""
    tiered_store_s3_prefix: str = ""
    tiered_storage_level: TieredStorageLevel = TieredStorageLevel.NOT_IN_DISK
    tiered_store_file_reserved_time: float = 72.0
    tiered_store_delete_file_enable: bool = False  # the broker deletes expired tier objects itself (else the job)
    tiered_store_commit_log_max_size: int = 1024 * 1024 * 1024  # bytes of one tiered commitlog segment
    tiered_store_consume_queue_max_size: int = 28 * 1024 * 1024  # bytes of one tiered consume queue segment
    tiered_store_group_commit_count: int = 2048  # a queue uploads once it has this many messages waiting,
    tiered_store_group_commit_size: int = 8 * 1024 * 1024  # or this many bytes,
    tiered_store_group_commit_age: int = 500  # or its oldest waited this many ms
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL  # delay level N = the Nth entry
    timer_max_delay_sec: int = DEFAULT_TIMER_MAX_DELAY_SEC  # the furthest ahead a deliver_at_ms may be
    transaction_time_out: int = 6000  # ms after its store time before a half message nobody ended is first checked
    transaction_check_interval: int = 30_000  # ms between checks of one half message (upstream's check period)
    transaction_check_max: int = 15  # checks before a half message is moved to TRANS_CHECK_MAX_TIME_TOPIC
    # ACL 2.0 (off by default): signed requests, users' policies, the super user made at first start, and the
    # credentials this broker presents to other brokers and name servers (JSON strings, checked when read)
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    init_authentication_user: str = ""
    inner_client_authentication_credentials: str = ""
    unknown_keys: list[str] = field(default_factory=list)

    @property
    def acl_enabled(self) -> bool:
        return self.authentication_enabled or self.authorization_enabled

    @property
    def inner_credentials(self) -> tuple[str, str] | None:
        raw = self.inner_client_authentication_credentials
        return parse_credentials(raw) if raw else None

    def tls_server(self) -> ServerTls | None:
        """What the broker's ports serve: TLS with this certificate and key, or None (plaintext)."""
        return server_tls(self.tls_enable, self.tls_server_cert_path, self.tls_server_key_path)

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    def store_config(self, store_host: str) -> MessageStoreConfig:
        try:
            return MessageStoreConfig(
                store_path_root_dir=self.store_path_root_dir,
                store_host=store_host,
                mapped_file_size_commit_log=self.mapped_file_size_commit_log,
                mapped_file_size_consume_queue=self.mapped_file_size_consume_queue,
                flush_disk_type=self.flush_disk_type,
                flush_interval_commit_log_ms=self.flush_interval_commit_log,
                flush_interval_consume_queue_ms=self.flush_interval_consume_queue,
                sync_flush_timeout_ms=self.sync_flush_timeout,
                max_message_size=self.max_message_size,
                file_reserved_time_hours=self.file_reserved_time,
                delete_when=self.delete_when,
                disk_max_used_space_ratio=self.disk_max_used_space_ratio,
                disk_space_clean_forcibly_ratio=self.disk_space_clean_forcibly_ratio,
                disk_space_warning_level_ratio=self.disk_space_warning_level_ratio,
                clean_file_forcibly_enable=self.clean_file_forcibly_enable,
                message_index_enable=self.message_index_enable,
                clean_resource_interval_ms=self.clean_resource_interval,
                store_type=self.store_type,
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties subset: ``key=value`` or ``key: value`` lines, ``#``/``!`` comments."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)$", line)
        if not m:
            raise ConfigError(f"line {number}: cannot parse {line!r}")
        out[m.group(1)] = m.group(2).strip()
    return out


def load_broker_config(text: str, overrides: dict[str, str] | None = None) -> BrokerConfig:
    values = parse_properties(text)
    values.update(overrides or {})
    config = BrokerConfig()
    for key, raw in values.items():
        spec = KEYS.get(key)
        if spec is None:
            log.warning("config_unknown_key key=%s", key)
            config.unknown_keys.append(key)
            continue
        attr, parse = spec
        try:
            setattr(config, attr, parse(raw))
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None
    _check_role(config)
    if 0 < config.broker_not_active_timeout_millis <= config.register_name_server_period:
        raise ConfigError(f"brokerNotActiveTimeoutMillis={config.broker_not_active_timeout_millis} is not above "
                          f"registerNameServerPeriod={config.register_name_server_period}: the name servers would drop "
                          "this live broker from every route between its registrations")
    if (config.tiered_store_enable and config.tiered_backend_service_provider is TieredBackendServiceProvider.S3
            and not config.tiered_store_s3_bucket):
        raise ConfigError("tieredBackendServiceProvider=s3: tieredStoreS3Bucket is required")
    _check_tiered_segment(config)
    try:
        config.tls_server()
    except TlsError as exc:
        raise ConfigError(f"tlsEnable=true: {exc} (tlsServerCertPath, tlsServerKeyPath)") from None
    return config


def _check_tiered_segment(config: BrokerConfig) -> None:
    """A record never straddles tiered segments: a tiered commitlog segment should hold the largest record the
    local commitlog takes, or that record's queue uploads nothing from it on (``tiered_queue_blocked``). Said at
    start, once; not refused: small segments serve tests and measurements whose records are all small."""
    if not config.tiered_store_enable:
        return
    largest = record_size(MAX_TOPIC_BYTES, MAX_PROPERTIES_SIZE, config.max_message_size)
    why = f"maxMessageSize={config.max_message_size} plus a record's header, topic and properties"
    local = config.mapped_file_size_commit_log - BLANK_MIN_LENGTH  # no record is larger than a local segment
    if local < largest:
        largest, why = local, f"mappedFileSizeCommitLog={config.mapped_file_size_commit_log} less its end marker"
    if config.tiered_store_commit_log_max_size < largest:
        log.warning("config_tiered_segment_small tieredStoreCommitLogMaxSize=%d largest_record=%d (%s): a larger "
                    "record blocks its queue's upload; set it to at least %d, or lower maxMessageSize",
                    config.tiered_store_commit_log_max_size, largest, why, largest)


def _check_role(config: BrokerConfig) -> None:
    """A broker group's replicas: the master is brokerId 0, a slave another id and its master's address
    (controller mode: every replica 1 or more, and the controller's address)."""
    if config.enable_controller_mode:
        if config.broker_id < 1:
            raise ConfigError("enableControllerMode=true: brokerId must be 1 or more (it names the replica; the "
                              "master is shown as 0)")
        if not config.controller_addr:
            raise ConfigError("enableControllerMode=true: controllerAddr (a name server started with "
                              "--enable-controller) is required")
        if len([a for a in config.controller_addr.split(";") if a.strip()]) > 1:
            # Controllers are not replicated: a replica that moved to another would let it elect a second master.
            raise ConfigError(f"controllerAddr={config.controller_addr}: one controller only (controllers do not "
                              "share their decisions, so a second one could elect a second master)")
        if not config.all_ack_in_sync_state_set or config.in_sync_replicas:
            raise ConfigError("enableControllerMode=true: a send waits for every in-sync replica (allAckInSyncStateSet"
                              "=true; inSyncReplicas applies to brokerRole=SYNC_MASTER only): an election may pick "
                              "any member, so each must hold every acknowledged message")
        return
    if config.broker_role is BrokerRole.SLAVE:
        if config.broker_id == 0:
            raise ConfigError("brokerRole=SLAVE: brokerId must be 1 or more (0 is the master's)")
        if not config.ha_master_address:
            raise ConfigError("brokerRole=SLAVE: haMasterAddress (the master's host:haListenPort) is required")
    elif config.broker_id != 0:
        raise ConfigError(f"brokerRole={config.broker_role}: brokerId must be 0 (a master)")

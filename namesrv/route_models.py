"""The name server's records: what brokers register and what routes are made of (no gRPC here)."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MASTER_ID = 0
DEFAULT_BROKER_EXPIRY_MS = 120_000
# A broker's registerNameServerPeriod (30 s by default) and a margin: a name server younger than this may not have
# heard from every live broker yet (GetRouteInfoResponse.warming_up)
WARM_UP_MS = 35_000


@dataclass(frozen=True, slots=True)
class DataVersion:
    """A broker's topic-config version: its start time and a counter bumped on every change."""

    state_version: int = 0
    counter: int = 0


@dataclass(slots=True)
class TopicConfig:
    """The part of a broker's topic config that routes need.

    Not frozen: one is built per topic of a registration, and frozen construction costs five times as much.
    """

    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(frozen=True, slots=True)
class QueueData:
    """One broker name's queues for one topic.

    Frozen and hashable so equal instances can be shared: a broker with a million topics usually has a handful
    of distinct queue layouts, and each (topic, broker) entry then costs only a reference.
    """

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int


@dataclass(frozen=True, slots=True)
class TopicQueueMappingInfo:
    """What a broker says about one static topic it takes part in: the logic queues it leads."""

    topic: str
    scope: str
    total_queues: int
    bname: str
    epoch: int
    dirty: bool
    curr_id_map: Mapping[int, int]


@dataclass(slots=True)
class BrokerData:
    """The addresses of one broker name (master and slaves)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def copy(self) -> "BrokerData":
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs))


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
    topic_queue_mapping_by_broker: dict[str, TopicQueueMappingInfo]


@dataclass(slots=True)
class RegisterBrokerRequest:
    """A registration (which doubles as the heartbeat).

    ``full``: ``topic_configs`` are all of the broker's topics. Otherwise a delta relative to ``base_version``:
    the configs changed since then and ``deleted_topics``. ``topic_configs`` may be a lazy iterable so a
    million-topic registration is never materialised twice.
    """

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    data_version: DataVersion
    full: bool = True
    topic_configs: Iterable[TopicConfig] = ()
    deleted_topics: Iterable[str] = ()
    topic_queue_mapping_infos: Mapping[str, TopicQueueMappingInfo] = field(default_factory=dict)
    base_version: DataVersion | None = None
    heartbeat_timeout_ms: int = 0  # 0: the name server's default, or three register periods when longer
    master_epoch: int = 0  # controller mode: the master epoch the broker knows
    register_period_ms: int = 0  # 0: not said (an older broker)


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    need_full: bool = False
    remark: str = ""
    refused: bool = False  # a deposed master's claim to the group (NO_PERMISSION, remark says why)


@dataclass(frozen=True, slots=True)
class LiveBroker:
    """A snapshot of one registered broker, as cluster info and expiry report it."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    last_update_timestamp: int  # wall clock ms, for operators
    data_version: DataVersion
    topic_count: int


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, list[str]]
    live_brokers: list[LiveBroker]


@dataclass(frozen=True, slots=True)
class NamesrvStats:
    """Sizes of the route tables; bytes are ``sys.getsizeof`` estimates from a sample of topics."""

    broker_count: int
    cluster_count: int
    topic_count: int
    topic_table_bytes: int
    bytes_per_topic: int

    def as_table(self) -> dict[str, str]:
        return {
            "broker_count": str(self.broker_count),
            "cluster_count": str(self.cluster_count),
            "topic_count": str(self.topic_count),
            "topic_table_bytes_estimate": str(self.topic_table_bytes),
            "bytes_per_topic_estimate": str(self.bytes_per_topic),
        }

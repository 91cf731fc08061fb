"""The name server's route state (RocketMQ's RouteInfoManager): live brokers and the topics they serve.

Pure state behind one lock, no gRPC. Each broker's own topics are its truth (``BrokerLiveInfo.topic_queue``);
``topic_queue_table`` is an index derived from them so a route lookup is one dict access. For every broker
name one broker is the *route source*: the master (id 0), or while the master is gone the lowest-id slave, so
consumers can keep reading from a slave as in RocketMQ, where queue data outlives the master.

Scale: a broker may hold a million topics. A delta registration touches only the topics it names, an empty one
only the heartbeat; per-topic records are shared frozen ``QueueData`` instances.
"""

import dataclasses
import logging
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter

from common.perm import PERM_WRITE
from common.statictopic.mapping_info_checks import registration_fault
from namesrv.route_models import (
    DEFAULT_BROKER_EXPIRY_MS,
    WARM_UP_MS,
    BrokerData,
    ClusterInfo,
    DataVersion,
    LiveBroker,
    NamesrvStats,
    QueueData,
    RegisterBrokerRequest,
    RegisterBrokerResult,
    TopicConfig,
    TopicQueueMappingInfo,
    TopicRouteData,
)

log = logging.getLogger(__name__)

_by_broker_name = attrgetter("broker_name")


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True, eq=False)
class BrokerLiveInfo:
    """One registered broker (keyed by address) with everything it told us."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    heartbeat_timeout_ms: int
    data_version: DataVersion = field(default_factory=DataVersion)
    master_epoch: int = 0  # controller mode: the epoch it registered at
    last_update_ms: int = 0  # the manager's (monotonic) clock: expiry must not jump with the wall clock
    last_update_timestamp: int = 0  # wall clock, only reported to operators
    topic_queue: dict[str, QueueData] = field(default_factory=dict)
    topic_queue_mapping: dict[str, TopicQueueMappingInfo] = field(default_factory=dict)
    # Equal QueueData share one instance, and identity then means "unchanged" when a registration is applied.
    # Keyed by a plain tuple: hashing it is ten times cheaper than building and hashing a QueueData per topic.
    queue_data_pool: dict[tuple[int, int, int, int], QueueData] = field(default_factory=dict)

    def queue_data(self, config: TopicConfig) -> QueueData:
        key = (config.read_queue_nums, config.write_queue_nums, config.perm, config.topic_sys_flag)
        queue_data = self.queue_data_pool.get(key)
        if queue_data is None:
            queue_data = self.queue_data_pool[key] = QueueData(self.broker_name, *key)
        return queue_data

    def same_identity(self, request: RegisterBrokerRequest) -> bool:
        return (self.cluster_name, self.broker_name, self.broker_id) == (
            request.cluster_name, request.broker_name, request.broker_id)

    def summary(self) -> LiveBroker:
        return LiveBroker(self.cluster_name, self.broker_name, self.broker_id, self.broker_addr,
                          self.last_update_timestamp, self.data_version, len(self.topic_queue))


class RouteInfoManager:
    def __init__(self, broker_expiry_ms: int = DEFAULT_BROKER_EXPIRY_MS, clock: Callable[[], int] = monotonic_ms,
                 wall_clock: Callable[[], int] = wall_ms, warm_up_ms: int = WARM_UP_MS) -> None:
        self.broker_expiry_ms = broker_expiry_ms
        self._clock = clock
        self._started_ms = clock()
        self.warm_up_ms = warm_up_ms
        self._heard: set[str] = set()  # broker names that registered since the start (see warm-up)
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}  # broker address -> broker
        self.broker_addr_table: dict[str, BrokerData] = {}  # broker name -> its addresses by id
        self.cluster_addr_table: dict[str, set[str]] = {}  # cluster -> broker names
        # topic -> QueueData of each broker name serving it, sorted by name. A tuple, not a dict per topic:
        # most topics live on one or two broker names and a million small dicts cost four times as much.
        self.topic_queue_table: dict[str, tuple[QueueData, ...]] = {}
        self.topic_queue_mapping_info_table: dict[str, dict[str, TopicQueueMappingInfo]] = {}  # static topics
        # (topic, broker name) -> why its last mapping was ignored: warn once per change, not every heartbeat
        self.ignored_mappings: dict[tuple[str, str], str] = {}
        self.write_wiped: set[str] = set()  # broker names routed without PERM_WRITE (mqadmin wipeWritePerm)

    # ---- registration -------------------------------------------------------------------------------------

    def brokers_heard_while_warming(self) -> frozenset[str] | None:
        """None once this name server is older than its warm-up; until then the broker names that registered
        with it since it started. A broker registers every registerNameServerPeriod, so a route may lack brokers
        that are alive but not yet heard from; one it lacks that was heard from really left (unregistered, or its
        queues moved)."""
        if self._clock() - self._started_ms >= self.warm_up_ms:
            return None
        with self._lock:
            return frozenset(self._heard)

    def register_broker(self, request: RegisterBrokerRequest) -> RegisterBrokerResult:
        """Apply a full or delta registration and refresh the heartbeat; a delta on a base version we do not
        hold changes nothing and answers ``need_full``; a full one older than what we hold changes nothing."""
        with self._lock:
            self._heard.add(request.broker_name)
            info = self.broker_live_table.get(request.broker_addr)
            refusal = self._delta_refusal(info, request)
            if refusal is not None:
                return self._need_full(request, refusal)
            if self._outdated_full(info, request):
                return RegisterBrokerResult()
            stale = self._stale_master_claim(request)
            if stale is not None:
                return RegisterBrokerResult(refused=True, remark=stale)
            if info is not None and not info.same_identity(request):  # a full registration takes the address
                self._remove_broker(info)
                log.info("broker_replaced addr=%s old_broker=%s old_id=%d", info.broker_addr, info.broker_name,
                         info.broker_id)
                info = None
            is_new = info is None
            if info is None:
                info = self._add_broker(request)
            if request.full:
                self._replace_topics(info, request.topic_configs, request.topic_queue_mapping_infos)
            else:
                self._apply_delta(info, request.topic_configs, request.deleted_topics,
                                  request.topic_queue_mapping_infos)
            info.data_version = request.data_version
            info.master_epoch = request.master_epoch
            info.heartbeat_timeout_ms = (request.heartbeat_timeout_ms
                                         or max(self.broker_expiry_ms, 3 * request.register_period_ms))
            info.last_update_ms = self._clock()
            info.last_update_timestamp = self._wall_clock()
            if request.full:  # deltas arrive every 30 s per broker: too many to log at INFO
                log.info("broker_registered cluster=%s broker=%s id=%d addr=%s new=%s topics=%d version=%s",
                         info.cluster_name, info.broker_name, info.broker_id, info.broker_addr, is_new,
                         len(info.topic_queue), _fmt(info.data_version))
            return RegisterBrokerResult()

    def unregister_broker(self, cluster_name: str, broker_name: str, broker_id: int, broker_addr: str) -> bool:
        """Remove a broker that is shutting down; False when no such broker is registered."""
        with self._lock:
            info = self.broker_live_table.get(broker_addr)
            if info is None or (info.cluster_name, info.broker_name, info.broker_id) != (
                    cluster_name, broker_name, broker_id):
                return False
            self._remove_broker(info)
            log.info("broker_unregistered cluster=%s broker=%s id=%d addr=%s", cluster_name, broker_name,
                     broker_id, broker_addr)
            return True

    def scan_not_active_brokers(self, now_ms: int | None = None) -> list[LiveBroker]:
        """Remove brokers whose last heartbeat is older than their timeout; returns them."""
        with self._lock:
            now = self._clock() if now_ms is None else now_ms
            expired = [info for info in self.broker_live_table.values()
                       if now - info.last_update_ms > info.heartbeat_timeout_ms]
            for info in expired:
                self._remove_broker(info)
                log.warning("broker_expired cluster=%s broker=%s id=%d addr=%s idle_ms=%d timeout_ms=%d",
                            info.cluster_name, info.broker_name, info.broker_id, info.broker_addr,
                            now - info.last_update_ms, info.heartbeat_timeout_ms)
            return [info.summary() for info in expired]

    # ---- queries and admin --------------------------------------------------------------------------------

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """The topic's route, or None when no live broker serves it."""
        with self._lock:
            queue_datas = self.topic_queue_table.get(topic, ())
            mappings = self.topic_queue_mapping_info_table.get(topic, {})
            if not queue_datas and not mappings:
                return None
            broker_names = sorted({qd.broker_name for qd in queue_datas} | mappings.keys())
            broker_datas = [self.broker_addr_table[name].copy() for name in broker_names
                            if name in self.broker_addr_table]
            routed = [dataclasses.replace(qd, perm=qd.perm & ~PERM_WRITE) if qd.broker_name in self.write_wiped
                      else qd for qd in queue_datas] if self.write_wiped else list(queue_datas)
            return TopicRouteData(routed, broker_datas, dict(mappings))

    def set_write_perm(self, broker_name: str, writeable: bool) -> int:
        """wipeWritePerm (False) / addWritePerm (True) of ``broker_name``: its queues are routed without (or
        again with) PERM_WRITE until the other call, whatever it registers meanwhile. Returns how many topics it
        serves here; -1 when no broker of that name is registered (nothing changes)."""
        with self._lock:
            if broker_name not in self.broker_addr_table:
                return -1
            if writeable:
                self.write_wiped.discard(broker_name)
            else:
                self.write_wiped.add(broker_name)
            count = sum(1 for qds in self.topic_queue_table.values() for qd in qds if qd.broker_name == broker_name)
        log.info("broker_write_perm broker=%s writeable=%s topics=%d", broker_name, writeable, count)
        return count

    def get_all_topic_list(self) -> list[str]:
        with self._lock:
            static_only = [t for t in self.topic_queue_mapping_info_table if t not in self.topic_queue_table]
            return [*self.topic_queue_table, *static_only]

    def get_broker_cluster_info(self) -> ClusterInfo:
        with self._lock:
            return ClusterInfo(
                broker_addr_table={name: data.copy() for name, data in self.broker_addr_table.items()},
                cluster_addr_table={cluster: sorted(names) for cluster, names in self.cluster_addr_table.items()},
                live_brokers=[info.summary() for info in self.broker_live_table.values()],
            )

    def delete_topic(self, topic: str, cluster_name: str | None = None,
                     broker_names: Collection[str] = ()) -> bool:
        """Forget ``topic`` on every broker (or only those of ``cluster_name``, and of those only ``broker_names``
        when given); False when none had it.

        An operator's delete, not the broker's own word: the broker may have taken the topic again since it deleted
        it (a create racing the delete), and its registration of that may already be here. The version held for a
        broker that had the topic is forgotten, so its next registration of changes is refused and it sends
        everything: what it holds comes back. Kept, a topic it held stayed out of its route for good."""
        with self._lock:
            removed = False
            for info in self.broker_live_table.values():
                if ((not cluster_name or info.cluster_name == cluster_name)
                        and (not broker_names or info.broker_name in broker_names)
                        and self._drop_topic(info, topic)):
                    info.data_version = DataVersion()
                    removed = True
            if removed:
                log.info("topic_deleted topic=%s cluster=%s brokers=%s", topic, cluster_name or "*",
                         ",".join(sorted(broker_names)) or "*")
            return removed

    def stats(self, sample_size: int = 1000) -> NamesrvStats:
        """Table sizes and a memory estimate: ``sys.getsizeof`` of the containers plus a sample of entries."""
        with self._lock:
            static_only = sum(1 for t in self.topic_queue_mapping_info_table if t not in self.topic_queue_table)
            topic_count = len(self.topic_queue_table) + static_only
            sample = list(islice(self.topic_queue_table.items(), sample_size))
            key_bytes = sum(sys.getsizeof(t) for t, _ in sample) / len(sample) if sample else 0.0
            tuple_bytes = sum(sys.getsizeof(v) for _, v in sample) / len(sample) if sample else 0.0
            total = (sys.getsizeof(self.topic_queue_table) + sys.getsizeof(self.topic_queue_mapping_info_table)
                     + (key_bytes + tuple_bytes) * len(self.topic_queue_table))
            for info in self.broker_live_table.values():
                total += sys.getsizeof(info.topic_queue) + sys.getsizeof(info.topic_queue_mapping)
                if not self._is_route_source(info):  # a source shares its topic strings with the index
                    total += key_bytes * len(info.topic_queue)
            return NamesrvStats(
                broker_count=len(self.broker_live_table),
                cluster_count=len(self.cluster_addr_table),
                topic_count=topic_count,
                topic_table_bytes=int(total),
                bytes_per_topic=int(total / topic_count) if topic_count else 0,
            )

    # ---- broker membership (lock held) --------------------------------------------------------------------

    def _delta_refusal(self, info: BrokerLiveInfo | None, request: RegisterBrokerRequest) -> str | None:
        """Why a delta cannot be applied (then the broker must send everything), or None."""
        if request.full:
            return None
        if info is None:
            return "broker not registered"
        if not info.same_identity(request):
            return f"{request.broker_addr} is registered as {info.broker_name}/{info.broker_id}"
        if request.base_version != info.data_version:
            return f"holding version {_fmt(info.data_version)}, delta based on {_fmt(request.base_version)}"
        return None

    def _outdated_full(self, info: BrokerLiveInfo | None, request: RegisterBrokerRequest) -> bool:
        """Whether ``request`` is a full registration older than the one held from the same broker run (same
        start time): one resent after an RPC timeout may be applied first, and the late original must not roll
        the route back (no delta would fix it until one was refused)."""
        if not request.full or info is None or not info.same_identity(request):
            return False
        held, sent = info.data_version, request.data_version
        if sent.state_version != held.state_version or sent.counter >= held.counter:
            return False
        log.warning("broker_registration_outdated broker=%s id=%d addr=%s version=%s held=%s: ignored",
                    request.broker_name, request.broker_id, request.broker_addr, _fmt(sent), _fmt(held))
        return True

    def _stale_master_claim(self, request: RegisterBrokerRequest) -> str | None:
        """Why a claim to be a group's master (id 0) is not taken: the registered master is of a newer epoch."""
        if request.broker_id != 0:
            return None
        holder_addr = self.broker_addr_table.get(request.broker_name, BrokerData("", "")).broker_addrs.get(0)
        holder = self.broker_live_table.get(holder_addr) if holder_addr is not None else None
        if holder is None or holder.broker_addr == request.broker_addr or holder.master_epoch <= request.master_epoch:
            return None
        log.warning("stale_master_refused broker=%s addr=%s epoch=%d master=%s master_epoch=%d",
                    request.broker_name, request.broker_addr, request.master_epoch, holder.broker_addr,
                    holder.master_epoch)
        return (f"{request.broker_addr} claims master of {request.broker_name} at epoch {request.master_epoch}; "
                f"{holder.broker_addr} is master at epoch {holder.master_epoch}")

    def _need_full(self, request: RegisterBrokerRequest, why: str) -> RegisterBrokerResult:
        log.info("broker_need_full broker=%s id=%d addr=%s reason=%r", request.broker_name, request.broker_id,
                 request.broker_addr, why)
        return RegisterBrokerResult(need_full=True, remark=f"send a full registration: {why}")

    def _add_broker(self, request: RegisterBrokerRequest) -> BrokerLiveInfo:
        superseded = self.broker_addr_table.get(request.broker_name, BrokerData("", "")).broker_addrs.get(
            request.broker_id)
        if superseded is not None:  # the same broker restarted on another address: the old one is gone
            self._remove_broker(self.broker_live_table[superseded])
            log.info("broker_superseded broker=%s id=%d old_addr=%s new_addr=%s", request.broker_name,
                     request.broker_id, superseded, request.broker_addr)
        broker_data = self._broker_data_in_cluster(request.cluster_name, request.broker_name)
        old_source = self._route_source(request.broker_name)
        info = BrokerLiveInfo(request.cluster_name, request.broker_name, request.broker_id, request.broker_addr,
                              self.broker_expiry_ms)
        self.broker_live_table[info.broker_addr] = info
        broker_data.broker_addrs[info.broker_id] = info.broker_addr
        if old_source is not None and self._is_route_source(info):
            self._unindex_broker(old_source)  # a returning master takes over; its topics are indexed as applied
        return info

    def _broker_data_in_cluster(self, cluster_name: str, broker_name: str) -> BrokerData:
        """The broker name's entry, created or moved so it belongs to ``cluster_name``."""
        broker_data = self.broker_addr_table.setdefault(broker_name, BrokerData(cluster_name, broker_name))
        if broker_data.cluster != cluster_name:  # reconfigured into another cluster: follow the newest claim
            self._discard_from_cluster(broker_data.cluster, broker_name)
            broker_data.cluster = cluster_name
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        return broker_data

    def _discard_from_cluster(self, cluster_name: str, broker_name: str) -> None:
        names = self.cluster_addr_table.get(cluster_name)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster_name]

    def _remove_broker(self, info: BrokerLiveInfo) -> None:
        was_source = self._is_route_source(info)
        if was_source:
            self._unindex_broker(info)
        del self.broker_live_table[info.broker_addr]
        broker_data = self.broker_addr_table[info.broker_name]
        if broker_data.broker_addrs.get(info.broker_id) == info.broker_addr:
            del broker_data.broker_addrs[info.broker_id]
        if not broker_data.broker_addrs:
            del self.broker_addr_table[info.broker_name]
            self._discard_from_cluster(broker_data.cluster, info.broker_name)
        elif was_source:
            successor = self._route_source(info.broker_name)
            if successor is not None:
                self._index_broker(successor)

    def _route_source(self, broker_name: str) -> BrokerLiveInfo | None:
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None or not broker_data.broker_addrs:
            return None
        return self.broker_live_table.get(broker_data.broker_addrs[min(broker_data.broker_addrs)])

    def _is_route_source(self, info: BrokerLiveInfo) -> bool:
        return self._route_source(info.broker_name) is info

    # ---- a broker's topics (lock held) --------------------------------------------------------------------

    def _replace_topics(self, info: BrokerLiveInfo, configs: Iterable[TopicConfig],
                        mappings: Mapping[str, TopicQueueMappingInfo]) -> None:
        indexed = self._is_route_source(info)
        old = info.topic_queue
        new: dict[str, QueueData] = {}
        for config in configs:
            queue_data = info.queue_data(config)
            new[config.topic_name] = queue_data
            if indexed and old.get(config.topic_name) is not queue_data:
                self._put_queue_data(config.topic_name, queue_data)
        if indexed:
            for topic in old:
                if topic not in new:
                    self._remove_queue_data(topic, info.broker_name)
        info.topic_queue = new
        old_mappings = info.topic_queue_mapping
        info.topic_queue_mapping = dict(mappings)
        if indexed:
            for topic in old_mappings:
                if topic not in mappings:
                    self._remove_mapping(topic, info.broker_name)
            for topic, mapping in mappings.items():
                self._put_mapping(topic, info.broker_name, mapping)

    def _apply_delta(self, info: BrokerLiveInfo, configs: Iterable[TopicConfig], deleted_topics: Iterable[str],
                     mappings: Mapping[str, TopicQueueMappingInfo]) -> None:
        indexed = self._is_route_source(info)
        for config in configs:
            queue_data = info.queue_data(config)
            if info.topic_queue.get(config.topic_name) is not queue_data:
                info.topic_queue[config.topic_name] = queue_data
                if indexed:
                    self._put_queue_data(config.topic_name, queue_data)
        for topic, mapping in mappings.items():
            info.topic_queue_mapping[topic] = mapping
            if indexed:
                self._put_mapping(topic, info.broker_name, mapping)
        for topic in deleted_topics:
            self._drop_topic(info, topic)

    def _drop_topic(self, info: BrokerLiveInfo, topic: str) -> bool:
        had_queues = info.topic_queue.pop(topic, None) is not None
        had_mapping = info.topic_queue_mapping.pop(topic, None) is not None
        if self._is_route_source(info):
            if had_queues:
                self._remove_queue_data(topic, info.broker_name)
            if had_mapping:
                self._remove_mapping(topic, info.broker_name)
        return had_queues or had_mapping

    # ---- the derived index (lock held) --------------------------------------------------------------------

    def _index_broker(self, info: BrokerLiveInfo) -> None:
        for topic, queue_data in info.topic_queue.items():
            self._put_queue_data(topic, queue_data)
        for topic, mapping in info.topic_queue_mapping.items():
            self._put_mapping(topic, info.broker_name, mapping)

    def _unindex_broker(self, info: BrokerLiveInfo) -> None:
        for topic in info.topic_queue:
            self._remove_queue_data(topic, info.broker_name)
        for topic in info.topic_queue_mapping:
            self._remove_mapping(topic, info.broker_name)

    def _put_queue_data(self, topic: str, queue_data: QueueData) -> None:
        current = self.topic_queue_table.get(topic)
        if current is None or (len(current) == 1 and current[0].broker_name == queue_data.broker_name):
            self.topic_queue_table[topic] = (queue_data,)
            return
        others = [qd for qd in current if qd.broker_name != queue_data.broker_name]
        others.append(queue_data)
        others.sort(key=_by_broker_name)
        self.topic_queue_table[topic] = tuple(others)

    def _remove_queue_data(self, topic: str, broker_name: str) -> None:
        current = self.topic_queue_table.get(topic)
        if current is None:
            return
        remaining = tuple(qd for qd in current if qd.broker_name != broker_name)
        if remaining:
            self.topic_queue_table[topic] = remaining
        else:
            del self.topic_queue_table[topic]

    def _put_mapping(self, topic: str, broker_name: str, mapping: TopicQueueMappingInfo) -> None:
        """Route by ``mapping`` unless it breaks a consistency rule (mapping_info_checks): then it is an
        intermediate or forged state, and the broker's previously accepted mapping (if any) keeps routing."""
        reason = registration_fault(mapping, broker_name, self.topic_queue_mapping_info_table.get(topic, {}))
        if reason is not None:
            self._ignore_mapping(topic, broker_name, reason)
            return
        self.ignored_mappings.pop((topic, broker_name), None)
        self.topic_queue_mapping_info_table.setdefault(topic, {})[broker_name] = mapping

    def _ignore_mapping(self, topic: str, broker_name: str, reason: str) -> None:
        if self.ignored_mappings.get((topic, broker_name)) == reason:
            return  # the broker re-sends the same mapping with every heartbeat: said already
        self.ignored_mappings[(topic, broker_name)] = reason
        log.warning("static_mapping_ignored topic=%s broker=%s reason=%r", topic, broker_name, reason)

    def _remove_mapping(self, topic: str, broker_name: str) -> None:
        self.ignored_mappings.pop((topic, broker_name), None)
        by_broker = self.topic_queue_mapping_info_table.get(topic)
        if by_broker is not None:
            by_broker.pop(broker_name, None)
            if not by_broker:
                del self.topic_queue_mapping_info_table[topic]


def _fmt(version: DataVersion | None) -> str:
    return "none" if version is None else f"{version.state_version}.{version.counter}"

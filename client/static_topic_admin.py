"""Static topics from the admin side: read what every broker holds, plan the change with
:mod:`common.statictopic.static_topic_plan`, and write it in the order that keeps every logic queue available.

Rules: ../shared/STATIC_TOPIC.md. Brokers are reached through a :class:`MappingTransport` (gRPC in production,
an in-memory fake in unit tests). The number of broker calls is constant per broker: one read each, one or two
writes each, plus one physical max read per moved logic queue.
"""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import grpc

from client.errors import MQClientError, partly_applied
from client.grpc_errors import business_error, rpc_error
from common.kv_shard import KV_TOPIC
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.mapping_checks import CHANGED_MEANWHILE, MappingError, check_cluster
from common.statictopic.mapping_codec import detail_from_proto, detail_to_proto
from common.statictopic.queue_status import item_status, logic_range, reusable
from common.statictopic.static_topic_plan import (
    BrokerTopicState,
    BrokerUpdate,
    RemapPlan,
    current_view,
    interrupted,
    plan_create_or_extend,
    plan_moves,
    plan_remap,
)
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import MAX_QUEUE_NUMS
from common.topic_config_codec import topic_config_from_proto, topic_config_to_proto
from common.topic_validator import InvalidTopicError, may_be_static, validate_topic
from proto import broker_pb2, common_pb2

if TYPE_CHECKING:
    from client.admin import Admin


def now_ms() -> int:
    return int(time.time() * 1000)


# -- results ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LogicQueueLeader:
    logic_id: int
    broker_name: str
    queue_id: int  # physical queue of the leader item
    gen: int
    logic_offset: int


@dataclass(slots=True)
class StaticTopicUpdate:
    """What updateStaticTopic wrote: every broker's new detail (no-target brokers hold empty ones)."""

    topic: str
    total_queues: int
    epoch: int
    details: dict[str, TopicQueueMappingDetail]
    created: list[int]  # the new logic queue ids

    def leaders(self) -> list[LogicQueueLeader]:
        return leaders_of(self.details)


@dataclass(frozen=True, slots=True)
class MovedLogicQueue:
    logic_id: int
    from_broker: str
    to_broker: str
    queue_id: int  # the new physical queue on ``to_broker``
    gen: int
    logic_offset: int  # where the new item starts in logic terms (after the block jump)
    old_end_offset: int  # the old item's physical end
    reused: bool = False  # the new item reuses an expired physical queue of the chain (seed 004)


@dataclass(slots=True)
class StaticTopicRemap:
    topic: str
    total_queues: int
    epoch: int
    moved: list[MovedLogicQueue]
    details: dict[str, TopicQueueMappingDetail]

    def leaders(self) -> list[LogicQueueLeader]:
        return leaders_of(self.details)


@dataclass(frozen=True, slots=True)
class PhysicalQueueStats:
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class MappingItemStatus:
    gen: int
    broker_name: str
    queue_id: int
    logic_offset: int
    start_offset: int
    end_offset: int
    time_of_start: int
    time_of_end: int
    leader: bool
    min_offset: int | None  # physical, from the item's broker; None when it could not be read
    max_offset: int | None
    last_update_timestamp: int | None
    status: str  # Normal, ReadOnly, Expired (seed 004), or Unknown when the item's broker did not answer
    logic_first: int | None  # the logic offsets the item covers, inclusive; None: open (or, both, expired)
    logic_last: int | None


@dataclass(slots=True)
class LogicQueueStatus:
    logic_id: int
    leader_broker: str
    leader_queue_id: int
    min_offset: int | None  # logic terms: the earliest decided item's min
    max_offset: int | None  # logic terms: the latest decided item's max
    items: list[MappingItemStatus]


@dataclass(slots=True)
class StaticTopicStatus:
    topic: str
    total_queues: int
    epoch: int  # the highest epoch any broker holds
    broker_epochs: dict[str, int]  # per broker holding a detail: differing epochs mean an interrupted change
    queues: list[LogicQueueStatus] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # broker -> why it did not answer
    missing: list[int] = field(default_factory=list)  # logic queues no answering broker holds a chain for


def leaders_of(details: dict[str, TopicQueueMappingDetail]) -> list[LogicQueueLeader]:
    out = {}
    for bname, d in details.items():
        for gid, items in d.hosted_queues.items():
            leader = items[-1]
            if leader.bname == bname:
                out[gid] = LogicQueueLeader(gid, bname, leader.queue_id, leader.gen, leader.logic_offset)
    return [out[g] for g in sorted(out)]


# -- talking to brokers -------------------------------------------------------------------------------------
class MappingTransport(Protocol):
    """What the static-topic admin needs from the cluster."""

    def clusters(self) -> dict[str, list[str]]:
        """Cluster name -> names of its brokers that have a live master."""

    def mapping_holders(self, topic: str) -> set[str]:
        """Brokers the name servers know to hold a detail for ``topic`` (empty when the topic is unknown)."""

    def read(self, bname: str, topic: str) -> BrokerTopicState:
        """GetTopicQueueMapping on ``bname``'s master."""

    def write(self, bname: str, update: BrokerUpdate, expected_epoch: int | None = None) -> None:
        """UpdateTopicQueueMapping (detail, and the config if any) on ``bname``'s master; with ``expected_epoch``
        only while it still holds the detail of that epoch (NO_DETAIL: none)."""

    def physical_max(self, bname: str, topic: str, queue_id: int) -> int:
        """GetMaxOffset of physical queue ``queue_id`` on ``bname`` (addressing PHYSICAL)."""

    def queue_stats(self, bname: str, topic: str) -> dict[int, PhysicalQueueStats]:
        """GetTopicStatsInfo on ``bname``: per physical queue min, max, last update."""

    def all_details(self, bname: str) -> dict[str, TopicQueueMappingDetail]:
        """GetAllTopicQueueMapping on ``bname``: its detail of every static topic."""

    def topic_offsets(self, bname: str, topic: str) -> dict[int, dict[str, int]]:
        """Physical queue id -> group -> consumer offset stored on ``bname`` for ``topic``."""

    def commit_offset(self, bname: str, topic: str, queue_id: int, group: str, offset: int) -> None:
        """UpdateConsumerOffset of physical queue ``queue_id`` on ``bname`` (addressing PHYSICAL)."""


class GrpcMappingTransport:
    """The real cluster, through an :class:`client.admin.Admin`'s client instance."""

    def __init__(self, client) -> None:  # client: client.client_instance.ClientInstance
        self.client = client
        self._addrs: dict[str, str] = {}

    def clusters(self) -> dict[str, list[str]]:
        info = self.client.call_namesrv("cluster info", lambda s: s.GetBrokerClusterInfo(
            common_pb2.Empty(), timeout=self.client.rpc_timeout_s))
        self._addrs = {name: d.broker_addrs[0] for name, d in info.broker_addr_table.items() if 0 in d.broker_addrs}
        return {cluster: sorted(n for n in names.broker_names if n in self._addrs)
                for cluster, names in info.cluster_addr_table.items()}

    def mapping_holders(self, topic: str) -> set[str]:
        try:
            route = self.client.route(topic, refresh=True)
        except MQClientError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                return set()
            raise
        return set(route.topic_queue_mapping_by_broker)

    def _addr(self, bname: str) -> str:
        if bname not in self._addrs:
            self.clusters()
        addr = self._addrs.get(bname)
        if addr is None:
            raise MQClientError(f"broker {bname} is not registered with a live master")
        return addr

    def _call(self, what: str, bname: str, method: str, request):
        addr = self._addr(bname)
        try:
            response = getattr(self.client.broker(addr), method)(request, timeout=self.client.rpc_timeout_s)
        except grpc.RpcError as exc:
            raise rpc_error(f"{what} on broker {bname}", addr, exc) from None
        return addr, response

    def read(self, bname: str, topic: str) -> BrokerTopicState:
        addr, r = self._call(f"read the mapping of {topic}", bname, "GetTopicQueueMapping",
                             broker_pb2.TopicRequest(topic=topic))
        if r.code != ResponseCode.SUCCESS:
            raise business_error(f"read the mapping of {topic} on broker {bname}", addr, r.code, r.remark)
        return BrokerTopicState(bname, detail_from_proto(r.detail) if r.HasField("detail") else None,
                                topic_config_from_proto(r.config) if r.HasField("config") else None)

    def write(self, bname: str, update: BrokerUpdate, expected_epoch: int | None = None) -> None:
        request = broker_pb2.UpdateTopicQueueMappingRequest(detail=detail_to_proto(update.detail),
                                                            expected_epoch=expected_epoch)
        if update.config is not None:
            request.config.CopyFrom(topic_config_to_proto(update.config))
        addr, r = self._call(f"update the mapping of {update.detail.topic}", bname, "UpdateTopicQueueMapping",
                             request)
        if r.code != ResponseCode.SUCCESS:
            raise business_error(f"update the mapping of {update.detail.topic} on broker {bname}", addr, r.code,
                                 r.remark)

    def physical_max(self, bname: str, topic: str, queue_id: int) -> int:
        addr, r = self._call(f"max offset of {topic}/{queue_id}", bname, "GetMaxOffset",
                             broker_pb2.QueueRequest(topic=topic, queue_id=queue_id, addressing=broker_pb2.PHYSICAL))
        if r.code != ResponseCode.SUCCESS:
            raise business_error(f"max offset of {topic}/{queue_id} on broker {bname}", addr, r.code, r.remark)
        return r.offset

    def queue_stats(self, bname: str, topic: str) -> dict[int, PhysicalQueueStats]:
        addr, r = self._call(f"status of {topic}", bname, "GetTopicStatsInfo", broker_pb2.TopicRequest(topic=topic))
        if r.code == ResponseCode.TOPIC_NOT_EXIST:
            return {}
        if r.code != ResponseCode.SUCCESS:
            raise business_error(f"status of {topic} on broker {bname}", addr, r.code, r.remark)
        return {q.queue_id: PhysicalQueueStats(q.min_offset, q.max_offset, q.last_update_timestamp) for q in r.queues}


    def topic_offsets(self, bname: str, topic: str) -> dict[int, dict[str, int]]:
        _addr, r = self._call("read consumer offsets", bname, "GetAllConsumerOffsets", common_pb2.Empty())
        out: dict[int, dict[str, int]] = {}
        for o in r.offsets:
            if o.topic == topic:
                out.setdefault(o.queue_id, {})[o.group] = o.offset
        return out

    def commit_offset(self, bname: str, topic: str, queue_id: int, group: str, offset: int) -> None:
        addr, r = self._call(f"commit {group}'s offset on {topic}/{queue_id}", bname, "UpdateConsumerOffset",
                             broker_pb2.UpdateConsumerOffsetRequest(consumer_group=group, topic=topic,
                                                                    queue_id=queue_id, commit_offset=offset,
                                                                    addressing=broker_pb2.PHYSICAL))
        if r.code != ResponseCode.SUCCESS:
            raise business_error(f"commit {group}'s offset on {topic}/{queue_id} on broker {bname}", addr, r.code,
                                 r.remark)

    def all_details(self, bname: str) -> dict[str, TopicQueueMappingDetail]:
        _addr, r = self._call("read every static-topic mapping", bname, "GetAllTopicQueueMapping", common_pb2.Empty())
        return {d.topic: d for d in map(detail_from_proto, r.details)}


# -- the admin ----------------------------------------------------------------------------------------------
class StaticTopicAdmin:
    def __init__(self, transport: "MappingTransport | Admin", clock: Callable[[], int] = now_ms) -> None:
        """``transport``: how brokers are reached; an :class:`client.admin.Admin` means through its gRPC client."""
        from client.admin import Admin  # not at the top: client.admin imports this module

        self.transport: MappingTransport = (GrpcMappingTransport(transport.client) if isinstance(transport, Admin)
                                            else transport)
        self.clock = clock

    # -- reading ------------------------------------------------------------------------------------------
    def _targets(self, clusters: dict[str, list[str]], cluster: str | None,
                 broker_names: list[str] | None) -> list[str]:
        if (cluster is None) == (broker_names is None):
            raise MQClientError("give exactly one of a cluster or a broker list")
        if cluster is not None:
            if cluster not in clusters:
                raise MQClientError(f"cluster {cluster} does not exist (known: {', '.join(sorted(clusters))})")
            if not clusters[cluster]:
                raise MQClientError(f"cluster {cluster} has no broker with a live master")
            return list(clusters[cluster])
        known = {b for names in clusters.values() for b in names}
        names = sorted(set(broker_names or []))
        if not names:
            raise MQClientError("no target broker")
        for name in names:
            if name not in known:
                raise MQClientError(f"broker {name} is not registered with a live master")
        return names

    def read_states(self, topic: str, brokers: list[str] | None = None,
                    cluster: str | None = None) -> dict[str, BrokerTopicState]:
        """What every broker concerned by a change on ``brokers`` or ``cluster`` holds (see :meth:`read_targets`)."""
        return self.read_targets(topic, cluster, brokers)[1]

    def read_targets(self, topic: str, cluster: str | None = None,
                     broker_names: list[str] | None = None) -> tuple[list[str], dict[str, BrokerTopicState]]:
        """(targets, state of every broker concerned): the targets, every broker the name servers know to hold
        a detail, every broker an item names, and every other master of those brokers' clusters (they hold
        empty details: every broker of a cluster taking part knows the topic). One read per broker."""
        clusters = self.transport.clusters()
        targets = self._targets(clusters, cluster, broker_names)
        cluster_of = {b: c for c, names in clusters.items() for b in names}
        scope = set(targets) | (self.transport.mapping_holders(topic) & set(cluster_of))
        states: dict[str, BrokerTopicState] = {}
        while pending := sorted(scope - set(states)):
            for bname in pending:
                state = self.transport.read(bname, topic)
                if state.detail is not None and state.detail.bname != bname:
                    raise MQClientError(f"broker {bname}: holds the mapping of broker {state.detail.bname} for "
                                        f"topic {topic}: repair it before changing the topic")
                states[bname] = state
                if bname in targets or state.detail is not None:
                    scope |= set(clusters[cluster_of[bname]])
                if state.detail is not None:  # chains may name brokers elsewhere
                    scope |= {i.bname for items in state.detail.hosted_queues.values() for i in items} & set(
                        cluster_of)
        return targets, {b: states[b] for b in sorted(states)}

    # -- create or extend ---------------------------------------------------------------------------------
    def update_static_topic(self, topic: str, queue_num: int, cluster: str | None = None,
                            brokers: list[str] | None = None) -> StaticTopicUpdate:
        """Create ``topic`` with ``queue_num`` logic queues, or extend it to that many. Every check runs before
        the first write; a refusal names the broker and the rule."""
        if queue_num <= 0:
            raise MQClientError(f"the number of logic queues must be positive, got {queue_num}")
        try:
            validate_topic(topic)
        except InvalidTopicError as exc:
            raise MQClientError(f"static topic not created: {exc}") from None
        if not may_be_static(topic):
            raise MQClientError(f"topic {topic} is a system topic (TBW102, the transaction topics, rmq_sys_*, %RETRY%* "
                                "and %DLQ%*): a static topic needs a name of its own")
        targets, states = self.read_targets(topic, cluster, brokers)
        if queue_num > MAX_QUEUE_NUMS * len(states):  # before planning: a plan holds an item per logic queue
            raise MQClientError(f"static topic {topic} not changed: {queue_num} logic queues do not fit on the "
                                f"{len(states)} broker(s) concerned, {MAX_QUEUE_NUMS} queues at most each")
        old_total = max((s.detail.total_queues for s in states.values() if s.detail is not None), default=0)
        try:
            updates = plan_create_or_extend(topic, queue_num, states, targets, self.clock())
            check_cluster({u.bname: u.detail for u in updates}, {u.bname: u.config for u in updates})
        except MappingError as exc:
            raise MQClientError(f"static topic {topic} not changed: {exc}") from None
        self.write_updates(updates)
        details = {u.bname: u.detail for u in updates}
        return StaticTopicUpdate(topic, queue_num, updates[0].detail.epoch, details,
                                 list(range(old_total, queue_num)))

    # -- remap ----------------------------------------------------------------------------------------------
    def remap_static_topic(self, topic: str, cluster: str | None = None,
                           brokers: list[str] | None = None) -> StaticTopicRemap:
        """Move logic queues onto the targets (STATIC_TOPIC.md, "Remap"), in the order that keeps one complete
        copy of every chain at all times. A run that failed part way is completed by running it again: the
        plan finishes undecided items first."""
        targets, states = self.read_targets(topic, cluster, brokers)
        if not any(s.detail is not None for s in states.values()):
            raise MQClientError(f"static topic {topic} does not exist: no broker holds a mapping for it")
        plan = self.plan_remap(topic, states, targets)
        self.carry_offsets(plan)
        self.apply_remap(plan)
        return self.remap_result(plan)

    def plan_remap(self, topic: str, states: dict[str, BrokerTopicState], targets: list[str]) -> RemapPlan:
        """The remap plan, checked as a whole (every broker's resulting detail) before anything is written."""
        expired = self.expired_queues(topic, states, set(targets))
        return self.checked_plan(topic, lambda: plan_remap(topic, states, targets, self.clock(), expired))

    @staticmethod
    def checked_plan(topic: str, make: Callable[[], RemapPlan]) -> RemapPlan:
        try:
            plan = make()
            check_cluster({b: u.detail for b, u in plan.full.items()}, {b: u.config for b, u in plan.full.items()})
        except MappingError as exc:
            raise MQClientError(f"static topic {topic} not remapped: {exc}") from None
        return plan

    def expired_queues(self, topic: str, states: dict[str, BrokerTopicState],
                       candidates: set[str]) -> dict[tuple[str, int], int]:
        """(broker, physical queue) -> physical max of the Expired older items on ``candidates`` (the brokers a
        logic queue may move to): a move there reuses them. One stats read per broker holding such an item."""
        if topic == KV_TOPIC:
            return {}  # shards keep their state: never expired
        older = [i for s in states.values() if s.detail is not None for items in s.detail.hosted_queues.values()
                 for i in items[:-1] if i.bname in candidates and i.end_offset_decided()]
        stats = {b: self.transport.queue_stats(b, topic) for b in sorted({i.bname for i in older})}
        out = {}
        for item in older:
            q = stats[item.bname].get(item.queue_id)
            if q is not None and reusable(item, q.min_offset):
                out[(item.bname, item.queue_id)] = q.max_offset
        return out

    # -- one logic queue -----------------------------------------------------------------------------------
    def migrate_logical_queue(self, topic: str, logic_id: int, broker: str) -> StaticTopicRemap:
        """Move logic queue ``logic_id``'s leadership onto ``broker`` (remap's write order), reusing an expired
        physical queue of its chain there. An interrupted move of the topic is finished first."""
        _targets, states = self.read_targets(topic, None, [broker])
        if not any(s.detail is not None for s in states.values()):
            raise MQClientError(f"static topic {topic} does not exist: no broker holds a mapping for it")
        _epoch, total, chains = self.current_view_of(topic, states)
        if not 0 <= logic_id < total:
            raise MQClientError(f"logic queue {logic_id} does not exist: topic {topic} has logic queues "
                                f"0..{total - 1}")
        finished = None
        if interrupted(s.detail for s in states.values() if s.detail is not None):
            # An interrupted change is finished first, and the brokers read again: a move planned over an undecided
            # link was dropped (the queue stayed undecided, taking sends nobody could read), and a new leader not
            # every broker had heard of looked like the queue's ("nothing to do").
            finished = self.move(topic, states, {})
            _targets, states = self.read_targets(topic, None, [broker])
            _epoch, total, chains = self.current_view_of(topic, states)
        if chains[logic_id][-1].bname == broker:
            if finished is not None:
                return finished
            raise MQClientError(f"nothing to do: broker {broker} already leads logic queue {logic_id} of {topic}")
        return self.move(topic, states, {logic_id: broker})

    @staticmethod
    def current_view_of(topic: str, states: dict[str, BrokerTopicState]
                        ) -> tuple[int, int, dict[int, list[LogicQueueMappingItem]]]:
        """(highest epoch, total, chains) of what the brokers hold (see ``current_view``)."""
        try:
            return current_view(states)
        except MappingError as exc:
            raise MQClientError(f"static topic {topic} not changed: {exc}") from None

    def move(self, topic: str, states: dict[str, BrokerTopicState], moves: dict[int, str]) -> StaticTopicRemap:
        """Apply ``moves`` (logic id -> new leader) to a topic whose brokers' states were just read."""
        expired = self.expired_queues(topic, states, set(moves.values()))
        plan = self.checked_plan(topic, lambda: plan_moves(topic, states, moves, self.clock(), expired))
        self.carry_offsets(plan)
        self.apply_remap(plan)
        return self.remap_result(plan)

    def remap_result(self, plan: RemapPlan) -> StaticTopicRemap:
        moved = []
        for m in plan.moved:
            old, new = plan.chains[m.global_id][-2:]
            moved.append(MovedLogicQueue(m.global_id, m.old_leader, m.new_leader, new.queue_id, new.gen,
                                         new.logic_offset, old.end_offset, m.reused))
        total = next(iter(plan.full.values())).detail.total_queues
        return StaticTopicRemap(plan.topic, total, plan.epoch, moved, {b: u.detail for b, u in plan.full.items()})

    def carry_offsets(self, plan: RemapPlan) -> None:
        """Before a move reuses an expired link's physical queue (its broker then forgets the offsets stored
        there), every group with an offset on it and none on the link after it gets one at that link's start:
        the same position (the expired link holds nothing readable)."""
        read: dict[str, dict[int, dict[str, int]]] = {}  # one read per broker for the whole plan

        def offsets(item: LogicQueueMappingItem) -> dict[str, int]:
            if item.bname not in read:
                read[item.bname] = self.transport.topic_offsets(item.bname, plan.topic)
            return read[item.bname].get(item.queue_id, {})

        for m in plan.moved:
            if m.replaced is None:
                continue
            gone, successor = m.replaced
            for group in sorted(set(offsets(gone)) - set(offsets(successor))):
                self.transport.commit_offset(successor.bname, plan.topic, successor.queue_id, group,
                                             successor.start_offset)

    def write_updates(self, updates: Iterable[BrokerUpdate], written: dict[str, int] | None = None) -> None:
        """UpdateTopicQueueMapping for each, in order; the first refusal stops. ``written``: the epoch this run
        last wrote to each broker (updated here), so every write is conditional on what the broker should hold."""
        written = {} if written is None else written
        updates = list(updates)
        for i, u in enumerate(updates):
            try:
                self._write(u, written)
            except MQClientError as exc:  # said with where it was written: the operator's next step depends on it
                raise partly_applied(exc, [w.bname for w in updates[:i]],
                                     [w.bname for w in updates[i + 1:]]) from None

    def _write(self, update: BrokerUpdate, written: dict[str, int]) -> None:
        """One write, refused by the broker unless it still holds what the plan was made from, or what this run
        wrote there last: two admins changing the topic at once must not overwrite each other's links."""
        expected = written.get(update.bname, update.expected_epoch)
        try:
            self.transport.write(update.bname, update, expected)
        except MQClientError as exc:
            if CHANGED_MEANWHILE not in str(exc):
                raise
            raise MQClientError(
                f"static topic {update.detail.topic}: another change of the topic came in between (another admin?), "
                f"refused by broker {update.bname}: run the command again, it reads the brokers afresh and plans "
                f"from what they hold now ({exc})", exc.code) from None
        written[update.bname] = update.detail.epoch

    def apply_remap(self, plan: RemapPlan) -> None:
        """Steps 1-4 of STATIC_TOPIC.md "Remap"."""
        written: dict[str, int] = {}  # a broker written twice expects its own first write the second time
        # 1. the new chains to the new leaders: writable now, logic offset undecided
        self.write_updates(plan.gained, written)
        # 2. the old leaders: fenced, they answer NOT_LEADER_FOR_QUEUE from now on
        old_leaders = sorted({m.old_leader for m in plan.moved})
        for bname in old_leaders:
            self._write(plan.full[bname], written)
        # 3. each old leader's physical max decides where the new item starts (after the block jump)
        for m in plan.moved:
            old = plan.chains[m.global_id][-2]
            plan.decide(m.global_id, self.transport.physical_max(old.bname, plan.topic, old.queue_id), self.clock())
        # 4. the decided chains to the new leaders, then to every other broker (the epoch bump; old leaders
        #    get the decided copy of the chains they lost at the same epoch)
        new_leaders = sorted({m.new_leader for m in plan.moved})
        for bname in new_leaders:
            self._write(plan.full[bname], written)
        for bname in sorted(plan.full):
            if bname not in new_leaders:
                self._write(plan.full[bname], written)

    # -- status ---------------------------------------------------------------------------------------------
    def static_topic_status(self, topic: str) -> StaticTopicStatus | None:
        """Per logic queue its chain with each item's physical min/max/last update; None for a topic no broker
        holds a mapping for (a normal topic)."""
        clusters = self.transport.clusters()
        states: dict[str, BrokerTopicState] = {}
        details: dict[str, TopicQueueMappingDetail] = {}  # the states' details
        unreachable: dict[str, str] = {}
        for bname in sorted({b for names in clusters.values() for b in names}):
            try:
                state = self.transport.read(bname, topic)
            except MQClientError as exc:  # show what the others hold, and say who did not answer
                unreachable[bname] = str(exc)
                continue
            if state.detail is not None:
                states[bname] = state
                details[bname] = state.detail
        if not states:
            if unreachable:
                raise MQClientError(next(iter(unreachable.values())))
            return None
        totals = {d.total_queues for d in details.values()}
        total = max(totals)
        epoch = max(d.epoch for d in details.values())
        chains = best_chains(states)
        stats: dict[str, dict[int, PhysicalQueueStats]] = {}
        for bname in sorted({i.bname for items in chains.values() for i in items} - set(unreachable)):
            try:
                stats[bname] = self.transport.queue_stats(bname, topic)
            except MQClientError as exc:
                unreachable[bname] = str(exc)
        status = StaticTopicStatus(topic, total, epoch, {b: d.epoch for b, d in details.items()},
                                   unreachable=unreachable, missing=sorted(set(range(total)) - set(chains)))
        for gid in sorted(chains):
            status.queues.append(_queue_status(topic, gid, chains[gid], stats))
        return status


def best_chains(states: dict[str, BrokerTopicState]) -> dict[int, list[LogicQueueMappingItem]]:
    """Per logic queue the chain of the detail with the highest epoch holding it, preferring the leader's own
    copy (as :func:`current_view`, but showing what is there when a broker is missing)."""
    chosen: dict[int, tuple[tuple[int, bool], list[LogicQueueMappingItem]]] = {}
    for s in states.values():
        d = s.detail
        assert d is not None
        for gid, items in d.hosted_queues.items():
            rank = (d.epoch, items[-1].bname == d.bname)
            if gid not in chosen or rank > chosen[gid][0]:
                chosen[gid] = (rank, items)
    return {gid: items for gid, (_rank, items) in sorted(chosen.items())}


def _queue_status(topic: str, gid: int, items: list[LogicQueueMappingItem],
                  stats: dict[str, dict[int, PhysicalQueueStats]]) -> LogicQueueStatus:
    rows = []
    for i, item in enumerate(items):
        s = stats.get(item.bname, {}).get(item.queue_id)
        is_leader = i == len(items) - 1
        status = item_status(item, is_leader, s.min_offset if s else None, keeps_state=topic == KV_TOPIC)
        logic_first, logic_last = logic_range(item, status)
        rows.append(MappingItemStatus(item.gen, item.bname, item.queue_id, item.logic_offset, item.start_offset,
                                      item.end_offset, item.time_of_start, item.time_of_end, is_leader,
                                      s.min_offset if s else None, s.max_offset if s else None,
                                      s.last_update_timestamp if s else None, status, logic_first, logic_last))
    decided = [(item, row) for item, row in zip(items, rows, strict=True) if item.logic_offset_decided()]
    logic_min = logic_max = None
    if decided:
        first, first_row = decided[0]
        last, last_row = decided[-1]
        if first_row.min_offset is not None:
            logic_min = first.logic_loosely(first_row.min_offset)
        if last_row.max_offset is not None:
            logic_max = last.logic_loosely(last_row.max_offset)
    leader = items[-1]
    return LogicQueueStatus(gid, leader.bname, leader.queue_id, logic_min, logic_max, rows)

"""Logic queues across every static topic of a cluster (seed 004's operator side): drain a broker, rebalance
leadership onto a new one, and say when a drained broker can be removed.

Each topic is changed by :meth:`StaticTopicAdmin.move` (remap's write order, reusing expired physical queues), one
topic after another. A run that stops part way is resumed by running it again: a topic with an unfinished move
is finished first, and queues already moved are not chosen again.
"""

import logging
from collections import Counter
from dataclasses import dataclass, field

from client.errors import MQClientError
from client.static_topic_admin import MovedLogicQueue, StaticTopicAdmin, leaders_of
from common.kv_shard import KV_TOPIC
from common.statictopic.leader_balance import drain_moves, rebalance_moves
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.queue_status import EXPIRED, item_status
from common.statictopic.static_topic_plan import interrupted
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class TopicMove:
    topic: str
    move: MovedLogicQueue


@dataclass(slots=True)
class LogicQueueMoves:
    """What drainBroker or rebalanceLogicalQueues moved."""

    moves: list[TopicMove] = field(default_factory=list)
    topics: int = 0  # static topics changed


@dataclass(frozen=True, slots=True)
class HeldItem:
    """An older item on the drained broker that a chain still names."""

    topic: str
    logic_id: int
    queue_id: int
    status: str  # ReadOnly (data left), Expired (the leader's clean service forgets it soon), Unknown
    min_offset: int | None
    max_offset: int | None
    expires_after_ms: int | None  # when its data is past fileReservedTime; None: never (KV state) or unknown


@dataclass(slots=True)
class DrainStatus:
    broker: str
    leads: dict[str, list[int]]  # topic -> logic queues the broker still leads
    held: list[HeldItem]
    file_reserved_hours: float | None
    # Delayed messages the broker's timer still holds: delivered where their topic's queue is now, lost if the broker
    # goes first (the static topics review: drainStatus said "can be removed" over 10 acknowledged ones).
    timer_pending: int = 0

    @property
    def removable(self) -> bool:
        return not self.leads and not self.held and not self.timer_pending


class LogicalQueueAdmin:
    def __init__(self, static_topics: StaticTopicAdmin) -> None:
        self.static_topics = static_topics
        self.transport = static_topics.transport

    def _cluster_of(self, broker: str) -> tuple[str, list[str]]:
        for cluster, names in self.transport.clusters().items():
            if broker in names:
                return cluster, names
        raise MQClientError(f"broker {broker} is not registered with a live master")

    def _all_details(self, brokers: list[str]) -> dict[str, dict[str, TopicQueueMappingDetail]]:
        return {b: self.transport.all_details(b) for b in brokers}

    # -- drainBroker ---------------------------------------------------------------------------------------
    def drain_broker(self, broker: str) -> LogicQueueMoves:
        """Move every logic queue ``broker`` leads, over all static topics (the KV store's shards too), onto the
        other masters of its cluster: only those queues move, each topic's leaders stay balanced."""
        cluster, members = self._cluster_of(broker)
        targets = [b for b in members if b != broker]
        if not targets:
            raise MQClientError(f"broker {broker} is the only master of cluster {cluster}: nowhere to drain it to")
        details = self._all_details(members)
        global_load = _led_counts(details)
        result = LogicQueueMoves()
        for topic in sorted({t for t, d in details[broker].items() if d.led_queues()} | _unfinished(details)):
            while True:  # twice when an interrupted move onto ``broker`` must be finished before it moves away
                targets_now, states = self.static_topics.read_targets(topic, cluster=cluster)
                _epoch, _total, chains = self.static_topics.current_view_of(topic, states)
                leaders = {g: items[-1].bname for g, items in chains.items() if items[-1].logic_offset_decided()}
                moves = drain_moves(leaders, broker, [b for b in targets_now if b != broker], global_load)
                self._apply(topic, states, moves, result)
                if not any(items[-1].bname == broker and not items[-1].logic_offset_decided()
                           for items in chains.values()):
                    break
        log.info("broker_drained broker=%s topics=%d moved=%d", broker, result.topics, len(result.moves))
        return result

    # -- rebalanceLogicalQueues ----------------------------------------------------------------------------
    def rebalance(self, cluster: str, exclude: list[str] | None = None) -> LogicQueueMoves:
        """Spread every static topic's leaders over the masters of ``cluster`` (but ``exclude``, e.g. a broker
        being drained) within one of each other, with the fewest moves: a new broker takes its share."""
        clusters = self.transport.clusters()
        if cluster not in clusters:
            raise MQClientError(f"cluster {cluster} does not exist (known: {', '.join(sorted(clusters))})")
        members = clusters[cluster]
        unknown = sorted(set(exclude or []) - set(members))
        if unknown:
            raise MQClientError(f"brokers {unknown} are not masters of cluster {cluster}")
        targets = [b for b in members if b not in set(exclude or [])]
        if not targets:
            raise MQClientError(f"cluster {cluster} has no broker left to lead logic queues")
        details = self._all_details(members)
        result = LogicQueueMoves()
        unfinished = _unfinished(details)
        if unfinished:  # interrupted moves finished first, then planned over: they count where they end
            for topic in sorted(unfinished):
                _targets, states = self.static_topics.read_targets(topic, cluster=cluster)
                self._apply(topic, states, {}, result)
            details = self._all_details(members)
        global_load = _led_counts(details)
        for topic, leaders in sorted(_decided_leaders(details).items()):
            # chosen from the details read above: only topics that change are read again, broker by broker
            moves = rebalance_moves(leaders, targets, set(members), global_load)
            if moves:
                _targets, states = self.static_topics.read_targets(topic, cluster=cluster)
                self._apply(topic, states, moves, result)
        log.info("logic_queues_rebalanced cluster=%s topics=%d moved=%d", cluster, result.topics, len(result.moves))
        return result

    def _apply(self, topic: str, states, moves: dict[int, str], result: LogicQueueMoves) -> None:
        remap = self.static_topics.move(topic, states, moves)
        result.topics += 1
        result.moves += [TopicMove(topic, m) for m in remap.moved]

    # -- drainStatus ---------------------------------------------------------------------------------------
    def drain_status(self, broker: str, file_reserved_hours: float | None) -> DrainStatus:
        """What still keeps ``broker`` from being removed: logic queues it leads, and older items on it that
        a chain names (with readable data, and when that data passes ``file_reserved_hours``)."""
        _cluster, members = self._cluster_of(broker)
        details = self._all_details(members)
        leads = {t: sorted(d.led_queues()) for t, d in details[broker].items() if d.led_queues()}
        # topic -> (logic id, physical queue) -> the item on ``broker`` some chain names
        named: dict[str, dict[tuple[int, int], LogicQueueMappingItem]] = {}
        for per_topic in details.values():
            for topic, d in per_topic.items():
                for gid, items in d.hosted_queues.items():  # leaders' copies, and ones a move has not trimmed yet
                    named.setdefault(topic, {}).update(
                        ((gid, i.queue_id), i) for i in items if i.bname == broker and i is not items[-1])
        held = []
        for topic, items_there in sorted(named.items()):
            stats = self.transport.queue_stats(broker, topic) if items_there else {}
            for (gid, queue_id), item in sorted(items_there.items()):
                q = stats.get(queue_id)
                status = item_status(item, False, q.min_offset if q else None, keeps_state=topic == KV_TOPIC)
                expires = None
                if q is not None and topic != KV_TOPIC and status != EXPIRED and file_reserved_hours is not None:
                    expires = q.last_update_timestamp + int(file_reserved_hours * HOUR_MS)
                held.append(HeldItem(topic, gid, queue_id, status, q.min_offset if q else None,
                                     q.max_offset if q else None, expires))
        return DrainStatus(broker, leads, held, file_reserved_hours)


def _unfinished(details: dict[str, dict[str, TopicQueueMappingDetail]]) -> set[str]:
    """Topics a change stopped part way through (``interrupted``)."""
    by_topic: dict[str, list[TopicQueueMappingDetail]] = {}
    for per_topic in details.values():
        for topic, d in per_topic.items():
            by_topic.setdefault(topic, []).append(d)
    return {topic for topic, ds in by_topic.items() if interrupted(ds)}


def _decided_leaders(details: dict[str, dict[str, TopicQueueMappingDetail]]) -> dict[str, dict[int, str]]:
    """Topic -> {logic id: leader} over what every broker leads (moves not decided yet left out)."""
    by_topic: dict[str, dict[str, TopicQueueMappingDetail]] = {}
    for bname, per_topic in details.items():
        for topic, d in per_topic.items():
            by_topic.setdefault(topic, {})[bname] = d
    return {topic: {q.logic_id: q.broker_name for q in leaders_of(ds) if q.logic_offset >= 0}
            for topic, ds in by_topic.items()}


def _led_counts(details: dict[str, dict[str, TopicQueueMappingDetail]]) -> Counter[str]:
    return Counter({b: sum(len(d.led_queues()) for d in per_topic.values()) for b, per_topic in details.items()})

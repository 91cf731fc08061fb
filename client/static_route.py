"""Static topics in the SDK: which broker leads each logic queue, read from a TopicRouteData.

A broker that takes part in a static topic registers a TopicQueueMappingInfo (its epoch, the topic's total of
logic queues, and {logic id: physical id} for the logic queues it leads). The SDK shows the topic as
``MessageQueue(topic, "__logical_queue_broker__", i)`` for i in 0..N-1 and sends each request to the broker
with the highest epoch that leads queue i. A logic queue nobody leads maps to :data:`VIRTUAL_BROKER_NAME`.
An info that fails the per-info consistency rules (common/statictopic/mapping_info_checks.py) is skipped.
Everything here is pure apart from a warning logged once per (topic, broker, reason): no I/O, no caching.
"""

import logging

from common.message_queue import MessageQueue
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from common.statictopic.mapping_info_checks import field_fault, two_leaders
from proto import common_pb2

log = logging.getLogger(__name__)

VIRTUAL_BROKER_NAME = "__virtual_broker__"  # the "leader" of a logic queue nobody leads right now
_WARNED_MAX = 1024  # routes are recomputed on every refresh: warn once per process, in bounded memory
_warned: set[tuple[str, str, str]] = set()

_Info = tuple[str, common_pb2.TopicQueueMappingInfo]


def is_static(route: common_pb2.TopicRouteData) -> bool:
    """True when some broker registered a static-topic mapping for the route's topic."""
    return len(route.topic_queue_mapping_by_broker) > 0


def is_logic_queue(mq: MessageQueue) -> bool:
    """True for a static topic's logic queue (its broker name is the mock name)."""
    return mq.broker_name == LOGICAL_QUEUE_MOCK_BROKER_NAME


def _warn_once(topic: str, broker_name: str, reason: str) -> None:
    key = (topic, broker_name, reason)
    if key in _warned:
        return
    if len(_warned) >= _WARNED_MAX:
        _warned.clear()
    _warned.add(key)
    log.warning("static_mapping_ignored topic=%s broker=%s reason=%r", topic, broker_name, reason)


def _consistent(route: common_pb2.TopicRouteData) -> list[_Info]:
    """The route's infos that pass the per-info rules; a failing one would route to a queue that is not there."""
    kept = []
    for name, info in route.topic_queue_mapping_by_broker.items():
        reason = field_fault(info, name)
        if reason is None:
            kept.append((name, info))
        else:
            _warn_once(info.topic, name, reason)
    return kept


def _preferred(infos: list[_Info]) -> list[_Info]:
    """Dirty infos count only when no clean one is there."""
    clean = [(name, info) for name, info in infos if not info.dirty]
    return clean or infos


def _total(infos: list[_Info]) -> int:
    infos = _preferred(infos)
    if not infos:
        return 0
    top_epoch = max(info.epoch for _, info in infos)
    return max(info.total_queues for _, info in infos if info.epoch == top_epoch)


def total_queues(route: common_pb2.TopicRouteData) -> int:
    """The topic's number of logic queues: the total announced with the highest epoch (0 for a normal topic)."""
    return _total(_consistent(route))


def logic_queue_leaders(route: common_pb2.TopicRouteData) -> tuple[int, dict[int, str]]:
    """``(N, {logic id: broker name})`` for ids 0..N-1. Per logic id, the broker with the highest epoch whose
    ``curr_id_map`` holds it wins (dirty infos only when no clean info holds the id; equal epochs: the smallest
    broker name, so every client agrees, with a warning: two leaders at one epoch is not a legit state). An id
    nobody leads maps to :data:`VIRTUAL_BROKER_NAME`."""
    infos = _consistent(route)
    total = _total(infos)
    claims: dict[int, list[_Info]] = {}
    for name, info in infos:
        for logic_id in info.curr_id_map:
            if 0 <= logic_id < total:
                claims.setdefault(logic_id, []).append((name, info))
    leaders: dict[int, str] = {}
    for logic_id in range(total):
        candidates = _preferred(claims.get(logic_id, []))
        leaders[logic_id] = _leader(logic_id, candidates) if candidates else VIRTUAL_BROKER_NAME
    return total, leaders


def has_unled_logic_queue(route: common_pb2.TopicRouteData) -> bool:
    """True for a static topic's route in which some logic queue has no leader (yet)."""
    return is_static(route) and VIRTUAL_BROKER_NAME in logic_queue_leaders(route)[1].values()


def _leader(logic_id: int, candidates: list[_Info]) -> str:
    """The highest epoch, then the smallest name. The SDK cannot know which of two equal-epoch claims came
    first (the name server does, and keeps the first), so it stays deterministic and warns about the others."""
    name, info = min(candidates, key=lambda c: (-c[1].epoch, c[0]))
    for other, other_info in candidates:
        if other != name and other_info.epoch == info.epoch:
            _warn_once(info.topic, other, two_leaders(info.epoch, logic_id, name, other))
    return name


def static_queues(topic: str, route: common_pb2.TopicRouteData) -> list[MessageQueue]:
    """The topic's logic queues ``MessageQueue(topic, "__logical_queue_broker__", i)``, i in 0..N-1."""
    return [MessageQueue(topic, LOGICAL_QUEUE_MOCK_BROKER_NAME, i) for i in range(total_queues(route))]


def master_of(route: common_pb2.TopicRouteData, broker_name: str) -> str | None:
    """The master address of ``broker_name`` in the route, if it has a live one."""
    for bd in route.broker_datas:
        if bd.broker_name == broker_name and 0 in bd.broker_addrs:
            return bd.broker_addrs[0]
    return None


def leader_address(route: common_pb2.TopicRouteData, logic_id: int) -> str | None:
    """The master address of the broker leading logic queue ``logic_id``; None when nobody leads it (or its
    leader has no master in the route)."""
    total, leaders = logic_queue_leaders(route)
    name = leaders.get(logic_id) if 0 <= logic_id < total else None
    if name is None or name == VIRTUAL_BROKER_NAME:
        return None
    return master_of(route, name)

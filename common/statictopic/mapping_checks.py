"""Consistency rules of static-topic mappings (STATIC_TOPIC.md, "Checks before any change").

Every failure raises :class:`MappingError` naming the broker and the rule, so an operator knows what to
repair before trying again.
"""

import itertools
from collections.abc import Mapping

from common.kv_shard import KV_TOPIC
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import TopicConfig


class MappingError(ValueError):
    """A mapping breaks a rule; the message names where and which."""


def check_fields(detail: TopicQueueMappingDetail) -> None:
    where = f"broker {detail.bname}, topic {detail.topic}"
    if detail.total_queues <= 0:
        raise MappingError(f"{where}: negative field: total queues {detail.total_queues} must be positive")
    if detail.epoch < 0:
        raise MappingError(f"{where}: negative field: epoch {detail.epoch}")
    for global_id, items in detail.hosted_queues.items():
        if not 0 <= global_id < detail.total_queues:
            raise MappingError(f"{where}: logic queue {global_id} is outside 0..{detail.total_queues - 1}")
        check_chain(detail.bname, detail.topic, global_id, items)


def check_chain(bname: str, topic: str, global_id: int, items: list[LogicQueueMappingItem]) -> None:
    where = f"broker {bname}, topic {topic}, logic queue {global_id}"
    if not items:
        raise MappingError(f"{where}: empty chain")
    for i, item in enumerate(items):
        if item.gen < 0 or item.queue_id < 0 or item.start_offset < 0 or item.logic_offset < -1 or item.end_offset < -1:
            raise MappingError(f"{where}: negative field in item gen {item.gen}: {item}")
        if item.end_offset_decided() and item.end_offset < item.start_offset:
            raise MappingError(f"{where}: item gen {item.gen} ends ({item.end_offset}) before it starts")
        if not item.logic_offset_decided() and i != len(items) - 1:
            raise MappingError(f"{where}: logic offset -1 in item gen {item.gen}, which is not the last item")
    physical = [(i.bname, i.queue_id) for i in items]
    if len(set(physical)) != len(physical):  # a reused physical queue replaces its expired item
        raise MappingError(f"{where}: a physical queue appears twice in the chain: {physical}")
    for prev, cur in itertools.pairwise(items):
        if cur.gen <= prev.gen:
            raise MappingError(f"{where}: gen not increasing: {prev.gen} then {cur.gen}")
        if cur.logic_offset_decided():
            if cur.logic_offset <= prev.logic_offset:
                raise MappingError(f"{where}: logic offsets not increasing: {prev.logic_offset} then "
                                   f"{cur.logic_offset}")
            if cur.logic_offset <= prev.max_logic_offset():  # the max must be strictly below the next start
                raise MappingError(f"{where}: logic offsets not increasing: item gen {cur.gen} starts at "
                                   f"{cur.logic_offset}, not above gen {prev.gen}'s max {prev.max_logic_offset()}")


def check_update(old: TopicQueueMappingDetail | None, new: TopicQueueMappingDetail) -> None:
    """What a broker checks before it applies a new detail for itself."""
    check_fields(new)
    if old is None:
        return
    where = f"broker {new.bname}, topic {new.topic}"
    if new.topic == KV_TOPIC and new.total_queues != old.total_queues:  # keys hash over the number of shards
        raise MappingError(f"{where}: the KV store has {old.total_queues} shards; the number of shards cannot "
                           f"change ({new.total_queues} offered)")
    if new.scope != old.scope:
        raise MappingError(f"{where}: scope mismatch: {old.scope} held, {new.scope} offered")
    if new.epoch < old.epoch:
        raise MappingError(f"{where}: smaller epoch: {new.epoch} offered, {old.epoch} held")
    if new.epoch == old.epoch:
        for global_id in set(old.hosted_queues) | set(new.hosted_queues):
            a, b = old.leader(global_id), new.leader(global_id)
            if (a and (a.bname, a.queue_id)) != (b and (b.bname, b.queue_id)):
                raise MappingError(f"{where}: leader changed at equal epoch {new.epoch} for logic queue {global_id}")


def check_cluster(details: Mapping[str, TopicQueueMappingDetail],
                  configs: Mapping[str, TopicConfig | None]) -> None:
    """The admin's check over every broker's detail (keyed by the broker it came from)."""
    if not details:
        raise MappingError("no broker holds a mapping")
    first = next(iter(details.values()))
    seen_physical: dict[tuple[str, int], int] = {}
    leaders: dict[int, str] = {}
    for broker, d in details.items():
        if d.bname != broker:
            raise MappingError(f"broker {broker}: holds a detail whose bname is {d.bname}")
        for attr in ("topic", "scope", "epoch", "total_queues"):
            if getattr(d, attr) != getattr(first, attr):
                raise MappingError(f"broker {broker}: {attr} {getattr(d, attr)} differs from broker {first.bname}'s "
                                   f"{getattr(first, attr)}")
        check_fields(d)
        config = configs.get(broker)
        for global_id, items in d.hosted_queues.items():
            leader = items[-1]
            if leader.bname == broker:
                if global_id in leaders:
                    raise MappingError(f"broker {broker}: logic queue {global_id} is also led by {leaders[global_id]}")
                leaders[global_id] = broker
            for item in items:
                key = (item.bname, item.queue_id)
                if seen_physical.setdefault(key, global_id) != global_id:
                    raise MappingError(f"broker {broker}: physical queue {item.bname}/{item.queue_id} is used by "
                                       f"logic queues {seen_physical[key]} and {global_id}")
                owner_config = configs.get(item.bname) if item.bname in details else None
                if item.bname in details and (owner_config is None or item.queue_id >= owner_config.write_queue_nums):
                    raise MappingError(f"broker {item.bname}: physical queue {item.queue_id} of logic queue "
                                       f"{global_id} is not below the topic's write queue count")
        if config is not None and config.read_queue_nums < config.write_queue_nums:
            raise MappingError(f"broker {broker}: read queues {config.read_queue_nums} below write queues "
                               f"{config.write_queue_nums}")
    missing = sorted(set(range(first.total_queues)) - set(leaders))
    if missing:
        raise MappingError(f"topic {first.topic}: logic queues {missing} have no leader")

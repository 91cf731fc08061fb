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


NO_DETAIL = -1  # the expected epoch of an update planned from a broker that held no detail
CHANGED_MEANWHILE = "changed meanwhile"  # in every MappingConflict's message: the admin recognises it in a refusal


class MappingConflict(MappingError):
    """An update planned from a state the broker no longer holds: another change came in between."""


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


def check_update(old: TopicQueueMappingDetail | None, new: TopicQueueMappingDetail,
                 expected_epoch: int | None = None) -> None:
    """What a broker checks before it applies a new detail for itself. ``expected_epoch``: the epoch of the detail
    the admin planned from (NO_DETAIL: it saw none); None (an older admin) checks nothing of the kind."""
    check_fields(new)
    where = f"broker {new.bname}, topic {new.topic}"
    held_epoch = old.epoch if old is not None else NO_DETAIL
    if expected_epoch is not None and held_epoch != expected_epoch:  # compare-and-set: the plan is stale
        raise MappingConflict(f"{where}: {CHANGED_MEANWHILE}: the change was planned from epoch "
                              f"{_epoch_text(expected_epoch)}, the broker holds {_epoch_text(held_epoch)}")
    if old is None:
        return
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
    for global_id, held in old.hosted_queues.items():
        check_links_kept(where, old.bname, global_id, held, new.hosted_queues.get(global_id))


def _epoch_text(epoch: int) -> str:
    return "none (no detail)" if epoch == NO_DETAIL else str(epoch)


def _same_link(held: LogicQueueMappingItem, offered: LogicQueueMappingItem) -> bool:
    """The same physical queue placed at the same logic offset (an undecided one may be decided now; the end may be
    decided now: a link is closed when the queue moves on)."""
    return ((held.bname, held.queue_id, held.start_offset) == (offered.bname, offered.queue_id, offered.start_offset)
            and (not held.logic_offset_decided() or held.logic_offset == offered.logic_offset))


def check_links_kept(where: str, bname: str, global_id: int, held: list[LogicQueueMappingItem],
                     offered: list[LogicQueueMappingItem] | None) -> None:
    """A new chain goes on from the one a broker holds: it never drops the decided link the broker leads (its
    messages would be in no chain) and never puts another link at a gen the broker holds (a fork: logic offsets
    handed out twice). Two admins planning from the same state would otherwise both be accepted. An undecided leader
    link (a remap's step 1) may still be replaced: nothing was read from it, and a re-run must be able to finish."""
    tip = held[-1]
    by_gen = {i.gen: i for i in offered or ()}
    if tip.bname == bname and tip.logic_offset_decided() and tip.gen not in by_gen:
        raise MappingConflict(f"{where}: {CHANGED_MEANWHILE}: the new detail drops link gen {tip.gen} "
                              f"({tip.bname}/{tip.queue_id}) of logic queue {global_id}, which this broker leads")
    for link in held:
        offered_link = by_gen.get(link.gen)
        if offered_link is not None and link.logic_offset_decided() and not _same_link(link, offered_link):
            raise MappingConflict(f"{where}: {CHANGED_MEANWHILE}: logic queue {global_id} forks at gen {link.gen}: "
                                  f"{link.bname}/{link.queue_id} from logic offset {link.logic_offset} held, "
                                  f"{offered_link.bname}/{offered_link.queue_id} offered")


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

"""Planning static-topic changes: create/extend and remap, as pure functions over what every broker holds.

The admin reads each broker's (detail, topic config), asks these functions for the new state, and writes
it in the order that keeps every logic queue writable (see :class:`RemapPlan`).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem, block_round_up
from common.statictopic.mapping_checks import NO_DETAIL, MappingError, check_chain, check_cluster
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import TopicConfig

EPOCH_STEP = 1000


@dataclass
class BrokerTopicState:
    """What one broker holds for the topic."""

    bname: str
    detail: TopicQueueMappingDetail | None
    config: TopicConfig | None

    def epoch(self) -> int:
        """The epoch of the detail read (NO_DETAIL: none): what a change planned from it expects the broker to hold."""
        return self.detail.epoch if self.detail is not None else NO_DETAIL


@dataclass
class BrokerUpdate:
    """A detail (and the topic config that goes with it, if any) to write to one broker."""

    bname: str
    detail: TopicQueueMappingDetail
    config: TopicConfig | None
    # the epoch of the detail the plan was made from (NO_DETAIL: none); the broker refuses the update when it holds
    # another one (a change came in between). None: unconditional
    expected_epoch: int | None = None


def next_epoch(old_epoch: int, now_ms: int) -> int:
    return max(old_epoch + EPOCH_STEP, now_ms)


def least_loaded(load: dict[str, int]) -> str:
    return min(load, key=lambda b: (load[b], b))


def _copy_config(config: TopicConfig | None, topic: str) -> TopicConfig:
    if config is None:
        return TopicConfig(topic, read_queue_nums=0, write_queue_nums=0)
    return TopicConfig(config.topic_name, config.read_queue_nums, config.write_queue_nums, config.perm,
                       config.topic_sys_flag, config.order, dict(config.attributes))


def _add_physical_queue(config: TopicConfig) -> int:
    """Append a physical queue (ids are never reused); returns its id."""
    queue_id = config.write_queue_nums
    config.write_queue_nums += 1
    config.read_queue_nums = max(config.read_queue_nums + 1, config.write_queue_nums)
    return queue_id


def _refuse_normal_topic(topic: str, states: dict[str, BrokerTopicState]) -> None:
    for s in states.values():
        if s.config is not None and s.detail is None:
            raise MappingError(f"topic {topic} is a normal topic on broker {s.bname}: "
                               "a static topic needs a name of its own")


# -- create or extend -------------------------------------------------------------------------------------
def plan_create_or_extend(topic: str, queue_num: int, states: dict[str, BrokerTopicState], targets: list[str],
                          now_ms: int) -> list[BrokerUpdate]:
    """New logic queues [old total, queue_num) go to the least-loaded targets; every broker in ``states``
    gets a detail with the new epoch and total (no-target brokers an empty one)."""
    if queue_num <= 0:
        raise MappingError(f"queue number {queue_num} must be positive")
    _refuse_normal_topic(topic, states)
    existing = {b: s.detail for b, s in states.items() if s.detail is not None}
    old_total = 0
    if existing:
        check_cluster(existing, {b: s.config for b, s in states.items()})
        old_total = next(iter(existing.values())).total_queues
    if queue_num < old_total:
        raise MappingError(f"topic {topic} has {old_total} logic queues and a static topic never shrinks "
                           f"(asked {queue_num})")
    if queue_num == old_total:
        raise MappingError(f"nothing to do: topic {topic} already has {queue_num} logic queues")
    holders = {b for b, d in existing.items() if d.led_queues()}
    targets = sorted(set(targets) | holders)
    if not targets:
        raise MappingError("no target broker")
    unknown = set(targets) - set(states)
    if unknown:
        raise MappingError(f"target brokers {sorted(unknown)} are not known")
    epoch = next_epoch(max((d.epoch for d in existing.values()), default=0), now_ms)
    details = {b: existing[b].copy() if b in existing else TopicQueueMappingDetail(topic, queue_num, b, epoch)
               for b in states}
    configs = {b: _copy_config(s.config, topic) if s.config else None for b, s in states.items()}
    for d in details.values():
        d.total_queues, d.epoch = queue_num, epoch
    load = {t: len(details[t].led_queues()) for t in targets}
    for global_id in range(old_total, queue_num):
        bname = least_loaded(load)
        load[bname] += 1
        config = configs[bname] = configs[bname] or TopicConfig(topic, 0, 0)
        queue_id = _add_physical_queue(config)
        details[bname].hosted_queues[global_id] = [
            LogicQueueMappingItem(gen=0, queue_id=queue_id, bname=bname, logic_offset=0, time_of_start=now_ms)]
    return [BrokerUpdate(b, details[b], configs[b], states[b].epoch()) for b in sorted(details)]


# -- remap ------------------------------------------------------------------------------------------------
@dataclass
class MovedQueue:
    global_id: int
    old_leader: str  # holds the previous item: its physical max decides the new item's logic offset
    new_leader: str
    reused: bool = False  # onto an expired physical queue of the chain
    # when reused: the expired link that left the chain, and the link after it, which takes over the consumer
    # offsets stored for it (the broker forgets those when it reuses the queue)
    replaced: tuple[LogicQueueMappingItem, LogicQueueMappingItem] | None = None


@dataclass
class RemapPlan:
    """The write order that keeps every logic queue available:

    1. ``gained`` to the new leaders (their new queues writable, logic offset still -1);
    2. ``full`` to the old leaders (fenced: they now answer NOT_LEADER_FOR_QUEUE);
    3. the admin reads each old leader's physical max and calls :meth:`decide`;
    4. ``full`` (decided) to the new leaders, then to every other broker (the epoch bump)."""

    topic: str
    moved: list[MovedQueue]
    gained: list[BrokerUpdate]
    full: dict[str, BrokerUpdate]
    epoch: int
    chains: dict[int, list[LogicQueueMappingItem]] = field(default_factory=dict)

    def decide(self, global_id: int, old_leader_max_physical: int, now_ms: int) -> None:
        """Close the old leader's item at its physical max and start the new item after a block jump."""
        chain = self.chains[global_id]
        old, new = chain[-2], chain[-1]
        old.end_offset = max(old_leader_max_physical, old.start_offset)
        old.time_of_end = now_ms
        new.logic_offset = block_round_up_logic(old)


def interrupted(details: Iterable[TopicQueueMappingDetail]) -> bool:
    """Whether a change of the topic these brokers' details are of stopped part way: a move not decided, or the
    brokers at different epochs (a re-run finishes it: ``plan_moves`` with no moves)."""
    epochs = set()
    for d in details:
        epochs.add(d.epoch)
        if any(not items[-1].logic_offset_decided() for items in d.hosted_queues.values()):
            return True
    return len(epochs) > 1


def block_round_up_logic(old: LogicQueueMappingItem) -> int:
    return block_round_up(old.logic_strictly(old.end_offset))


def current_view(states: dict[str, BrokerTopicState]) -> tuple[int, int, dict[int, list[LogicQueueMappingItem]]]:
    """(highest epoch, total, chain per logic queue) over every broker's detail: each chain is the copy that went
    furthest (newest link by gen, a decided link before an undecided one), then the one from the highest epoch,
    preferring its leader's own copy. An interrupted remap leaves brokers at different epochs; this view is what
    it had reached. (Epoch alone is not enough: a broker that still leads a queue being moved away may be
    written again at a higher epoch with its older chain, which must not hide the move.)"""
    details = [s.detail for s in states.values() if s.detail is not None]
    if not details:
        raise MappingError("no broker holds a mapping for this topic")
    totals = {d.total_queues for d in details}
    chosen: dict[int, tuple[tuple[int, bool, int, bool], list[LogicQueueMappingItem]]] = {}
    for d in details:
        for global_id, items in d.hosted_queues.items():
            check_chain(d.bname, d.topic, global_id, items)
            rank = (items[-1].gen, items[-1].logic_offset_decided(), d.epoch, items[-1].bname == d.bname)
            if global_id not in chosen or rank > chosen[global_id][0]:
                chosen[global_id] = (rank, [LogicQueueMappingItem(**{f: getattr(i, f) for f in i.__slots__})
                                            for i in items])
    chains = {gid: items for gid, (_rank, items) in chosen.items()}
    total = _view_total(totals, chains)
    missing = sorted(set(range(total)) - set(chains))
    if missing:
        raise MappingError(f"logic queues {missing} have no chain on any broker")
    topic = details[0].topic
    for gid, items in chains.items():
        check_chain(items[-1].bname, topic, gid, items)
    return max(d.epoch for d in details), total, chains


def _view_total(totals: set[int], chains: dict[int, list[LogicQueueMappingItem]]) -> int:
    """The topic's number of logic queues, from the brokers' totals. A grow writes the new total broker by broker:
    one stopped part-way (refused by a remap racing it) leaves brokers at the old total beside brokers at the new.
    Totals only grow: the highest is the topic's once a chain exists for each of its queues. A grow that stopped
    before any new queue had a chain (nothing could be sent to them) counts as not made: a re-run writes the old
    total everywhere, and the grow can be run again. Refused here, that state blocked every command for good."""
    if len(totals) == 1:
        return totals.pop()
    highest, complete = max(totals), [t for t in sorted(totals) if set(range(t)) <= set(chains)]
    if set(range(highest)) <= set(chains):
        return highest
    if complete and not any(gid >= complete[-1] for gid in chains):
        return complete[-1]
    raise MappingError(f"brokers disagree on the number of logic queues: {sorted(totals)}, and the new queues of the "
                       f"highest have no chain on every broker")


def plan_remap(topic: str, states: dict[str, BrokerTopicState], targets: list[str], now_ms: int,
               expired: Mapping[tuple[str, int], int] | None = None) -> RemapPlan:
    """Move logic queues whose leader is not a target with room to targets with room (balanced within one).
    A queue whose last item is still undecided (an interrupted remap) is finished first, where it is."""
    if not targets:
        raise MappingError("no target broker")
    unknown = set(targets) - set(states)
    if unknown:
        raise MappingError(f"target brokers {sorted(unknown)} are not known")
    _epoch, total, chains = current_view(states)
    load = dict.fromkeys(targets, 0)
    base, extra = divmod(total, len(load))

    def has_room(bname: str) -> bool:
        """Balanced within one: every target holds ``base`` queues, ``extra`` of them one more."""
        return load[bname] < base or (load[bname] == base and sum(n > base for n in load.values()) < extra)

    to_move: list[int] = []
    for gid in sorted(chains):
        leader = chains[gid][-1]
        if not leader.logic_offset_decided() and leader.bname in load:  # interrupted: plan_moves finishes it
            load[leader.bname] += 1
    for gid in sorted(chains):
        leader = chains[gid][-1]
        if not leader.logic_offset_decided():
            continue
        if leader.bname in load and has_room(leader.bname):
            load[leader.bname] += 1
        else:
            to_move.append(gid)
    moves = {}
    for gid in to_move:
        new_leader = least_loaded({b: n for b, n in load.items() if has_room(b)} or load)
        load[new_leader] += 1
        moves[gid] = new_leader
    return plan_moves(topic, states, moves, now_ms, expired)


def plan_moves(topic: str, states: dict[str, BrokerTopicState], moves: Mapping[int, str], now_ms: int,
               expired: Mapping[tuple[str, int], int] | None = None) -> RemapPlan:
    """Move each logic queue of ``moves`` (logic id -> new leader) and finish every interrupted move of the
    topic in place. ``expired``: (broker, physical queue id) -> physical max of the physical queues whose data
    is all gone; a move onto a broker holding such a queue of the same chain reuses it (seed 004: an expired
    queue comes back; a read-only one never does)."""
    old_epoch, total, chains = current_view(states)
    epoch = next_epoch(old_epoch, now_ms)
    configs = {b: _copy_config(s.config, topic) if s.config else None for b, s in states.items()}
    _cover_queue_ids(topic, configs, chains)
    moved = [MovedQueue(gid, items[-2].bname, items[-1].bname) for gid, items in sorted(chains.items())
             if not items[-1].logic_offset_decided()]
    unfinished = {m.global_id for m in moved}
    for gid, new_leader in sorted(moves.items()):
        if gid not in chains:
            raise MappingError(f"logic queue {gid} does not exist: topic {topic} has logic queues 0..{total - 1}")
        if new_leader not in states:
            raise MappingError(f"broker {new_leader} is not known")
        old = chains[gid][-1]
        if gid in unfinished or old.bname == new_leader:
            continue  # finishing an interrupted move, or already there
        config = configs[new_leader] = configs[new_leader] or TopicConfig(topic, 0, 0)
        chain = chains[gid]
        chains[gid], gone = _append_leader(chain, new_leader, config, expired or {}, now_ms)
        replaced = (gone, chain[chain.index(gone) + 1]) if gone is not None else None
        moved.append(MovedQueue(gid, old.bname, new_leader, gone is not None, replaced))
    return _remap_updates(topic, total, states, configs, chains, moved, epoch)


def _append_leader(chain: list[LogicQueueMappingItem], new_leader: str, config: TopicConfig,
                   expired: Mapping[tuple[str, int], int],
                   now_ms: int) -> tuple[list[LogicQueueMappingItem], LogicQueueMappingItem | None]:
    """The chain with a new undecided leader item on ``new_leader``, on the newest expired physical queue the chain
    holds there (returned: it leaves the chain, its data is gone), else on a new one (None)."""
    old = chain[-1]
    reusable = [i for i in chain[:-1] if i.bname == new_leader and (i.bname, i.queue_id) in expired]
    if not reusable:
        return [*chain, LogicQueueMappingItem(gen=old.gen + 1, queue_id=_add_physical_queue(config),
                                              bname=new_leader, time_of_start=now_ms)], None
    gone = reusable[-1]
    # the physical queue goes on from its max offset (the broker checks it): the old link leaves the chain and the
    # broker forgets the offsets stored for it, so nothing below the start is ever read as the new link's
    start = expired[(gone.bname, gone.queue_id)]
    return [*(i for i in chain if i is not gone),
            LogicQueueMappingItem(gen=old.gen + 1, queue_id=gone.queue_id, bname=new_leader, start_offset=start,
                                  time_of_start=now_ms)], gone


def _cover_queue_ids(topic: str, configs: dict[str, TopicConfig | None],
                     chains: dict[int, list[LogicQueueMappingItem]]) -> None:
    """A broker stores its mapping before its topic config: after a crash in between (an interrupted remap),
    its config may not count a queue its chains use yet. Count it, so the rerun ends consistent and new ids
    are still never reused."""
    for items in chains.values():
        for item in items:
            if item.bname in configs:
                config = configs[item.bname] = configs[item.bname] or TopicConfig(topic, 0, 0)
                config.write_queue_nums = max(config.write_queue_nums, item.queue_id + 1)
                config.read_queue_nums = max(config.read_queue_nums, config.write_queue_nums)


def _remap_updates(topic: str, total: int, states: dict[str, BrokerTopicState],
                   configs: dict[str, TopicConfig | None], chains: dict[int, list[LogicQueueMappingItem]],
                   moved: list[MovedQueue], epoch: int) -> RemapPlan:
    moved_ids = {m.global_id for m in moved}

    def detail_for(bname: str, epoch: int, only_gained: bool) -> TopicQueueMappingDetail:
        d = TopicQueueMappingDetail(topic, total, bname, epoch)
        old = states[bname].detail
        for gid, items in chains.items():
            leads_now = items[-1].bname == bname
            old_chain = old.hosted_queues.get(gid) if old is not None else None
            if only_gained and gid in moved_ids and not leads_now and old_chain is not None:
                d.hosted_queues[gid] = old_chain  # not fenced yet: that is step 2
            elif leads_now or (not only_gained and gid in moved_ids and any(i.bname == bname for i in items[:-1])):
                # leaders keep whole chains; an old leader keeps the one it lost, but only from step 2 on: a
                # gained detail must not carry a chain whose new leader may not have received it yet
                d.hosted_queues[gid] = items
        return d

    new_leaders = sorted({m.new_leader for m in moved})
    gained = [BrokerUpdate(b, detail_for(b, epoch, only_gained=True), configs[b], states[b].epoch())
              for b in new_leaders]
    full = {b: BrokerUpdate(b, detail_for(b, epoch + 1, only_gained=False), configs[b], states[b].epoch())
            for b in sorted(states)}
    return RemapPlan(topic, moved, gained, full, epoch + 1, chains)

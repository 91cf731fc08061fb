"""plan_remap (STATIC_TOPIC.md, "Remap"): who moves, the new links, the write order, interrupted and repeated
remaps. Every write is checked with the broker-side check_update, every end state with check_cluster."""

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.statictopic.logic_queue_mapping_item import NOT_DECIDED, LogicQueueMappingItem, block_round_up
from common.statictopic.mapping_checks import MappingError, check_cluster, check_update
from common.statictopic.static_topic_plan import (
    BrokerTopicState,
    BrokerUpdate,
    RemapPlan,
    current_view,
    next_epoch,
    plan_create_or_extend,
    plan_remap,
)
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import TopicConfig

NOW = 1_700_000_000_000
BROKERS = [f"b{i}" for i in range(6)]
States = dict[str, BrokerTopicState]


# -- a tiny in-memory cluster -----------------------------------------------------------------------------
def copy_config(c: TopicConfig | None) -> TopicConfig | None:
    return None if c is None else TopicConfig(c.topic_name, c.read_queue_nums, c.write_queue_nums, c.perm,
                                              c.topic_sys_flag, c.order, dict(c.attributes))


def copy_states(states: States) -> States:
    return {b: BrokerTopicState(b, s.detail and s.detail.copy(), copy_config(s.config)) for b, s in states.items()}


def write(states: States, u: BrokerUpdate) -> None:
    """One broker applies one update: it must accept it (check_update); what it stores is a copy (the wire)."""
    check_update(states[u.bname].detail, u.detail)
    states[u.bname] = BrokerTopicState(u.bname, u.detail.copy(), copy_config(u.config))


def check(states: States) -> None:
    check_cluster({b: s.detail for b, s in states.items()}, {b: s.config for b, s in states.items()})


def loads(states: States) -> dict[str, int]:
    return {b: len(s.detail.led_queues()) if s.detail else 0 for b, s in states.items()}


def create(n: int, names: list[str], targets: list[str], now: int = NOW) -> States:
    states = {b: BrokerTopicState(b, None, None) for b in names}
    for u in plan_create_or_extend("T", n, states, targets, now):
        write(states, u)
    check(states)
    return states


Action = Callable[[States], None]


def actions(plan: RemapPlan, max_of: Callable[[int], int], now: int) -> list[Action]:
    """The admin's writes in the documented order; run a prefix to simulate a failure part-way."""
    out: list[Action] = [lambda s, u=u: write(s, u) for u in plan.gained]  # 1. new leaders, writable, undecided
    old_leaders = sorted({m.old_leader for m in plan.moved})
    out += [lambda s, b=b: write(s, plan.full[b]) for b in old_leaders]  # 2. fence the old leaders
    out += [lambda s, m=m: plan.decide(m.global_id, max_of(m.global_id), now) for m in plan.moved]  # 3.
    new_leaders = sorted({m.new_leader for m in plan.moved})
    out += [lambda s, b=b: write(s, plan.full[b]) for b in new_leaders]  # 4. decided chains to the new leaders
    out += [lambda s, b=b: write(s, plan.full[b]) for b in sorted(plan.full) if b not in new_leaders]  # 5.
    return out


def execute(states: States, plan: RemapPlan, max_of: Callable[[int], int], now: int, upto: int | None = None,
            observe: Callable[[States], None] | None = None) -> States:
    out = dict(states)
    for action in actions(plan, max_of, now)[:upto]:
        action(out)
        if observe:
            observe(out)
    return out


def default_max(gid: int) -> int:
    return (gid * 7_919 + 4_321) % 23_000


def remap(states: States, targets: list[str], now: int = NOW, max_of: Callable[[int], int] = default_max
          ) -> tuple[RemapPlan, States]:
    plan = plan_remap("T", states, targets, now)
    after = execute(states, plan, max_of, now)
    check(after)
    return plan, after


def writable(states: States) -> set[tuple[int, str, int]]:
    """(logic queue, broker, physical queue) for every physical queue a broker currently accepts sends on."""
    return {(gid, s.detail.bname, qid)
            for s in states.values() if s.detail for gid, qid in s.detail.led_queues().items()}


def chains_of(states: States) -> dict[int, list[LogicQueueMappingItem]]:
    """Each logic queue's chain as its leader holds it."""
    out = {}
    for s in states.values():
        for gid in s.detail.led_queues():
            out[gid] = s.detail.hosted_queues[gid]
    return out


# -- examples ---------------------------------------------------------------------------------------------
def test_remap_everything_to_new_brokers():
    states = create(4, ["b0", "b1", "b2", "b3"], ["b0", "b1"], now=NOW - 10_000)
    e = next_epoch(states["b0"].detail.epoch, NOW)
    plan = plan_remap("T", states, ["b2", "b3"], NOW)
    assert plan.epoch == e + 1
    assert sorted((m.global_id, m.old_leader) for m in plan.moved) == [(0, "b0"), (1, "b1"), (2, "b0"), (3, "b1")]
    assert sorted(m.new_leader for m in plan.moved) == ["b2", "b2", "b3", "b3"]
    assert [u.bname for u in plan.gained] == ["b2", "b3"]
    assert {u.detail.epoch for u in plan.gained} == {e}
    assert sorted(plan.full) == ["b0", "b1", "b2", "b3"]
    assert {u.detail.epoch for u in plan.full.values()} == {e + 1}
    for u in plan.gained:
        assert sorted(u.detail.led_queues().values()) == [0, 1]
        assert (u.config.write_queue_nums, u.config.read_queue_nums) == (2, 2)
        for gid in u.detail.led_queues():
            old, new = u.detail.hosted_queues[gid]
            assert (new.gen, new.logic_offset, new.start_offset, new.end_offset, new.time_of_start) == \
                (1, NOT_DECIDED, 0, NOT_DECIDED, NOW)
            assert old == states[old.bname].detail.hosted_queues[gid][0]
    # the old leaders are fenced in full: they keep the chain they lost, and no longer lead it
    assert plan.full["b0"].detail.led_queues() == {} and sorted(plan.full["b0"].detail.hosted_queues) == [0, 2]
    assert plan.full["b1"].detail.led_queues() == {} and sorted(plan.full["b1"].detail.hosted_queues) == [1, 3]
    assert plan.full["b0"].config.write_queue_nums == 2  # the old physical queues stay (their data is read)
    after = execute(states, plan, default_max, NOW)
    check(after)
    for gid, (old, new) in chains_of(after).items():
        assert old.end_offset == default_max(gid)
        assert new.logic_offset == block_round_up(old.logic_strictly(default_max(gid)))
    assert loads(after) == {"b0": 0, "b1": 0, "b2": 2, "b3": 2}


def test_remap_onto_the_same_targets_moves_nothing_but_bumps_the_epoch():
    states = create(5, ["b0", "b1", "b2"], ["b0", "b1"])
    plan = plan_remap("T", states, ["b1", "b0"], NOW + 1)
    assert plan.moved == [] and plan.gained == []
    assert plan.epoch == NOW + 1000 + 1
    after = execute(states, plan, default_max, NOW + 1)
    check(after)
    for b, s in after.items():
        assert s.detail.epoch == NOW + 1001
        assert s.detail.hosted_queues == states[b].detail.hosted_queues
        assert s.config == states[b].config


def test_a_new_target_gets_its_share():
    # 4 queues on b0, b1 (2 each), remap onto b0, b1, b2: balanced within one means b2 gets one
    states = create(4, ["b0", "b1", "b2"], ["b0", "b1"])
    plan, after = remap(states, ["b0", "b1", "b2"])
    assert sorted(loads(after).values()) == [1, 1, 2]
    assert [m.new_leader for m in plan.moved] == ["b2"]
    assert [u.bname for u in plan.gained] == ["b2"]


def test_remap_onto_one_broker_appends_queue_ids():
    states = create(5, ["b0", "b1", "b2"], ["b0", "b1", "b2"])
    plan, after = remap(states, ["b1"])
    assert loads(after) == {"b0": 0, "b1": 5, "b2": 0}
    assert sorted(after["b1"].detail.led_queues().values()) == [0, 1, 2, 3, 4]
    moved_ids = {after["b1"].detail.led_queues()[m.global_id] for m in plan.moved}
    assert moved_ids == {2, 3, 4}  # ids 0 and 1 were b1's already; the new ones are appended
    assert (after["b1"].config.write_queue_nums, after["b1"].config.read_queue_nums) == (5, 5)


def test_ids_are_never_reused_even_after_queues_moved_away():
    states = create(2, ["b0", "b1"], ["b0"])
    _, states = remap(states, ["b1"])
    _, states = remap(states, ["b0"])
    assert sorted(states["b0"].detail.led_queues().values()) == [2, 3]
    assert states["b0"].config.write_queue_nums == 4
    _, states = remap(states, ["b1"])
    assert sorted(states["b1"].detail.led_queues().values()) == [2, 3]


def test_a_broker_new_to_the_topic_can_be_a_target():
    states = create(3, ["b0", "b1"], ["b0", "b1"])
    states["b5"] = BrokerTopicState("b5", None, None)
    plan, after = remap(states, ["b5"])
    assert loads(after)["b5"] == 3 and after["b5"].config.write_queue_nums == 3
    assert "b5" in plan.full


def test_gained_leaves_old_leaders_chains_alone():
    # b0 loses queue 0 to b2 and gains nothing; b1 loses nothing and gains; check b1's gained detail
    states = create(4, ["b0", "b1", "b2"], ["b0", "b1"])
    plan = plan_remap("T", states, ["b1", "b2"], NOW)
    for u in plan.gained:
        old = states[u.bname].detail
        for gid in range(4):
            if u.detail.leads(gid) and not old.leads(gid):
                continue
            assert u.detail.hosted_queues.get(gid) == old.hosted_queues.get(gid), (u.bname, gid)


def test_gained_never_hands_a_broker_a_chain_another_broker_leads():
    """An interrupted remap must not look started for a queue whose new leader never heard of it.

    b0 once led queue 0 (it is in its chain), and is a new leader in a later remap that moves queue 0 to b1.
    If b0's gained detail carried queue 0's new chain and only that write landed, every reader would take the
    queue as moved to b1 (pending), though b1 holds neither the chain nor the physical queue."""
    states = create(2, ["b0", "b1", "b2"], ["b0"])  # b0 leads 0 and 1
    _, states = remap(states, ["b2"])  # both move to b2
    first = plan_remap("T", states, ["b0", "b2"], NOW + 10_000)  # queue 1 back to b0, queue 0 stays on b2
    assert [(m.global_id, m.new_leader) for m in first.moved] == [(1, "b0")]
    states = execute(states, first, default_max, NOW + 10_000, upto=1)  # only b0's gained write lands
    second = plan_remap("T", states, ["b0", "b1"], NOW + 20_000)  # finish 1 on b0, move 0 from b2 to b1
    assert sorted((m.global_id, m.old_leader, m.new_leader) for m in second.moved) == \
        [(0, "b2", "b1"), (1, "b2", "b0")]
    [gained_b0] = [u for u in second.gained if u.bname == "b0"]
    assert 0 not in gained_b0.detail.hosted_queues
    states = execute(states, second, default_max, NOW + 20_000, upto=1)  # again only b0's gained write lands
    _, _, view = current_view(states)
    assert view[0][-1].bname == "b2" and view[0][-1].logic_offset_decided()  # queue 0 has not started to move
    _, done = remap(states, ["b0", "b1"], NOW + 30_000)
    assert loads(done) == {"b0": 1, "b1": 1, "b2": 0}


def test_an_old_leaders_later_write_does_not_hide_a_pending_move():
    """Sends already landed on a pending new leader's physical queue: no rerun may drop that queue.

    b1 receives queue 0's new chain (gained; b0 still leads, not fenced yet); the run stops. The rerun makes
    b0 a new leader of queue 1, and b0's gained detail still holds queue 0's old chain (b0 leads it until it
    is fenced) at a higher epoch than b1's. It stops again. The view must still see queue 0 moving to b1/0."""
    states = create(2, ["b0", "b1", "b2"], ["b0", "b2"])  # b0 leads 0, b2 leads 1
    first = plan_remap("T", states, ["b1", "b2"], NOW + 10_000)
    assert [(m.global_id, m.old_leader, m.new_leader) for m in first.moved] == [(0, "b0", "b1")]
    states = execute(states, first, default_max, NOW + 10_000, upto=1)  # b1 only: it accepts sends on b1/0
    assert (0, "b1", 0) in writable(states)
    second = plan_remap("T", states, ["b0", "b1"], NOW + 20_000)
    assert sorted((m.global_id, m.old_leader, m.new_leader) for m in second.moved) == \
        [(0, "b0", "b1"), (1, "b2", "b0")]
    states = execute(states, second, default_max, NOW + 20_000, upto=1)  # b0 only
    assert states["b0"].detail.epoch > states["b1"].detail.epoch and states["b0"].detail.leads(0)
    _, _, view = current_view(states)
    assert [(i.bname, i.queue_id, i.logic_offset) for i in view[0]] == [("b0", 0, 0), ("b1", 0, NOT_DECIDED)]
    _, done = remap(states, ["b0", "b1"], NOW + 30_000)
    assert [(i.bname, i.queue_id) for i in chains_of(done)[0]] == [("b0", 0), ("b1", 0)]
    assert done["b1"].config.write_queue_nums == 1  # no second physical queue on b1


def test_a_repeated_target_counts_once():
    states = create(4, ["b0", "b1", "b2"], ["b0"])
    _, after = remap(states, ["b1", "b1", "b2"])
    assert loads(after) == {"b0": 0, "b1": 2, "b2": 2}


def test_a_remap_rerun_after_a_grow_it_interrupted_settles_the_topic():
    """A grow racing a remap, both refused part-way: b0 and b1 took the new total (6) and the remap's fence, b2 the
    remap's undecided link at a higher epoch and the old total; the new queues had no chain yet. Every command was
    refused (the brokers disagree on the total) for good. A remap re-run writes the old total everywhere (nothing
    could reach queues without a chain); a grow then works again."""
    states = create(4, ["b0", "b1", "b2"], ["b0", "b1"])
    for bname in ("b0", "b1"):
        states[bname].detail.total_queues = 6
    _, after = remap(states, ["b2"])
    assert {s.detail.total_queues for s in after.values()} == {4}
    assert loads(after) == {"b0": 0, "b1": 0, "b2": 4}
    for u in plan_create_or_extend("T", 6, after, ["b0", "b1", "b2"], NOW + 10_000):
        write(after, u)
    check(after)
    assert {s.detail.total_queues for s in after.values()} == {6}


def test_remap_refusals():
    states = create(2, ["b0", "b1"], ["b0"])
    with pytest.raises(MappingError, match="no target"):
        plan_remap("T", states, [], NOW)
    with pytest.raises(MappingError, match=r"\['b7'\] are not known"):
        plan_remap("T", states, ["b7"], NOW)
    with pytest.raises(MappingError, match="no broker holds a mapping"):
        plan_remap("T", {"b0": BrokerTopicState("b0", None, None)}, ["b0"], NOW)
    states["b1"].detail.total_queues = 4  # a grow stopped part-way after queue 2 had a chain, before queue 3 had one
    states["b1"].detail.hosted_queues[2] = [LogicQueueMappingItem(0, 1, "b1", 0, 0)]
    with pytest.raises(MappingError, match=r"disagree on the number of logic queues: \[2, 4\], and the new"):
        plan_remap("T", states, ["b1"], NOW)
    states = create(2, ["b0", "b1"], ["b0", "b1"])
    states["b1"].detail.hosted_queues.clear()
    with pytest.raises(MappingError, match=r"logic queues \[1\] have no chain"):
        plan_remap("T", states, ["b0"], NOW)
    states["b1"].detail.hosted_queues[1] = []  # a malformed copy is refused by name, not an IndexError
    with pytest.raises(MappingError, match="broker b1, topic T, logic queue 1: empty chain"):
        plan_remap("T", states, ["b0"], NOW)


def test_plan_does_not_change_its_input():
    states = create(4, ["b0", "b1", "b2"], ["b0", "b1"])
    snapshot = copy_states(states)
    plan = plan_remap("T", states, ["b2"], NOW)
    for m in plan.moved:
        plan.decide(m.global_id, 10, NOW)
    assert {b: (s.detail, s.config) for b, s in states.items()} == \
        {b: (s.detail, s.config) for b, s in snapshot.items()}


def test_decide_clamps_a_negative_max_at_the_start():
    states = create(1, ["b0", "b1"], ["b0"])
    plan = plan_remap("T", states, ["b1"], NOW)
    plan.decide(0, -1, NOW + 3)
    old, new = plan.chains[0]
    assert (old.end_offset, old.time_of_end, new.logic_offset) == (0, NOW + 3, 10_000)


# -- properties -------------------------------------------------------------------------------------------
@st.composite
def topics(draw) -> tuple[list[str], States]:
    """A consistent static topic: created, maybe extended, maybe remapped, maybe extended again."""
    names = BROKERS[: draw(st.integers(1, 6))]
    some = st.lists(st.sampled_from(names), min_size=1, unique=True)
    n = draw(st.integers(1, 16))
    states = create(n, names, draw(some))
    if draw(st.booleans()):
        for u in plan_create_or_extend("T", n + draw(st.integers(1, 8)), states, draw(some), NOW + 10):
            write(states, u)
        check(states)
    for i in range(draw(st.integers(0, 2))):
        _, states = remap(states, draw(some), NOW + 100 * (i + 1), max_of=lambda g, i=i: (g * 977 + i * 5_003) % 17_000)
    if draw(st.booleans()):
        total = next(iter(states.values())).detail.total_queues
        for u in plan_create_or_extend("T", total + draw(st.integers(1, 8)), states, draw(some), NOW + 1_000):
            write(states, u)
        check(states)
    if draw(st.booleans()):
        names = [*names, "b9"]  # a broker of the cluster the topic never touched
        states["b9"] = BrokerTopicState("b9", None, None)
    return names, states


def balanced_moves(before: dict[str, int], targets: set[str], total: int) -> int:
    """The fewest queues a balanced (within one) remap can move."""
    base, extra = divmod(total, len(targets))
    kept = sum(min(before[t], base) for t in targets) + min(extra, sum(before[t] > base for t in targets))
    return total - kept


@settings(max_examples=200, deadline=None)
@given(topics(), st.data())
def test_remap_properties(topic, data):
    names, states = topic
    targets = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    now = data.draw(st.integers(0, 2 * NOW))
    maxes = data.draw(st.lists(st.integers(0, 10**9), min_size=32, max_size=32))
    old_epoch, total, view = current_view(states)
    before = loads(states)
    plan = plan_remap("T", states, targets, now)
    e = next_epoch(old_epoch, now)
    assert plan.epoch == e + 1
    assert {u.detail.epoch for u in plan.gained} <= {e} and {u.detail.epoch for u in plan.full.values()} == {e + 1}
    assert sorted(plan.full) == sorted(states)

    moved = {m.global_id: m for m in plan.moved}
    assert len(moved) == len(plan.moved)
    for gid, chain in plan.chains.items():
        old_leader = view[gid][-1]
        if gid not in moved:  # stays: same chain, its leader is a target
            assert chain == view[gid] and old_leader.bname in targets
            continue
        m = moved[gid]
        assert chain[:-1] == view[gid] and m.old_leader == old_leader.bname
        new = chain[-1]
        assert (new.gen, new.bname, new.logic_offset, new.start_offset, new.end_offset, new.time_of_start) == \
            (old_leader.gen + 1, m.new_leader, NOT_DECIDED, 0, NOT_DECIDED, now)
        assert m.new_leader in targets
    # balanced within one, with as few moves as that allows
    after_loads = dict.fromkeys(targets, 0)
    for chain in plan.chains.values():
        if chain[-1].bname in after_loads:
            after_loads[chain[-1].bname] += 1
    assert sum(after_loads.values()) == total
    assert max(after_loads.values()) - min(after_loads.values()) <= 1
    assert len(plan.moved) == balanced_moves(before, set(targets), total)
    for t in targets:  # a target either gives queues away or takes them in, never both
        assert not (any(m.old_leader == t for m in plan.moved) and any(m.new_leader == t for m in plan.moved))
    # new physical queues: appended on the new leader, never reusing an id
    for b in {m.new_leader for m in plan.moved}:
        old_write = states[b].config.write_queue_nums if states[b].config else 0
        new_ids = sorted(plan.chains[m.global_id][-1].queue_id for m in plan.moved if m.new_leader == b)
        assert new_ids == list(range(old_write, old_write + len(new_ids)))
        assert plan.full[b].config.write_queue_nums == old_write + len(new_ids)
        assert plan.full[b].config.read_queue_nums >= plan.full[b].config.write_queue_nums
    # gained: what the new leaders lead now; the chains they lose stay as they were (fenced in step 2); never a
    # chain another broker leads that they did not hold (its new leader might not have it yet)
    assert sorted(u.bname for u in plan.gained) == sorted({m.new_leader for m in plan.moved})
    for u in plan.gained:
        old = states[u.bname].detail
        held = old.hosted_queues if old else {}
        for gid in range(total):
            chain = u.detail.hosted_queues.get(gid)
            if plan.chains[gid][-1].bname == u.bname:
                assert chain == plan.chains[gid]
            elif gid in moved and gid in held:
                assert chain == held[gid]
            else:
                assert chain is None, gid
        for gid in old.led_queues() if old else {}:  # still writable there until step 2
            assert u.detail.leads(gid) or plan.chains[gid][-1].bname == u.bname
    # full: old leaders are fenced and keep the chain; new leaders lead it
    for m in plan.moved:
        assert plan.full[m.old_leader].detail.hosted_queues[m.global_id] == plan.chains[m.global_id]
        assert not plan.full[m.old_leader].detail.leads(m.global_id)
        assert plan.full[m.new_leader].detail.leads(m.global_id)

    for m in plan.moved:
        plan.decide(m.global_id, maxes[m.global_id], now)
    check_cluster({b: u.detail for b, u in plan.full.items()}, {b: u.config for b, u in plan.full.items()})
    after = execute(states, plan, lambda g: maxes[g], now)  # every write passes check_update
    check(after)
    for gid, chain in chains_of(after).items():
        if gid in moved:
            old, new = chain[-2:]
            assert old.end_offset == maxes[gid]
            assert new.logic_offset == block_round_up(old.logic_strictly(maxes[gid]))
        else:
            assert chain == view[gid]


@settings(max_examples=300, deadline=None)
@given(topic=topics(), data=st.data())
def test_an_interrupted_remap_is_finished_by_running_it_again(topic, data):
    names, states = topic
    some = st.lists(st.sampled_from(names), min_size=1, unique=True)
    now = NOW + 1_000_000
    ever_writable = writable(states)

    def observe(current: States) -> None:
        ever_writable.update(writable(current))
        _, _, view = current_view(current)
        for gid, chain in view.items():
            if not chain[-1].logic_offset_decided():  # a move looks started only once its new leader holds it
                holder = current[chain[-1].bname].detail
                assert holder is not None and holder.hosted_queues.get(gid) == chain, gid
        for gid, bname, qid in writable(current):  # every queue a broker takes sends on is in the view
            assert any((i.bname, i.queue_id) == (bname, qid) for i in view[gid]), (gid, bname, qid)

    for _ in range(data.draw(st.integers(1, 3))):  # fail part-way, maybe again, maybe with other targets
        plan = plan_remap("T", states, data.draw(some), now)
        steps = actions(plan, default_max, now)
        upto = data.draw(st.integers(0, len(steps)))
        states = execute(states, plan, default_max, now, upto, observe)
        now += data.draw(st.integers(0, 10_000))
        if upto == len(steps):
            check(states)

    _, _, view = current_view(states)
    pending = {gid: chain[-1].bname for gid, chain in view.items() if not chain[-1].logic_offset_decided()}
    maxes = data.draw(st.lists(st.integers(0, 10**6), min_size=32, max_size=32))
    again = plan_remap("T", states, data.draw(some), now)
    moved = {m.global_id: m for m in again.moved}
    for gid, leader in pending.items():  # finished in place
        assert moved[gid].new_leader == leader and moved[gid].old_leader == view[gid][-2].bname
        assert again.chains[gid] == view[gid]
    assert {u.bname for u in again.gained} == {m.new_leader for m in again.moved}
    done = execute(states, again, lambda g: maxes[g], now, observe=observe)  # every write passes check_update
    check(done)
    final = chains_of(done)
    for gid, bname, qid in ever_writable:  # nothing sent during the failed runs is lost
        assert any((i.bname, i.queue_id) == (bname, qid) for i in final[gid]), (gid, bname, qid)
    for gid, chain in final.items():
        assert chain[-1].logic_offset_decided()
        if gid in moved:
            assert chain[-2].end_offset == maxes[gid]
            assert chain[-1].logic_offset == block_round_up(chain[-2].logic_strictly(maxes[gid]))
        else:
            assert chain == view[gid]


def test_an_interrupted_remap_after_the_gained_writes():
    states = create(4, ["b0", "b1", "b2", "b3"], ["b0", "b1"])
    plan = plan_remap("T", states, ["b2", "b3"], NOW)
    broken = execute(states, plan, default_max, NOW, upto=len(plan.gained))
    assert {b: s.detail.epoch for b, s in broken.items()} == {"b0": NOW, "b1": NOW, "b2": NOW + 1000,
                                                               "b3": NOW + 1000}
    with pytest.raises(MappingError, match="epoch"):
        check(broken)  # the admin's check refuses other commands until the remap is finished
    again, done = remap(broken, ["b2", "b3"], NOW + 1)
    assert sorted((m.global_id, m.old_leader, m.new_leader) for m in again.moved) == \
        sorted((m.global_id, m.old_leader, m.new_leader) for m in plan.moved)
    assert [u.detail.epoch for u in again.gained] == [NOW + 2000] * 2
    assert loads(done) == {"b0": 0, "b1": 0, "b2": 2, "b3": 2}
    assert done["b2"].config.write_queue_nums == 2  # no second physical queue for a pending move


def test_an_interrupted_remap_after_fencing_and_some_decided_writes():
    states = create(4, ["b0", "b1", "b2", "b3"], ["b0", "b1"])
    plan = plan_remap("T", states, ["b2", "b3"], NOW)
    # gained (2) + fence (2) + decide (4) + the decided chains to b2 only
    broken = execute(states, plan, default_max, NOW, upto=2 + 2 + 4 + 1)
    _, _, view = current_view(broken)
    assert {g for g, c in view.items() if not c[-1].logic_offset_decided()} == \
        set(broken["b3"].detail.led_queues())
    again, done = remap(broken, ["b2", "b3"], NOW + 1)
    assert sorted(m.global_id for m in again.moved) == sorted(broken["b3"].detail.led_queues())
    assert loads(done) == {"b0": 0, "b1": 0, "b2": 2, "b3": 2}


def test_a_broker_that_stored_the_detail_but_not_the_config_is_repaired_by_a_rerun():
    """The broker writes its mapping file before the topic config: a crash in between leaves a new queue id
    that its config does not count yet. The rerun must still end consistent."""
    states = create(2, ["b0", "b1"], ["b0"])
    plan = plan_remap("T", states, ["b1"], NOW)
    broken = execute(states, plan, default_max, NOW, upto=1)  # gained to b1 ...
    broken["b1"] = BrokerTopicState("b1", broken["b1"].detail, copy_config(states["b1"].config))  # ... config lost
    _, done = remap(broken, ["b1"], NOW + 1)
    assert done["b1"].config.write_queue_nums == 2
    assert sorted(done["b1"].detail.led_queues().values()) == [0, 1]


@settings(max_examples=100, deadline=None)
@given(topic=topics(), data=st.data())
def test_successive_remaps_keep_chains_consistent(topic, data):
    names, states = topic
    _, _, start = current_view(states)
    now = NOW + 10**6
    for _ in range(data.draw(st.integers(1, 4))):
        targets = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        maxes = data.draw(st.lists(st.integers(0, 10**6), min_size=32, max_size=32))
        before = current_view(states)[2]
        plan, states = remap(states, targets, now, max_of=lambda g, m=maxes: m[g])  # every write checked
        moved = {m.global_id for m in plan.moved}
        for gid, chain in chains_of(states).items():
            prev = before[gid]
            if gid in moved:  # the old leader's link closed at its max, one new link appended
                assert len(chain) == len(prev) + 1 and chain[:-2] == prev[:-1]
                closed = LogicQueueMappingItem(**{f: getattr(prev[-1], f) for f in prev[-1].__slots__})
                closed.end_offset, closed.time_of_end = maxes[gid], now
                assert chain[-2] == closed
                assert chain[-1].gen == chain[-2].gen + 1 and chain[-1].time_of_start == now
            else:
                assert chain == prev
        now += data.draw(st.integers(0, 5_000))
    for gid, chain in chains_of(states).items():
        assert chain[: len(start[gid]) - 1] == start[gid][:-1]  # history is only ever appended to
        for a, b in itertools.pairwise(chain):
            assert b.gen == a.gen + 1
            assert a.end_offset >= 0
            assert b.logic_offset == block_round_up(a.logic_strictly(a.end_offset))
            assert b.logic_offset > a.max_logic_offset()
        assert chain[-1].end_offset == NOT_DECIDED and chain[-1].logic_offset_decided()


def test_the_write_order_passes_check_update_at_every_broker():
    states = create(6, ["b0", "b1", "b2"], ["b0", "b1", "b2"])
    plan = plan_remap("T", states, ["b1", "b2"], NOW)
    seen: dict[str, list[TopicQueueMappingDetail]] = {b: [s.detail] for b, s in states.items()}
    current = dict(states)
    for action in actions(plan, default_max, NOW):
        action(current)
        for b, s in current.items():
            if s.detail is not seen[b][-1]:
                seen[b].append(s.detail)
    assert [d.epoch for d in seen["b1"]] == [d.epoch for d in seen["b2"]] == [NOW, NOW + 1000, NOW + 1001]
    assert [d.epoch for d in seen["b0"]] == [NOW, NOW + 1001, NOW + 1001]  # fenced, then decided
    for history in seen.values():
        for a, b in itertools.pairwise(history):
            check_update(a, b)

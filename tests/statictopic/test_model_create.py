"""plan_create_or_extend (STATIC_TOPIC.md, "Create or extend")."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.statictopic.logic_queue_mapping_item import NOT_DECIDED, LogicQueueMappingItem
from common.statictopic.mapping_checks import MappingError, check_cluster, check_update
from common.statictopic.static_topic_plan import BrokerTopicState, BrokerUpdate, next_epoch, plan_create_or_extend
from common.statictopic.topic_queue_mapping_detail import MAPPING_SCOPE_GLOBAL, TopicQueueMappingDetail
from common.topic_config import TopicConfig

NOW = 1_700_000_000_000
BROKERS = [f"b{i}" for i in range(6)]


def fresh(*names: str) -> dict[str, BrokerTopicState]:
    return {b: BrokerTopicState(b, None, None) for b in names}


def applied(states: dict[str, BrokerTopicState], updates: list[BrokerUpdate]) -> dict[str, BrokerTopicState]:
    """The brokers' state after every update was written (copies: the wire does not share objects)."""
    out = dict(states)
    for u in updates:
        old = states[u.bname].detail if u.bname in states else None
        check_update(old, u.detail)  # each broker would accept it
        config = None if u.config is None else TopicConfig(u.config.topic_name, u.config.read_queue_nums,
                                                           u.config.write_queue_nums)
        out[u.bname] = BrokerTopicState(u.bname, u.detail.copy(), config)
    return out


def check(states: dict[str, BrokerTopicState]) -> None:
    check_cluster({b: s.detail for b, s in states.items()}, {b: s.config for b, s in states.items()})


def loads(states: dict[str, BrokerTopicState]) -> dict[str, int]:
    return {b: len(s.detail.led_queues()) if s.detail else 0 for b, s in states.items()}


def create(n: int, names: list[str], targets: list[str], now: int = NOW) -> dict[str, BrokerTopicState]:
    states = fresh(*names)
    return applied(states, plan_create_or_extend("T", n, states, targets, now))


# -- create -----------------------------------------------------------------------------------------------
def test_create_by_target_list():
    states = fresh("b0", "b1", "b2")
    updates = plan_create_or_extend("T", 5, states, ["b1", "b0"], NOW)
    assert [u.bname for u in updates] == ["b0", "b1", "b2"]
    by = {u.bname: u for u in updates}
    assert sorted([*by["b0"].detail.led_queues(), *by["b1"].detail.led_queues()]) == [0, 1, 2, 3, 4]
    assert sorted(len(by[b].detail.led_queues()) for b in ("b0", "b1")) == [2, 3]
    for b in ("b0", "b1"):
        d, c = by[b].detail, by[b].config
        assert (d.topic, d.total_queues, d.bname, d.epoch, d.scope) == ("T", 5, b, NOW, MAPPING_SCOPE_GLOBAL)
        n = len(d.hosted_queues)
        assert sorted(d.led_queues().values()) == list(range(n))  # physical ids 0.. appended on a fresh broker
        assert (c.topic_name, c.write_queue_nums, c.read_queue_nums) == ("T", n, n)
        for items in d.hosted_queues.values():
            assert len(items) == 1
            i = items[0]
            assert (i.gen, i.bname, i.logic_offset, i.start_offset, i.end_offset) == (0, b, 0, 0, NOT_DECIDED)
            assert i.time_of_start == NOW
    empty = by["b2"].detail
    assert (empty.epoch, empty.total_queues, empty.hosted_queues, by["b2"].config) == (NOW, 5, {}, None)
    check(applied(states, updates))


@pytest.mark.parametrize(("old", "now", "expected"), [(0, 5, 1000), (0, NOW, NOW), (NOW, NOW, NOW + 1000),
                                                      (NOW, NOW + 999, NOW + 1000), (NOW, NOW + 1001, NOW + 1001)])
def test_next_epoch(old, now, expected):
    assert next_epoch(old, now) == expected


def test_create_epoch_is_old_plus_1000_when_the_clock_is_behind():
    updates = plan_create_or_extend("T", 2, fresh("b0"), ["b0"], 7)
    assert {u.detail.epoch for u in updates} == {1000}


def test_extend_epoch_is_max_of_old_plus_1000_and_now():
    states = create(2, ["b0", "b1"], ["b0"], now=NOW)
    assert {u.detail.epoch for u in plan_create_or_extend("T", 3, states, ["b0"], NOW + 10)} == {NOW + 1000}
    assert {u.detail.epoch for u in plan_create_or_extend("T", 3, states, ["b0"], NOW + 5000)} == {NOW + 5000}


@settings(max_examples=150, deadline=None)
@given(n_brokers=st.integers(1, 6), n=st.integers(1, 40), data=st.data())
def test_create_is_balanced_and_consistent(n_brokers, n, data):
    names = BROKERS[:n_brokers]
    targets = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    now = data.draw(st.integers(0, 2 * NOW))
    states = fresh(*names)
    updates = plan_create_or_extend("T", n, states, targets, now)
    assert sorted(u.bname for u in updates) == sorted(names)  # every broker gets a detail
    after = applied(states, updates)
    check(after)
    load = loads(after)
    target_loads = [load[t] for t in targets]
    assert sum(target_loads) == n
    assert max(target_loads) - min(target_loads) <= 1
    for b in names:
        d, c = after[b].detail, after[b].config
        assert (d.epoch, d.total_queues) == (max(1000, now), n)
        if b not in targets:
            assert d.hosted_queues == {} and c is None
        elif load[b]:
            assert (c.write_queue_nums, c.read_queue_nums) == (load[b], load[b])
            assert sorted(d.led_queues().values()) == list(range(load[b]))


def test_a_repeated_target_counts_once():
    after = create(4, ["b0", "b1"], ["b0", "b0", "b1"])
    assert loads(after) == {"b0": 2, "b1": 2}


# -- extend -----------------------------------------------------------------------------------------------
def test_extend_appends_physical_queues_and_keeps_old_chains():
    states = create(2, ["b0", "b1", "b2"], ["b0"])
    before = {b: (s.detail.copy(), s.config) for b, s in states.items()}
    updates = plan_create_or_extend("T", 5, states, ["b1"], NOW + 1)
    after = applied(states, updates)
    check(after)
    # b0 already holds the topic, so it joins the targets: the 3 new go b1, b1, then b0 (tie, by name)
    assert loads(after) == {"b0": 3, "b1": 2, "b2": 0}
    assert after["b0"].detail.led_queues() == {0: 0, 1: 1, 4: 2}
    for gid, items in before["b0"][0].hosted_queues.items():
        assert after["b0"].detail.hosted_queues[gid] == items
    assert after["b1"].detail.led_queues() == {2: 0, 3: 1}
    assert (after["b1"].config.write_queue_nums, after["b1"].config.read_queue_nums) == (2, 2)
    assert (after["b0"].config.write_queue_nums, after["b0"].config.read_queue_nums) == (3, 3)
    assert before["b0"][1].write_queue_nums == 2  # the input was not changed
    assert states["b1"].detail.hosted_queues == {}
    assert {s.detail.epoch for s in after.values()} == {NOW + 1000}
    assert {s.detail.total_queues for s in after.values()} == {5}


def test_holders_join_the_targets_on_extend():
    states = create(1, ["b0", "b1"], ["b0"])
    after = applied(states, plan_create_or_extend("T", 3, states, ["b1"], NOW))
    # b0 (1 queue) joined: the two new ones go to the least loaded: b1, then b0 or b1 (tie -> b0)
    assert loads(after) == {"b0": 2, "b1": 1}
    assert after["b0"].detail.led_queues() == {0: 0, 2: 1}
    assert after["b0"].config.write_queue_nums == 2


def test_extend_grows_an_existing_config_by_one_per_new_queue():
    states = create(4, ["b0", "b1"], ["b0", "b1"])
    states["b0"].config.read_queue_nums = 5  # more read queues than write queues is allowed
    after = applied(states, plan_create_or_extend("T", 6, states, ["b0", "b1"], NOW))
    assert (after["b0"].config.write_queue_nums, after["b0"].config.read_queue_nums) == (3, 6)
    assert (after["b1"].config.write_queue_nums, after["b1"].config.read_queue_nums) == (3, 3)
    assert after["b0"].detail.led_queues() == {0: 0, 2: 1, 4: 2}
    check(after)


@settings(max_examples=100, deadline=None)
@given(n_brokers=st.integers(1, 6), n=st.integers(1, 20), more=st.integers(1, 20), data=st.data())
def test_extend_fills_the_least_loaded(n_brokers, n, more, data):
    names = BROKERS[:n_brokers]
    first = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    second = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    states = create(n, names, first)
    before = loads(states)
    after = applied(states, plan_create_or_extend("T", n + more, states, second, NOW + 1))
    check(after)
    load = loads(after)
    targets = set(second) | {b for b in names if before[b]}
    assert sum(load[t] - before[t] for t in targets) == more
    assert all(load[b] == before[b] for b in set(names) - targets)
    for a in targets:  # water filling: a broker that got a new queue is at most one above any other target
        if load[a] > before[a]:
            assert all(load[a] <= load[b] + 1 for b in targets)
    for b in names:
        old, new = states[b].detail, after[b].detail
        for gid, items in old.hosted_queues.items():
            assert new.hosted_queues[gid] == items  # nothing old moved
        added = sorted(q for g, q in new.led_queues().items() if g not in old.hosted_queues)
        old_write = states[b].config.write_queue_nums if states[b].config else 0
        assert added == list(range(old_write, old_write + len(added)))  # appended, never reused
        assert set(new.hosted_queues) - set(old.hosted_queues) <= set(range(n, n + more))


# -- refusals ---------------------------------------------------------------------------------------------
def test_fewer_queues_than_now_is_refused():
    states = create(4, ["b0", "b1"], ["b0", "b1"])
    with pytest.raises(MappingError, match="never shrinks"):
        plan_create_or_extend("T", 3, states, ["b0"], NOW)


def test_same_number_of_queues_is_nothing_to_do():
    states = create(4, ["b0", "b1"], ["b0", "b1"])
    with pytest.raises(MappingError, match="nothing to do"):
        plan_create_or_extend("T", 4, states, ["b0"], NOW)


def test_a_normal_topic_is_refused_naming_the_broker():
    states = fresh("b0", "b1", "b2")
    states["b1"] = BrokerTopicState("b1", None, TopicConfig("T", 8, 8))
    with pytest.raises(MappingError, match=r"normal topic on broker b1"):
        plan_create_or_extend("T", 4, states, ["b0"], NOW)


def test_a_normal_topic_on_a_non_target_broker_of_a_static_topic_is_refused():
    states = create(2, ["b0", "b1"], ["b0"])
    states["b1"] = BrokerTopicState("b1", None, TopicConfig("T", 8, 8))
    with pytest.raises(MappingError, match="normal topic on broker b1"):
        plan_create_or_extend("T", 4, states, ["b0"], NOW)


@pytest.mark.parametrize("n", [0, -1])
def test_queue_number_must_be_positive(n):
    with pytest.raises(MappingError, match="must be positive"):
        plan_create_or_extend("T", n, fresh("b0"), ["b0"], NOW)


def test_no_target_or_unknown_target_is_refused():
    with pytest.raises(MappingError, match="no target"):
        plan_create_or_extend("T", 2, fresh("b0"), [], NOW)
    with pytest.raises(MappingError, match=r"\['b9'\] are not known"):
        plan_create_or_extend("T", 2, fresh("b0"), ["b0", "b9"], NOW)


def test_extend_refuses_an_inconsistent_cluster():
    states = create(2, ["b0", "b1"], ["b0", "b1"])
    states["b1"].detail.epoch += 1
    with pytest.raises(MappingError, match="broker b1: epoch"):
        plan_create_or_extend("T", 3, states, ["b0"], NOW)
    states = create(2, ["b0", "b1"], ["b0", "b1"])
    states["b1"].detail = TopicQueueMappingDetail("T", 2, "b0", states["b0"].detail.epoch)
    with pytest.raises(MappingError, match="broker b1: holds a detail whose bname is b0"):
        plan_create_or_extend("T", 3, states, ["b0"], NOW)
    states = create(2, ["b0", "b1"], ["b0", "b1"])
    states["b1"].detail.hosted_queues[1].append(LogicQueueMappingItem(0, 5, "b1", NOT_DECIDED))
    with pytest.raises(MappingError, match=r"broker b1.*gen not increasing"):
        plan_create_or_extend("T", 3, states, ["b0"], NOW)


def test_plan_does_not_change_its_input():
    states = create(3, ["b0", "b1"], ["b0"])
    snapshot = {b: (s.detail.copy(), s.config and TopicConfig(s.config.topic_name, s.config.read_queue_nums,
                                                               s.config.write_queue_nums)) for b, s in states.items()}
    plan_create_or_extend("T", 7, states, ["b1"], NOW)
    assert {b: (s.detail, s.config) for b, s in states.items()} == snapshot

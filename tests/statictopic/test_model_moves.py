"""Pure parts of seed 004's operator side: item status, reuse of expired physical queues, drain and rebalance
choices."""

from collections import Counter

import pytest

from common.statictopic.leader_balance import drain_moves, rebalance_moves
from common.statictopic.logic_queue_mapping_item import NOT_DECIDED, LogicQueueMappingItem
from common.statictopic.mapping_checks import MappingError, check_cluster
from common.statictopic.queue_status import EXPIRED, NORMAL, READ_ONLY, UNKNOWN, item_status, logic_range, reusable
from common.statictopic.static_topic_plan import BrokerTopicState, plan_moves
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import TopicConfig

T = "MovesT"


def it(gen: int, queue_id: int, bname: str, logic: int, end: int = NOT_DECIDED,
       start: int = 0) -> LogicQueueMappingItem:
    return LogicQueueMappingItem(gen=gen, queue_id=queue_id, bname=bname, logic_offset=logic, start_offset=start,
                                 end_offset=end)


# -- status -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("item", "leader", "physical_min", "keeps_state", "status"), [
    (it(0, 0, "b1", 0), True, 0, False, NORMAL),
    (it(0, 0, "b1", 0, end=101), False, 0, False, READ_ONLY),
    (it(0, 0, "b1", 0, end=101), False, 100, False, READ_ONLY),  # one message left
    (it(0, 0, "b1", 0, end=101), False, 101, False, EXPIRED),
    (it(0, 0, "b1", 0, end=0), False, 0, False, EXPIRED),  # never held data
    (it(0, 0, "b1", 0, end=101), False, None, False, UNKNOWN),
    (it(0, 0, "b1", 0, end=101), False, 101, True, READ_ONLY),  # KV state outlives the commitlog
    (it(0, 0, "b1", 0), False, 0, False, READ_ONLY),  # fenced by a move still running: end not decided
    (it(2, 0, "b1", 20_000, end=150, start=101), False, 120, False, READ_ONLY),  # a reused queue
    (it(2, 0, "b1", 20_000, end=150, start=101), False, 150, False, EXPIRED),
])
def test_item_status(item: LogicQueueMappingItem, leader: bool, physical_min: int | None, keeps_state: bool,
                     status: str):
    assert item_status(item, leader, physical_min, keeps_state) == status


def test_logic_ranges_as_the_seed_writes_them():
    assert logic_range(it(0, 0, "b1", 0, end=101), READ_ONLY) == (0, 100)
    assert logic_range(it(1, 2, "b2", 10_000), NORMAL) == (10_000, None)
    assert logic_range(it(0, 0, "b1", 0, end=101), EXPIRED) == (None, None)
    assert logic_range(it(1, 2, "b2", NOT_DECIDED), NORMAL) == (None, None)


def test_only_expired_items_that_held_data_are_reusable():
    assert reusable(it(0, 0, "b1", 0, end=101), 101)
    assert not reusable(it(0, 0, "b1", 0, end=101), 100)  # read-only
    assert not reusable(it(0, 0, "b1", 0, end=0), 0)  # a stored offset 0 there would be ambiguous
    assert not reusable(it(0, 0, "b1", 0), 0)  # still open


# -- reuse in a move --------------------------------------------------------------------------------------
def seed_states(chain0: list[LogicQueueMappingItem]) -> dict[str, BrokerTopicState]:
    """The seed's layout: b1 leads logic queue 1 (and 0 when ``chain0`` ends there), b2 leads 2 and 3."""
    d1 = TopicQueueMappingDetail(T, 4, "b1", 5000, hosted_queues={1: [it(0, 1, "b1", 0)]})
    d2 = TopicQueueMappingDetail(T, 4, "b2", 5000, hosted_queues={2: [it(0, 0, "b2", 0)], 3: [it(0, 1, "b2", 0)]})
    (d1 if chain0[-1].bname == "b1" else d2).hosted_queues[0] = chain0
    return {"b1": BrokerTopicState("b1", d1, TopicConfig(T, 2, 2)),
            "b2": BrokerTopicState("b2", d2, TopicConfig(T, 3, 3))}


def test_moving_back_onto_an_expired_queue_reuses_it_from_its_max():
    states = seed_states([it(0, 0, "b1", 0, end=101), it(1, 2, "b2", 10_000)])
    plan = plan_moves(T, states, {0: "b1"}, now_ms=10_000, expired={("b1", 0): 101})
    assert [(m.global_id, m.old_leader, m.new_leader, m.reused) for m in plan.moved] == [(0, "b2", "b1", True)]
    chain = plan.chains[0]
    assert [(i.bname, i.queue_id, i.gen) for i in chain] == [("b2", 2, 1), ("b1", 0, 2)]  # the expired link left
    assert chain[-1].start_offset == 101 and not chain[-1].logic_offset_decided()
    assert plan.full["b1"].config is not None and plan.full["b1"].config.write_queue_nums == 2  # no new queue
    plan.decide(0, 100, now_ms=10_001)
    assert chain[-1].logic_offset == 20_000
    check_cluster({b: u.detail for b, u in plan.full.items()}, {b: u.config for b, u in plan.full.items()})


def test_moving_back_onto_a_read_only_queue_adds_one():
    states = seed_states([it(0, 0, "b1", 0, end=101), it(1, 2, "b2", 10_000)])
    plan = plan_moves(T, states, {0: "b1"}, now_ms=10_000, expired={})
    chain = plan.chains[0]
    assert [(i.bname, i.queue_id) for i in chain] == [("b1", 0), ("b2", 2), ("b1", 2)]
    assert chain[-1].start_offset == 0 and not plan.moved[0].reused


def test_a_move_names_a_known_queue_and_broker():
    states = seed_states([it(0, 0, "b1", 0)])
    with pytest.raises(MappingError, match="logic queue 7 does not exist"):
        plan_moves(T, states, {7: "b2"}, now_ms=1)
    with pytest.raises(MappingError, match="broker b9 is not known"):
        plan_moves(T, states, {0: "b9"}, now_ms=1)
    assert plan_moves(T, states, {0: "b1"}, now_ms=1).moved == []  # already there


# -- drain and rebalance ----------------------------------------------------------------------------------
def test_drain_moves_only_the_drained_brokers_queues_and_balances_the_topic():
    leaders = {0: "a", 1: "a", 2: "a", 3: "b", 4: "c", 5: "c", 6: "c", 7: "c"}
    moves = drain_moves(leaders, "c", ["a", "b"], Counter())
    assert set(moves) == {4, 5, 6, 7}
    after = Counter({**leaders, **moves}.values())
    assert after == {"a": 4, "b": 4}


def test_drain_spreads_over_topics_by_global_load():
    load: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for _topic in range(10):  # every topic: one queue on c, one on each other broker
        moves = drain_moves({0: "a", 1: "b", 2: "c"}, "c", ["a", "b"], load)
        total.update(moves.values())
    assert total == {"a": 5, "b": 5}


def test_rebalance_gives_a_new_broker_its_share_with_the_fewest_moves():
    leaders = {0: "b1", 1: "b1", 2: "b1", 3: "b1"}
    moves = rebalance_moves(leaders, ["b1", "b3"], {"b1", "b3"}, Counter())
    assert moves == {2: "b3", 3: "b3"}  # the newest ids, as the seed's last table
    leaders = {g: "a" if g < 5 else "b" for g in range(8)}  # a 5, b 3, c new
    moves = rebalance_moves(leaders, ["a", "b", "c"], {"a", "b", "c"}, Counter())
    assert len(moves) == 2 and set(moves.values()) == {"c"}
    assert sorted(Counter({**leaders, **moves}.values()).values()) == [2, 3, 3]
    assert rebalance_moves({**leaders, **moves}, ["a", "b", "c"], {"a", "b", "c"}, Counter()) == {}


def test_rebalance_empties_excluded_members_and_leaves_other_clusters_alone():
    leaders = {0: "a", 1: "x", 2: "far", 3: "a"}
    moves = rebalance_moves(leaders, ["a", "b"], {"a", "b", "x"}, Counter())
    assert 2 not in moves and moves.get(1) == "b"

"""The consistency rules (STATIC_TOPIC.md, "Checks before any change" and "Errors"): every rule is reachable,
its message names the broker and the rule, and valid mappings pass."""

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.statictopic.logic_queue_mapping_item import NOT_DECIDED, LogicQueueMappingItem
from common.statictopic.mapping_checks import (
    NO_DETAIL,
    MappingConflict,
    MappingError,
    check_chain,
    check_cluster,
    check_fields,
    check_update,
)
from common.statictopic.topic_queue_mapping_detail import MAPPING_SCOPE_GLOBAL, TopicQueueMappingDetail
from common.topic_config import TopicConfig

EPOCH = 5_000


def it(gen: int, queue_id: int, bname: str, logic: int = 0, end: int = NOT_DECIDED, start: int = 0):
    return LogicQueueMappingItem(gen=gen, queue_id=queue_id, bname=bname, logic_offset=logic, start_offset=start,
                                 end_offset=end)


def cluster() -> tuple[dict[str, TopicQueueMappingDetail], dict[str, TopicConfig | None]]:
    """T, 4 logic queues. b0 leads 0 and 2 and keeps the chain of 3 it lost to b1; b1 leads 1 and 3; b2 holds
    nothing (a no-target broker)."""
    chain3 = [it(0, 2, "b0", 0, 120), it(1, 1, "b1", 10_000)]
    b0 = TopicQueueMappingDetail("T", 4, "b0", EPOCH, hosted_queues={
        0: [it(0, 0, "b0")], 2: [it(0, 1, "b0")], 3: [LogicQueueMappingItem(**{f: getattr(i, f) for f in i.__slots__})
                                                       for i in chain3]})
    b1 = TopicQueueMappingDetail("T", 4, "b1", EPOCH, hosted_queues={1: [it(0, 0, "b1")], 3: chain3})
    b2 = TopicQueueMappingDetail("T", 4, "b2", EPOCH)
    return {"b0": b0, "b1": b1, "b2": b2}, {"b0": TopicConfig("T", 3, 3), "b1": TopicConfig("T", 2, 2), "b2": None}


def refused(fn: Callable[[], object], *fragments: str) -> str:
    with pytest.raises(MappingError) as err:
        fn()
    msg = str(err.value)
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"
    return msg


# -- check_cluster ----------------------------------------------------------------------------------------
def test_valid_cluster_passes():
    details, configs = cluster()
    check_cluster(details, configs)
    for d in details.values():
        check_fields(d)
        check_update(None, d)
        check_update(d, d.copy())


def test_fixture_leaders():
    details, _ = cluster()
    assert details["b0"].led_queues() == {0: 0, 2: 1}
    assert details["b1"].led_queues() == {1: 0, 3: 1}
    assert details["b2"].led_queues() == {}
    assert details["b0"].leads(0) and not details["b0"].leads(3) and details["b1"].leads(3)
    assert details["b2"].leader(0) is None


def _set(obj: object, **values: object) -> None:
    for k, v in values.items():
        setattr(obj, k, v)


CLUSTER_BREAKS = [
    ("topic differs", lambda d, c: _set(d["b1"], topic="U"), "broker b1", "topic"),
    ("scope differs", lambda d, c: _set(d["b2"], scope="other"), "broker b2", "scope"),
    ("epoch differs", lambda d, c: _set(d["b1"], epoch=EPOCH + 1), "broker b1", "epoch"),
    ("total differs", lambda d, c: _set(d["b2"], total_queues=5), "broker b2", "total_queues"),
    ("bname is not the broker it came from", lambda d, c: _set(d["b2"], bname="b0"), "broker b2", "bname is b0"),
    ("a leader missing", lambda d, c: d["b0"].hosted_queues.pop(2), "topic T", "[2] have no leader"),
    ("two leaders", lambda d, c: (d["b2"].hosted_queues.__setitem__(0, [it(0, 0, "b2")]),
                                  c.__setitem__("b2", TopicConfig("T", 1, 1))), "led by", "logic queue 0"),
    ("physical queue used twice", lambda d, c: _set(d["b0"].hosted_queues[2][0], queue_id=0),
     "broker b0", "physical queue b0/0 is used by logic queues 0 and 2"),
    ("physical queue used twice across chains", lambda d, c: _set(d["b1"].hosted_queues[3][1], queue_id=0),
     "physical queue b1/0 is used by logic queues"),
    ("queue id not below write count", lambda d, c: _set(c["b0"], write_queue_nums=2, read_queue_nums=2),
     "broker b0", "physical queue 2", "not below the topic's write queue count"),
    ("queue id not below write count (new leader)", lambda d, c: _set(c["b1"], write_queue_nums=1),
     "broker b1", "physical queue 1", "not below the topic's write queue count"),
    ("no topic config at all for queues", lambda d, c: c.__setitem__("b1", None),
     "broker b1", "not below the topic's write queue count"),
    ("read below write", lambda d, c: _set(c["b1"], read_queue_nums=1),
     "broker b1", "read queues 1 below write queues 2"),
    ("read below write on a no-target broker", lambda d, c: c.__setitem__("b2", TopicConfig("T", 0, 1)),
     "broker b2", "read queues 0 below write queues 1"),
    ("gen not increasing in a chain", lambda d, c: _set(d["b1"].hosted_queues[3][1], gen=0),
     "broker b", "gen not increasing"),
    ("negative field", lambda d, c: _set(d["b2"], epoch=-1), "broker b2", "epoch"),
]


@pytest.mark.parametrize(("mutate", "fragments"), [(m, f) for _, m, *f in CLUSTER_BREAKS],
                         ids=[name for name, *_ in CLUSTER_BREAKS])
def test_cluster_rule_is_enforced(mutate, fragments):
    details, configs = cluster()
    mutate(details, configs)
    refused(lambda: check_cluster(details, configs), *fragments)


def test_two_leaders_names_both_brokers():
    details, configs = cluster()
    details["b2"].hosted_queues[0] = [it(0, 0, "b2")]
    configs["b2"] = TopicConfig("T", 1, 1)
    msg = refused(lambda: check_cluster(details, configs), "also led by")
    assert "b0" in msg and "b2" in msg


def test_negative_epoch_everywhere_is_a_negative_field():
    details, configs = cluster()
    for d in details.values():
        d.epoch = -5
    refused(lambda: check_cluster(details, configs), "broker b0", "negative field")


def test_detail_copied_to_another_broker_is_refused():
    details, configs = cluster()
    details["b2"] = details["b0"].copy()  # b0's file copied onto b2
    refused(lambda: check_cluster(details, configs), "broker b2", "bname is b0")


def test_no_detail_at_all_is_refused():
    refused(lambda: check_cluster({}, {}), "no broker")


def test_leader_cover_needs_every_queue_and_names_them():
    details, configs = cluster()
    details["b1"].hosted_queues.clear()  # b0 still holds queue 3's chain, but b1 no longer leads it
    refused(lambda: check_cluster(details, configs), "[1, 3] have no leader")


def test_a_lost_chain_alone_is_not_a_leader():
    details, configs = cluster()
    del details["b1"]  # only b0's copy of queue 3 is left, and it says b1 leads it
    configs.pop("b1")
    refused(lambda: check_cluster(details, configs), "no leader")


# -- chains -----------------------------------------------------------------------------------------------
def chain_refused(items: list[LogicQueueMappingItem], *fragments: str) -> None:
    refused(lambda: check_chain("bx", "T", 1, items), "broker bx", "logic queue 1", *fragments)
    detail = TopicQueueMappingDetail("T", 4, "bx", EPOCH, hosted_queues={1: items})
    refused(lambda: check_fields(detail), "broker bx", *fragments)
    refused(lambda: check_update(None, detail), "broker bx", *fragments)


@pytest.mark.parametrize(("items", "fragment"), [
    ([], "empty chain"),
    ([it(0, 0, "b0", 0, 10), it(0, 1, "b1", 10_000)], "gen not increasing: 0 then 0"),
    ([it(3, 0, "b0", 0, 10), it(2, 1, "b1", 10_000)], "gen not increasing: 3 then 2"),
    ([it(0, 0, "b0", 0, 10), it(2, 1, "b1", 10_000), it(1, 2, "b2", 30_000)], "gen not increasing: 2 then 1"),
    ([it(0, 0, "b0", NOT_DECIDED), it(1, 1, "b1", 10_000)], "logic offset -1"),
    ([it(0, 0, "b0", 0, 5), it(1, 1, "b1", NOT_DECIDED, 3), it(2, 2, "b2", 30_000)], "logic offset -1"),
    ([it(0, 0, "b0", 20_000, 5), it(1, 1, "b1", 20_000)], "logic offsets not increasing"),
    ([it(0, 0, "b0", 20_000, 5), it(1, 1, "b1", 10_000)], "logic offsets not increasing"),
    ([it(0, 0, "b0", 0, 20_000), it(1, 1, "b1", 10_000)], "logic offsets not increasing"),  # starts inside gen 0
    ([it(0, 0, "b0", 0, 10_000), it(1, 1, "b1", 10_000)], "logic offsets not increasing"),  # at gen 0's max
    ([it(0, 0, "b0", 0, 10), it(1, 1, "b1", 10_000, 50), it(2, 2, "b2", 10_050)], "logic offsets not increasing"),
    ([it(0, 0, "b0", 0, 10, start=11)], "ends (10) before it starts"),
    ([it(0, 0, "b0", 0, 10), it(1, 1, "b1", 10_000), it(2, 0, "b0", 20_000, start=10)], "appears twice"),
    ([it(-1, 0, "b0")], "negative field"),
    ([it(0, -1, "b0")], "negative field"),
    ([it(0, 0, "b0", start=-1)], "negative field"),
    ([it(0, 0, "b0", logic=-2)], "negative field"),
    ([it(0, 0, "b0", end=-2)], "negative field"),
    ([it(0, 0, "b0", 0, 10), it(1, -3, "b1", 10_000)], "negative field"),
])
def test_chain_rule_is_enforced(items, fragment):
    chain_refused(items, fragment)


@pytest.mark.parametrize("items", [
    [it(0, 0, "b0")],
    [it(0, 0, "b0", NOT_DECIDED)],  # a brand-new link not yet placed
    [it(0, 0, "b0", 0, 0), it(1, 0, "b1", 10_000)],  # an empty closed link
    [it(0, 0, "b0", 0, 10), it(1, 1, "b1", 10_000, 6_000), it(2, 2, "b2", 30_000)],
    [it(0, 0, "b0", 0, 10), it(5, 1, "b1", 10_000, 6_000), it(9, 2, "b2", NOT_DECIDED)],  # gens may skip
    [it(0, 0, "b0", 0), it(1, 1, "b1", NOT_DECIDED)],  # an open old leader while the new link is undecided
    [it(0, 0, "b0", 0, 9_999), it(1, 1, "b1", 10_000)],  # just above gen 0's max
])
def test_valid_chains_pass(items):
    check_chain("bx", "T", 1, items)


def test_detail_fields():
    ok = TopicQueueMappingDetail("T", 2, "b0", 0, hosted_queues={1: [it(0, 0, "b0")]})
    check_fields(ok)
    for bad, fragment in [
        (TopicQueueMappingDetail("T", 0, "b0", 1), "negative field: total queues 0"),
        (TopicQueueMappingDetail("T", -3, "b0", 1), "negative field: total queues -3"),
        (TopicQueueMappingDetail("T", 2, "b0", -1), "negative field: epoch -1"),
        (TopicQueueMappingDetail("T", 2, "b0", 1, hosted_queues={2: [it(0, 0, "b0")]}), "logic queue 2 is outside"),
        (TopicQueueMappingDetail("T", 2, "b0", 1, hosted_queues={-1: [it(0, 0, "b0")]}), "logic queue -1 is outside"),
    ]:
        refused(lambda bad=bad: check_fields(bad), "broker b0", fragment)


@st.composite
def valid_chains(draw) -> list[LogicQueueMappingItem]:
    n = draw(st.integers(1, 6))
    items = []
    gen, logic = draw(st.integers(0, 3)), draw(st.integers(0, 10**6))
    for i in range(n):
        last = i == n - 1
        end = draw(st.integers(0, 10**5)) if not last or draw(st.booleans()) else NOT_DECIDED
        decided = not last or n == 1 or draw(st.booleans())
        items.append(it(gen, i, f"b{i % 3}", logic if decided else NOT_DECIDED, end))
        gen += draw(st.integers(1, 3))
        logic = logic + max(end, 0) + draw(st.integers(1, 10**5))
    return items


@given(valid_chains())
def test_generated_valid_chains_pass(items):
    check_chain("bx", "T", 0, items)


@given(valid_chains().filter(lambda c: len(c) >= 2), st.data())
def test_any_overlap_between_links_is_refused(items, data):
    i = data.draw(st.integers(1, len(items) - 1))
    prev = items[i - 1]
    # anywhere from the previous link's start up to (and including) its max is refused
    low, high = prev.logic_offset, prev.max_logic_offset()
    items[i].logic_offset = data.draw(st.one_of(st.just(high), st.just(low), st.integers(low, high)))
    chain_refused(items[: i + 1], "logic offsets not increasing")


@given(valid_chains().filter(lambda c: len(c) >= 2), st.data())
def test_any_gen_regression_is_refused(items, data):
    i = data.draw(st.integers(1, len(items) - 1))
    items[i].gen = data.draw(st.integers(0, items[i - 1].gen))
    chain_refused(items, "gen not increasing")


# -- check_update (the broker side) -----------------------------------------------------------------------
def b1_detail(epoch: int = EPOCH) -> TopicQueueMappingDetail:
    return TopicQueueMappingDetail("T", 4, "b1", epoch, hosted_queues={
        1: [it(0, 0, "b1")], 3: [it(0, 2, "b0", 0, 120), it(1, 1, "b1", 10_000)]})


def test_update_accepts_a_first_detail_and_a_higher_epoch_with_other_leaders():
    check_update(None, b1_detail())
    new = b1_detail(EPOCH + 1000)
    new.hosted_queues[1].append(it(1, 2, "b2", NOT_DECIDED))  # queue 1 moved away from b1
    new.hosted_queues[0] = [it(0, 0, "b0", 0, 5), it(1, 3, "b1", 10_000)]  # and queue 0 moved here
    check_update(b1_detail(), new)


def test_update_at_equal_epoch_may_decide_offsets_but_keep_leaders():
    old = b1_detail()
    old.hosted_queues[3] = [it(0, 2, "b0", 0), it(1, 1, "b1", NOT_DECIDED)]
    check_update(old, b1_detail())  # the same leaders, now decided
    check_update(b1_detail(), b1_detail())


def test_update_smaller_epoch():
    refused(lambda: check_update(b1_detail(), b1_detail(EPOCH - 1)), "broker b1", "smaller epoch", str(EPOCH - 1),
            str(EPOCH))


def test_update_scope_mismatch():
    new = b1_detail(EPOCH + 1)
    new.scope = "cluster-x"
    refused(lambda: check_update(b1_detail(), new), "broker b1", "scope mismatch", MAPPING_SCOPE_GLOBAL, "cluster-x")


@pytest.mark.parametrize(("change", "when_newer"), [
    (lambda d: _set(d.hosted_queues[1][0], queue_id=7), "forks at gen 0"),  # another physical queue
    (lambda d: d.hosted_queues[1].append(it(1, 2, "b2", NOT_DECIDED)), None),  # another broker
    (lambda d: d.hosted_queues.pop(1), "drops link gen 0"),  # dropped
    (lambda d: d.hosted_queues.__setitem__(0, [it(0, 3, "b1")]), None),  # gained
], ids=["queue id", "broker", "dropped", "gained"])
def test_update_leader_changed_at_equal_epoch(change, when_newer):
    new = b1_detail()
    change(new)
    refused(lambda: check_update(b1_detail(), new), "broker b1", "leader changed at equal epoch")
    new.epoch += 1
    if when_newer is None:
        check_update(b1_detail(), new)  # fine with a higher epoch
    else:  # never, even newer: the link b1 leads, with its messages, would be in no chain (or in two)
        refused(lambda: check_update(b1_detail(), new), "broker b1", "changed meanwhile", when_newer)


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda d: _set(d.hosted_queues[3][1], gen=0), "gen not increasing"),
    (lambda d: _set(d.hosted_queues[3][1], logic_offset=100), "logic offsets not increasing"),
    (lambda d: _set(d.hosted_queues[3][1], logic_offset=120), "logic offsets not increasing"),
    (lambda d: _set(d.hosted_queues[3][0], end_offset=-7), "negative field"),
    (lambda d: _set(d, total_queues=0), "negative field"),
    (lambda d: _set(d, epoch=-1), "negative field"),
])
def test_update_checks_the_new_chains(change, fragment):
    new = b1_detail(EPOCH + 1)
    change(new)
    refused(lambda: check_update(b1_detail(), new), "broker b1", fragment)
    refused(lambda: check_update(None, new), "broker b1", fragment)


# -- what a newer detail must keep of the held one (two admins at once) -----------------------------------------
def test_update_with_an_expected_epoch_is_a_compare_and_set():
    newer = b1_detail(EPOCH + 1000)
    check_update(b1_detail(), newer, EPOCH)  # planned from what the broker holds
    check_update(None, newer, NO_DETAIL)
    check_update(b1_detail(), newer)  # an older admin: no condition
    for held, expected, fragments in [(b1_detail(), EPOCH - 1000, (str(EPOCH - 1000), str(EPOCH))),
                                      (b1_detail(), NO_DETAIL, ("none (no detail)", str(EPOCH))),
                                      (None, EPOCH, (str(EPOCH), "none (no detail)"))]:
        msg = refused(lambda h=held, e=expected: check_update(h, newer, e), "broker b1", "changed meanwhile",
                      *fragments)
        assert "planned from epoch" in msg
    with pytest.raises(MappingConflict):
        check_update(b1_detail(), newer, EPOCH + 1)


def test_a_newer_detail_may_close_the_led_link_but_not_fork_it():
    moved = b1_detail(EPOCH + 1000)  # queue 3 moves on from b1: its link is closed, still in the chain
    moved.hosted_queues[3] = [it(0, 2, "b0", 0, 120), it(1, 1, "b1", 10_000, 50), it(2, 4, "b2", 20_000)]
    check_update(b1_detail(), moved)
    forked = b1_detail(EPOCH + 1000)  # another admin planned from before b1 led it: same gen, another link
    forked.hosted_queues[3] = [it(0, 2, "b0", 0, 120), it(1, 5, "b2", NOT_DECIDED)]
    refused(lambda: check_update(b1_detail(), forked), "broker b1", "changed meanwhile", "logic queue 3",
            "forks at gen 1", "b1/1", "b2/5")
    shifted = b1_detail(EPOCH + 1000)  # the same link placed at another logic offset: offsets handed out twice
    shifted.hosted_queues[3][1].logic_offset = 20_000
    refused(lambda: check_update(b1_detail(), shifted), "forks at gen 1")
    dropped = b1_detail(EPOCH + 1000)
    del dropped.hosted_queues[3]
    refused(lambda: check_update(b1_detail(), dropped), "broker b1", "drops link gen 1 (b1/1) of logic queue 3")


def test_a_previous_leader_may_forget_the_chain_it_lost_and_an_undecided_link_may_be_replaced():
    held = TopicQueueMappingDetail("T", 4, "b0", EPOCH, hosted_queues={3: [it(0, 2, "b0", 0, 120),
                                                                           it(1, 1, "b1", 10_000)]})
    check_update(held, TopicQueueMappingDetail("T", 4, "b0", EPOCH + 1000))  # b0 no longer keeps queue 3's chain
    forked = TopicQueueMappingDetail("T", 4, "b0", EPOCH + 1000, hosted_queues={3: [it(0, 2, "b0", 0, 120),
                                                                                   it(1, 7, "b2", NOT_DECIDED)]})
    refused(lambda: check_update(held, forked), "broker b0", "forks at gen 1")  # but never takes a fork
    step1 = TopicQueueMappingDetail("T", 4, "b1", EPOCH, hosted_queues={3: [it(0, 2, "b0", 0, 120),
                                                                            it(1, 1, "b1", NOT_DECIDED)]})
    check_update(step1, TopicQueueMappingDetail("T", 4, "b1", EPOCH + 1000))  # nothing was read from it yet

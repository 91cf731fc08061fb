"""Offset arithmetic of one chain link and the remap block jump (STATIC_TOPIC.md, "Offset arithmetic")."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.statictopic.logic_queue_mapping_item import (
    BLOCK_SIZE,
    NOT_DECIDED,
    LogicQueueMappingItem,
    block_round_up,
)

B = 10_000
offsets = st.integers(min_value=0, max_value=2**62)
small = st.integers(min_value=0, max_value=10**12)


def item(logic: int = 0, start: int = 0, end: int = NOT_DECIDED) -> LogicQueueMappingItem:
    return LogicQueueMappingItem(gen=0, queue_id=0, bname="b0", logic_offset=logic, start_offset=start,
                                 end_offset=end)


# -- strict -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("logic", "start", "physical", "expected"), [
    (0, 0, 0, 0), (0, 0, 7, 7), (20_000, 0, 0, 20_000), (20_000, 0, 13, 20_013),
    (20_000, 5, 4, 20_000), (20_000, 5, 0, 20_000), (20_000, 5, 5, 20_000), (20_000, 5, 6, 20_001),
])
def test_strict_examples(logic, start, physical, expected):
    assert item(logic, start).logic_strictly(physical) == expected


@given(logic=small, start=small, physical=small, end=st.one_of(st.just(NOT_DECIDED), small))
def test_strict_is_logic_below_start_else_logic_plus_distance(logic, start, physical, end):
    got = item(logic, start, end).logic_strictly(physical)
    assert got == (logic if physical < start else logic + physical - start)  # the end never clamps it


def test_strict_does_not_clamp_at_a_decided_end():
    assert item(10_000, 0, 50).logic_strictly(80) == 10_080


def test_strict_refuses_an_undecided_item():
    with pytest.raises(AssertionError):
        item(NOT_DECIDED).logic_strictly(3)


# -- loose ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("logic", "start", "end", "physical", "expected"), [
    (-1, 0, -1, 0, -1), (-1, 0, -1, 99, -1), (-1, 0, 10, 99, -1),  # undecided: -1 whatever the offset
    (100, 5, -1, 4, 100), (100, 5, -1, 5, 100), (100, 5, -1, 9, 104),  # below start: clamped to logic
    (100, 0, -1, 1_000_000, 1_000_100),  # open end: never clamped
    (100, 0, 50, 49, 149), (100, 0, 50, 50, 150), (100, 0, 50, 51, 150), (100, 0, 50, 10**9, 150),
    (100, 5, 50, 60, 145), (100, 5, 50, 2, 100),
])
def test_loose_examples(logic, start, end, physical, expected):
    assert item(logic, start, end).logic_loosely(physical) == expected


@given(logic=small, start=small, physical=small, end=st.one_of(st.just(NOT_DECIDED), small))
def test_loose_follows_the_rule(logic, start, physical, end):
    got = item(logic, start, end).logic_loosely(physical)
    if physical < start:
        assert got == logic
    elif end >= 0 and physical > end:
        assert got == logic + end - start
    else:
        assert got == logic + physical - start


@given(start=small, physical=small, end=st.one_of(st.just(NOT_DECIDED), small))
def test_loose_is_minus_one_while_undecided(start, physical, end):
    assert item(NOT_DECIDED, start, end).logic_loosely(physical) == -1


@given(logic=small, end=small, physical=small)
def test_loose_never_passes_the_max_of_a_closed_item(logic, end, physical):
    it = item(logic, 0, end)
    assert it.logic_loosely(physical) <= it.max_logic_offset()
    assert it.logic_loosely(physical) == min(logic + physical, logic + end)


@given(logic=small, start=small, physical=small)
def test_loose_equals_strict_on_an_open_decided_item(logic, start, physical):
    it = item(logic, start)
    assert it.logic_loosely(physical) == it.logic_strictly(physical)


# -- physical from logic, delta, max ----------------------------------------------------------------------
@pytest.mark.parametrize(("logic", "start", "s", "expected"), [
    (0, 0, 0, 0), (0, 0, 9, 9), (20_000, 0, 20_000, 0), (20_000, 0, 20_017, 17), (20_000, 3, 20_017, 20),
    (20_000, 3, 19_999, 2),  # no clamping: below the item gives a physical offset below its start
])
def test_physical_of_examples(logic, start, s, expected):
    assert item(logic, start).physical_of(s) == expected


@given(logic=small, start=small, s=small)
def test_physical_of_is_s_minus_logic_plus_start(logic, start, s):
    assert item(logic, start).physical_of(s) == s - logic + start


@given(logic=small, start=small, physical=small)
def test_physical_of_inverts_strict_from_the_start_on(logic, start, physical):
    it = item(logic, start)
    p = start + physical
    assert it.physical_of(it.logic_strictly(p)) == p
    assert it.logic_strictly(it.physical_of(logic + physical)) == logic + physical


@given(logic=small, start=small, physical=small)
def test_offset_delta_is_logic_minus_start(logic, start, physical):
    it = item(logic, start)
    assert it.offset_delta() == logic - start
    assert start + physical + it.offset_delta() == it.logic_strictly(start + physical)


@pytest.mark.parametrize(("logic", "start", "end", "expected"), [
    (0, 0, -1, 0), (30_000, 0, -1, 30_000), (30_000, 0, 0, 30_000), (30_000, 0, 123, 30_123), (30_000, 4, 123, 30_119),
])
def test_max_logic_offset_examples(logic, start, end, expected):
    assert item(logic, start, end).max_logic_offset() == expected


@given(logic=small, start=small, length=small)
def test_max_logic_offset_of_closed_and_open_items(logic, start, length):
    assert item(logic, start, start + length).max_logic_offset() == logic + length
    assert item(logic, start).max_logic_offset() == logic


def test_decided_predicates():
    assert not item(NOT_DECIDED).logic_offset_decided() and item(0).logic_offset_decided()
    assert not item(0).end_offset_decided() and item(0, 0, 0).end_offset_decided()


# -- block round up ---------------------------------------------------------------------------------------
def test_block_size_is_ten_thousand():
    assert BLOCK_SIZE == B


@pytest.mark.parametrize(("o", "expected"), [
    (0, 10_000), (1, 10_000), (4_999, 10_000), (5_000, 20_000), (5_001, 20_000), (9_999, 20_000),
    (10_000, 20_000), (14_999, 20_000), (15_000, 30_000), (123_456, 130_000), (125_000, 140_000),
])
def test_block_round_up_examples(o, expected):
    assert block_round_up(o) == expected
    assert block_round_up(o, B) == expected


@given(o=offsets)
def test_block_round_up_properties(o):
    r = block_round_up(o)
    assert r == ((o // B + 1) * B if o % B < B / 2 else (o // B + 2) * B)
    assert r > o
    assert r % B == 0
    assert r - o >= B / 2
    assert r - o <= 2 * B


@given(o=st.integers(min_value=0, max_value=10**15), block=st.integers(min_value=1, max_value=10**6))
def test_block_round_up_follows_the_rule_for_any_block(o, block):
    r = block_round_up(o, block)
    assert r == ((o // block + 1) * block if o % block < block / 2 else (o // block + 2) * block)
    assert r > o and r % block == 0 and r - o >= block / 2


@pytest.mark.parametrize(("o", "block", "expected"), [(1, 3, 3), (2, 3, 6), (0, 3, 3), (4, 3, 6), (5, 3, 9),
                                                       (0, 1, 1), (7, 1, 8), (2, 5, 5), (3, 5, 10)])
def test_block_round_up_odd_blocks_use_the_exact_half(o, block, expected):
    assert block_round_up(o, block) == expected

"""A read's check of the records it serves against their consume-queue units (``broker/store/record_identity.py``):
a run of one size is checked in one unpack (the first and last record whole, the magic of each), others one by
one; a zeroed record anywhere, a unit that names another offset, or one past the segment fails it."""

import mmap

import pytest

from broker.store.record_identity import IDENTITY, run_intact
from common.message_codec import MESSAGE_MAGIC

QUEUE_ID, FIRST = 3, 100


def records(sizes: list[int]) -> tuple[mmap.mmap, list[tuple[int, int, int]]]:
    mm = mmap.mmap(-1, sum(sizes) + 64)
    units, pos = [], 0
    for i, size in enumerate(sizes):
        IDENTITY.pack_into(mm, pos, size, MESSAGE_MAGIC, QUEUE_ID, FIRST + i, 5000 + pos)
        units.append((5000 + pos, size, 0))
        pos += size
    return mm, units


@pytest.mark.parametrize("sizes", [[1115] * 64, [200, 1115, 90, 4000] * 8], ids=["one size", "mixed sizes"])
def test_a_run_is_intact_until_one_record_is_not(sizes: list[int]):
    mm, units = records(sizes)
    assert run_intact(mm, 0, units, len(units), QUEUE_ID, FIRST)
    assert not run_intact(mm, 0, units, len(units), QUEUE_ID, FIRST + 1)  # the units name other offsets
    assert not run_intact(mm, 0, units, len(units), QUEUE_ID + 1, FIRST)
    middle = units[len(units) // 2][0] - 5000
    mm[middle:middle + 64] = bytes(64)  # a bad page in the middle record's header
    assert not run_intact(mm, 0, units, len(units), QUEUE_ID, FIRST)
    assert run_intact(mm, 0, units, len(units) // 2, QUEUE_ID, FIRST)  # the run before it still is


def test_a_run_past_the_segment_end_is_not_intact():
    mm, units = records([1115] * 4)
    assert not run_intact(mm, 0, [*units, (units[-1][0] + 1115, 1115, 0)], 5, QUEUE_ID, FIRST)

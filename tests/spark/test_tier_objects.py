"""The compaction's verification of a merged object (no Spark needed)."""

import pytest

from common.message_codec import encode_record
from spark_jobs.tier_objects import CorruptObjectError, verify


def _records(base: int, n: int) -> bytes:
    out, pos = [], base
    for i in range(n):
        r = encode_record(b"T", 0, b"body-%d" % i, b"KEYS\x01k\x02", queue_offset=i, physical_offset=pos)
        out.append(r)
        pos += len(r)
    return b"".join(out)


def test_verify_counts_records_of_an_intact_object():
    data = _records(4096, 50)
    assert verify(data, 0, 4096, len(data)) == 50


@pytest.mark.parametrize("where", [0, 4, 30, 95, -1])
def test_verify_refuses_a_flipped_byte(where: int):
    data = bytearray(_records(0, 5))
    data[where] ^= 0x40
    with pytest.raises(CorruptObjectError):
        verify(bytes(data), 0, 0, len(data))


def test_verify_refuses_a_wrong_position_a_short_object_and_torn_units():
    data = _records(0, 3)
    with pytest.raises(CorruptObjectError):
        verify(data, 0, 100, len(data))  # records placed elsewhere than they say
    with pytest.raises(CorruptObjectError):
        verify(data[:-1], 0, 0, len(data))
    with pytest.raises(CorruptObjectError):
        verify(data[:-1], 0, 0, len(data) - 1)
    with pytest.raises(CorruptObjectError):
        verify(b"x" * 30, 1, 0, 30)
    assert verify(b"x" * 56, 1, 0, 56) == 2

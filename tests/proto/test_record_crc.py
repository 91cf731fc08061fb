"""Records' CRC-32 (``common/record_crc.py``) is zlib's: records written with either check with the other, so a
store written before the switch recovers, and other RocketMQ-model tools can check what we write."""

import zlib

from hypothesis import given
from hypothesis import strategies as st

from common.message_codec import HEADER_SIZE, check_record, encode_record
from common.record_crc import crc32


@given(st.binary(max_size=5000), st.integers(min_value=0, max_value=2**32 - 1))
def test_the_same_values_as_zlib(data: bytes, seed: int):
    assert crc32(data) == zlib.crc32(data)
    assert crc32(data, seed) == zlib.crc32(data, seed)
    assert crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])  # slices of a view, as the store takes them


def test_a_record_carries_zlibs_crc_of_its_variable_part():
    record = encode_record(b"CrcT", 3, b"body" * 300, b"TAGS\x01t\x02", queue_offset=7, physical_offset=0)
    assert int.from_bytes(record[8:12], "big") == zlib.crc32(record[HEADER_SIZE:])
    assert check_record(memoryview(record), 0, len(record), 0, verify_crc=True) == len(record)

"""Property tests of the commitlog record codec."""


import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from common.message_codec import (
    HEADER_SIZE,
    CorruptRecordError,
    check_record,
    decode_record,
    decode_records,
    encode_record,
)
from common.message_id import encode_host, make_message_id, parse_message_id
from common.message_properties import decode_properties, encode_properties, find_property

topics = st.from_regex(r"[%a-zA-Z0-9_-]{1,127}", fullmatch=True)
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)
properties = st.dictionaries(prop_text.filter(bool), prop_text, max_size=5)
bodies = st.binary(min_size=1, max_size=4096)
offsets = st.integers(min_value=0, max_value=2**62)


@given(topics, st.integers(0, 2**31 - 1), bodies, properties, offsets, offsets, offsets)
def test_round_trip(topic, queue_id, body, props, queue_offset, physical_offset, store_ts):
    raw = encode_record(topic.encode(), queue_id, body, encode_properties(props), queue_offset=queue_offset,
                        physical_offset=physical_offset, store_timestamp=store_ts,
                        born_host=encode_host("10.1.2.3:4567"), store_host=encode_host("127.0.0.1:10911"))
    assert len(raw) == HEADER_SIZE + len(topic.encode()) + len(encode_properties(props)) + len(body)
    msg = decode_record(raw)
    assert (msg.topic, msg.queue_id, msg.body, msg.properties) == (topic, queue_id, body, props)
    assert (msg.queue_offset, msg.physical_offset, msg.store_timestamp) == (queue_offset, physical_offset, store_ts)
    assert msg.born_host == "10.1.2.3:4567" and msg.store_host == "127.0.0.1:10911"
    assert parse_message_id(msg.offset_msg_id) == ("127.0.0.1:10911", physical_offset)
    assert msg.msg_id == (msg.unique_key or msg.offset_msg_id)
    assert check_record(raw, 0, len(raw), physical_offset, verify_crc=True) == len(raw)


@settings(max_examples=200)
@given(bodies, st.data())
def test_flipped_body_bit_is_caught_by_crc(body, data):
    raw = bytearray(encode_record(b"T", 0, body, b""))
    bit = data.draw(st.integers(0, len(body) * 8 - 1))
    raw[len(raw) - len(body) + bit // 8] ^= 1 << (bit % 8)
    assert check_record(raw, 0, len(raw), 0, verify_crc=True) == -1
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_record(raw)


@given(bodies, properties, st.data())
def test_cut_record_is_torn(body, props, data):
    raw = encode_record(b"TopicA", 3, body, encode_properties(props))
    cut = data.draw(st.integers(0, len(raw) - 1))
    torn = raw[:cut] + bytes(len(raw) - cut)  # what a torn write leaves: a prefix, then zeros
    assume(torn != raw)  # a tail that was zeros anyway is not torn: the record is whole
    assert check_record(torn, 0, len(torn), 0, verify_crc=True) == -1
    with pytest.raises(CorruptRecordError):
        decode_record(raw[:cut])


def test_decode_records_reads_back_to_back():
    raws = [encode_record(b"T", 1, f"body-{i}".encode(), b"", queue_offset=i) for i in range(5)]
    msgs = decode_records(b"".join(raws))
    assert [m.queue_offset for m in msgs] == list(range(5))
    assert [m.body for m in msgs] == [f"body-{i}".encode() for i in range(5)]


@given(properties)
def test_properties_round_trip_and_find(props):
    raw = encode_properties(props)
    assert decode_properties(raw) == props
    for name, value in props.items():
        assert find_property(raw, name.encode() + b"\x01") == value.encode()


def test_find_property_matches_whole_names_only():
    raw = encode_properties({"XTAGS": "no", "TAGS": "yes"})
    assert find_property(raw, b"TAGS\x01") == b"yes"
    assert find_property(encode_properties({"XTAGS": "no"}), b"TAGS\x01") is None


def test_message_id_is_store_host_and_offset():
    msg_id = make_message_id(encode_host("192.168.0.7:10911"), 123456789)
    assert len(msg_id) == 32
    assert parse_message_id(msg_id) == ("192.168.0.7:10911", 123456789)
    with pytest.raises(ValueError):
        parse_message_id("zz")


def test_crc_covers_topic_and_properties():
    raw = bytearray(encode_record(b"T", 0, b"body", encode_properties({"a": "b"})))
    raw[HEADER_SIZE + 2] ^= 0xFF  # inside the properties
    assert check_record(raw, 0, len(raw), 0, verify_crc=True) == -1

"""Batches that travel as commitlog records: what the SDK encodes (``encode_wire_batch``), what the broker
accepts and rejects (``WireBatch.parse``), and what it writes in place before the store appends the bytes."""

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.store.config import StoreType
from broker.store.message_store import MessageStore
from broker.store.put_message_result import PutMessageStatus
from common.message_codec import (
    HEADER_SIZE,
    CorruptRecordError,
    check_record,
    decode_record,
    decode_records,
    encode_record,
)
from common.message_id import encode_host
from common.message_properties import encode_properties
from common.wire_batch import WireBatch, _parse_each, _parse_equal_sized, encode_wire_batch
from tests.store.conftest import store_config

TOPIC = b"WireT"
BORN_HOST = encode_host("10.1.2.3:4567")
STORE_HOST = encode_host("127.0.0.1:10911")
BORN_TS = 1_700_000_000_123
BODY_LEN_AT = 84  # i32, then topic_len u8 at 88 and properties_len u16 at 89
TOTAL_SIZE = struct.Struct(">i")
# Header bytes only the broker writes: queue id; queue offset, physical offset, store time and the batch mark
# (sys_flag's top byte); store host.
BROKER_FIELDS = ((12, 16), (20, 45), (64, 72))


def wire(bodies: list[bytes], properties: list[bytes] | None = None, topic: bytes = TOPIC, flag: int = 0,
         sys_flag: int = 0) -> bytes:
    props = properties if properties is not None else [encode_properties({"KEYS": f"k{i}"}) for i in range(len(bodies))]
    return encode_wire_batch(topic, bodies, props, born_timestamp=BORN_TS, born_host=BORN_HOST, flag=flag,
                             sys_flag=sys_flag)


def parse(records: bytes, topic: bytes = TOPIC, queue_id: int = 3, max_count: int = 1024) -> WireBatch:
    return WireBatch.parse(records, topic, queue_id, STORE_HOST, max_count)


def stored(batch: WireBatch, queue_offset: int, physical_offset: int, store_ts: int) -> tuple[bytes, list[int]]:
    offsets: list[int] = []
    return bytes(batch.encode(0, len(batch.sizes), queue_offset, physical_offset, store_ts, offsets)), offsets


def record_starts(sizes: list[int]) -> list[int]:
    starts, pos = [], 0
    for size in sizes:
        starts.append(pos)
        pos += size
    return starts


# -- the round trip --------------------------------------------------------------------------------------------


def test_parsed_batch_knows_its_sizes_and_totals():
    bodies = [b"a" * 10, b"b" * 300, b"c"]
    props = [b"", encode_properties({"TAGS": "x" * 40}), encode_properties({"K": "v"})]
    batch = parse(wire(bodies, props))
    assert batch.sizes == [HEADER_SIZE + len(TOPIC) + len(p) + len(b) for b, p in zip(bodies, props, strict=True)]
    assert (batch.topic, batch.queue_id) == (TOPIC, 3)
    assert batch.body_bytes == 311 and batch.max_body == 300 and batch.max_properties == len(props[1])


def test_broker_fields_are_written_in_place_and_every_record_decodes_with_its_crc():
    bodies = [f"body-{i}".encode() * (i + 1) for i in range(5)]
    props = [encode_properties({"TAGS": f"t{i}", "KEYS": f"k{i}"}) for i in range(5)]
    batch = parse(wire(bodies, props, flag=7, sys_flag=2), queue_id=6)
    raw, offsets = stored(batch, queue_offset=100, physical_offset=5_000, store_ts=1_700_000_999_000)

    messages = decode_records(raw)  # raises on a CRC failure
    assert [m.body for m in messages] == bodies
    assert [m.properties for m in messages] == [{"TAGS": f"t{i}", "KEYS": f"k{i}"} for i in range(5)]
    assert [m.queue_offset for m in messages] == [100, 101, 102, 103, 104]
    assert [m.physical_offset for m in messages] == offsets == [5_000 + s for s in record_starts(batch.sizes)]
    for m in messages:
        assert (m.topic, m.queue_id, m.store_timestamp, m.born_timestamp) == ("WireT", 6, 1_700_000_999_000, BORN_TS)
        assert (m.born_host, m.store_host, m.flag, m.sys_flag) == ("10.1.2.3:4567", "127.0.0.1:10911", 7, 2)
    for start, size, physical in zip(record_starts(batch.sizes), batch.sizes, offsets, strict=True):
        assert check_record(raw, start, len(raw), physical, verify_crc=True) == size


def test_only_the_broker_fields_differ_from_what_the_producer_encoded():
    records = wire([b"x" * 50, b"y" * 70])
    batch = parse(records, queue_id=9)
    raw, _ = stored(batch, queue_offset=42, physical_offset=777, store_ts=123)
    for start, size in zip(record_starts(batch.sizes), batch.sizes, strict=True):
        sent, kept = bytearray(records[start : start + size]), bytearray(raw[start : start + size])
        assert sent != kept
        for lo, hi in BROKER_FIELDS:
            sent[lo:hi] = kept[lo:hi] = bytes(hi - lo)
        assert sent == kept


def test_producer_records_are_the_store_records_with_zeros_for_what_the_broker_assigns():
    props = encode_properties({"TAGS": "A"})
    records = wire([b"hello"], [props], flag=3)
    assert records == encode_record(TOPIC, 0, b"hello", props, born_timestamp=BORN_TS, born_host=BORN_HOST, flag=3)


def test_records_encoded_in_two_runs_equal_one_run():
    """A batch that spans a segment end is encoded in two runs; the records are the same as in one."""
    batch = parse(wire([bytes([65 + i]) * (20 + i) for i in range(6)]))
    whole, whole_offsets = stored(batch, 10, 1_000, 55)
    first_offsets: list[int] = []
    first = bytes(batch.encode(0, 2, 10, 1_000, 55, first_offsets))
    rest_offsets: list[int] = []
    rest = bytes(batch.encode(2, 6, 12, 1_000 + sum(batch.sizes[:2]), 55, rest_offsets))
    assert first + rest == whole and first_offsets + rest_offsets == whole_offsets


def test_the_same_records_parse_afresh_for_another_queue():
    """A producer retries a batch on another queue with the same records: each parse is a copy of its own."""
    records = wire([b"retry-me"])
    first, second = parse(records, queue_id=1), parse(records, queue_id=2)
    assert decode_record(stored(first, 0, 0, 1)[0]).queue_id == 1
    assert decode_record(stored(second, 0, 0, 1)[0]).queue_id == 2
    assert records == wire([b"retry-me"])  # the sent bytes are untouched


bodies_st = st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=20)
prop_st = st.dictionaries(st.from_regex(r"[A-Za-z]{1,8}", fullmatch=True),
                          st.from_regex(r"[A-Za-z0-9 ]{0,20}", fullmatch=True), max_size=3)


@given(bodies_st, st.data(), st.integers(0, 2**31 - 1), st.integers(0, 2**40), st.integers(0, 2**40))
def test_any_batch_round_trips(bodies, data, queue_id, queue_offset, physical_offset):
    props = [encode_properties(data.draw(prop_st)) for _ in bodies]
    batch = WireBatch.parse(wire(bodies, props), TOPIC, queue_id, STORE_HOST, len(bodies))
    raw, offsets = stored(batch, queue_offset, physical_offset, 99)
    messages = decode_records(raw)
    assert [m.body for m in messages] == bodies and [m.raw_properties for m in messages] == props
    assert [m.queue_offset for m in messages] == list(range(queue_offset, queue_offset + len(bodies)))
    assert [m.physical_offset for m in messages] == offsets and {m.queue_id for m in messages} == {queue_id}


# -- what the broker rejects -----------------------------------------------------------------------------------


def rejected(records: bytes | bytearray, topic: bytes = TOPIC, max_count: int = 1024) -> str:
    with pytest.raises(CorruptRecordError) as err:
        WireBatch.parse(bytes(records), topic, 0, STORE_HOST, max_count)
    return str(err.value)


def test_empty_batch_is_rejected():
    assert "batch is empty" in rejected(b"")


def test_a_tail_shorter_than_a_header_is_a_cut_record():
    records = wire([b"one", b"two"])
    assert "record 1 is cut" in rejected(records[: len(records) - 20 - len(b"two")])
    assert "record 0 is cut" in rejected(records[:HEADER_SIZE - 1])


def test_a_record_whose_body_is_cut_off_does_not_add_up():
    records = wire([b"one", b"two" * 20])
    assert "record 1 has size" in rejected(records[:-1])


def test_bad_magic_is_rejected():
    records = bytearray(wire([b"one", b"two"]))
    second = parse(bytes(records)).sizes[0]
    records[second + 4 : second + 8] = b"JUNK"
    assert "record 1 has bad magic 0x4a554e4b" in rejected(records)


@pytest.mark.parametrize("delta", [-1, 1, 1000])
def test_a_total_size_that_disagrees_with_the_parts_is_rejected(delta: int):
    records = bytearray(wire([b"body"]))
    TOTAL_SIZE.pack_into(records, 0, len(records) + delta)
    assert "record 0 has size" in rejected(records + bytes(max(delta, 0)))


def test_a_body_length_that_disagrees_with_the_size_is_rejected():
    records = bytearray(wire([b"body"]))
    TOTAL_SIZE.pack_into(records, BODY_LEN_AT, 5)
    assert "record 0 has size" in rejected(records)


def test_a_record_of_only_a_header_is_rejected_not_looped_on():
    records = bytearray(wire([b"body"], [b""], topic=b"T"))
    header = bytearray(records[:HEADER_SIZE])
    TOTAL_SIZE.pack_into(header, 0, 0)  # size 0 with lengths that add up to 0: must not spin in place
    TOTAL_SIZE.pack_into(header, BODY_LEN_AT, -HEADER_SIZE - 1)
    assert "empty body" in rejected(header + bytes(10), topic=b"T")


def test_empty_body_is_rejected():
    assert "record 1 has an empty body" in rejected(wire([b"ok", b"", b"ok"]))


@pytest.mark.parametrize("other", [b"WireU", b"Wire", b"WireTT", b"wiret"])
def test_records_of_another_topic_are_rejected(other: bytes):
    assert "record 0 is not of topic WireT" in rejected(wire([b"x"], topic=other))


def test_one_foreign_record_among_good_ones_is_rejected():
    records = wire([b"a", b"b"]) + wire([b"c"], topic=b"WireU") + wire([b"d"])
    assert "record 2 is not of topic WireT" in rejected(records)


@pytest.mark.parametrize("part", ["properties", "body", "crc"])
def test_a_flipped_byte_fails_the_crc(part: str):
    props = encode_properties({"TAGS": "abc"})
    records = bytearray(wire([b"first"], [props]) + wire([b"second"], [props]))
    second = parse(bytes(records)).sizes[0]
    at = {"properties": second + HEADER_SIZE + len(TOPIC) + 1, "body": len(records) - 1, "crc": second + 8}[part]
    records[at] ^= 0x01
    assert "record 1 fails its CRC" in rejected(records)


def test_a_flipped_topic_byte_is_another_topic_and_fails_the_crc():
    records = bytearray(wire([b"body"]))
    records[HEADER_SIZE] ^= 0x01  # "WireT" becomes "VireT"
    assert "record 0 is not of topic WireT" in rejected(records)
    assert "record 0 fails its CRC" in rejected(records, topic=b"VireT")


def test_max_count_records_are_accepted_and_one_more_is_rejected():
    assert len(parse(wire([b"m"] * 4), max_count=4).sizes) == 4
    assert "more than 4 records" in rejected(wire([b"m"] * 5), max_count=4)


@given(st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=6), st.data())
def test_a_cut_anywhere_but_a_record_boundary_is_rejected(bodies, data):
    records = wire(bodies)
    cut = data.draw(st.integers(1, len(records) - 1))
    boundaries = set(record_starts(parse(records).sizes))
    if cut in boundaries:
        assert len(parse(records[:cut]).sizes) == sorted(boundaries).index(cut)
    else:
        rejected(records[:cut])


@given(st.binary(min_size=1, max_size=40), st.data())
def test_any_flipped_bit_after_the_header_is_rejected(body, data):
    records = bytearray(wire([body], [encode_properties({"TAGS": "t"})]))
    bit = data.draw(st.integers(HEADER_SIZE * 8, len(records) * 8 - 1))
    records[bit // 8] ^= 1 << (bit % 8)
    rejected(records)


# -- the two parses: equal-sized records in one pass, any batch record by record ----------------------------------


# Header bytes the broker checks: size, magic, CRC, body length, topic length, properties length; the topic's first.
CHECKED_BYTES = (*range(0, 12), *range(84, 92))


def equal_sized_batch(data: st.DataObject) -> bytearray:
    """Records all of one size with bodies and property blocks of differing lengths and contents."""
    n, size = data.draw(st.integers(1, 12)), data.draw(st.integers(2, 60))
    props_lens = data.draw(st.lists(st.integers(0, size - 1), min_size=n, max_size=n))
    props = [data.draw(st.binary(min_size=p, max_size=p)) for p in props_lens]
    bodies = [data.draw(st.binary(min_size=size - p, max_size=size - p)) for p in props_lens]
    return bytearray(wire(bodies, props))


def same_batch(a: WireBatch, b: WireBatch) -> bool:
    return (a.topic, a.queue_id, a.sizes, a.body_bytes, a.max_body, a.max_properties, a.buf, a.properties) == (
        b.topic, b.queue_id, b.sizes, b.body_bytes, b.max_body, b.max_properties, b.buf, b.properties)


@given(st.data())
def test_the_one_pass_parse_takes_every_good_equal_sized_batch_as_the_record_by_record_parse_does(data):
    records = bytes(equal_sized_batch(data))
    one_pass = _parse_equal_sized(records, TOPIC, 7, STORE_HOST, 1024)
    assert one_pass is not None and same_batch(one_pass, _parse_each(records, TOPIC, 7, STORE_HOST, 1024))


@given(st.data())
def test_the_one_pass_parse_leaves_any_damaged_equal_sized_batch_to_the_record_by_record_parse(data):
    """A flipped byte anywhere, a count over the limit or another topic: where the record-by-record parse rejects
    the batch, the one-pass parse declines it (so the rejection says what is wrong); where it accepts (a byte the
    broker does not check), both give the same batch."""
    records = equal_sized_batch(data)
    size = TOTAL_SIZE.unpack_from(records)[0]
    checked_field = st.builds(int.__add__, st.sampled_from(CHECKED_BYTES),
                              st.sampled_from(range(0, len(records), size)))
    at = data.draw(st.one_of(checked_field, st.integers(0, len(records) - 1)))
    records[at] ^= data.draw(st.integers(1, 255))
    topic = data.draw(st.sampled_from([TOPIC, b"WireU", b"Wire"]))
    max_count = data.draw(st.sampled_from([1024, 1]))
    one_pass = _parse_equal_sized(bytes(records), topic, 7, STORE_HOST, max_count)
    try:
        each = _parse_each(bytes(records), topic, 7, STORE_HOST, max_count)
    except CorruptRecordError:
        assert one_pass is None
    else:
        assert one_pass is not None and same_batch(one_pass, each)


# -- appended by the store ---------------------------------------------------------------------------------------


@pytest.fixture(params=tuple(StoreType), ids=["files", "rocksdb"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MessageStore]:
    s = MessageStore(store_config(tmp_path / "store", store_type=request.param, max_message_size=64 * 1024))
    s.start()
    yield s
    s.shutdown()


def read_back(store: MessageStore, topic: str, queue_id: int, n: int) -> list[bytes]:
    result = store.get_message(topic, queue_id, 0, n, max_total_bytes=1 << 30)
    return [bytes(m) for m in result.messages]


def test_store_appends_wire_batches_across_segment_ends_as_sent(store: MessageStore):
    """Tiny segments (64 KiB): batches of 10 KiB records cross segment ends; every record is read back whole,
    CRC-valid at its offset, in queue order."""
    sent: list[bytes] = []
    for round_ in range(4):
        bodies = [bytes([round_ * 10 + i]) * 10_000 for i in range(5)]
        result = store.put_wire_batch(WireBatch.parse(wire(bodies), TOPIC, 2, store.store_host, 1024))
        assert result.ok and result.queue_offset == round_ * 5, result
        sent += bodies
    assert store.wait_dispatched(store.commit_log.mapped_file_queue.max_offset())
    records = read_back(store, "WireT", 2, 100)
    messages = [decode_record(r) for r in records]
    assert [m.body for m in messages] == sent
    assert [m.queue_offset for m in messages] == list(range(20))
    for record, m in zip(records, messages, strict=True):
        assert store.commit_log.read_record(m.physical_offset) == record  # CRC and offset checked there
        assert m.store_host == "127.0.0.1:10911" and m.queue_id == 2 and m.born_timestamp == BORN_TS


def test_store_interleaves_wire_batches_and_encoded_batches_in_one_queue(store: MessageStore):
    first = store.put_wire_batch(parse(wire([b"w1", b"w2"]), queue_id=0))
    second = store.put_messages("WireT", 0, [b"p1"], [b""])
    third = store.put_wire_batch(parse(wire([b"w3"]), queue_id=0))
    assert (first.queue_offset, second.queue_offset, third.queue_offset) == (0, 2, 3)
    assert store.wait_dispatched(store.commit_log.mapped_file_queue.max_offset())
    assert [decode_record(r).body for r in read_back(store, "WireT", 0, 10)] == [b"w1", b"w2", b"p1", b"w3"]


def test_store_refuses_a_wire_body_over_max_message_size(store: MessageStore):
    result = store.put_wire_batch(parse(wire([b"x" * (64 * 1024 + 1)])))
    assert result.status is PutMessageStatus.MESSAGE_ILLEGAL and "exceeds maxMessageSize" in result.error
    assert store.max_offset("WireT", 3) == 0


def test_store_refuses_wire_properties_over_the_limit(store: MessageStore):
    result = store.put_wire_batch(parse(wire([b"x"], [b"p" * 40_000])))
    assert result.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED

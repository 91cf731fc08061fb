"""KvRecord codec and raw states: every op round-trips through (properties, body), CAS fields included."""

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.kv import kv_record
from broker.kv.kv_record import CAS_HEAD, DELETED, FORMAT, MAX_BODY_BYTES, KvOp, KvRecord, present, value_of
from common.kv_shard import MAX_VALUE_BYTES, check_key, check_scan_limit, check_value, shard_of
from common.kv_shard import KvInputError as ShardInputError
from common.message_properties import decode_properties, find_property

BINARY_KEYS = [b"k", b"\x00", b"\xff" * 7, b"\x01\x02", b"KV_OP\x01PUT\x02", bytes(range(256)), b""]


def round_trip(record: KvRecord) -> KvRecord:
    props, body = record.encode()
    return kv_record.decode(props, body)


@pytest.mark.parametrize("key", BINARY_KEYS)
@pytest.mark.parametrize("value", [b"", b"v", b"\x00\x01\x02", b"\xff" * 1000])
def test_put_round_trip(key: bytes, value: bytes):
    record = KvRecord(KvOp.PUT, key, value)
    assert round_trip(record) == record


@pytest.mark.parametrize("key", BINARY_KEYS)
def test_delete_round_trip_and_body_not_empty(key: bytes):
    record = KvRecord(KvOp.DELETE, key)
    props, body = record.encode()
    assert body == FORMAT  # non-empty: the store refuses empty bodies
    decoded = kv_record.decode(props, body)
    assert decoded == record
    assert decoded.op is KvOp.DELETE and decoded.value == b"" and decoded.expected is None and decoded.base is None


@pytest.mark.parametrize("key", BINARY_KEYS)
@pytest.mark.parametrize("expected", [None, b"", b"old", b"\x00\xff"])
@pytest.mark.parametrize("base", [None, DELETED, present(b""), present(b"base-value"), present(b"\x01\x02")])
@pytest.mark.parametrize("value", [b"", b"new", b"\x00" * 9])
def test_cas_round_trip(key: bytes, expected: bytes | None, base: bytes | None, value: bytes):
    record = KvRecord(KvOp.CAS, key, value, expected, base)
    decoded = round_trip(record)
    assert decoded == record
    # None (expect absent / no base) and empty bytes stay distinct
    assert (decoded.expected is None) == (expected is None)
    assert (decoded.base is None) == (base is None)


def test_cas_body_layout():
    _, body = KvRecord(KvOp.CAS, b"k", b"new", b"exp", present(b"b")).encode()
    assert body[:1] == FORMAT
    assert CAS_HEAD.unpack_from(body, 1) == (3, 2)
    assert body[1 + CAS_HEAD.size :] == b"exp" + b"\x01b" + b"new"
    _, body = KvRecord(KvOp.CAS, b"k", b"v").encode()
    assert CAS_HEAD.unpack_from(body, 1) == (-1, -1)
    assert body[1 + CAS_HEAD.size :] == b"v"


def test_properties_wire_form():
    props, _ = KvRecord(KvOp.CAS, b"\xff\x00key", b"v", None, None).encode()
    assert decode_properties(props) == {"KV_OP": "CAS", "KV_KEY": base64.b64encode(b"\xff\x00key").decode()}
    assert find_property(props, b"KV_OP\x01") == b"CAS"


@pytest.mark.parametrize("before, after", [(b"TAGS\x01t\x02", b"UNIQ_KEY\x01u\x02"), (b"", b"UNIQ_KEY\x01u\x02"),
                                           (b"TAGS\x01t\x02", b"")], ids=["around", "after", "before"])
def test_decode_tolerates_other_properties(before: bytes, after: bytes):
    """What ``encode`` writes is read at fixed positions; properties with others around it are searched."""
    props, body = KvRecord(KvOp.PUT, b"key", b"value").encode()
    decoded = kv_record.decode(before + props + after, body)
    assert decoded == KvRecord(KvOp.PUT, b"key", b"value")
    assert kv_record.op_and_key(before + props + after) == (KvOp.PUT, b"key")


def test_decode_accepts_memoryview_and_bytearray_bodies():
    record = KvRecord(KvOp.CAS, b"key", b"value", b"e", DELETED)
    props, body = record.encode()
    assert kv_record.decode(props, memoryview(body)) == record
    assert kv_record.decode(props, bytearray(body)) == record


@pytest.mark.parametrize(
    ("props", "body"),
    [
        (b"KV_KEY\x01aw==\x02", FORMAT),  # no op
        (b"KV_OP\x01PUT\x02", FORMAT),  # no key
        (KvRecord(KvOp.PUT, b"k").encode()[0], b"\x02v"),  # unknown format byte
        (KvRecord(KvOp.PUT, b"k").encode()[0], b""),  # no format byte at all
    ],
)
def test_decode_rejects_malformed(props: bytes, body: bytes):
    with pytest.raises(AssertionError):
        kv_record.decode(props, body)


def test_decode_rejects_unknown_op():
    with pytest.raises(ValueError):
        kv_record.decode(b"KV_OP\x01XYZ\x02KV_KEY\x01aw==\x02", FORMAT)


def test_raw_states():
    assert present(b"v") == b"\x01v"
    assert value_of(present(b"v")) == b"v"
    assert value_of(present(b"")) == b""
    assert value_of(DELETED) is None
    assert value_of(None) is None
    assert value_of(present(b"\x00")) == b"\x00"


def test_max_body_bytes_fits_the_largest_cas():
    big = b"x" * MAX_VALUE_BYTES
    _, body = KvRecord(KvOp.CAS, b"k", big, big, present(big)).encode()
    assert len(body) <= MAX_BODY_BYTES  # the base carries its state tag byte


def test_kv_shard_helpers():
    assert shard_of(b"abc", 8) == shard_of(b"abc", 8) and 0 <= shard_of(b"abc", 8) < 8
    assert {shard_of(bytes([i]), 4) for i in range(64)} == {0, 1, 2, 3}
    check_key(b"k" * 1024)
    check_value(b"v" * MAX_VALUE_BYTES)
    check_scan_limit(1)
    check_scan_limit(10_000)
    for bad in (lambda: check_key(b""), lambda: check_key(b"k" * 1025),
                lambda: check_value(b"v" * (MAX_VALUE_BYTES + 1)), lambda: check_scan_limit(0),
                lambda: check_scan_limit(10_001)):
        with pytest.raises(ShardInputError):
            bad()


raw_states = st.one_of(st.none(), st.just(DELETED), st.binary(max_size=64).map(present))


@settings(max_examples=300, deadline=None)
@given(
    op=st.sampled_from(KvOp),
    key=st.binary(max_size=64),
    value=st.binary(max_size=128),
    expected=st.one_of(st.none(), st.binary(max_size=64)),
    base=raw_states,
)
def test_round_trip_property(op: KvOp, key: bytes, value: bytes, expected: bytes | None, base: bytes | None):
    if op is not KvOp.CAS:
        expected = base = None
    record = KvRecord(op, key, value, expected, base)
    props, body = record.encode()
    assert b"\x01" not in find_property(props, b"KV_KEY\x01")  # base64: no separator inside the key
    assert kv_record.decode(props, body) == record

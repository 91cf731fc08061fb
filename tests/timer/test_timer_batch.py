"""The send side of delayed messages: the SDK's properties and checks, and a batch's records re-encoded for the
timer topic (same messages, mixed batches refused)."""

import pytest

from broker.timer.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from broker.timer.delay_router import DelayRouter, delivered_properties, timer_target
from broker.timer.timer_batch import timer_properties, timer_wire_batch
from client import MQClientError
from client.message_encoding import batch_wire_properties
from common.message import Message
from common.message_codec import decode_records
from common.message_id import encode_host
from common.message_properties import decode_properties
from common.request_error import RequestError
from common.timer_topic import TIMER_QUEUE_ID, TIMER_TOPIC
from common.wire_batch import WireBatch, encode_wire_batch

NOW = 1_700_000_000_000
ROUTER = DelayRouter(parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL), 259_200_000)
STORE_HOST = encode_host("10.0.0.1:10911")
BORN_HOST = encode_host("10.0.0.2:4242")


def parsed(msgs: list[Message], flag: int = 0) -> tuple[bytes, WireBatch]:
    records = encode_wire_batch(msgs[0].topic.encode(), [m.body for m in msgs], batch_wire_properties(msgs),
                                born_timestamp=NOW - 7, born_host=BORN_HOST, flag=flag)
    return records, WireBatch.parse(records, msgs[0].topic.encode(), 3, STORE_HOST, 4096)


# -- SDK -------------------------------------------------------------------------------------------------
def test_sdk_encodes_delay_and_time():
    level, at, plain = batch_wire_properties([Message("T", b"a", delay_level=2)]) + batch_wire_properties(
        [Message("T", b"b", deliver_at_ms=NOW)]) + batch_wire_properties([Message("T", b"c")])
    assert decode_properties(level)["DELAY"] == "2" and "TIMER_DELIVER_MS" not in decode_properties(level)
    assert decode_properties(at)["TIMER_DELIVER_MS"] == str(NOW) and "DELAY" not in decode_properties(at)
    assert set(decode_properties(plain)) == {"UNIQ_KEY"}  # the fast path: unique key alone


@pytest.mark.parametrize(("msg", "error"), [
    (Message("T", b"x", delay_level=2, deliver_at_ms=NOW), "not both"),
    (Message("T", b"x", delay_level=-1), "delay_level -1 is negative"),
    (Message("T", b"x", deliver_at_ms=-1), "deliver_at_ms -1 is negative"),
    (Message("T", b"x", delay_level=1.5), "are integers"),  # type: ignore[arg-type]
    (Message("T", b"x", delay_level=True), "are integers"),
])
def test_sdk_refuses_what_it_can_tell(msg: Message, error: str):
    with pytest.raises(MQClientError, match=error):
        batch_wire_properties([msg])


def test_sdk_refuses_a_mixed_batch():
    with pytest.raises(MQClientError, match="all delayed or all immediate: 1 of 3"):
        batch_wire_properties([Message("T", b"a"), Message("T", b"b", delay_level=1), Message("T", b"c", tags="x")])
    # all delayed, levels and times mixed: fine
    assert len(batch_wire_properties([Message("T", b"a", delay_level=1), Message("T", b"b", deliver_at_ms=NOW)])) == 2


# -- broker: records to timer records ------------------------------------------------------------------
def test_a_delayed_batch_becomes_timer_records_of_the_same_messages():
    msgs = [Message("Orders", b"body-%d" % i, tags="t", keys=[f"k{i}"], delay_level=i % 3 + 1) for i in range(5)]
    records, batch = parsed(msgs, flag=7)
    timer_and_props = timer_wire_batch(ROUTER, batch, "Orders", 3, NOW)
    assert timer_and_props is not None
    timer = timer_and_props[0]
    assert timer_and_props[1] == timer.properties
    assert timer.topic == TIMER_TOPIC.encode() and timer.queue_id == TIMER_QUEUE_ID
    assert len(timer.sizes) == 5 and timer.body_bytes == batch.body_bytes and sum(timer.sizes) == len(timer.buf)
    originals = decode_records(records)
    for i, (before, after) in enumerate(zip(originals, decode_records(bytes(timer.buf)), strict=True)):
        assert (after.topic, after.queue_id, after.body) == (TIMER_TOPIC, TIMER_QUEUE_ID, before.body)
        assert (after.born_timestamp, after.born_host, after.flag) == (NOW - 7, "10.0.0.2:4242", 7)
        assert after.store_host == "10.0.0.1:10911"
        assert (after.tags, after.keys, after.unique_key) == (before.tags, before.keys, before.unique_key)
        target = timer_target(after.raw_properties)
        assert target is not None
        assert (target.topic, target.queue_id, target.due_ms) == ("Orders", 3, NOW + (1000, 5000, 10_000)[i % 3])
        assert delivered_properties(after.raw_properties) == delivered_properties(before.raw_properties)


def test_a_batch_mixing_delayed_and_immediate_messages_is_refused():
    delayed = batch_wire_properties([Message("T", b"a", delay_level=1)])
    plain = batch_wire_properties([Message("T", b"b")])
    records = encode_wire_batch(b"T", [b"a", b"b"], delayed + plain, born_timestamp=NOW, born_host=BORN_HOST)
    batch = WireBatch.parse(records, b"T", 0, STORE_HOST, 4096)
    with pytest.raises(RequestError, match="all delayed or all immediate: 1 of 2 messages are delayed"):
        timer_wire_batch(ROUTER, batch, "T", 0, NOW)
    with pytest.raises(RequestError, match="all delayed or all immediate"):
        timer_properties(ROUTER, plain + delayed, "T", 0, NOW)


def test_a_body_or_another_name_holding_the_needle_is_not_delayed():
    msgs = [Message("T", b"DELAY\x013\x02TIMER_DELIVER_MS\x011\x02", properties={"XDELAY": "4"})]
    _records, batch = parsed(msgs)
    blocks = batch.properties
    assert b"XDELAY\x01" in b"".join(blocks)  # the cheap test hits ...
    assert timer_wire_batch(ROUTER, batch, "T", 3, NOW) is None  # ... the exact one does not
    assert timer_properties(ROUTER, blocks, "T", 3, NOW) is None


def test_a_checked_batch_holds_each_records_property_block():
    msgs = [Message("T", b"x" * n, tags=f"tag{n}") for n in (1, 100, 3)]
    _records, batch = parsed(msgs)
    assert [decode_properties(p)["TAGS"] for p in batch.properties] == ["tag1", "tag100", "tag3"]

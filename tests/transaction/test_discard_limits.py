"""Discards at the limits, over the check service on a real message store in this process (its clock injected): a
half message whose property block is full (stored before sends kept room for the broker's properties) is copied
to TRANS_CHECK_MAX_TIME_TOPIC without its check count, and a copy the store refuses for good is left out, logged;
neither holds back the other discards any more (they were one batch, refused whole at every pass)."""

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.store.put_message_result import PutMessageResult, PutMessageStatus
from broker.transaction.half_message import half_properties
from common.message_properties import MAX_PROPERTIES_SIZE, encode_properties
from common.refusal import Refusal
from common.transaction_id import TransactionId
from common.transaction_topic import HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from proto import transaction_pb2
from tests.transaction.test_check_service import BROKER, CHECK_MAX, INTERVAL, TIMEOUT, TOPIC, Broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "store")
    yield b
    b.close()


def half_props(unique_key: str, pad: int = 0) -> bytes:
    props = encode_properties({"UNIQ_KEY": unique_key, "TRAN_MSG": "true", "PGROUP": "pg", "big": "x" * pad})
    [half] = half_properties([props], TOPIC, 0, static=False)
    return half


def put_half(broker: Broker, body: bytes, props: bytes) -> TransactionId:
    """A half message stored as it is, whatever its size (as an older broker stored it)."""
    result = broker.store.put_messages(HALF_TOPIC, 0, [body], [props])
    assert result.ok and broker.store.wait_dispatched(result.append.end_offset)
    return TransactionId(BROKER, result.physical_offset, result.queue_offset)


def run_out_of_checks(broker: Broker) -> None:
    start = broker.now
    for n in range(CHECK_MAX + 1):  # CHECK_MAX checks, then the discard
        broker.pass_at(start + TIMEOUT + n * INTERVAL + 1000)


def assert_discarded(broker: Broker, tx: TransactionId) -> None:
    with pytest.raises(Refusal, match="ended earlier with DISCARD"):
        broker.end(tx, transaction_pb2.TRANSACTION_COMMIT)


def test_a_full_half_message_is_discarded_without_its_count_and_blocks_no_other(broker: Broker, caplog):
    base = len(half_props("FULL"))
    full = put_half(broker, b"full", half_props("FULL", MAX_PROPERTIES_SIZE - base))
    small = put_half(broker, b"small", half_props("SMALL"))
    with caplog.at_level(logging.WARNING):
        run_out_of_checks(broker)
    moved = {m.body: m for m in broker.messages(TRANS_CHECK_MAX_TIME_TOPIC)}
    assert set(moved) == {b"full", b"small"}
    assert "TRANSACTION_CHECK_TIMES" not in moved[b"full"].properties  # no room for it
    assert len(moved[b"full"].raw_properties) == MAX_PROPERTIES_SIZE and moved[b"full"].unique_key == "FULL"
    assert moved[b"small"].properties["TRANSACTION_CHECK_TIMES"] == str(CHECK_MAX)
    assert "transaction_discard_count_left_out" in caplog.text
    assert "transaction_discard_failed" not in caplog.text
    assert broker.service.discarded == 2
    for tx in (full, small):
        assert_discarded(broker, tx)


def test_a_copy_refused_for_good_is_left_out_and_the_others_are_copied(broker: Broker, caplog):
    """A body over a maxMessageSize lowered since it was stored: its copy is refused at every pass."""
    large = put_half(broker, b"x" * 2048, half_props("LARGE"))
    small = put_half(broker, b"small", half_props("SMALL"))
    broker.store.config.max_message_size = 1024
    with caplog.at_level(logging.WARNING):
        run_out_of_checks(broker)
    assert [m.body for m in broker.messages(TRANS_CHECK_MAX_TIME_TOPIC)] == [b"small"]
    assert "transaction_discard_copy_refused" in caplog.text and "action=discarded_without_copy" in caplog.text
    assert broker.service.discarded == 2
    for tx in (large, small):
        assert_discarded(broker, tx)


def test_a_refusal_that_may_pass_still_retries_every_discard(broker: Broker, monkeypatch):
    """A full disk is not a refusal for good: nothing is discarded, and the next pass does it."""
    tx = put_half(broker, b"later", half_props("LATER"))
    put = broker.store.put_wire_batch
    monkeypatch.setattr(broker.store, "put_wire_batch", lambda *a, **k: _disk_full())
    run_out_of_checks(broker)
    assert broker.service.discarded == 0
    monkeypatch.setattr(broker.store, "put_wire_batch", put)
    broker.pass_at(broker.now + INTERVAL)
    assert [m.body for m in broker.messages(TRANS_CHECK_MAX_TIME_TOPIC)] == [b"later"]
    assert_discarded(broker, tx)


def _disk_full() -> PutMessageResult:
    return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, "disk full")

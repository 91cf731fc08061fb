"""The receipt handle codec, POP's durable state round trip, and a group's FIFO flag in both metadata formats."""

import pytest

from broker.metadata.metadata_codec import decode_groups, encode_group
from broker.metadata.subscription_group_config import SubscriptionGroupConfig
from broker.pop.pop_queue_state import InFlight
from broker.pop.pop_state_store import (
    DELIVERY,
    IN_FLIGHT,
    IN_FLIGHT_TAG,
    OFFSET,
    QUEUE_ID,
    PopStateStore,
    PopWrite,
)
from broker.rocksdb_raw import raw_keys
from common.receipt_handle import InvalidReceiptHandle, ReceiptHandle


def test_receipt_handle_round_trip_and_bad_handles_are_refused_clearly():
    handle = ReceiptHandle("broker-a", 3, 1234, 99, 1_700_000_000_000, 2)
    assert ReceiptHandle.decode(handle.encode()) == handle
    for bad in ["", "v1|broker-a|1|2|3|4", "v2|b|1|2|3|4|5", "v1||1|2|3|4|5", "v1|b|x|2|3|4|5", "v1|b|-1|2|3|4|5"]:
        with pytest.raises(InvalidReceiptHandle, match="receipt handle"):
            ReceiptHandle.decode(bad)


def test_pop_state_survives_reopening_and_deletes_stick(tmp_path):
    key = ("g", "T", 2)
    store = PopStateStore(tmp_path / "pop", sync=False)
    store.write(PopWrite(scan={key: 10}, deliveries={(key, 42): {7: InFlight(5000, 1, 42, "grp"), 8: InFlight(
        5000, 0, 42, "")}, (key, 43): {11: InFlight(6000, 0, 43, "")}}, held={(key, 9): "grp"}))
    store.write(PopWrite(deliveries={(key, 42): {7: InFlight(5000, 1, 42, "grp")}, (key, 43): {}}))
    store.close()
    reopened = PopStateStore(tmp_path / "pop", sync=False)
    state = reopened.load()[key]
    reopened.close()
    assert state.scan_offset == 10 and state.held == {9: "grp"}
    assert state.in_flight == {7: InFlight(5000, 1, 42, "grp")} and state.deliveries == {42: {7}}
    assert state.consumed_offset() == 7
    assert state.busy_groups(4999) == {"grp"} and state.busy_groups(5000) == set()
    assert state.expired(4999) == [] and state.expired(5000) == [7] and state.next_expiry_ms() == 5000


def test_a_store_of_one_record_a_message_is_read_and_rewritten_as_deliveries(tmp_path):
    key = ("g", "T", 2)
    store = PopStateStore(tmp_path / "pop", sync=False)
    queue_key = b"g\x00T\x00" + QUEUE_ID.pack(2)
    for offset, delivery in ((7, 42), (8, 43)):  # as brokers before deliveries wrote them
        store.db[IN_FLIGHT_TAG + queue_key + OFFSET.pack(offset)] = IN_FLIGHT.pack(5000 + offset, 1, delivery) + b"grp"
    state = store.load()[key]
    assert state.in_flight == {7: InFlight(5007, 1, 42, "grp"), 8: InFlight(5008, 1, 43, "grp")}
    assert [k[:1] for k in raw_keys(store.db)] == [DELIVERY, DELIVERY]  # rewritten once
    store.close()
    reopened = PopStateStore(tmp_path / "pop", sync=False)
    assert reopened.load()[key].in_flight == state.in_flight
    reopened.close()


def test_group_fifo_flag_round_trips_and_older_records_read_as_not_fifo():
    fifo = SubscriptionGroupConfig("g", consume_message_orderly=True)
    [decoded] = decode_groups([(b"g", encode_group(fifo))])
    assert decoded == fifo
    older = encode_group(SubscriptionGroupConfig("g"))[:-1]  # written before the flag existed
    [decoded] = decode_groups([(b"g", older)])
    assert decoded == SubscriptionGroupConfig("g")

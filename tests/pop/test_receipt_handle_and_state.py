"""The receipt handle codec, POP's durable state round trip, and a group's FIFO flag in both metadata formats."""

import pytest

from broker.metadata.metadata_codec import decode_groups, encode_group
from broker.metadata.subscription_group_config import SubscriptionGroupConfig
from broker.pop.pop_queue_state import InFlight, QueuePopState
from broker.pop.pop_state_store import PopStateStore, PopWrite
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
    store.write(PopWrite(scan={key: 10}, in_flight={(key, 7): InFlight(5000, 1, 42, "grp"), (key, 8): InFlight(
        6000, 0, 43, "")}, held={(key, 9): "grp"}))
    store.write(PopWrite(done_in_flight={(key, 8)}))
    store.close()
    reopened = PopStateStore(tmp_path / "pop", sync=False)
    state = reopened.load()[key]
    reopened.close()
    assert state == QueuePopState(10, {7: InFlight(5000, 1, 42, "grp")}, {9: "grp"})
    assert state.consumed_offset() == 7
    assert state.busy_groups(4999) == {"grp"} and state.busy_groups(5000) == set()
    assert state.expired(5000) == [7] and state.next_expiry_ms() == 5000


def test_group_fifo_flag_round_trips_and_older_records_read_as_not_fifo():
    fifo = SubscriptionGroupConfig("g", consume_message_orderly=True)
    [decoded] = decode_groups([(b"g", encode_group(fifo))])
    assert decoded == fifo
    older = encode_group(SubscriptionGroupConfig("g"))[:-1]  # written before the flag existed
    [decoded] = decode_groups([(b"g", older)])
    assert decoded == SubscriptionGroupConfig("g")

"""A tiered commitlog segment should hold the largest record the commitlog takes (a record never straddles
segments): a smaller ``tieredStoreCommitLogMaxSize`` is said at start (``config_tiered_segment_small``, naming both
keys and the minimum). Not refused: tests and measurements run small segments with small records, and a larger
record blocks only its own queue's upload (``test_tiered_unit_dispatcher_fetcher.py``); before, it stopped every
queue's uploads, and local expiry, for good."""

import logging

import pytest

from broker.broker_config import load_broker_config
from common.message_codec import HEADER_SIZE, MAX_TOPIC_BYTES
from common.message_properties import MAX_PROPERTIES_SIZE

MIB = 1024 * 1024
# maxMessageSize's default (4 MiB) plus a record's header, longest topic and largest properties
LARGEST = 4 * MIB + HEADER_SIZE + MAX_TOPIC_BYTES + MAX_PROPERTIES_SIZE


def conf(**keys: object) -> str:
    return "".join(f"{k}={v}\n" for k, v in {"tieredStoreEnable": "true", **keys}.items())


def warnings_of(text: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="broker.broker_config"):
        load_broker_config(text)
    return [r.getMessage() for r in caplog.records if "config_tiered_segment_small" in r.getMessage()]


def test_a_tiered_segment_below_the_largest_record_is_said_naming_both_keys_and_the_minimum(
        caplog: pytest.LogCaptureFixture):
    [line] = warnings_of(conf(tieredStoreCommitLogMaxSize=4 * MIB), caplog)
    assert f"tieredStoreCommitLogMaxSize={4 * MIB} largest_record={LARGEST}" in line
    assert f"maxMessageSize={4 * MIB}" in line and f"at least {LARGEST}" in line
    assert warnings_of(conf(tieredStoreCommitLogMaxSize=LARGEST), caplog) == []


@pytest.mark.parametrize(("keys", "fits"), [
    ({"tieredStoreCommitLogMaxSize": 64 * 1024, "maxMessageSize": 16 * 1024}, True),  # 16 KiB + 33 KiB fits
    ({"tieredStoreCommitLogMaxSize": 64 * 1024, "maxMessageSize": 32 * 1024}, False),
    # no record is larger than a local segment (less its 8-byte end marker)
    ({"tieredStoreCommitLogMaxSize": MIB, "mappedFileSizeCommitLog": MIB}, True),
    ({"tieredStoreCommitLogMaxSize": MIB - 9, "mappedFileSizeCommitLog": MIB}, False),
    ({"tieredStoreCommitLogMaxSize": 4096, "tieredStoreEnable": "false"}, True),  # no tier: nothing to hold
])
def test_the_minimum_follows_max_message_size_and_the_local_segment(keys: dict[str, object], fits: bool,
                                                                     caplog: pytest.LogCaptureFixture):
    assert (warnings_of(conf(**keys), caplog) == []) is fits

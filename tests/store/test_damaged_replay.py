"""The replay at start crossing damage on disk (``broker/store/dispatch/damaged_range.py``), in process with the
real store: the consume queue was lost (removed, as an operator rebuilding it would) and the commitlog has a zeroed
page in its first segment, below the flushed checkpoint, so recovery's own check does not see it. The damaged
records are skipped and logged, the queue's hole is filled with empty units that reads pass over, and every other
message is served at its queue offset. (The replay failed on the damage, and the store fail-stopped at every start.)
"""

import logging
import os
import shutil
from pathlib import Path

import pytest

from broker.store.recovery import ABORT_FILE
from common.message_codec import decode_record
from common.message_properties import encode_properties
from tests.store.conftest import StoreFactory

TOPIC = "DamagedReplayT"
COUNT = 150  # about 1.1 KiB records: three 64 KiB segments


def _zero(path: Path, pos: int, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(size), pos)
    finally:
        os.close(fd)


def test_damage_the_replay_crosses_is_skipped_and_the_queue_keeps_its_offsets(
        tmp_path: Path, open_store: StoreFactory, caplog: pytest.LogCaptureFixture):
    store = open_store()
    r = None
    for i in range(COUNT):
        r = store.put_messages(TOPIC, 0, [f"{i:04d}".encode() * 256], [encode_properties({"KEYS": f"k{i}"})])
    store.wait_dispatched(r.append.end_offset)
    first = store.get_message(TOPIC, 0, 10, 1).messages[0]
    damaged_at, size = decode_record(first).physical_offset, len(first)
    store.shutdown()
    root = tmp_path / "store"
    for name in ("consumequeue", "consumequeue_rocksdb"):
        shutil.rmtree(root / name, ignore_errors=True)
    _zero(min((root / "commitlog").iterdir()), damaged_at, size + 100)  # record 10, and the start of 11
    (root / ABORT_FILE).touch()  # as after a crash
    with caplog.at_level(logging.WARNING):
        store = open_store()
    assert "commitlog_damaged_skipped" in caplog.text and "consume_queue_gap_filled" in caplog.text
    assert not store.running_flags.fail_stop_reason
    got, offset = [], 0
    while offset < COUNT:
        result = store.get_message(TOPIC, 0, offset, 32)
        got += [decode_record(m) for m in result.messages]
        offset = result.next_begin_offset
    assert [m.queue_offset for m in got] == [i for i in range(COUNT) if i not in (10, 11)]
    assert all(m.body == f"{m.queue_offset:04d}".encode() * 256 for m in got)
    r = store.put_messages(TOPIC, 0, [b"after"], [encode_properties({})])
    store.wait_dispatched(r.append.end_offset)
    assert decode_record(store.get_message(TOPIC, 0, COUNT, 1).messages[0]).body == b"after"

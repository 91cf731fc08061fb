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

from broker.store.config import StoreType
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.store.message_store import MessageStore
from broker.store.recovery import ABORT_FILE
from common.message_codec import decode_record
from common.message_properties import encode_properties
from tests.store.conftest import StoreFactory, store_config

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
    # The hole's units keep the queue's units in commitlog order: searches by time and expiry bisect them (an
    # offset 0 there sent them past good records, the diff review)
    units = store.consume_queue_store.read_units(TOPIC, 0, 0, COUNT)
    assert [u[0] for u in units] == sorted(u[0] for u in units)
    for offset in (5, 30, 120):
        stored = next(m for m in got if m.queue_offset == offset).store_timestamp
        assert store.offset_by_time(TOPIC, 0, stored) <= offset
    r = store.put_messages(TOPIC, 0, [b"after"], [encode_properties({})])
    store.wait_dispatched(r.append.end_offset)
    assert decode_record(store.get_message(TOPIC, 0, COUNT, 1).messages[0]).body == b"after"


class NoHoles(CommitLogDispatcher):
    """A dispatcher a hole in the records would harm (as tiered storage's gap filling)."""

    name = "no-holes"
    takes_holes = False

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        pass

    def checkpoint(self) -> int:
        return 0


def test_with_a_dispatcher_that_takes_no_holes_the_damage_stops_the_store(
        tmp_path: Path, store_type: StoreType, caplog: pytest.LogCaptureFixture):
    root = tmp_path / "store"
    store = MessageStore(store_config(root, store_type=store_type))
    store.start()
    r = None
    for i in range(COUNT):
        r = store.put_messages(TOPIC, 0, [f"{i:04d}".encode() * 256], [encode_properties({})])
    store.wait_dispatched(r.append.end_offset)
    damaged_at = decode_record(store.get_message(TOPIC, 0, 10, 1).messages[0]).physical_offset
    store.shutdown()
    _zero(min((root / "commitlog").iterdir()), damaged_at, 200)
    (root / ABORT_FILE).touch()
    store = MessageStore(store_config(root, store_type=store_type))
    store.register_dispatcher(NoHoles())
    with caplog.at_level(logging.WARNING):
        store.start()
    try:
        assert store.running_flags.fail_stop_reason and "commitlog_damaged_skipped" not in caplog.text
    finally:
        store.shutdown()


def test_a_record_the_kept_confirm_offset_cuts_waits_and_is_no_damage(tmp_path: Path):
    """Controller mode keeps the confirm offset, which a restart caps the log's visible end at; it may lie inside a
    record. The replay waits there for the group to confirm the rest: taken for damage, the record was skipped, and
    reput left inside a record fail-stopped the store once the group confirmed past it (the diff review)."""
    root = tmp_path / "store"

    def opened() -> MessageStore:
        store = MessageStore(store_config(root))
        store.keeps_confirm_checkpoint = True  # as broker_controller sets it in controller mode
        store.start()
        return store

    store = opened()
    r = None
    for i in range(20):
        r = store.put_messages(TOPIC, 0, [f"{i:04d}".encode() * 256], [encode_properties({})])
    store.wait_dispatched(r.append.end_offset)
    cut = decode_record(store.get_message(TOPIC, 0, 10, 1).messages[0]).physical_offset + 300
    store.shutdown()
    store.confirm_checkpoint.write(cut)
    shutil.rmtree(root / "consumequeue")  # its checkpoint behind, as after a crash
    (root / ABORT_FILE).touch()
    store = opened()
    try:
        assert store.reput.skipped_damage == [] and store.max_offset(TOPIC, 0) == 10
        log = store.commit_log
        log.replication_gated = True
        log.set_replicated_offset(log.max_offset())
        log.advance_confirm_offset(log.max_offset())
        assert store.wait_dispatched(log.max_offset(), 5) and store.max_offset(TOPIC, 0) == 20
        assert not store.running_flags.fail_stop_reason
    finally:
        store.shutdown()

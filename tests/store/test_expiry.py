"""Expiry of commitlog segments and what it does to queues."""

import errno
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from broker.store.disk_usage_watcher import USAGE_FILE_ENV
from broker.store.get_message_result import GetMessageStatus
from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import MappedFileQueue
from common.message_codec import decode_record
from tests.store.conftest import StoreFactory


def _fill(store, n: int, queues: int = 2):
    r = None
    for i in range(n):
        r = store.put_messages("ExpT", i % queues, [f"{i:06d}".encode() * 100], [b""])
        assert r.ok
    store.wait_dispatched(r.append.end_offset)


def _age(path: Path, hours: float) -> None:
    t = time.time() - hours * 3600
    os.utime(path, (t, t))


def test_expiry_moves_min_offsets_and_keeps_the_written_segment(open_store: StoreFactory, tmp_path: Path):
    store = open_store(file_reserved_time_hours=1, delete_when="*")
    _fill(store, 400)
    segments = sorted((tmp_path / "store" / "commitlog").iterdir())
    assert len(segments) >= 5
    for seg in segments[:3]:
        _age(seg, 2)
    assert store.delete_expired_files() == 3
    assert store.commit_log.min_offset() == int(segments[3].name)
    for q in range(2):
        lo = store.min_offset("ExpT", q)
        assert lo > 0
        got = store.get_message("ExpT", q, lo, 1)
        assert got.status is GetMessageStatus.FOUND
        assert decode_record(got.messages[0]).physical_offset >= store.commit_log.min_offset()
        assert store.get_message("ExpT", q, 0, 1).status is GetMessageStatus.OFFSET_TOO_SMALL
        assert store.get_message("ExpT", q, 0, 1).next_begin_offset == lo

    for seg in segments:  # everything is old now: all but the segment being written go
        if seg.exists():
            _age(seg, 5)
    while store.delete_expired_files():
        pass
    remaining = sorted((tmp_path / "store" / "commitlog").iterdir())
    assert remaining == [segments[-1]]
    r = store.put_messages("ExpT", 0, [b"after"], [b""])
    assert r.ok
    store.wait_dispatched(r.append.end_offset)
    assert decode_record(store.get_message("ExpT", 0, r.queue_offset, 1).messages[0]).body == b"after"


def test_nothing_expires_before_its_time_or_outside_delete_hours(open_store: StoreFactory, tmp_path: Path):
    store = open_store(file_reserved_time_hours=1, delete_when="*")
    _fill(store, 200)
    assert store.delete_expired_files() == 0  # all fresh
    store.shutdown()  # one store at a time on a directory (RocksDB holds a lock)
    hour = (time.localtime().tm_hour + 12) % 24
    store = open_store(file_reserved_time_hours=1, delete_when=f"{hour:02d}")
    for seg in (tmp_path / "store" / "commitlog").iterdir():
        _age(seg, 2)
    assert store.delete_expired_files(ignore_delete_when=False) == 0  # not the delete hour, disk not full
    assert store.delete_expired_files(ignore_delete_when=True) > 0


def test_disk_above_clean_forcibly_ratio_deletes_oldest_at_once(open_store: StoreFactory, monkeypatch,
                                                                 tmp_path: Path):
    hour = (time.localtime().tm_hour + 12) % 24
    store = open_store(file_reserved_time_hours=1000, delete_when=f"{hour:02d}")
    _fill(store, 200)
    before = store.commit_log.min_offset()
    assert 0 < store.disk_watcher.check().used_percent < 100
    assert store.delete_expired_files(ignore_delete_when=False) == 0
    usage_file = tmp_path / "disk-usage"
    usage_file.write_text("87")  # above diskSpaceCleanForciblyRatio=85: a disk we cannot really fill
    monkeypatch.setenv(USAGE_FILE_ENV, str(usage_file))
    assert store.delete_expired_files(ignore_delete_when=False) > 0
    assert store.commit_log.min_offset() > before


def test_expired_queue_min_offset_survives_restart(open_store: StoreFactory, tmp_path: Path):
    store = open_store(file_reserved_time_hours=1, delete_when="*")
    _fill(store, 300)
    for seg in sorted((tmp_path / "store" / "commitlog").iterdir())[:2]:
        _age(seg, 2)
    store.delete_expired_files()
    mins = [store.min_offset("ExpT", q) for q in range(2)]
    maxs = [store.max_offset("ExpT", q) for q in range(2)]
    store.shutdown()
    store = open_store(file_reserved_time_hours=1, delete_when="*")
    assert [store.max_offset("ExpT", q) for q in range(2)] == maxs
    for q in range(2):  # recovery moves each min past the expired commitlog again: exact, and readable
        lo = store.min_offset("ExpT", q)
        assert lo == mins[q]
        got = store.get_message("ExpT", q, lo, 1)
        assert got.status is GetMessageStatus.FOUND, (q, lo, mins)


def test_nothing_expires_when_the_consume_queue_cannot_prepare(open_store: StoreFactory, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture):
    store = open_store(file_reserved_time_hours=1, delete_when="*")
    _fill(store, 300)
    segments = sorted((tmp_path / "store" / "commitlog").iterdir())
    for seg in segments[:2]:
        _age(seg, 2)
    asked: list[int] = []

    def full_disk(commit_log_min_offset: int) -> None:
        asked.append(commit_log_min_offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    store.clean_service.before_delete = full_disk
    with caplog.at_level(logging.ERROR):
        assert store.delete_expired_files() == 0
    assert asked == [int(segments[2].name)]  # the new min the deletion would have made
    assert sorted((tmp_path / "store" / "commitlog").iterdir()) == segments
    assert f"commitlog_expiry_held new_min_offset={int(segments[2].name)}" in caplog.text
    assert [store.min_offset("ExpT", q) for q in range(2)] == [0, 0]
    store.clean_service.before_delete = store.consume_queue_store.prepare_expiry
    assert store.delete_expired_files() == 2


def test_a_segment_deleted_while_the_flusher_holds_it_does_not_stop_the_store(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    """Forced cleanup on a full disk deleted a segment the flusher had taken but not yet fsynced: the flush reopened
    it by path, failed with "No such file or directory", and the store stopped taking writes (seen in a full-suite
    run). A deletion now waits for the flush in progress."""
    queue = MappedFileQueue(tmp_path / "segments", 4096)
    queue.load()
    first = queue.last_writable()
    first.append(b"x" * 4096)  # full, not flushed
    queue.last_writable().append(b"y")  # the second segment: the first may go
    real_flush = MappedFile.flush
    deleted = threading.Event()

    def flush_while_deleting(segment: MappedFile) -> int:
        if segment is first:
            threading.Thread(target=lambda: (queue.delete_first(lambda _f: True, 1), deleted.set())).start()
            deleted.wait(0.3)  # a deletion between the flusher's choice and its fsync
        return real_flush(segment)

    monkeypatch.setattr(MappedFile, "flush", flush_while_deleting)
    queue.flush()
    assert deleted.wait(5) and [f.file_from_offset for f in queue._files] == [4096]
    queue.shutdown()

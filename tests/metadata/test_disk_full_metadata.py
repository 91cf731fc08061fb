"""Metadata on a full disk: a read never needs a write (a group auto-created by a pull lives in memory and is
written later), a failed write loses nothing that a later one cannot write, and leaves no partial file."""

import errno
import json
import os
from pathlib import Path

import pytest

from broker.metadata import metadata_store
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.store.config import StoreType
from common import atomic_file
from common.storage_refusal import is_disk_full
from common.topic_config import TopicConfig
from tests.disk.tmpfs import fill_file_system, remove_filler, try_mount_tmpfs, unmount
from tests.metadata.helpers import BACKENDS, Managers, open_managers


def _enospc(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fail_store_writes(monkeypatch: pytest.MonkeyPatch, store: object, method: str = "put") -> None:
    """Make the store's writes (its ``method``: a RocksDB store writes at once) fail as a full disk does (RocksDB
    raises a plain Exception)."""
    if isinstance(store, metadata_store.JsonMetadataStore):
        monkeypatch.setattr(metadata_store, "write_json_atomically", _enospc)
    else:
        def refuse(*_args: object) -> None:
            raise Exception("IO error: No space left on device: While appending to file")
        monkeypatch.setattr(store, method, refuse)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_group_first_seen_by_a_read_needs_no_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     backend: StoreType) -> None:
    managers = open_managers(backend, tmp_path)
    _fail_store_writes(monkeypatch, managers.groups.store)
    cfg = managers.groups.find("fresh-group")
    assert cfg is not None and cfg.group_name == "fresh-group" and cfg.consume_enable
    assert managers.groups.find("fresh-group") is cfg
    with pytest.raises(Exception):  # noqa: B017 - the retry fails while the disk is full
        managers.groups.persist()
    monkeypatch.undo()
    managers.groups.persist()  # space is back: the deferred write happens
    managers.close()
    reopened = open_managers(backend, tmp_path)
    assert "fresh-group" in reopened.groups.subscription_group_table
    reopened.close()


def test_a_failed_offsets_write_is_retried_by_the_next_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = ConsumerOffsetManager(tmp_path / "config")
    offsets.commit_offset("g", "T", 0, 42)  # the JSON store defers writes: a commit needs no disk
    monkeypatch.setattr(metadata_store, "write_json_atomically", _enospc)
    with pytest.raises(OSError):
        offsets.persist()
    monkeypatch.undo()
    offsets.persist()  # still dirty: written now
    reloaded = ConsumerOffsetManager(tmp_path / "config")
    reloaded.load()
    assert reloaded.query_offset("g", "T", 0) == 42


def _after_a_kill(managers: Managers, backend: StoreType, root: Path) -> Managers:
    """What a broker killed now finds at restart: no flush of the offsets (the JSON files are replaced whole and
    fsynced, RocksDB writes through its WAL: closing only releases the database)."""
    managers.stores.close()
    return open_managers(backend, root)


@pytest.mark.parametrize("backend", BACKENDS)
def test_offsets_whose_delete_the_disk_refused_are_deleted_by_a_retry(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     backend: StoreType) -> None:
    """A reused static-topic queue's offsets are forgotten durably before the call returns; refused, they stay
    listed in memory too, so the retry deletes them, durably. (JSON: dropped from memory before the write, the
    retry found nothing, wrote nothing and answered success; a kill before the next flush brought them back, read
    as the new link's.)"""
    managers = open_managers(backend, tmp_path)
    managers.offsets.commit_offset("g", "T", 0, 42)
    managers.offsets.commit_offset("g", "T", 1, 7)
    managers.offsets.persist()
    _fail_store_writes(monkeypatch, managers.offsets.store, "delete")
    with pytest.raises(Exception, match="No space left on device"):
        managers.offsets.delete_queues("T", [0])
    assert managers.offsets.query_offset("g", "T", 0) == 42  # as on disk
    monkeypatch.undo()
    assert managers.offsets.delete_queues("T", [0]) == 1
    reopened = _after_a_kill(managers, backend, tmp_path)
    assert (reopened.offsets.query_offset("g", "T", 0), reopened.offsets.query_offset("g", "T", 1)) == (-1, 7)
    reopened.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_offsets_of_a_topic_whose_delete_the_disk_refused_stay_readable_until_a_retry_deletes_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: StoreType) -> None:
    """deleteTopic refused by a full disk: the disk still holds the topic's offsets, and so does memory (they were
    dropped from memory first: every group read -1, a consumer started at max, until a retry)."""
    managers = open_managers(backend, tmp_path)
    managers.offsets.commit_offset("g1", "T", 0, 42)
    managers.offsets.commit_offset("g2", "T", 3, 5)
    managers.offsets.commit_offset("g1", "Other", 0, 9)
    managers.offsets.persist()
    _fail_store_writes(monkeypatch, managers.offsets.store, "delete_prefix")
    with pytest.raises(Exception, match="No space left on device"):
        managers.offsets.delete_topic("T")
    assert (managers.offsets.query_offset("g1", "T", 0), managers.offsets.query_offset("g2", "T", 3)) == (42, 5)
    assert managers.offsets.topics_of_group("g1") == ["Other", "T"]
    monkeypatch.undo()
    managers.offsets.delete_topic("T")
    assert managers.offsets.topics_of_group("g1") == ["Other"]
    reopened = _after_a_kill(managers, backend, tmp_path)
    assert [reopened.offsets.query_offset(*key) for key in (("g1", "T", 0), ("g2", "T", 3), ("g1", "Other", 0))] \
        == [-1, -1, 9]
    reopened.close()


def test_a_json_write_the_disk_refuses_leaves_the_old_file_and_no_temp(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    groups = SubscriptionGroupManager(tmp_path / "config")
    groups.find("before")
    path = tmp_path / "config" / metadata_store.GROUPS.json_file
    old = path.read_bytes()
    monkeypatch.setattr(atomic_file.os, "fsync", _enospc)
    groups.find("during")  # does not raise: persisted later
    monkeypatch.undo()
    assert path.read_bytes() == old
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    groups.persist()
    assert "during" in json.dumps(json.loads(path.read_text()))


def test_rocksdb_metadata_takes_writes_again_once_the_full_disk_has_room(tmp_path: Path) -> None:
    """RocksDB keeps a failed log append's error and refuses every later write with it, room or not, until the
    database is reopened: commits and topic changes failed after a full disk until a restart. The metadata database
    now reopens at the first write once there is room, and refuses as disk full, without reopening, while there is
    none. A real tmpfs: the refusal is RocksDB's own."""
    disk = tmp_path / "disk"
    disk.mkdir()
    assert try_mount_tmpfs(disk, "16m"), f"cannot mount a tmpfs on {disk} (uid {os.geteuid()}: needs root)"
    try:
        managers = open_managers(StoreType.DEFAULT_ROCKSDB, disk)
        managers.offsets.commit_offset("g", "T", 0, 1)
        fill_file_system(disk)
        refused: Exception | None = None
        for queue_id in range(1, 200_000):  # the log's set-aside room takes many first
            try:
                managers.offsets.commit_offset("g" * 200, "T", queue_id, queue_id)
            except Exception as exc:
                refused = exc
                break
        assert refused is not None and is_disk_full(refused), refused
        with pytest.raises(OSError) as still_full:
            managers.topics.update(TopicConfig("WhileFullT", 1, 1))
        assert is_disk_full(still_full.value) and "reopened once" in str(still_full.value)
        remove_filler(disk)
        managers.offsets.commit_offset("g", "T", 0, 2)
        managers.topics.update(TopicConfig("AfterRoomT", 1, 1))
        managers.close()
        reopened = open_managers(StoreType.DEFAULT_ROCKSDB, disk)
        assert reopened.offsets.query_offset("g", "T", 0) == 2
        assert reopened.topics.select("AfterRoomT") is not None and reopened.topics.select("WhileFullT") is None
        reopened.close()
    finally:
        unmount(disk)

"""The tier's metadata store (RocksDB) on a real full disk: RocksDB keeps a failed log append's error and refuses every
later write with it, room or not, until the database is reopened. The uploader retries refused record writes "once
there is room"; before the store reopened its database, no retry could succeed until a restart."""

import os
from pathlib import Path

import pytest

from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.metadata.tiered_metadata_store import QueueMetadata, TopicMetadata
from common.storage_refusal import is_disk_full
from tests.disk.tmpfs import fill_file_system, remove_filler, try_mount_tmpfs, unmount


def test_the_tier_metadata_takes_writes_again_once_the_full_disk_has_room(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    assert try_mount_tmpfs(disk, "16m"), f"cannot mount a tmpfs on {disk} (uid {os.geteuid()}: needs root)"
    try:
        store = RocksDBTieredMetadataStore(disk / "tiered_metadata")
        store.set_checkpoint(100)
        fill_file_system(disk)
        refused: Exception | None = None
        for queue_id in range(200_000):  # the log's set-aside room takes many first
            try:
                store.update_queue(QueueMetadata("T" * 120, queue_id, 0, queue_id))
            except Exception as exc:
                refused = exc
                break
        assert refused is not None and is_disk_full(refused), refused
        with pytest.raises(OSError) as still_full:
            store.set_checkpoint(200)
        assert is_disk_full(still_full.value) and "reopened once" in str(still_full.value)
        assert store.get_checkpoint() == 100  # reads go on meanwhile
        remove_filler(disk)
        store.set_checkpoint(300)
        store.update_topic(TopicMetadata("AfterRoomT", -1))
        store.close()
        reopened = RocksDBTieredMetadataStore(disk / "tiered_metadata")
        assert reopened.get_checkpoint() == 300 and reopened.get_topic("AfterRoomT") is not None
        reopened.close()
    finally:
        unmount(disk)

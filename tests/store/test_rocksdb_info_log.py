"""RocksDB's info log (``LOG``) of the broker's own databases is rolled and kept to two files: unrolled, it grew by
every flush and compaction for as long as the broker ran (the KV store's, flushed every 5 s under any traffic,
about 4 MB an hour; the leaks review), and the metadata database kept one more at every start."""

from pathlib import Path

import pytest

from broker import rocksdb_raw
from broker.metadata.rocksdb_metadata_store import _open_db as open_metadata_db
from broker.store.consume_queue.rocksdb_consume_queue_store import open_db as open_consume_queue_db
from broker.tiered.metadata.rocksdb_tiered_metadata_store import _open_db as open_tiered_metadata_db

LIMIT = 16 * 1024


def _info_logs(path: Path) -> list[int]:
    return [p.stat().st_size for p in path.iterdir() if p.name == "LOG" or p.name.startswith("LOG.old")]


@pytest.mark.parametrize("open_db", [rocksdb_raw.open_raw, open_metadata_db, open_consume_queue_db,
                                     open_tiered_metadata_db])
def test_the_info_log_rolls_at_its_limit_and_two_are_kept(tmp_path: Path, monkeypatch, open_db) -> None:
    monkeypatch.setattr(rocksdb_raw, "MAX_INFO_LOG_BYTES", LIMIT)
    path = tmp_path / "db"
    for _ in range(3):  # and at every start
        db = open_db(path)
        for i in range(25):  # each flush writes its lines to the info log
            db[b"k%d" % i] = b"v" * 100
            db.flush(True)
        db.close()
    sizes = _info_logs(path)
    assert len(sizes) <= 2 and max(sizes) <= 4 * LIMIT, sizes

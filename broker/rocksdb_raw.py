"""rocksdict in raw mode (``Options(raw_mode=True)``), typed: every key and value is ``bytes``.

rocksdict's stubs describe its default (pickling) mode: keys ``str | int | float | bytes | bool``, values
``Any``. The stores here open their databases in raw mode; these helpers say so once per scan (no cost per
item) instead of at every use.
"""

import errno
import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

from rocksdict import Options, Rdict, ReadOptions, Snapshot, WriteOptions

from common.storage_refusal import is_disk_full

log = logging.getLogger(__name__)

# Free space a reopen waits for: opening writes a new write-ahead log and manifest.
REOPEN_ROOM_BYTES = 4 * 1024 * 1024
MAX_INFO_LOG_BYTES = 8 * 1024 * 1024


def broker_db_options() -> Options:
    """The settings of every database the broker keeps itself: raw mode, created if missing, two background jobs,
    and RocksDB's info log (``LOG``) rolled at :data:`MAX_INFO_LOG_BYTES` with two kept. Unrolled, it grew by every
    flush and compaction for as long as the broker ran (the KV store's, flushed every 5 s under any traffic, about
    4 MB an hour), and one more was kept at every start."""
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_keep_log_file_num(2)
    options.set_max_log_file_size(MAX_INFO_LOG_BYTES)
    options.set_max_background_jobs(2)
    return options


def open_raw(path: Path) -> Rdict:
    """A raw-mode database at ``path`` (created if missing) with :func:`broker_db_options`."""
    path.mkdir(parents=True, exist_ok=True)
    return Rdict(str(path), broker_db_options())


def reopen_after_refusal(db: Rdict, path: Path, open_db: Callable[[Path], Rdict] = open_raw) -> Rdict:
    """``db`` (at ``path``) reopened by ``open_db``, once the disk has room, after the disk refused a write: RocksDB
    keeps a failed write-ahead-log append's error and refuses every later write with it, room or not, until the
    database is reopened. The caller keeps every other use of ``db`` out meanwhile. Without room, raises ENOSPC and
    leaves ``db`` open (reads go on); an open that fails anyway raises, and the caller's next write tries again.
    Closing reports the kept error; what the log holds is read again at the open."""
    free = shutil.disk_usage(path).free
    if free < REOPEN_ROOM_BYTES:
        raise OSError(errno.ENOSPC, f"No space left on device: {free} bytes free under {path}; the database is "
                                    f"reopened once {REOPEN_ROOM_BYTES} are")
    try:
        db.close()
    except Exception as exc:  # RocksDB's kept error, reported by the close it still does
        log.info("rocksdb_closed_with_error path=%s error=%r", path, str(exc))
    reopened = open_db(path)
    log.info("rocksdb_reopened path=%s reason=a_write_was_refused_as_disk_full free_bytes=%d", path, free)
    return reopened


class ReopenedAfterRefusal:
    """A database whose writes go through :meth:`write`, one at a time: after the disk refused one, the next
    reopens the database first (``reopen_after_refusal``), so writes work again once there is room, without a
    restart. Readers take :attr:`db` afresh for each use; a reopen swaps it (the old object is closed). An iterator
    of the old object still open keeps its file lock, and the open fails until it is gone: the next write tries
    again, and reads fail meanwhile (measured with rocksdict: the iterator goes on reading the closed object)."""

    def __init__(self, db: Rdict, path: Path, open_db: Callable[[Path], Rdict] = open_raw) -> None:
        self.db = db
        self.path = path
        self._open_db = open_db
        self._refused = False
        self._lock = threading.Lock()

    def write(self, change: Callable[[Rdict], None]) -> None:
        """``change(db)``: one write (a put, a delete, a batch). Raises what it raises; a refusal as disk full
        makes the next write reopen the database."""
        with self._lock:
            if self._refused:
                self.db = reopen_after_refusal(self.db, self.path, self._open_db)
                self._refused = False
            try:
                change(self.db)
            except Exception as exc:
                if is_disk_full(exc):
                    self._refused = True
                raise


def raw_items(db: Rdict | Snapshot, from_key: bytes | None = None, read_opt: ReadOptions | None = None,
              backwards: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """``db.items(...)`` of a raw-mode database."""
    return cast(Iterator[tuple[bytes, bytes]], db.items(backwards=backwards, from_key=from_key, read_opt=read_opt))


def raw_keys(db: Rdict, from_key: bytes | None = None, read_opt: ReadOptions | None = None) -> Iterator[bytes]:
    """``db.keys(...)`` of a raw-mode database."""
    return cast(Iterator[bytes], db.keys(from_key=from_key, read_opt=read_opt))


def snapshot_get(snap: Snapshot, key: bytes) -> bytes | None:
    """A point read through a snapshot (rocksdict's snapshot iterators do not isolate as of 0.3.29; its point
    reads do); None when the key is absent."""
    try:
        return snap[key]
    except Exception:  # rocksdict raises a bare Exception for a missing key
        return None


def unlogged_write_options() -> WriteOptions:
    """Write options with RocksDB's write-ahead log off."""
    options = WriteOptions()
    options.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; the stub says a method
    return options


def synced_write_options() -> WriteOptions:
    """Write options with the write-ahead log on and synced before the write returns."""
    options = WriteOptions()
    options.sync = True
    return options

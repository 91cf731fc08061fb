"""rocksdict in raw mode (``Options(raw_mode=True)``), typed: every key and value is ``bytes``.

rocksdict's stubs describe its default (pickling) mode: keys ``str | int | float | bytes | bool``, values
``Any``. The stores here open their databases in raw mode; these helpers say so once per scan (no cost per
item) instead of at every use.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import cast

from rocksdict import Options, Rdict, ReadOptions, WriteOptions


def open_raw(path: Path) -> Rdict:
    """A raw-mode database at ``path`` (created if missing) with the small-footprint settings the broker's own
    stores use: two info logs kept, two background jobs."""
    path.mkdir(parents=True, exist_ok=True)
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_keep_log_file_num(2)
    options.set_max_background_jobs(2)
    return Rdict(str(path), options)


def raw_items(db: Rdict, from_key: bytes | None = None, read_opt: ReadOptions | None = None,
              backwards: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """``db.items(...)`` of a raw-mode database."""
    return cast(Iterator[tuple[bytes, bytes]], db.items(backwards=backwards, from_key=from_key, read_opt=read_opt))


def raw_keys(db: Rdict, from_key: bytes | None = None, read_opt: ReadOptions | None = None) -> Iterator[bytes]:
    """``db.keys(...)`` of a raw-mode database."""
    return cast(Iterator[bytes], db.keys(from_key=from_key, read_opt=read_opt))


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

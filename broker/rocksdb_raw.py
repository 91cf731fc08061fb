"""rocksdict in raw mode (``Options(raw_mode=True)``), typed: every key and value is ``bytes``.

rocksdict's stubs describe its default (pickling) mode: keys ``str | int | float | bytes | bool``, values
``Any``. The stores here open their databases in raw mode; these helpers say so once per scan (no cost per
item) instead of at every use.
"""

from collections.abc import Iterator
from typing import cast

from rocksdict import Rdict, ReadOptions, WriteOptions


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

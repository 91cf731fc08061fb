"""Where the metadata managers persist their tables.

Each manager (topics, subscription groups, consumer offsets) keeps its table in memory, serves every read
from it, and tells its :class:`MetadataStore` about each change. Two implementations:

* :class:`JsonMetadataStore` (``storeType=default``): today's behaviour, one JSON file per table under
  ``<storePathRootDir>/config`` rewritten whole on every change (topics, groups), or by a timer
  (offsets: ``write_through=False``, written on :meth:`MetadataStore.flush`).
* ``RocksDBMetadataStore`` (``storeType=defaultRocksDB``, ``rocksdb_metadata_store.py``): one RocksDB at
  ``<storePathRootDir>/metadata`` shared by the three tables; every change is one small write with the WAL
  on, whatever the size of the table.
"""

import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic

from broker.metadata.json_file import loading, read_json, write_json_atomically
from broker.metadata.metadata_codec import (
    ACLS,
    GROUPS,
    OFFSETS,
    TABLES,
    TOPICS,
    USERS,
    K,
    MetadataTable,
    OffsetKey,
    OffsetRecord,
    V,
)
from broker.metadata.subscription_group_config import SubscriptionGroupConfig
from broker.store.config import StoreType
from common.acl import Policy, User
from common.atomic_file import write_file_atomically
from common.topic_config import TopicConfig

log = logging.getLogger(__name__)


class MetadataStore(ABC, Generic[K, V]):
    """The persistence of one metadata table. Callers serialize changes to one key (the managers hold
    their lock around the in-memory change and the call here)."""

    #: True: a put or delete is on disk (it survives a kill of the process) when the call returns.
    #: False: changes reach disk on :meth:`flush` (a timer and shutdown).
    write_through: bool = True
    #: True: the store writes the manager's whole table (its :meth:`bind` snapshot), not just the keys it is
    #: given, so a deletion reaches disk only once memory no longer holds the keys.
    writes_snapshot: bool = False

    def bind(self, snapshot: Callable[[], Sequence[V]]) -> None:
        """How to read the manager's whole table, for stores that write whole files."""

    @abstractmethod
    def load(self) -> Iterator[V]:
        """Every stored record, in no particular order."""

    @abstractmethod
    def put(self, values: Sequence[V]) -> None:
        """Insert or replace ``values``, all in one write."""

    @abstractmethod
    def delete(self, keys: Sequence[K]) -> None:
        """Remove the records with these keys (missing keys are fine)."""

    @abstractmethod
    def delete_prefix(self, key_prefix: K) -> None:
        """Remove every record whose key starts with ``key_prefix`` (offsets: ``(topic,)``)."""

    def flush(self) -> None:
        """Write what :meth:`put`/:meth:`delete` deferred."""


class JsonMetadataStore(MetadataStore[K, V]):
    """One JSON file holding the whole table, rewritten (temp file, fsync, rename) on change, or on
    :meth:`flush` when ``write_through`` is false."""

    writes_snapshot = True

    def __init__(self, config_dir: Path, table: MetadataTable[K, V], write_through: bool = True) -> None:
        self.path = config_dir / table.json_file
        self.table = table
        self.write_through = write_through
        if table.secret:
            keep_private(self.path, SECRET_FILE_MODE)
        self._snapshot: Callable[[], Sequence[V]] | None = None
        self._dirty = False
        self._write_lock = threading.Lock()
        self._as_written: tuple[int, int] | None = None  # the file's (mtime, size) as this broker last read or wrote it

    def bind(self, snapshot: Callable[[], Sequence[V]]) -> None:
        self._snapshot = snapshot

    def load(self) -> Iterator[V]:
        with loading(self.path, " (fix or remove that entry)"):
            self._as_written = _stamp(self.path)
            return iter(list(self.table.from_json(read_json(self.path))))

    def put(self, values: Sequence[V]) -> None:
        self._changed()

    def delete(self, keys: Sequence[K]) -> None:
        self._changed()

    def delete_prefix(self, key_prefix: K) -> None:
        self._changed()

    def flush(self) -> None:
        if self._dirty:
            self._write()

    def _changed(self) -> None:
        self._dirty = True
        if self.write_through:
            self._write()

    def _write(self) -> None:
        assert self._snapshot is not None, "JsonMetadataStore used before bind()"
        with self._write_lock:  # the timer and shutdown may flush at once: one writer of the temp file
            self._dirty = False  # before the snapshot: a change racing with it sets the flag again
            try:
                self._keep_hand_edit()
                write_json_atomically(self.path, self.table.to_json(self._snapshot()),
                                      SECRET_FILE_MODE if self.table.secret else None)
                self._as_written = _stamp(self.path)
            except BaseException:
                self._dirty = True  # not written (a full disk): the next flush tries again
                raise

    def _keep_hand_edit(self) -> None:
        """The file changed since this broker read or wrote it (edited by hand while it ran): the table in memory
        replaces it, so the edit is kept beside it and said, not lost silently."""
        stamp = _stamp(self.path)
        if stamp is None or stamp == self._as_written:
            return
        kept = self.path.with_name(f"{self.path.name}.edited-{time.strftime('%Y%m%dT%H%M%S')}")
        write_file_atomically(kept, self.path.read_bytes(), SECRET_FILE_MODE if self.table.secret else None)
        log.warning("metadata_file_edited_while_running path=%s kept_as=%s: the broker reads it at start only and "
                    "its table replaces the edit (change it with mqadmin, or stop the broker before editing)",
                    self.path, kept.name)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size


@dataclass
class MetadataStores:
    """The tables' stores of one broker (ACL users and policies too), and how to close what they share."""

    store_type: StoreType
    topics: MetadataStore[str, TopicConfig]
    groups: MetadataStore[str, SubscriptionGroupConfig]
    offsets: MetadataStore[OffsetKey, OffsetRecord]
    close: Callable[[], None] = lambda: None
    users: MetadataStore[str, User] | None = None
    acls: MetadataStore[str, Policy] | None = None


def json_stores(config_dir: Path) -> MetadataStores:
    return MetadataStores(StoreType.DEFAULT, JsonMetadataStore(config_dir, TOPICS),
                          JsonMetadataStore(config_dir, GROUPS),
                          JsonMetadataStore(config_dir, OFFSETS, write_through=False),
                          users=JsonMetadataStore(config_dir, USERS), acls=JsonMetadataStore(config_dir, ACLS))


METADATA_DIR = "metadata"  # <storePathRootDir>/metadata: the RocksDB of storeType=defaultRocksDB
IMPORTED_SUFFIX = ".imported"  # what the RocksDB import renames each JSON file to
# Where the ACL users' passwords are kept (users.json; the metadata RocksDB): readable by the broker's user only
SECRET_FILE_MODE, SECRET_DIR_MODE = 0o600, 0o700


def keep_private(path: Path, mode: int) -> None:
    """``path`` (a file or directory of secrets) given ``mode``: one an earlier release made readable by others too
    is narrowed. One the broker's user does not own (made by another user, a mount point) is left as it is, said."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    if st.st_mode & 0o777 == mode:
        return
    if st.st_uid != os.geteuid():
        log.warning("secret_path_not_private path=%s mode=%o owner_uid=%d: owned by another user, left as it is",
                    path, st.st_mode & 0o777, st.st_uid)
        return
    path.chmod(mode)


class MetadataInRocksDBError(OSError):
    """``storeType=default`` on a store whose metadata lives in RocksDB (``storeType=defaultRocksDB`` ran on it)."""


def check_json_mode(store_root: Path) -> None:
    """Refuse JSON mode on a store whose metadata RocksDB mode holds: the JSON tables would open empty, and the
    broker would serve without its topics, groups and consumer offsets. The JSON files renamed back (the README's
    way back) are taken as the operator's choice: the database is then left alone."""
    config_dir, database = store_root / "config", store_root / METADATA_DIR
    imported = [t.json_file for t in TABLES
                if (config_dir / (t.json_file + IMPORTED_SUFFIX)).exists() and not (config_dir / t.json_file).exists()]
    if imported:
        raise MetadataInRocksDBError(
            f"storeType=default, but {database} holds this store's metadata (storeType=defaultRocksDB imported "
            f"{', '.join(imported)} from {config_dir} and renamed them to *{IMPORTED_SUFFIX}): set "
            f"storeType=defaultRocksDB, or rename {config_dir}/*.json{IMPORTED_SUFFIX} back to *.json (losing every "
            f"change to topics, groups and offsets since the import)")
    has_json = any((config_dir / t.json_file).exists() for t in TABLES)
    if not has_json and (database / "CURRENT").exists():  # a RocksDB made on a store that never had JSON files
        raise MetadataInRocksDBError(
            f"storeType=default, but {database} holds this store's metadata (storeType=defaultRocksDB) and "
            f"{config_dir} has no JSON tables: set storeType=defaultRocksDB, or move {database} away to start "
            f"with no topics, groups nor offsets")


def open_metadata_stores(store_type: StoreType, store_root: Path) -> MetadataStores:
    """The stores ``storeType`` selects. RocksDB mode opens ``<store_root>/metadata`` (importing the JSON
    files of ``<store_root>/config`` once, into an empty database); raises OSError when it cannot, and
    :class:`MetadataInRocksDBError` for JSON mode on a store RocksDB mode holds."""
    config_dir = store_root / "config"
    if store_type is StoreType.DEFAULT_ROCKSDB:
        from broker.metadata.rocksdb_metadata_store import RocksDBMetadata

        return RocksDBMetadata.open(store_root / METADATA_DIR, config_dir).stores()
    if store_type is not StoreType.DEFAULT:  # parsed once (broker.conf): a plain string is a caller's bug
        raise TypeError(f"StoreType member expected, got {store_type!r}")
    check_json_mode(store_root)
    return json_stores(config_dir)

"""Metadata in RocksDB (``storeType=defaultRocksDB``): one database at ``<storePathRootDir>/metadata`` for
topics, subscription groups and consumer offsets, told apart by key prefix (see ``metadata_codec.py``).

Every change is one small write (a put, a delete, a ``delete_range`` for a topic's offsets, or one
WriteBatch for a batch of topics) with the write-ahead log on and not synced: it survives a kill of the
process as soon as the call returns (the WAL record is in the OS), whatever the size of the table.

The first open of an empty database imports the JSON files of ``<storePathRootDir>/config`` if there are
any (all of them, then a format marker written with a synced WAL), logs one ``metadata_imported`` line, and
renames the files to ``*.imported``. A database that holds the marker never imports again: JSON files found
next to it later are ignored (with a warning). A database without the marker (empty, or an import cut
short by a crash) is wiped and imported again.
"""

import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import cast

from rocksdict import Rdict, ReadOptions, WriteBatch, WriteOptions

from broker.metadata.json_file import read_json
from broker.metadata.metadata_codec import (
    ACLS,
    FORMAT_VERSION,
    GROUPS,
    META_PREFIX,
    OFFSETS,
    TABLES,
    TOPICS,
    USERS,
    K,
    MetadataTable,
    V,
)
from broker.metadata.metadata_store import (
    IMPORTED_SUFFIX,
    SECRET_DIR_MODE,
    SECRET_FILE_MODE,
    MetadataStore,
    MetadataStores,
    keep_private,
)
from broker.rocksdb_raw import ReopenedAfterRefusal, broker_db_options, raw_items, synced_write_options
from broker.store.config import StoreType

log = logging.getLogger(__name__)

FORMAT_KEY = META_PREFIX + b"format"
IMPORT_BATCH = 50_000


def _open_db(path: Path) -> Rdict:
    try:
        db = Rdict(str(path), broker_db_options())
    except Exception as exc:  # rocksdict raises a bare Exception (lock held by another process, corruption)
        raise OSError(f"cannot open metadata RocksDB at {path}: {exc}") from None
    db.set_write_options(WriteOptions())  # WAL on, not synced per write
    return db


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise ValueError(f"no upper bound for prefix {prefix!r}")
    return stripped[:-1] + bytes([stripped[-1] + 1])


class RocksDBMetadataStore(MetadataStore[K, V]):
    """One table's slice of the shared database."""

    write_through = True

    def __init__(self, database: ReopenedAfterRefusal, table: MetadataTable[K, V]) -> None:
        self.database = database
        self.table = table

    def _key(self, key: K) -> bytes:
        return self.table.prefix + self.table.encode_key(key)

    def load(self) -> Iterator[V]:
        return self.table.decode(scan(self.database.db, self.table.prefix))

    def put(self, values: Sequence[V]) -> None:
        t = self.table
        if len(values) == 1:
            key, value = self._key(t.key_of(values[0])), t.encode_value(values[0])
            self.database.write(lambda db: db.put(key, value))
            return
        batch = WriteBatch(raw_mode=True)
        for v in values:
            batch.put(self._key(t.key_of(v)), t.encode_value(v))
        self.database.write(lambda db: db.write(batch))

    def delete(self, keys: Sequence[K]) -> None:
        if len(keys) == 1:
            key = self._key(keys[0])
            self.database.write(lambda db: db.delete(key))
            return
        batch = WriteBatch(raw_mode=True)
        for k in keys:
            batch.delete(self._key(k))
        self.database.write(lambda db: db.write(batch))

    def delete_prefix(self, key_prefix: K) -> None:
        start = self._key(key_prefix)
        self.database.write(lambda db: db.delete_range(start, prefix_end(start)))

    def count(self) -> int:
        return sum(1 for _ in scan(self.database.db, self.table.prefix))


def _bounded(prefix: bytes) -> ReadOptions:
    options = ReadOptions()
    options.set_iterate_upper_bound(prefix_end(prefix))
    return options


def scan(db: Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """``(key without prefix, value)`` for every key starting with ``prefix``, in key order."""
    cut = len(prefix)
    # Referenced until the scan ends: the iterator points into this object's copy of the bound, and a
    # temporary ReadOptions ends scans early at random (seen: keys missing after a reopen).
    options = _bounded(prefix)
    for key, value in raw_items(db, from_key=prefix, read_opt=options):
        if not key.startswith(prefix):
            break
        yield key[cut:], value
    del options


class RocksDBMetadata:
    """The shared database: opened once per broker, closed at shutdown."""

    def __init__(self, db: Rdict, path: Path) -> None:
        # After the disk refused a write, the next reopens the database once there is room (RocksDB refuses every
        # write until then): offsets and topics are written again without a restart.
        self.database = ReopenedAfterRefusal(db, path, _open_db)
        self.path = path
        self.topics: RocksDBMetadataStore = RocksDBMetadataStore(self.database, TOPICS)
        self.groups: RocksDBMetadataStore = RocksDBMetadataStore(self.database, GROUPS)
        self.offsets: RocksDBMetadataStore = RocksDBMetadataStore(self.database, OFFSETS)
        self.users: RocksDBMetadataStore = RocksDBMetadataStore(self.database, USERS)
        self.acls: RocksDBMetadataStore = RocksDBMetadataStore(self.database, ACLS)
        self._closed = False

    @property
    def db(self) -> Rdict:
        return self.database.db

    @classmethod
    def open(cls, path: Path, json_dir: Path | None = None) -> "RocksDBMetadata":
        """Open (create) the database; import the JSON files of ``json_dir`` into a new one."""
        path.mkdir(parents=True, exist_ok=True)
        keep_private(path, SECRET_DIR_MODE)  # it holds the ACL users' passwords: the broker's user only
        metadata = cls(_open_db(path), path)
        if metadata.db.get(FORMAT_KEY) is None:
            try:
                metadata._initialize(json_dir)
            except BaseException:
                metadata.close()
                raise
        else:
            metadata._check_format()
            if json_dir is not None:
                ignored = [t.json_file for t in TABLES if (json_dir / t.json_file).exists()]
                if ignored:
                    log.warning("metadata_json_ignored files=%s dir=%s reason=rocksdb_holds_metadata path=%s",
                                ",".join(ignored), json_dir, path)
        return metadata

    def _check_format(self) -> None:
        version = int(cast(bytes, self.db[FORMAT_KEY]))
        if version != FORMAT_VERSION:
            self.close()
            raise OSError(f"metadata RocksDB at {self.path} has format {version}; this broker reads {FORMAT_VERSION}")

    def _initialize(self, json_dir: Path | None) -> None:
        """A database without the format marker: empty, or an import that did not finish. Start clean,
        import whatever JSON files there are, then write the marker (synced) and rename the files."""
        started = time.monotonic()
        self.db.delete_range(b"\x00", b"\xff")  # the remains of an interrupted import, if any
        files = [json_dir / t.json_file for t in TABLES] if json_dir is not None else []
        present = [f for f in files if f.exists()]
        counts = {}
        for table, file in zip(TABLES, files, strict=False):
            try:
                counts[table.name] = self._import(table, read_json(file)) if file.exists() else 0
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise OSError(f"cannot import {file} into {self.path}: {exc!r}") from None
        marker = WriteBatch(raw_mode=True)
        marker.put(FORMAT_KEY, str(FORMAT_VERSION).encode())
        if present:
            marker.put(META_PREFIX + b"imported", str(int(time.time() * 1000)).encode())
        self.db.write(marker, synced_write_options())
        if not present:
            log.info("metadata_created path=%s", self.path)
            return
        for f in present:
            f.rename(imported := f.with_name(f.name + IMPORTED_SUFFIX))
            if f.name == USERS.json_file:  # kept beside the database: its passwords as private as the database
                keep_private(imported, SECRET_FILE_MODE)
        log.info("metadata_imported from=%s to=%s topics=%d groups=%d offsets=%d files=%s renamed_to=*%s "
                 "seconds=%.2f", json_dir, self.path, counts["topics"], counts["groups"], counts["offsets"],
                 ",".join(f.name for f in present), IMPORTED_SUFFIX, time.monotonic() - started)

    def _import(self, table: MetadataTable, doc: object) -> int:
        count = 0
        batch = WriteBatch(raw_mode=True)
        for value in table.from_json(doc):
            batch.put(table.prefix + table.encode_key(table.key_of(value)), table.encode_value(value))
            count += 1
            if count % IMPORT_BATCH == 0:
                self.db.write(batch)
                batch = WriteBatch(raw_mode=True)
        if not batch.is_empty():
            self.db.write(batch)
        return count

    def stores(self) -> MetadataStores:
        return MetadataStores(StoreType.DEFAULT_ROCKSDB, self.topics, self.groups, self.offsets, self.close,
                              users=self.users, acls=self.acls)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.db.close()

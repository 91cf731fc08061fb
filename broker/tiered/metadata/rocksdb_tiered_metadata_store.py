"""Tiered metadata in a RocksDB at ``<storePathRootDir>/tiered_metadata`` (WAL on: every change survives a
process kill). Keys order a queue's segments by type and base offset; values are small JSON objects."""

import dataclasses
import json
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from rocksdict import Rdict, ReadOptions, WriteBatch

from broker.rocksdb_raw import ReopenedAfterRefusal, broker_db_options, raw_items, synced_write_options
from broker.rocksdb_records import decode_records, encode_records
from broker.tiered.metadata.change_journal import ChangeJournal
from broker.tiered.metadata.tiered_metadata_store import (
    FileSegmentMetadata,
    QueueMetadata,
    SegmentStatus,
    TieredMetadataCopy,
    TieredMetadataStore,
    TieredMetadataTooNewError,
    TopicMetadata,
)
from broker.tiered.provider.file_segment import FileSegmentType

M = TypeVar("M", TopicMetadata, QueueMetadata, FileSegmentMetadata)

SEP = b"\x00"  # cannot occur in a topic name
QUEUE_ID = struct.Struct(">I")
OFFSET = struct.Struct(">q")
CHECKPOINT_KEY = b"C"
UPLOADED_END_KEY = b"U"
RECONCILE_END_KEY = b"R"
OWN_KEYS = (CHECKPOINT_KEY, RECONCILE_END_KEY)  # this broker's own: never in a copy


def _topic_key(topic: str) -> bytes:
    return b"T" + topic.encode()


def _queue_key(topic: str, queue_id: int) -> bytes:
    return b"Q" + topic.encode() + SEP + QUEUE_ID.pack(queue_id)


def _segment_prefix(topic: str, queue_id: int, file_type: FileSegmentType) -> bytes:
    return b"S" + topic.encode() + SEP + QUEUE_ID.pack(queue_id) + bytes([file_type])


def _segment_key(m: FileSegmentMetadata) -> bytes:
    return _segment_prefix(m.topic, m.queue_id, m.type) + OFFSET.pack(m.base_offset)


def _segment_value(m: FileSegmentMetadata) -> bytes:
    d = asdict(m)
    d["type"], d["status"] = int(m.type), int(m.status)
    return json.dumps(d, separators=(",", ":")).encode()


def _segment(raw: bytes) -> FileSegmentMetadata:
    d = json.loads(raw)
    d["type"], d["status"] = FileSegmentType(d["type"]), SegmentStatus(d["status"])
    return _decoded(FileSegmentMetadata, d)


def _decoded(cls: type[M], fields: dict[str, Any]) -> M:
    """A record as ``cls``; refused naming what it holds that this release does not know. A newer release wrote
    it, and a field left out could change what the record means (as ``commit_log_offsets_from`` does: without it,
    today's records would read as an older release's)."""
    unknown = fields.keys() - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise TieredMetadataTooNewError(
            f"tiered metadata (<storePathRootDir>/tiered_metadata) holds {cls.__name__} fields this release does "
            f"not know ({', '.join(sorted(unknown))}): a newer release wrote it; run that release (or a newer one) "
            "on this store")
    return cls(**fields)


def _offsets(get: Callable[[bytes], bytes | None]) -> tuple[int, int]:
    """The checkpoint and the uploaded end, as ``get`` reads them."""
    checkpoint, uploaded_end = get(CHECKPOINT_KEY), get(UPLOADED_END_KEY)
    return (OFFSET.unpack(checkpoint)[0] if checkpoint else 0,
            OFFSET.unpack(uploaded_end)[0] if uploaded_end else 0)


def _queue_of(key: bytes) -> tuple[str, int] | None:
    """The queue a queue or segment record belongs to (None for other records)."""
    if key[:1] not in (b"Q", b"S"):
        return None
    topic, _, rest = key[1:].partition(SEP)
    return topic.decode(), QUEUE_ID.unpack_from(rest)[0]


def _open_db(root: Path) -> Rdict:
    return Rdict(str(root), broker_db_options())


class RocksDBTieredMetadataStore(TieredMetadataStore):
    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        # After the disk refused a write, the next reopens the database once there is room (RocksDB refuses every
        # write until then): the uploader's retries get through without a restart.
        self._database = ReopenedAfterRefusal(_open_db(root), root, _open_db)
        # Every write, with its journal entry (a copy reads both at one point); replace_segments reads then writes.
        self._lock = threading.RLock()
        self._journal = ChangeJournal()

    @property
    def _db(self) -> Rdict:
        return self._database.db

    def _put(self, key: bytes, value: bytes) -> None:
        with self._lock:
            self._database.write(lambda db: db.put(key, value))
            self._journal.record((key,))

    def _delete(self, key: bytes) -> None:
        with self._lock:
            self._database.write(lambda db: db.delete(key))
            self._journal.record((key,))

    def _write(self, batch: WriteBatch, keys: Iterable[bytes]) -> None:
        """``batch``, which changes ``keys``."""
        with self._lock:
            self._database.write(lambda db: db.write(batch))
            self._journal.record(keys)

    def _scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        options = ReadOptions()  # referenced for the whole scan (rocksdict stops early otherwise)
        options.set_iterate_upper_bound(prefix[:-1] + bytes([prefix[-1] + 1]))
        yield from self._db.items(from_key=prefix, read_opt=options)

    # -- topics
    def get_topic(self, topic: str) -> TopicMetadata | None:
        raw = self._db.get(_topic_key(topic))
        return _decoded(TopicMetadata, json.loads(raw)) if raw is not None else None

    def iterate_topics(self) -> Iterator[TopicMetadata]:
        for _, raw in self._scan(b"T"):
            yield _decoded(TopicMetadata, json.loads(raw))

    def update_topic(self, metadata: TopicMetadata) -> None:
        self._put(_topic_key(metadata.topic), json.dumps(asdict(metadata)).encode())

    def delete_topic(self, topic: str) -> None:
        batch = WriteBatch(raw_mode=True)
        keys = [_topic_key(topic)]
        batch.delete(keys[0])
        for prefix in (b"Q", b"S"):
            start = prefix + topic.encode() + SEP
            keys += (key for key, _ in self._scan(start))
            batch.delete_range(start, prefix + topic.encode() + b"\x01")
        self._write(batch, keys)

    # -- queues
    def get_queue(self, topic: str, queue_id: int) -> QueueMetadata | None:
        raw = self._db.get(_queue_key(topic, queue_id))
        return _decoded(QueueMetadata, json.loads(raw)) if raw is not None else None

    def iterate_queues(self, topic: str | None = None) -> Iterator[QueueMetadata]:
        prefix = b"Q" + (topic.encode() + SEP if topic is not None else b"")
        for _, raw in self._scan(prefix):
            yield _decoded(QueueMetadata, json.loads(raw))

    def update_queue(self, metadata: QueueMetadata) -> None:
        self._put(_queue_key(metadata.topic, metadata.queue_id), json.dumps(asdict(metadata)).encode())

    # -- segments
    def iterate_segments(self, topic: str, queue_id: int, file_type: FileSegmentType) -> Iterator[FileSegmentMetadata]:
        for _, raw in self._scan(_segment_prefix(topic, queue_id, file_type)):
            yield _segment(raw)

    def update_segment(self, metadata: FileSegmentMetadata) -> None:
        with self._lock:
            self._put(_segment_key(metadata), _segment_value(metadata))

    def delete_segment(self, metadata: FileSegmentMetadata) -> None:
        with self._lock:
            self._delete(_segment_key(metadata))

    def replace_segments(self, old: list[FileSegmentMetadata], new: FileSegmentMetadata) -> bool:
        with self._lock:
            for m in old:
                if self._db.get(_segment_key(m)) != _segment_value(m):
                    return False
            batch = WriteBatch(raw_mode=True)
            for m in old:
                batch.delete(_segment_key(m))
            batch.put(_segment_key(new), _segment_value(new))
            self._write(batch, [*map(_segment_key, old), _segment_key(new)])
            return True

    # -- checkpoint
    def get_checkpoint(self) -> int:
        raw = self._db.get(CHECKPOINT_KEY)
        return OFFSET.unpack(raw)[0] if raw is not None else 0

    def set_checkpoint(self, offset: int) -> None:
        self._put(CHECKPOINT_KEY, OFFSET.pack(offset))

    def get_uploaded_end(self) -> int:
        raw = self._db.get(UPLOADED_END_KEY)
        return OFFSET.unpack(raw)[0] if raw is not None else 0

    def set_uploaded_end(self, offset: int) -> None:
        # synced: after a machine crash an older value beside the newer objects let recovery keep records the
        # commitlog lost, and skip the new messages that took their offsets
        with self._lock:
            self._database.write(lambda db: db.put(UPLOADED_END_KEY, OFFSET.pack(offset),
                                                   write_opt=synced_write_options()))
            self._journal.record((UPLOADED_END_KEY,))

    def get_reconcile_end(self) -> int | None:
        raw = self._db.get(RECONCILE_END_KEY)
        return OFFSET.unpack(raw)[0] if raw is not None else None

    def set_reconcile_end(self, offset: int | None) -> None:
        with self._lock:  # synced, as the uploaded end it stands in for; not journaled: never copied
            if offset is None:
                self._database.write(lambda db: db.delete(RECONCILE_END_KEY, write_opt=synced_write_options()))
            else:
                self._database.write(lambda db: db.put(RECONCILE_END_KEY, OFFSET.pack(offset),
                                                       write_opt=synced_write_options()))

    def sync(self) -> None:
        with self._lock:
            self._database.write(lambda db: db.flush_wal(True))

    # -- copies
    def copy(self, since: str = "") -> TieredMetadataCopy:
        with self._lock:
            version = self._journal.version
            changed = self._journal.since(since) if since else None
            if changed is not None:  # the records changed since: read now, under the lock that orders writes
                return TieredMetadataCopy(*_offsets(self._db.get), encode_records(
                    (key, self._db.get(key)) for key in changed if key not in OWN_KEYS), version, whole=False)
            snapshot = self._db.snapshot()  # whole: read after the lock, as of this moment
        items = dict(raw_items(snapshot))
        checkpoint, uploaded_end = _offsets(items.get)
        return TieredMetadataCopy(checkpoint, uploaded_end, encode_records(
            (key, value) for key, value in items.items() if key not in OWN_KEYS), version)

    def install(self, copy: TieredMetadataCopy) -> set[tuple[str, int]]:
        theirs = dict(decode_records(copy.records, "tier metadata copy"))
        batch = WriteBatch(raw_mode=True)
        with self._lock:
            if copy.whole:
                mine = {key: value for key, value in raw_items(self._db) if key != CHECKPOINT_KEY}
                changed = {key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key)}
                batch.delete_range(b"", CHECKPOINT_KEY)  # every key but the checkpoint (keys are a letter and more)
                batch.delete_range(CHECKPOINT_KEY + b"\x00", b"\xff")
            else:
                changed = set(theirs) - {CHECKPOINT_KEY}
            if not changed:
                return set()
            for key, value in theirs.items():
                if value is None:
                    batch.delete(key)
                elif key != CHECKPOINT_KEY:
                    batch.put(key, value)
            self._write(batch, changed)
        return {queue for queue in map(_queue_of, changed) if queue is not None}

    def close(self) -> None:
        self._db.close()

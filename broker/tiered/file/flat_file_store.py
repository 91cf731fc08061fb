"""Every queue's flat files, loaded from the metadata store at start and created when a queue's first
message reaches the tier. On the S3 backend (a round trip a read) they share one bounded read-ahead cache
(:mod:`read_ahead_cache`); posix and memory read directly (the page cache, or memory, is there already)."""

import threading

from broker.tiered.file.flat_append_file import LoadMode
from broker.tiered.file.flat_message_file import FlatMessageFile
from broker.tiered.file.read_ahead_cache import ReadAheadCache
from broker.tiered.metadata.tiered_metadata_store import TieredMetadataStore
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider

QueueKey = tuple[str, int]
READ_AHEAD_CACHE_BYTES = 128 * 1024 * 1024  # every queue's read-ahead blocks together (S3)


class FlatFileStore:
    def __init__(self, factory: FileSegmentFactory, metadata: TieredMetadataStore, broker_name: str,
                 commit_log_segment_size: int, consume_queue_segment_size: int,
                 read_ahead_cache_bytes: int | None = None) -> None:
        """``read_ahead_cache_bytes``: the read-ahead cache's bound (0: no read-ahead); by default
        ``READ_AHEAD_CACHE_BYTES`` on the S3 backend and none on the others."""
        self.factory = factory
        self.metadata = metadata
        self.broker_name = broker_name
        self.commit_log_segment_size = commit_log_segment_size
        self.consume_queue_segment_size = consume_queue_segment_size
        self.files: dict[QueueKey, FlatMessageFile] = {}
        if read_ahead_cache_bytes is None:
            remote = factory.provider is TieredBackendServiceProvider.S3
            read_ahead_cache_bytes = READ_AHEAD_CACHE_BYTES if remote else 0
        self.read_ahead_cache = ReadAheadCache(read_ahead_cache_bytes) if read_ahead_cache_bytes > 0 else None
        self._lock = threading.Lock()
        # topics deleted whose flat files the next upload pass deletes: hidden from reads meanwhile (a topic made
        # again under the name read the old one's records, at offsets its new messages take)
        self._deleting: set[str] = set()

    def load(self, mode: LoadMode = LoadMode.RECOVER) -> None:
        """Every queue the metadata store lists (again: readers holding the files loaded before keep them)."""
        files = {(q.topic, q.queue_id): self._open(q.topic, q.queue_id, q.min_offset, mode)
                 for q in self.metadata.iterate_queues()}
        with self._lock:
            self.files = files

    def reload(self, queues: set[QueueKey], mode: LoadMode) -> None:
        """These queues again from the metadata store (gone when it lists them no more); the others stay loaded."""
        files = dict(self.files)
        for topic, queue_id in queues:
            record = self.metadata.get_queue(topic, queue_id)
            if record is None:
                files.pop((topic, queue_id), None)
            else:
                files[(topic, queue_id)] = self._open(topic, queue_id, record.min_offset, mode)
        with self._lock:
            self.files = files

    def _open(self, topic: str, queue_id: int, first_queue_offset: int,
              mode: LoadMode = LoadMode.RECOVER) -> FlatMessageFile:
        flat = FlatMessageFile(self.factory, self.metadata, self.broker_name, topic, queue_id,
                               self.commit_log_segment_size, self.consume_queue_segment_size,
                               self.read_ahead_cache)
        flat.load(first_queue_offset, mode)
        return flat

    def shutdown(self) -> None:
        """No more background read-ahead (the broker is stopping)."""
        if self.read_ahead_cache is not None:
            self.read_ahead_cache.shutdown()

    def get(self, topic: str, queue_id: int) -> FlatMessageFile | None:
        if topic in self._deleting:
            return None
        return self.files.get((topic, queue_id))

    def hide_topic(self, topic: str) -> None:
        """Its deletion is due (the next upload pass): reads find no flat file of it from now on."""
        self._deleting.add(topic)

    def show_topic(self, topic: str) -> None:
        """Its deletion was done, or left to another (a master whose tier this replica follows)."""
        self._deleting.discard(topic)

    def get_or_create(self, topic: str, queue_id: int, first_queue_offset: int) -> FlatMessageFile:
        flat = self.files.get((topic, queue_id))
        if flat is None:
            with self._lock:
                flat = self.files.get((topic, queue_id))
                if flat is None:
                    flat = self.files[(topic, queue_id)] = self._open(topic, queue_id, first_queue_offset)
        return flat

    def queues_of(self, topic: str) -> list[FlatMessageFile]:
        return sorted((f for (t, _), f in self.files.items() if t == topic), key=lambda f: f.queue_id)

    def delete_topic(self, topic: str) -> int:
        """The topic's flat files: every object, then every record (a crash between them leaves records whose
        objects are gone, read at a restart as lost bytes, and the replayed deletion drops them). Returns the
        queues deleted."""
        doomed = self.queues_of(topic)
        for flat in doomed:
            flat.destroy_objects()
        self.metadata.delete_topic(topic)
        with self._lock:
            for flat in doomed:
                self.files.pop((topic, flat.queue_id), None)
        self.show_topic(topic)  # what is made under the name from now on is the new topic's
        return len(doomed)

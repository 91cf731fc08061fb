"""All consume queues as files under ``<root>/consumequeue/<topic>/<queue id>/``."""

import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from broker.store.checkpoint import OffsetCheckpoint
from broker.store.consume_queue.consume_queue_store import BoundaryType, ConsumeQueueStore, UnitTuple
from broker.store.consume_queue.deleted_queue_ends import DeletedQueueEnds
from broker.store.consume_queue.file_consume_queue import UNIT, FileConsumeQueue
from broker.store.dispatch.dispatch_request import DispatchRequest

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]


class FileConsumeQueueStore(ConsumeQueueStore):
    def __init__(self, root: Path, file_size: int, store_time: Callable[[int], int]) -> None:
        self.root = root
        self.file_size = file_size
        self._store_time = store_time
        self._queues: dict[QueueKey, FileConsumeQueue] = {}
        self.deleted_ends = DeletedQueueEnds()
        self._dirty: set[QueueKey] = set()
        self._dispatched_offset = 0
        # Not a valid topic name, so it never collides with a topic directory.
        self._checkpoint_file = OffsetCheckpoint(root / ".checkpoint")
        self._checkpoint = 0
        self._lock = threading.Lock()  # queue table changes (create, delete) vs. dispatch
        self._dirty_lock = threading.Lock()  # the dirty set and dispatched offset: dispatch vs. flush

    # -- lifecycle ---------------------------------------------------------------------------------
    def load(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for topic_dir in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for queue_dir in sorted(p for p in topic_dir.iterdir() if p.is_dir() and p.name.isdigit()):
                cq = FileConsumeQueue(topic_dir.name, int(queue_dir.name), queue_dir, self.file_size)
                cq.load()
                self._queues[(cq.topic, cq.queue_id)] = cq
        self._checkpoint = self._checkpoint_file.read() or 0
        log.info("consume_queue_loaded queues=%d checkpoint=%d", len(self._queues), self._checkpoint)

    def _queue(self, topic: str, queue_id: int, create: bool) -> FileConsumeQueue | None:
        cq = self._queues.get((topic, queue_id))
        if cq is None and create:
            with self._lock:
                cq = self._queues.get((topic, queue_id))
                if cq is None:
                    cq = FileConsumeQueue(topic, queue_id, self.root / topic / str(queue_id), self.file_size)
                    self._queues[(topic, queue_id)] = cq
        return cq

    # -- dispatcher --------------------------------------------------------------------------------
    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        runs: dict[QueueKey, tuple[int, list[bytes]]] = {}
        pack = UNIT.pack
        last_topic, last_queue_id, units = "", -1, []  # records come in runs of one queue: one lookup per run
        for topic, queue_id, queue_offset, physical_offset, size, tags_code, _ts, _props in requests:
            if queue_id != last_queue_id or topic != last_topic:
                last_topic, last_queue_id = topic, queue_id
                run = runs.get((topic, queue_id))
                if run is None:
                    run = runs[(topic, queue_id)] = (queue_offset, [])
                units = run[1]
            units.append(pack(physical_offset, size, tags_code))
        for (topic, queue_id), (first, units) in runs.items():
            cq = self._queue(topic, queue_id, create=True)
            assert cq is not None
            cq.put_units(first, b"".join(units))
        with self._dirty_lock:
            self._dirty.update(runs)
            self._dispatched_offset = end_offset

    def checkpoint(self) -> int:
        return self._checkpoint

    def flush(self) -> None:
        # Taken together, under the lock dispatch marks them with: a queue marked dirty in a set this flush had
        # already walked would be flushed by no one, while a later checkpoint passed its units.
        with self._dirty_lock:
            dispatched = self._dispatched_offset  # everything below it is in the files we flush now
            dirty, self._dirty = self._dirty, set()
        try:
            for key in dirty:
                cq = self._queues.get(key)
                if cq is not None:
                    cq.flush()
        except OSError:
            with self._dirty_lock:
                self._dirty |= dirty  # flushed again next time: the checkpoint must not pass unflushed units
            raise
        if dispatched > self._checkpoint:
            self._checkpoint_file.write(dispatched)
            self._checkpoint = dispatched

    def truncate_dirty(self, commit_log_end: int) -> None:
        for cq in list(self._queues.values()):
            cq.truncate_dirty(commit_log_end)
        if self._checkpoint > commit_log_end:
            self._checkpoint = commit_log_end
            self._checkpoint_file.write(commit_log_end)

    # -- queries -----------------------------------------------------------------------------------
    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return cq.max_offset() if cq else 0

    def read_units(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[UnitTuple]:
        cq = self._queues.get((topic, queue_id))
        return cq.read_units(offset, max_count) if cq else []

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int, boundary: BoundaryType) -> int:
        cq = self._queues.get((topic, queue_id))
        return cq.offset_by_time(timestamp, boundary, self._store_time) if cq else 0

    def queue_max_offsets(self) -> dict[QueueKey, int]:
        return {key: cq.max_offset() for key, cq in self._queues.items()}

    # -- maintenance -------------------------------------------------------------------------------
    def correct_min_offset(self, commit_log_min_offset: int) -> None:
        for cq in list(self._queues.values()):
            cq.correct_min_offset(commit_log_min_offset)
            cq.close_retired()

    def topic_deleted(self, topic: str, at_offset: int = 0) -> None:
        with self._lock:
            keys = [k for k in self._queues if k[0] == topic]
            self.deleted_ends.note(topic, {key[1]: self._queues[key].max_offset() for key in keys})
            for key in keys:
                self._queues.pop(key).destroy()
                with self._dirty_lock:
                    self._dirty.discard(key)
        shutil.rmtree(self.root / topic, ignore_errors=True)
        log.info("consume_queue_topic_deleted topic=%s queues=%d", topic, len(keys))

    def shutdown(self) -> None:
        self.flush()
        for cq in self._queues.values():
            cq.shutdown()

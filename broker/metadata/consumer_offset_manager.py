"""Consumer offsets kept by the broker: per (group, topic) a map of queue id to the next offset to consume."""

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from broker.metadata.metadata_codec import OFFSETS, OffsetKey, OffsetRecord
from broker.metadata.metadata_store import JsonMetadataStore, MetadataStore

log = logging.getLogger(__name__)

GroupTopic = tuple[str, str]


class ConsumerOffsetManager:
    """Commits land in memory at once. With a write-through store (RocksDB) each commit is also one write
    before the call returns; with the JSON store they reach disk on :meth:`persist` (a timer, and shutdown).

    ``store``: a :class:`MetadataStore`, or a config directory for the JSON store (``consumerOffset.json``)."""

    def __init__(self, store: MetadataStore[OffsetKey, OffsetRecord] | Path) -> None:
        self.store = JsonMetadataStore(store, OFFSETS, write_through=False) if isinstance(store, Path) else store
        self.offset_table: dict[GroupTopic, dict[int, int]] = {}
        self._lock = threading.RLock()
        self.store.bind(self._snapshot)

    def all_offsets(self) -> list[OffsetRecord]:
        """Every committed offset as (group, topic, queue id, offset)."""
        return self._snapshot()

    def _snapshot(self) -> list[OffsetRecord]:
        with self._lock:
            return [(group, topic, queue_id, offset) for (group, topic), queues in self.offset_table.items()
                    for queue_id, offset in queues.items()]

    def load(self) -> None:
        count = 0
        with self._lock:
            for group, topic, queue_id, offset in self.store.load():
                self.offset_table.setdefault((group, topic), {})[queue_id] = offset
                count += 1
        log.info("consumer_offsets_loaded queues=%d", count)

    def persist(self) -> None:
        self.store.flush()  # not under our lock: a JSON store takes it briefly for its snapshot

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        assert offset >= 0, f"commit offset {offset} is negative"
        with self._lock:
            queues = self.offset_table.setdefault((group, topic), {})
            old = queues.get(queue_id)
            queues[queue_id] = offset
            try:
                self.store.put([(group, topic, queue_id, offset)])
            except BaseException:
                if old is None:
                    del queues[queue_id]
                else:
                    queues[queue_id] = old
                raise

    def seed_queues(self, topic: str, queue_ids: range, start: Callable[[int], int]) -> list[str]:
        """Each group with offsets on ``topic`` gets ``start(queue id)`` for each of ``queue_ids`` it has none on
        (queues added to a topic the group consumes); returns those groups."""
        with self._lock:
            groups = sorted(g for g, t in self.offset_table if t == topic)
            records = [(g, topic, q, start(q)) for g in groups for q in queue_ids
                       if q not in self.offset_table[(g, topic)]]
            if not records:
                return []
            self.store.put(records)
            for g, t, q, offset in records:
                self.offset_table[(g, t)][q] = offset
        return sorted({g for g, _, _, _ in records})

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed on this queue."""
        return self.offset_table.get((group, topic), {}).get(queue_id, -1)

    def topics_of_group(self, group: str) -> list[str]:
        with self._lock:  # a first commit of a new (group, topic) would change the dict while we iterate
            return sorted(topic for g, topic in self.offset_table if g == group)

    def delete_offsets(self, keys: list[tuple[str, str, int]]) -> None:
        """Forget these (group, topic, queue id) offsets (missing ones are fine), durably at once: unlike a lost
        commit (read again), a forgotten offset coming back after a crash could be read past data (a reused
        static-topic queue)."""
        if not keys:
            return
        wanted = set(keys)
        self._forget(lambda group, topic, queue_id: (group, topic, queue_id) in wanted,
                     lambda: self.store.delete([(topic, group, queue_id) for group, topic, queue_id in keys]))

    def delete_queues(self, topic: str, queue_ids: list[int]) -> int:
        """Forget every group's offset on these queues of ``topic`` (one durable write); how many there were."""
        wanted = set(queue_ids)
        with self._lock:
            keys = [(group, t, q) for (group, t), queues in self.offset_table.items() if t == topic
                    for q in queues if q in wanted]
        self.delete_offsets(keys)
        return len(keys)

    def delete_topic(self, topic: str) -> None:
        """Every group's offsets of ``topic``, durably at once (as :meth:`delete_offsets`: a topic made again under
        the name starts at offset 0, and an old offset back after a crash would read past its first messages)."""
        self._forget(lambda _group, t, _queue_id: t == topic,
                     lambda: self.store.delete_prefix((topic,)))

    def _forget(self, selected: Callable[[str, str, int], bool], write: Callable[[], None]) -> None:
        """Delete the ``selected(group, topic, queue id)`` offsets from the store and memory, durably. A
        refused write leaves memory as it was: the disk still holds them, so they stay readable, and a retry
        finds them and deletes them again (gone from memory, a retry found nothing to delete and wrote nothing,
        and a restart brought them back)."""
        if not self.store.writes_snapshot:
            with self._lock:
                write()  # the store first: refused, memory is untouched
                self._drop(selected)
            self.persist()
            return
        # A store written from our snapshot (JSON) needs them out of memory before it writes: drop, write,
        # put back if refused. The write runs outside our lock (the store's writer takes it for the snapshot).
        with self._lock:
            dropped = self._drop(selected)
            try:
                write()
            except BaseException:
                self._restore(dropped)
                raise
        try:
            self.persist()
        except BaseException:
            self._restore(dropped)  # (the failed write left the store dirty: the next flush writes them back)
            raise

    def _drop(self, selected: Callable[[str, str, int], bool]) -> list[OffsetRecord]:
        """Remove the selected offsets from memory, for :meth:`_restore`."""
        dropped: list[OffsetRecord] = []
        with self._lock:
            for (group, topic), queues in list(self.offset_table.items()):
                before = len(dropped)
                for queue_id, offset in list(queues.items()):
                    if selected(group, topic, queue_id):
                        del queues[queue_id]
                        dropped.append((group, topic, queue_id, offset))
                if not queues and len(dropped) > before:
                    del self.offset_table[(group, topic)]
        return dropped

    def _restore(self, dropped: list[OffsetRecord]) -> None:
        """Put back what :meth:`_drop` removed, except where a commit since has set a newer offset."""
        with self._lock:
            for group, topic, queue_id, offset in dropped:
                self.offset_table.setdefault((group, topic), {}).setdefault(queue_id, offset)

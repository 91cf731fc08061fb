"""Topic configs of this broker, with a change log so registration can send only what changed."""

import bisect
import gc
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from broker.metadata.data_version import DataVersion
from broker.metadata.metadata_codec import TOPICS, compact_attributes
from broker.metadata.metadata_store import JsonMetadataStore, MetadataStore
from common.topic_config import TopicConfig

log = logging.getLogger(__name__)


class TopicConfigManager:
    """The table lives in memory (every read); each change is written to the store before the call returns.

    ``store``: a :class:`MetadataStore`, or a config directory for the JSON store (``topics.json``)."""

    def __init__(self, store: MetadataStore[str, TopicConfig] | Path) -> None:
        self.store = JsonMetadataStore(store, TOPICS) if isinstance(store, Path) else store
        self.topic_config_table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self._change_counters: list[int] = []  # ascending (a batch shares one), parallel to _change_topics
        self._change_topics: list[str] = []
        self._compacted_changes = 0  # entries the journal held after its last compaction
        self._lock = threading.RLock()  # the JSON store reads the table back (all_configs) under it
        self.store.bind(self.all_configs)

    def load(self) -> None:
        started = time.monotonic()
        gc_was_enabled = gc.isenabled()
        gc.disable()  # a million new objects would trigger hundreds of useless collections
        try:
            with self._lock:
                self.topic_config_table.update((c.topic_name, c) for c in self.store.load())
        finally:
            if gc_was_enabled:
                gc.enable()
        log.info("topic_config_loaded topics=%d seconds=%.2f", len(self.topic_config_table),
                 time.monotonic() - started)

    def persist(self) -> None:
        """Write what the store deferred (nothing: every change is written at once)."""
        with self._lock:
            self.store.flush()

    def select(self, topic: str) -> TopicConfig | None:
        return self.topic_config_table.get(topic)

    def update(self, config: TopicConfig) -> None:
        self.update_many([config])
        log.info("topic_updated topic=%s read=%d write=%d perm=%d", config.topic_name, config.read_queue_nums,
                 config.write_queue_nums, config.perm)

    def update_many(self, configs: Sequence[TopicConfig]) -> None:
        """Create or replace ``configs`` together: all are validated first (ValueError: nothing changes), then
        written in one store write, then recorded as one change (one data version) for registration."""
        if not configs:
            return
        names: set[str] = set()
        for config in configs:
            config.validate()
            if config.topic_name in names:
                raise ValueError(f"topic {config.topic_name} appears more than once")
            names.add(config.topic_name)
            compact_attributes(config)
        table = self.topic_config_table
        with self._lock:
            previous = [table.get(c.topic_name) for c in configs]
            for config in configs:
                table[config.topic_name] = config
            try:
                self.store.put(configs)
            except BaseException:
                for config, old in zip(configs, previous, strict=True):
                    if old is None:
                        del table[config.topic_name]
                    else:
                        table[config.topic_name] = old
                raise
            counter = self.data_version.next()
            self._change_counters.extend([counter] * len(configs))
            self._change_topics.extend(c.topic_name for c in configs)
            self._compact_changes_when_due()

    def delete(self, topic: str, announce: bool = False) -> bool:
        """Remove ``topic``; ``announce`` records the removal for the name servers even when this broker held
        no config for it (a static topic's no-target broker registers only its mapping)."""
        with self._lock:
            old = self.topic_config_table.pop(topic, None)
            if old is not None:
                try:
                    self.store.delete([topic])
                except BaseException:
                    self.topic_config_table[topic] = old
                    raise
            if old is not None or announce:
                self._record_change(topic)
        if old is not None:
            log.info("topic_deleted topic=%s", topic)
        return old is not None

    def _record_change(self, topic: str) -> None:
        self._change_counters.append(self.data_version.next())
        self._change_topics.append(topic)
        self._compact_changes_when_due()

    def _compact_changes_when_due(self) -> None:
        """Under the lock: the journal keeps one entry a topic, its latest change, once it doubled since its last
        compaction (what changes_since answers is the same). It grew by an entry a change for good: 200,000 updates
        of one topic held 9.7 MB."""
        if len(self._change_counters) <= 2 * self._compacted_changes + 1024:
            return
        latest = dict(zip(self._change_topics, self._change_counters, strict=True))  # the last change of each
        ordered = sorted(latest.items(), key=lambda entry: entry[1])
        self._change_topics = [topic for topic, _ in ordered]
        self._change_counters = [counter for _, counter in ordered]
        self._compacted_changes = len(ordered)
    def changes_since(self, counter: int) -> tuple[list[TopicConfig], list[str]]:
        """Topics changed after ``counter``: their current configs, and the names since deleted."""
        with self._lock:
            start = bisect.bisect_right(self._change_counters, counter)
            names = set(self._change_topics[start:])
            changed = [self.topic_config_table[n] for n in names if n in self.topic_config_table]
            deleted = [n for n in names if n not in self.topic_config_table]
        return changed, deleted

    def all_configs(self) -> list[TopicConfig]:
        with self._lock:
            return list(self.topic_config_table.values())

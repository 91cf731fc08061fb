"""Topic configs of this broker, with a change log so registration can send only what changed."""

import bisect
import dataclasses
import logging
import threading
from pathlib import Path

from broker.metadata.data_version import DataVersion
from broker.metadata.json_file import read_json, write_json_atomically
from common.topic_config import TopicConfig

log = logging.getLogger(__name__)


class TopicConfigManager:
    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / "topics.json"
        self.topic_config_table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self._change_counters: list[int] = []  # ascending, parallel to _change_topics
        self._change_topics: list[str] = []
        self._lock = threading.Lock()

    def load(self) -> None:
        data = read_json(self.path)
        if data:
            for raw in data["topics"]:
                cfg = TopicConfig(**raw)
                self.topic_config_table[cfg.topic_name] = cfg
        log.info("topic_config_loaded topics=%d", len(self.topic_config_table))

    def persist(self) -> None:
        write_json_atomically(self.path, {"topics": [dataclasses.asdict(c) for c in self.topic_config_table.values()]})

    def select(self, topic: str) -> TopicConfig | None:
        return self.topic_config_table.get(topic)

    def update(self, config: TopicConfig) -> None:
        config.validate()
        with self._lock:
            self.topic_config_table[config.topic_name] = config
            self._record_change(config.topic_name)
            self.persist()
        log.info("topic_updated topic=%s read=%d write=%d perm=%d", config.topic_name, config.read_queue_nums,
                 config.write_queue_nums, config.perm)

    def delete(self, topic: str, announce: bool = False) -> bool:
        """Remove ``topic``; ``announce`` records the removal for the name servers even when this broker held
        no config for it (a static topic's no-target broker registers only its mapping)."""
        with self._lock:
            existed = self.topic_config_table.pop(topic, None) is not None
            if existed or announce:
                self._record_change(topic)
            if existed:
                self.persist()
        if existed:
            log.info("topic_deleted topic=%s", topic)
        return existed

    def _record_change(self, topic: str) -> None:
        self._change_counters.append(self.data_version.next())
        self._change_topics.append(topic)

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

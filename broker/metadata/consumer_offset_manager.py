"""Consumer offsets kept by the broker: per (group, topic) a map of queue id to the next offset to consume."""

import logging
import threading
import time
from pathlib import Path

from broker.metadata.json_file import read_json, write_json_atomically

log = logging.getLogger(__name__)

GroupTopic = tuple[str, str]


class ConsumerOffsetManager:
    """Commits land in memory at once and reach disk on :meth:`persist` (a timer, and shutdown)."""

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / "consumerOffset.json"
        self.offset_table: dict[GroupTopic, dict[int, int]] = {}
        self.commit_times: dict[GroupTopic, dict[int, int]] = {}
        self._lock = threading.Lock()
        self._dirty = False

    def load(self) -> None:
        data = read_json(self.path) or {}
        for key, queues in data.get("offsetTable", {}).items():
            topic, _, group = key.partition("@")
            self.offset_table[(group, topic)] = {int(q): int(o) for q, o in queues.items()}

    def persist(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            snapshot = {f"{topic}@{group}": {str(q): o for q, o in queues.items()}
                        for (group, topic), queues in self.offset_table.items()}
            self._dirty = False
        write_json_atomically(self.path, {"offsetTable": snapshot})

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        assert offset >= 0, f"commit offset {offset} is negative"
        with self._lock:
            self.offset_table.setdefault((group, topic), {})[queue_id] = offset
            self.commit_times.setdefault((group, topic), {})[queue_id] = int(time.time() * 1000)
            self._dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed on this queue."""
        return self.offset_table.get((group, topic), {}).get(queue_id, -1)

    def topics_of_group(self, group: str) -> list[str]:
        return sorted(topic for g, topic in self.offset_table if g == group)

    def delete_topic(self, topic: str) -> None:
        with self._lock:
            for key in [k for k in self.offset_table if k[1] == topic]:
                del self.offset_table[key]
                self.commit_times.pop(key, None)
            self._dirty = True

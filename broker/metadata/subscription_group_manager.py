"""Subscription groups (consumer groups) this broker knows."""

import dataclasses
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from broker.metadata.json_file import read_json, write_json_atomically

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0


class SubscriptionGroupManager:
    def __init__(self, config_dir: Path, auto_create: bool = True) -> None:
        self.path = config_dir / "subscriptionGroup.json"
        self.auto_create = auto_create
        self.subscription_group_table: dict[str, SubscriptionGroupConfig] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        data = read_json(self.path)
        for raw in (data or {}).get("groups", []):
            cfg = SubscriptionGroupConfig(**raw)
            self.subscription_group_table[cfg.group_name] = cfg

    def persist(self) -> None:
        write_json_atomically(self.path, {"groups": [dataclasses.asdict(g)
                                                     for g in self.subscription_group_table.values()]})

    def update(self, config: SubscriptionGroupConfig) -> None:
        with self._lock:
            self.subscription_group_table[config.group_name] = config
            self.persist()
        log.info("subscription_group_updated group=%s consume_enable=%s", config.group_name, config.consume_enable)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults on first use when auto-create is on."""
        cfg = self.subscription_group_table.get(group)
        if cfg is None and self.auto_create:
            cfg = SubscriptionGroupConfig(group)
            self.update(cfg)
        return cfg

    def delete(self, group: str) -> bool:
        with self._lock:
            found = self.subscription_group_table.pop(group, None) is not None
            if found:
                self.persist()
        return found

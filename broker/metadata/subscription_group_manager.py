"""Subscription groups (consumer groups) this broker knows."""

import logging
import threading
from pathlib import Path

from broker.metadata.metadata_codec import GROUPS
from broker.metadata.metadata_store import JsonMetadataStore, MetadataStore
from broker.metadata.subscription_group_config import SubscriptionGroupConfig

log = logging.getLogger(__name__)

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupManager"]


class SubscriptionGroupManager:
    """``store``: a :class:`MetadataStore`, or a config directory for the JSON store (``subscriptionGroup.json``).
    Every change is written to the store before the call returns."""

    def __init__(self, store: MetadataStore[str, SubscriptionGroupConfig] | Path, auto_create: bool = True) -> None:
        self.store = JsonMetadataStore(store, GROUPS) if isinstance(store, Path) else store
        self.auto_create = auto_create
        self.subscription_group_table: dict[str, SubscriptionGroupConfig] = {}
        self._lock = threading.RLock()  # the JSON store reads the table back under it
        self.store.bind(self._snapshot)

    def _snapshot(self) -> list[SubscriptionGroupConfig]:
        with self._lock:
            return list(self.subscription_group_table.values())

    def load(self) -> None:
        with self._lock:
            for cfg in self.store.load():
                self.subscription_group_table[cfg.group_name] = cfg
        log.info("subscription_groups_loaded groups=%d", len(self.subscription_group_table))

    def persist(self) -> None:
        with self._lock:
            self.store.flush()

    def update(self, config: SubscriptionGroupConfig) -> None:
        with self._lock:
            old = self.subscription_group_table.get(config.group_name)
            self.subscription_group_table[config.group_name] = config
            try:
                self.store.put([config])
            except BaseException:
                self._restore(config.group_name, old)
                raise
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
            old = self.subscription_group_table.pop(group, None)
            if old is not None:
                try:
                    self.store.delete([group])
                except BaseException:
                    self._restore(group, old)
                    raise
        return old is not None

    def _restore(self, group: str, old: SubscriptionGroupConfig | None) -> None:
        if old is None:
            self.subscription_group_table.pop(group, None)
        else:
            self.subscription_group_table[group] = old

"""Subscription groups (consumer groups) this broker knows."""

import logging
import threading
from pathlib import Path

from broker.metadata.data_version import DataVersion
from broker.metadata.metadata_codec import GROUPS
from broker.metadata.metadata_store import JsonMetadataStore, MetadataStore
from broker.metadata.subscription_group_config import SubscriptionGroupConfig

log = logging.getLogger(__name__)

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupManager"]


class SubscriptionGroupManager:
    """``store``: a :class:`MetadataStore`, or a config directory for the JSON store (``subscriptionGroup.json``).
    Every change is written to the store before the call returns, except a group auto-created by a read (see
    :meth:`find`)."""

    def __init__(self, store: MetadataStore[str, SubscriptionGroupConfig] | Path, auto_create: bool = True) -> None:
        self.store = JsonMetadataStore(store, GROUPS) if isinstance(store, Path) else store
        self.auto_create = auto_create
        self.subscription_group_table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()  # moved by every change: a slave copies the table when it moves
        self._unpersisted: set[str] = set()  # auto-created groups whose write failed; :meth:`persist` retries
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
            groups = [self.subscription_group_table[g] for g in self._unpersisted if g in self.subscription_group_table]
            if groups:
                self.store.put(groups)
                log.info("subscription_group_persisted groups=%d", len(groups))
            self._unpersisted.clear()
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
            self._unpersisted.discard(config.group_name)
            self.data_version.next()
        log.info("subscription_group_updated group=%s consume_enable=%s", config.group_name, config.consume_enable)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults on first use when auto-create is on."""
        cfg = self.subscription_group_table.get(group)
        if cfg is None and self.auto_create:
            cfg = self._auto_create(group)
        return cfg

    def _auto_create(self, group: str) -> SubscriptionGroupConfig:
        """A group first seen by a read (a pull) exists in memory at once. Writing it down is best effort: a read
        must never need a disk write (the disk may be full); a failed write is retried by :meth:`persist`."""
        with self._lock:
            cfg = self.subscription_group_table.setdefault(group, SubscriptionGroupConfig(group))
            self.data_version.next()
            try:
                self.store.put([cfg])
            except Exception as exc:  # OSError from the JSON file, a plain Exception from RocksDB
                self._unpersisted.add(group)
                log.warning("subscription_group_persist_deferred group=%s error=%r", group, exc)
                return cfg
        log.info("subscription_group_created group=%s", group)
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
                self.data_version.next()
        return old is not None

    def _restore(self, group: str, old: SubscriptionGroupConfig | None) -> None:
        if old is None:
            self.subscription_group_table.pop(group, None)
        else:
            self.subscription_group_table[group] = old

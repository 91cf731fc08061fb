"""Open the three metadata managers on a store directory, in either backend."""

from dataclasses import dataclass
from pathlib import Path

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.metadata_store import MetadataStores, open_metadata_stores
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.store.config import StoreType

BACKENDS = tuple(StoreType)


@dataclass
class Managers:
    stores: MetadataStores
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager

    def close(self) -> None:
        """What a broker does at shutdown: flush deferred offsets, close the stores."""
        self.offsets.persist()
        self.stores.close()


def open_managers(store_type: StoreType, root: Path) -> Managers:
    stores = open_metadata_stores(store_type, root)
    m = Managers(stores, TopicConfigManager(stores.topics), SubscriptionGroupManager(stores.groups),
                 ConsumerOffsetManager(stores.offsets))
    m.topics.load()
    m.groups.load()
    m.offsets.load()
    return m

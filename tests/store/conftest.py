"""Fixtures for message store tests: a store on a temp dir with tiny segments, once per consume queue
store type (files, RocksDB)."""

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.store.config import FlushDiskType, MessageStoreConfig, StoreType
from broker.store.message_store import MessageStore

StoreFactory = Callable[..., MessageStore]

STORE_TYPES = tuple(StoreType)


def store_config(root: Path, **overrides: object) -> MessageStoreConfig:
    settings: dict[str, object] = {
        "mapped_file_size_commit_log": 64 * 1024,
        "mapped_file_size_consume_queue": 20 * 256,
        "flush_disk_type": FlushDiskType.ASYNC_FLUSH,
        "max_hash_slot_num": 1024,
        "max_index_num": 4096,
        "destroy_mapped_file_grace_ms": 0,
    }
    settings.update(overrides)
    return MessageStoreConfig(str(root), **settings)  # type: ignore[arg-type]


@pytest.fixture(params=STORE_TYPES, ids=["files", "rocksdb"])
def store_type(request: pytest.FixtureRequest) -> StoreType:
    """The consume queue implementation (``storeType``): every store test runs against both."""
    return request.param


@pytest.fixture
def open_store(tmp_path: Path, store_type: StoreType) -> Iterator[StoreFactory]:
    """Opens (and at the end shuts) stores on ``tmp_path / "store"``; reopen by calling again."""
    opened: list[MessageStore] = []

    def factory(**overrides: object) -> MessageStore:
        store = MessageStore(store_config(tmp_path / "store", **{"store_type": store_type, **overrides}))
        store.start()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.shutdown()


def held_dispatch(store: MessageStore) -> threading.Event:
    """Consume-queue dispatch (records and topic deletions) waits (up to 10 s) until the event returned is set."""
    gate = threading.Event()
    cq = store.consume_queue_store
    dispatch, topic_deleted = cq.dispatch, cq.topic_deleted

    def held_records(requests, end):  # type: ignore[no-untyped-def]
        gate.wait(10)
        dispatch(requests, end)

    def held_deletion(topic, at_offset):  # type: ignore[no-untyped-def]
        gate.wait(10)
        topic_deleted(topic, at_offset)

    cq.dispatch = held_records  # type: ignore[method-assign]
    cq.topic_deleted = held_deletion  # type: ignore[method-assign]
    return gate

"""The broker's KV store: state backend, its dispatcher in the commitlog's chain, and apply waiters."""

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from broker.kv.kv_apply_waiters import KvApplyWaiters
from broker.kv.kv_chain_reader import KvChainReader
from broker.kv.kv_dispatcher import KvCommitLogDispatcher
from broker.kv.kv_state_store import KvStateStore
from broker.out.peer_brokers import PeerBrokers
from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

KV_STORE_TYPES = ("rocksdb", "memory")


def open_state_store(store_type: str, root: Path, snapshot_interval_s: float) -> KvStateStore:
    if store_type == "memory":
        from broker.kv.memory_kv_state_store import MemoryKvStateStore

        return MemoryKvStateStore(root, snapshot_interval_s)
    from broker.kv.rocksdb_kv_state_store import RocksDBKvStateStore

    return RocksDBKvStateStore(root)


class KvStore:
    """Register with :meth:`attach` before the message store starts (recovery replays into it)."""

    def __init__(self, store_type: str, root: Path, snapshot_interval_s: float, broker_name: str) -> None:
        assert store_type in KV_STORE_TYPES, store_type
        self.store_type = store_type
        self.state = open_state_store(store_type, root, snapshot_interval_s)
        self.broker_name = broker_name
        self.dispatcher: KvCommitLogDispatcher
        self.waiters: KvApplyWaiters
        self.reader: KvChainReader

    def attach(self, store: MessageStore, loop: asyncio.AbstractEventLoop, peers: Callable[[], PeerBrokers]) -> None:
        self.dispatcher = KvCommitLogDispatcher(self.state, store.commit_log.read_at)
        self.waiters = KvApplyWaiters(loop)
        self.dispatcher.apply_listeners.append(self.waiters.on_applied)
        self.reader = KvChainReader(self.state, peers, self.broker_name)
        store.register_dispatcher(self.dispatcher)

    def close(self) -> None:
        """After the message store shut down (its final dispatch is applied)."""
        self.state.close()
        log.info("kv_closed applied=%d ops_applied=%d", self.dispatcher.applied_offset, self.dispatcher.applied_ops)

"""The broker's KV store: state backend, its dispatcher in the commitlog's chain, and apply waiters."""

import asyncio
import logging
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from broker.kv.kv_apply_waiters import KvApplyWaiters
from broker.kv.kv_chain_reader import KvChainReader
from broker.kv.kv_dispatcher import KvCommitLogDispatcher
from broker.kv.kv_partition_fences import KvPartitionFences
from broker.kv.kv_state_store import KvStateStore, KvStoreType
from broker.out.peer_brokers import PeerBrokers
from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)


class KvStoreTypeMismatchError(OSError):
    """``kvStoreType`` names one backend, and the KV directory holds the other's state: opened, the configured one
    served what it held (nothing, or an older copy) as the KV data, once the commitlog that made it had expired."""


def _check_no_other_backend(store_type: KvStoreType, root: Path) -> None:
    from broker.kv.memory_kv_state_store import SNAPSHOT_FILE

    other = {KvStoreType.MEMORY: (root / "CURRENT", KvStoreType.ROCKSDB),
             KvStoreType.ROCKSDB: (root / SNAPSHOT_FILE, KvStoreType.MEMORY)}.get(store_type)
    if other is not None and other[0].exists():
        marker, backend = other
        raise KvStoreTypeMismatchError(
            f"kvStoreType={store_type.value}, but {root} holds kvStoreType={backend.value} state ({marker.name}): "
            f"set kvStoreType={backend.value}, or move {marker if backend is KvStoreType.MEMORY else root} away to "
            "rebuild the KV data from what the commitlog still holds")


def open_state_store(store_type: KvStoreType, root: Path, snapshot_interval_s: float) -> KvStateStore:
    _check_no_other_backend(store_type, root)
    if store_type is KvStoreType.MEMORY:
        from broker.kv.memory_kv_state_store import MemoryKvStateStore

        return MemoryKvStateStore(root, snapshot_interval_s)
    if store_type is not KvStoreType.ROCKSDB:  # parsed once (broker.conf): a plain string is a caller's bug
        raise TypeError(f"KvStoreType member expected, got {store_type!r}")
    from broker.kv.rocksdb_kv_state_store import RocksDBKvStateStore

    return RocksDBKvStateStore(root)


class KvStore:
    """Register with :meth:`attach` before the message store starts (recovery replays into it)."""

    def __init__(self, store_type: KvStoreType, root: Path, snapshot_interval_s: float, broker_name: str) -> None:
        self.store_type = store_type
        self.state = open_state_store(store_type, root, snapshot_interval_s)
        self.broker_name = broker_name
        self.dispatcher: KvCommitLogDispatcher
        self.waiters: KvApplyWaiters
        self.reader: KvChainReader
        self.fences: KvPartitionFences
        self._message_store: MessageStore

    def attach(self, store: MessageStore, loop: asyncio.AbstractEventLoop, peers: Callable[[], PeerBrokers],
               led_partitions: Callable[[], Collection[int] | None]) -> None:
        """``led_partitions``: the KV topic's physical queues this broker leads now (None: no mapping yet)."""
        self.dispatcher = KvCommitLogDispatcher(self.state, store.commit_log.read_at)
        self.fences = KvPartitionFences(self.broker_name, led_partitions, store.commit_log.max_offset,
                                        lambda: self.dispatcher.applied_offset)
        self.waiters = KvApplyWaiters(loop)
        self.dispatcher.apply_listeners.append(self.waiters.on_applied)
        store.running_flags.on_fail_stop(self.waiters.fail)
        self.reader = KvChainReader(self.state, peers, self.broker_name, self.fences.check_applied)
        store.register_dispatcher(self.dispatcher)
        self._message_store = store

    def stalled(self) -> str | None:
        """Why reads would miss writes now, or None: the store fail-stopped before applying all it holds (a read
        answered a stored key "not found", as a success)."""
        store = self._message_store
        reason = store.running_flags.fail_stop_reason
        if reason is None or self.dispatcher.applied_offset >= store.commit_log.confirm_offset:
            return None
        return (f"the KV store applied the commitlog up to {self.dispatcher.applied_offset} of "
                f"{store.commit_log.confirm_offset} before the store stopped ({reason}): reads would miss writes")

    # -- a new replica's copy of its master's state (broker/ha/state_copy.py) -----------------------
    def copy_out(self) -> tuple[int, Iterator[tuple[bytes, bytes]]]:
        return self.state.copy_out()

    def copy_in_begin(self) -> None:
        self.state.clear()
        self.dispatcher.copied(0)

    def copy_in(self, records: list[tuple[bytes, bytes]]) -> None:
        self.state.put_copied(records)

    def copy_in_end(self, applied_offset: int) -> None:
        self.state.set_applied(applied_offset)
        self.dispatcher.copied(applied_offset)

    def close(self) -> None:
        """After the message store shut down (its final dispatch is applied)."""
        self.state.close()
        log.info("kv_closed applied=%d ops_applied=%d", self.dispatcher.applied_offset, self.dispatcher.applied_ops)

"""``kvEnable=false`` over a store that holds KV state (KV was on before): the commitlog from the KV store's applied
offset is kept, so that turning KV on again replays what the store had not applied (acknowledged puts a SIGKILL
left unflushed among them) instead of serving older values, until the disk is fuller than diskSpaceCleanForciblyRatio
(the forced expiry passes it; the KV store then misses those records, said at its next start as ``dispatcher_gap``).
Deleting ``<store>/kv`` drops the KV data, and with it this hold."""

import logging
from pathlib import Path

from broker.kv.memory_kv_state_store import SNAPSHOT_FILE, MemoryKvStateStore
from broker.kv.rocksdb_kv_state_store import RocksDBKvStateStore
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest

log = logging.getLogger(__name__)


class DisabledKvHold(CommitLogDispatcher):
    name = "kv-disabled"
    keeps_commit_log = True  # the point: segments the KV store has not applied stay
    holds_under_disk_pressure = False  # not past diskSpaceCleanForciblyRatio: a full disk stops every write

    def __init__(self, applied_offset: int) -> None:
        self._applied_offset = applied_offset

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        pass  # applied once KV is on again

    def checkpoint(self) -> int:
        return self._applied_offset


def disabled_kv_hold(root: Path) -> DisabledKvHold | None:
    """The hold for a KV store left at ``root`` (either type), or None when there is none."""
    store: MemoryKvStateStore | RocksDBKvStateStore
    if (root / SNAPSHOT_FILE).exists():
        store = MemoryKvStateStore(root)
    elif (root / "CURRENT").exists():  # a RocksDB directory
        store = RocksDBKvStateStore(root)
    else:
        return None
    applied = store.load()
    store.close()
    log.warning("kv_disabled_store_kept path=%s applied_offset=%d: kvEnable=false, but this store holds KV state; "
                "commitlog segments from its applied offset are kept (turning KV on again replays them). Delete the "
                "directory to drop the KV data and let them expire", root, applied)
    return DisabledKvHold(applied)

"""A dispatcher's flush the disk refused. A RocksDB whose flush failed (a full disk) refuses every write until it is
reopened: the broker went on taking sends it could no longer dispatch (fail-stopped at the next one, after
acknowledging it), or, for the KV store's applied mark, held the commitlog from expiring for good, with only the
first failure logged (the disk-full review). The store fail-stops at once now, saying to restart; a dispatcher that
reopens its database by itself (the tier's metadata) is left to do so, and the others flush meanwhile."""

from pathlib import Path

import pytest

from broker.store.checkpoint import OffsetCheckpoint
from broker.store.commit_log import CommitLog
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.running_flags import RunningFlags
from broker.store.store_services import DispatcherFlushService
from tests.disk.rocksdb_refusal import rocksdb_disk_full


class Flushing(CommitLogDispatcher):
    def __init__(self, name: str, refused: bool = False, recovers: bool = False) -> None:
        self.name, self.refused, self.recovers_from_refused_flush = name, refused, recovers
        self.flushes = 0

    def dispatch(self, requests, end_offset) -> None:  # type: ignore[no-untyped-def]
        pass

    def checkpoint(self) -> int:
        return 0

    def flush(self) -> None:
        if self.refused:
            raise rocksdb_disk_full()
        self.flushes += 1


def service(tmp_path: Path, dispatchers: list[CommitLogDispatcher]) -> tuple[DispatcherFlushService, RunningFlags]:
    flags = RunningFlags()
    commit_log = CommitLog(tmp_path / "commitlog", 1 << 20)
    return DispatcherFlushService(commit_log, dispatchers, OffsetCheckpoint(tmp_path / "flushed"), flags, 1000), flags


def test_a_refused_rocksdb_flush_fail_stops_the_store_saying_to_restart(tmp_path: Path) -> None:
    svc, flags = service(tmp_path, [Flushing("kv", refused=True), Flushing("index")])
    with pytest.raises(Exception, match="No space left on device"):
        svc.run_once()
    assert flags.fail_stop_reason is not None and "flushing the kv failed" in flags.fail_stop_reason
    assert "restart the broker once the disk has room" in flags.fail_stop_reason
    assert not flags.writeable


def test_a_dispatcher_that_reopens_by_itself_is_left_to_and_the_others_flush(tmp_path: Path) -> None:
    tier, index = Flushing("tiered", refused=True, recovers=True), Flushing("index")
    svc, flags = service(tmp_path, [tier, index])
    with pytest.raises(Exception, match="No space left on device"):  # logged once by the service while it lasts
        svc.run_once()
    assert flags.fail_stop_reason is None and index.flushes == 1
    tier.refused = False
    svc.run_once()
    assert tier.flushes == 1 and index.flushes == 2

"""A new replica's copy of its master's KV and timer stores (``broker/ha/state_copy.py``), in process with the real
stores: what the master's ``state_chunks`` carry, ``receive_state`` puts in the replica's store whole, as of the
master's applied offset, over whatever the replica held before (a copy cut short is done again)."""

from pathlib import Path

import pytest

from broker.ha import state_copy
from broker.ha.state_copy import receive_state, state_chunks
from broker.kv.kv_state_store import KvStateStore
from broker.kv.memory_kv_state_store import MemoryKvStateStore
from broker.kv.rocksdb_kv_state_store import RocksDBKvStateStore
from broker.timer.timer_message_store import CHECKPOINT_KEY, OFFSET, TimerMessageStore, timer_key
from proto import ha_pb2


class CopiedKv:
    """A KV state store as ``KvStore`` hands it to the copy (without a dispatcher)."""

    def __init__(self, state: KvStateStore) -> None:
        self.state = state

    def copy_out(self):  # type: ignore[no-untyped-def]
        return self.state.copy_out()

    def copy_in_begin(self) -> None:
        self.state.clear()

    def copy_in(self, records: list[tuple[bytes, bytes]]) -> None:
        self.state.put_copied(records)

    def copy_in_end(self, applied_offset: int) -> None:
        self.state.set_applied(applied_offset)


def _kv_store(kind: str, root: Path) -> KvStateStore:
    store: KvStateStore = RocksDBKvStateStore(root) if kind == "rocksdb" else MemoryKvStateStore(root)
    store.load()
    return store


@pytest.mark.parametrize("kind", ["rocksdb", "memory"])
def test_a_kv_copy_holds_every_partition_as_of_the_masters_applied_offset(tmp_path: Path, kind: str,
                                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(state_copy, "CHUNK_BYTES", 64)  # many chunks
    master = _kv_store(kind, tmp_path / "master")
    master.apply({(p, b"k%d" % i): b"\x01v%d-%d" % (p, i) for p in range(3) for i in range(20)}, 5000)
    replica = _kv_store(kind, tmp_path / "replica")
    replica.apply({(7, b"stale"): b"\x01from an earlier copy"}, 100)
    chunks = list(state_chunks("kv", CopiedKv(master)))
    assert len(chunks) > 3 and chunks[-1].last
    receive_state({"kv": CopiedKv(replica)}, chunks)
    for p in range(3):
        assert replica.scan(p, b"", b"", 100) == master.scan(p, b"", b"", 100)
    assert replica.get(7, [b"stale"]) == [None]
    assert replica.flush() == 5000  # durable, as of the master's applied offset


def test_a_timer_copy_holds_the_pending_timers_and_the_checkpoint(tmp_path: Path):
    def store(name: str) -> TimerMessageStore:
        timers = TimerMessageStore(tmp_path / name, lambda _offset, _size: b"")
        timers.load()
        return timers

    master, replica = store("master"), store("replica")
    master.db.put(timer_key(1_000, 10), b"record-a")
    master.db.put(timer_key(2_000, 20), b"record-b")
    master.db.put(CHECKPOINT_KEY, OFFSET.pack(4096))
    replica.db.put(timer_key(500, 5), b"left from a copy cut short")
    receive_state({"timer": replica}, state_chunks("timer", master))
    assert replica.checkpoint() == 4096 and replica.pending == 2
    assert replica.first_due() == 1_000
    assert [key for key, _ in replica.take_due(10_000, 10)] == [timer_key(1_000, 10), timer_key(2_000, 20)]


def test_a_chunk_ends_before_a_record_that_would_overflow_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(A chunk was closed only once past its size: up to its size and one whole timer record, a whole message, which
    a replica's 64 MiB frame limit then refused at every try.)"""
    monkeypatch.setattr(state_copy, "CHUNK_BYTES", 1000)
    timers = TimerMessageStore(tmp_path / "timers", lambda _offset, _size: b"")
    timers.load()
    for i, size in enumerate([600, 300, 900, 5000, 10]):
        timers.db.put(timer_key(1_000 + i, i), bytes(size))
    sizes = [sum(len(v) for _k, v in state_copy.decode_records(c.records, "t")) for c in state_chunks("timer", timers)]
    assert sizes[:3] == [900, 900, 5000] and sizes[3] < 1000  # the big one alone, the others within (the last: the
    # 10 and the store's own keys)


def test_a_copy_cut_short_is_an_error_and_a_store_not_kept_here_is_skipped(tmp_path: Path):
    replica = _kv_store("rocksdb", tmp_path / "replica")
    cut_short = [ha_pb2.StateChunk(store="kv", applied_offset=1, records=b"")]
    with pytest.raises(ValueError, match="ended before the end of"):
        receive_state({"kv": CopiedKv(replica)}, cut_short)
    receive_state({}, cut_short)  # a broker with kvEnable=false keeps no KV store: nothing to apply


def test_a_log_without_records_starts_again_where_the_master_now_begins(tmp_path: Path):
    """A new replica started its log at the master's oldest segment, which expired before a record came: the
    master refuses the position, and the replica, still without records, begins again at the next oldest."""
    from broker.store.commit_log import CommitLog

    log = CommitLog(tmp_path / "commitlog", 4096)
    log.start_empty_at(8192)
    assert (log.min_offset(), log.max_offset(), log.confirm_offset) == (8192, 8192, 8192)
    log.start_empty_at(16384)
    assert (log.min_offset(), log.max_offset(), log.confirm_offset) == (16384, 16384, 16384)
    assert sorted(p.name for p in (tmp_path / "commitlog").iterdir()) == ["00000000000000016384"]
    log.shutdown()


def test_a_log_without_records_starts_in_a_segment_of_the_masters_size_where_the_master_begins(tmp_path: Path):
    """The master's oldest segment starts at no multiple of this log's size (its mappedFileSizeCommitLog changed):
    the log's first segment is the master's, and the next one follows it."""
    from broker.store.commit_log import CommitLog

    log = CommitLog(tmp_path / "commitlog", 4096)
    log.start_empty_at(6144, 3072)
    assert (log.min_offset(), log.max_offset(), log.confirm_offset) == (6144, 6144, 6144)
    assert log.segment_size_at(6144) == 3072
    log.append_replica(6144, bytes(3072), 3072)
    log.append_replica(9216, bytes(100), 4096)
    assert [(p.name, p.stat().st_size) for p in sorted((tmp_path / "commitlog").iterdir())] == [
        ("00000000000000006144", 3072), ("00000000000000009216", 4096)]
    log.shutdown()

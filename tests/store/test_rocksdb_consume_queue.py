"""The RocksDB consume queue store on its own: key layout, one write batch per dispatch, idempotence, crash
consistency with the WAL off, topic deletion, search by stored time, expiry, truncation, file count."""

import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker.store.consume_queue.consume_queue_store import BoundaryType, CqUnit
from broker.store.consume_queue.rocksdb_consume_queue_store import (
    CHECKPOINT_KEY,
    META,
    OFFSET,
    UNIT,
    RocksDBConsumeQueueStore,
    meta_key,
    unit_key_prefix,
)
from broker.store.dispatch.dispatch_request import DispatchRequest
from tests.disk.rocksdb_refusal import RefusingDb

REPO_ROOT = Path(__file__).resolve().parents[2]
SIZE = 100  # every test record is 100 bytes: physical offset = 100 * position in the commitlog


def no_commit_log(physical_offset: int) -> int:
    raise AssertionError(f"the RocksDB store read the commitlog (store time at {physical_offset})")


def open_cq(root: Path, **kwargs: object) -> RocksDBConsumeQueueStore:
    cq = RocksDBConsumeQueueStore(root, no_commit_log, **kwargs)  # type: ignore[arg-type]
    cq.load()
    return cq


class Log:
    """A fake commitlog: hands out queue offsets and physical offsets like appends would."""

    def __init__(self) -> None:
        self.end = 0
        self.next: dict[tuple[str, int], int] = {}
        self.records: list[DispatchRequest] = []

    def append(self, topic: str, queue_id: int, n: int = 1, tags: int = 0, ts: int = 1_000) -> list[DispatchRequest]:
        out = []
        for _ in range(n):
            offset = self.next.get((topic, queue_id), 0)
            self.next[(topic, queue_id)] = offset + 1
            out.append((topic, queue_id, offset, self.end, SIZE, tags, ts, b""))
            self.end += SIZE
        self.records.extend(out)
        return out


class CountingDb:
    """Wraps the store's Rdict: records every write batch; single puts/deletes outside a batch fail."""

    def __init__(self, db: object) -> None:
        self._db = db
        self.batches: list[int] = []

    def write(self, batch, write_opt=None):  # type: ignore[no-untyped-def]
        self.batches.append(len(batch))
        return self._db.write(batch, write_opt)  # type: ignore[attr-defined]

    def put(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a write outside a batch")

    delete = delete_range = put

    def __getattr__(self, name: str) -> object:
        return getattr(self._db, name)


def all_keys(cq: RocksDBConsumeQueueStore) -> list[bytes]:
    return list(cq.db.keys())


def units(cq: RocksDBConsumeQueueStore, topic: str, queue_id: int) -> list[CqUnit]:
    lo, hi = cq.min_offset(topic, queue_id), cq.max_offset(topic, queue_id)
    return list(map(CqUnit._make, cq.read_units(topic, queue_id, lo, hi - lo + 5)))


# -- layout and batches --------------------------------------------------------------------------------
def test_one_write_batch_per_dispatch_holding_units_bounds_and_checkpoint(tmp_path: Path):
    cq = open_cq(tmp_path / "cq")
    counting = CountingDb(cq.db)
    cq._db = counting  # type: ignore[assignment]
    log = Log()
    requests = log.append("BatchT", 0, 10) + log.append("BatchT", 1, 7) + log.append("Other", 3, 5)
    random.Random(1).shuffle(requests)  # commitlog order interleaves queues; offsets per queue stay ordered
    requests.sort(key=lambda r: (r[0], r[1], r[2]))
    cq.dispatch(requests, log.end)
    # one batch: 22 units, the bounds of the 3 queues it touched, the checkpoint
    assert counting.batches == [22 + 3 + 1]
    keys = all_keys(cq)
    assert len(keys) == 22 + 3 + 1
    assert sorted(keys) == keys
    assert CHECKPOINT_KEY in keys and OFFSET.unpack(cq.db.get(CHECKPOINT_KEY))[0] == log.end
    assert META.unpack(cq.db.get(meta_key("BatchT", 1))) == (0, 7)
    assert UNIT.unpack(cq.db.get(unit_key_prefix("BatchT", 1) + OFFSET.pack(6)))[1] == SIZE
    more = log.append("BatchT", 0, 64)
    cq.dispatch(more, log.end)
    assert counting.batches[1:] == [64 + 1 + 1]
    assert len(all_keys(cq)) == 22 + 64 + 3 + 1
    assert cq.max_offset("BatchT", 0) == 74 and cq.min_offset("BatchT", 0) == 0
    cq.shutdown()


def test_writes_skip_the_wal(tmp_path: Path):
    cq = open_cq(tmp_path / "cq")
    log = Log()
    for _ in range(50):
        cq.dispatch(log.append("WalT", 0, 64), log.end)
    wal = [p for p in (tmp_path / "cq").iterdir() if p.suffix == ".log"]
    assert wal and all(p.stat().st_size == 0 for p in wal), [(p.name, p.stat().st_size) for p in wal]
    assert cq.max_offset("WalT", 0) == 3200
    cq.shutdown()


def test_redispatch_is_idempotent(tmp_path: Path):
    cq = open_cq(tmp_path / "cq")
    log = Log()
    first = log.append("IdemT", 0, 30, tags=7) + log.append("IdemT", 1, 10)
    cq.dispatch(first, log.end)
    keys, before = all_keys(cq), (units(cq, "IdemT", 0), units(cq, "IdemT", 1))
    end = log.end
    cq.dispatch(first, end)  # the same again, as after a restart from an older checkpoint
    cq.dispatch(first[10:30], end)
    assert all_keys(cq) == keys
    assert (units(cq, "IdemT", 0), units(cq, "IdemT", 1)) == before
    assert [cq.max_offset("IdemT", q) for q in (0, 1)] == [30, 10]
    # an overlapping re-dispatch that runs past the end appends only the new units
    new = log.append("IdemT", 0, 5)
    cq.dispatch(first[25:30] + new, log.end)
    assert cq.max_offset("IdemT", 0) == 35
    assert [u.physical_offset for u in units(cq, "IdemT", 0)] == [r[3] for r in first[:30] + new]
    assert len(all_keys(cq)) == len(keys) + 5
    cq.shutdown()


def test_bounds_and_checkpoint_survive_reopen(tmp_path: Path):
    cq = open_cq(tmp_path / "cq")
    log = Log()
    for q in range(5):
        cq.dispatch(log.append("ReopenT", q, q + 1, tags=q, ts=500 + q), log.end)
    assert cq.checkpoint() == 0  # nothing flushed yet
    cq.shutdown()
    cq = open_cq(tmp_path / "cq")
    assert cq.checkpoint() == log.end
    assert cq.queue_max_offsets() == {("ReopenT", q): q + 1 for q in range(5)}
    assert units(cq, "ReopenT", 4) == [CqUnit(r[3], SIZE, 4) for r in log.records[-5:]]
    assert cq.store_times("ReopenT", 4, 0, 10) == [504] * 5
    assert cq.min_offset("Nope", 0) == cq.max_offset("Nope", 0) == 0 and cq.read_units("Nope", 0, 0, 5) == []
    cq.shutdown()


def test_read_units_stops_at_max_and_count(tmp_path: Path):
    cq = open_cq(tmp_path / "cq")
    log = Log()
    cq.dispatch(log.append("ReadA", 0, 20) + log.append("ReadA", 1, 20) + log.append("ReadAB", 0, 20), log.end)
    assert [u[0] for u in cq.read_units("ReadA", 0, 5, 4)] == [r[3] for r in log.records[5:9]]
    assert len(cq.read_units("ReadA", 0, 15, 100)) == 5  # never into the next queue
    assert cq.read_units("ReadA", 0, 20, 100) == []
    assert cq.read_units("ReadA", 1, 0, 100) == [(r[3], SIZE, 0) for r in log.records[20:40]]
    cq.shutdown()


# -- crash consistency -----------------------------------------------------------------------------------
CRASH_CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from broker.store.consume_queue.rocksdb_consume_queue_store import RocksDBConsumeQueueStore
    cq = RocksDBConsumeQueueStore(Path(sys.argv[1]), lambda p: 0, flush_interval_s=0)
    cq.load()
    def reqs(first_physical, n, queue_offset):
        return [("CrashT", 0, queue_offset + i, first_physical + i * 100, 100, 0, 1, b"") for i in range(n)]
    cq.dispatch(reqs(0, 50, 0), 5000)
    cq.flush()  # durable: 50 units, checkpoint 5000
    assert cq.checkpoint() == 5000
    cq.dispatch(reqs(5000, 50, 50), 10000)  # in the memtable only: the WAL is off
    print("ready", flush=True)
    signal.pause()
""")


def test_sigkill_leaves_units_consistent_with_the_flushed_checkpoint(tmp_path: Path):
    proc = subprocess.Popen([sys.executable, "-c", CRASH_CHILD, str(tmp_path / "cq")], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == b"ready\n", (line, proc.stderr.read() if proc.poll() is not None else b"")  # type: ignore
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    cq = open_cq(tmp_path / "cq")
    assert cq.checkpoint() == 5000
    assert cq.max_offset("CrashT", 0) == 50
    assert len(all_keys(cq)) == 50 + 1 + 1
    # recovery re-dispatches from the checkpoint: the queue continues without a gap
    cq.dispatch([("CrashT", 0, 50 + i, 5000 + i * 100, 100, 0, 1, b"") for i in range(50)], 10000)
    assert [u.physical_offset for u in units(cq, "CrashT", 0)] == list(range(0, 10000, 100))
    cq.shutdown()


def test_flush_policy_flushes_by_time_or_when_forced(tmp_path: Path):
    cq = open_cq(tmp_path / "cq", flush_interval_s=3600)
    log = Log()
    cq.dispatch(log.append("FlushT", 0, 10), log.end)
    cq.flush()
    assert (cq.flush_count, cq.checkpoint()) == (0, 0)  # not due: the checkpoint lags
    cq.flush_interval_s = 0
    cq.flush()
    assert (cq.flush_count, cq.checkpoint()) == (1, log.end)
    cq.flush()
    assert cq.flush_count == 1  # nothing new: no flush
    cq.flush_interval_s, cq.flush_bytes = 3600, 1
    cq.dispatch(log.append("FlushT", 0, 1), log.end)
    cq.flush()  # enough written
    assert (cq.flush_count, cq.checkpoint()) == (2, log.end)
    cq.flush_bytes = 1 << 40
    cq.dispatch(log.append("FlushT", 0, 1), log.end)
    cq.shutdown()  # always flushes
    assert cq.flush_count == 3
    assert open_cq(tmp_path / "cq").checkpoint() == log.end


def test_a_refused_flush_is_still_due_so_an_idle_store_flushes_once_it_can(tmp_path: Path):
    """A flush the disk refused (the first pass after a topic deletion, which makes a flush due at once) keeps what
    made it due: the next periodic pass of an idle store flushes. Cleared, the deletion stayed in the memtable (no
    WAL) until some later dispatch."""
    cq = open_cq(tmp_path / "cq", flush_interval_s=3600)
    log = Log()
    cq.dispatch(log.append("Gone", 0, 4), log.end)
    cq.flush_interval_s = 0
    cq.flush()
    cq.flush_interval_s = 3600
    refusing = RefusingDb(cq._db, "flush")
    cq._db = refusing  # type: ignore[assignment]
    cq.topic_deleted("Gone")
    with pytest.raises(Exception, match="No space left on device"):
        cq.flush()
    refusing.refusing = False
    flushed = cq.flush_count
    cq.flush()  # the periodic pass: not due by time, still due by the deletion
    assert cq.flush_count == flushed + 1


# -- maintenance -----------------------------------------------------------------------------------------
def test_delete_topic_removes_everything_of_the_topic_and_nothing_else(tmp_path: Path):
    cq = open_cq(tmp_path / "cq")
    log = Log()
    topics = ["Top", "To", "Top1", "Top-1", "TopX", "%RETRY%Top"]  # prefixes of each other
    for topic in topics:
        for q in range(3):
            cq.dispatch(log.append(topic, q, 4), log.end)
    before = {t: {q: units(cq, t, q) for q in range(3)} for t in topics}
    keys = all_keys(cq)
    cq.topic_deleted("Top")
    mine = [k for k in keys if k[1:].startswith(b"Top\x00")]
    assert len(mine) == 3 * 4 + 3
    assert all_keys(cq) == [k for k in keys if k not in mine]
    assert all(cq.max_offset("Top", q) == cq.min_offset("Top", q) == 0 for q in range(3))
    assert ("Top", 0) not in cq.queue_max_offsets() and len(cq.queue_max_offsets()) == 15
    for topic in topics[1:]:
        assert {q: units(cq, topic, q) for q in range(3)} == before[topic]
    cq.shutdown()
    cq = open_cq(tmp_path / "cq")  # and it stays gone
    assert cq.max_offset("Top", 0) == 0 and len(cq.queue_max_offsets()) == 15
    # new messages of a re-created topic (queue offsets go on in the commitlog) start a fresh queue
    cq.dispatch(log.append("Top", 0, 2), log.end)
    assert (cq.min_offset("Top", 0), cq.max_offset("Top", 0)) == (4, 6)
    assert [u.physical_offset for u in units(cq, "Top", 0)] == [r[3] for r in log.records[-2:]]
    cq.shutdown()


def test_correct_min_offset_moves_min_and_deletes_units(tmp_path: Path):
    cq = open_cq(tmp_path / "cq")
    log = Log()
    for _ in range(40):
        cq.dispatch(log.append("ExpA", 0, 2) + log.append("ExpB", 1, 3), log.end)
    commit_log_min = log.records[100][3]  # 100 records gone: 40 of ExpA, 60 of ExpB
    cq.correct_min_offset(commit_log_min)
    assert (cq.min_offset("ExpA", 0), cq.max_offset("ExpA", 0)) == (40, 80)
    assert (cq.min_offset("ExpB", 1), cq.max_offset("ExpB", 1)) == (60, 120)
    assert all(u.physical_offset >= commit_log_min for u in units(cq, "ExpB", 1))
    assert cq.read_units("ExpA", 0, 0, 1)[0] == units(cq, "ExpA", 0)[0]  # below min reads from min
    assert len([k for k in all_keys(cq) if k[:1] == b"U"]) == 40 + 60  # really deleted
    cq.correct_min_offset(commit_log_min)  # again: nothing moves
    assert cq.min_offset("ExpB", 1) == 60
    cq.correct_min_offset(log.end)  # everything expired: empty queues that go on at their max
    assert cq.min_offset("ExpA", 0) == cq.max_offset("ExpA", 0) == 80
    assert [k for k in all_keys(cq) if k[:1] == b"U"] == []
    cq.shutdown()
    cq = open_cq(tmp_path / "cq")
    assert (cq.min_offset("ExpB", 1), cq.max_offset("ExpB", 1)) == (120, 120)
    cq.dispatch(log.append("ExpB", 1, 1), log.end)
    assert units(cq, "ExpB", 1) == [CqUnit(log.records[-1][3], SIZE, 0)]
    cq.shutdown()


def test_prepare_expiry_logs_only_queues_it_empties_and_only_past_the_checkpoint(tmp_path: Path):
    cq = open_cq(tmp_path / "cq", flush_interval_s=3600)
    counting = CountingDb(cq.db)
    cq._db = counting  # type: ignore[assignment]
    log = Log()
    cq.dispatch(log.append("Gone", 0, 10) + log.append("Kept", 0, 10), log.end)
    boundary = log.end  # everything so far expires
    cq.dispatch(log.append("Kept", 0, 5), log.end)
    wal = [p for p in (tmp_path / "cq").iterdir() if p.suffix == ".log"]
    cq.prepare_expiry(boundary)
    # one synced batch through the WAL: Gone emptied (its units deleted, bounds at its max); Kept untouched,
    # since its units past the boundary come back by replay after a crash
    assert counting.batches[2:] == [2] and any(p.stat().st_size > 0 for p in wal)  # a range delete, the bounds
    assert (cq.min_offset("Gone", 0), cq.max_offset("Gone", 0)) == (10, 10)
    assert (cq.min_offset("Kept", 0), cq.max_offset("Kept", 0)) == (0, 15)
    cq.correct_min_offset(boundary)  # after the deletion: the rest moves as always
    assert cq.min_offset("Kept", 0) == 10
    cq.flush_interval_s = 0
    cq.flush()
    cq.dispatch(log.append("Gone2", 0, 3), log.end)
    writes = len(counting.batches)
    cq.prepare_expiry(log.end - 3 * SIZE)  # covered by the flushed checkpoint: nothing to write
    assert len(counting.batches) == writes
    cq.shutdown()


def test_truncate_dirty_cuts_units_past_the_commit_log_end(tmp_path: Path):
    cq = open_cq(tmp_path / "cq", flush_interval_s=0)
    log = Log()
    for _ in range(10):
        cq.dispatch(log.append("CutA", 0, 3) + log.append("CutB", 0, 1), log.end)
    cq.flush()
    assert cq.checkpoint() == log.end
    end = log.records[30][3]  # the commitlog lost its last 10 records: 7 or 8 of CutA, 2 or 3 of CutB
    keep_a = sum(1 for r in log.records[:30] if r[0] == "CutA")
    keep_b = 30 - keep_a
    cq.truncate_dirty(end)
    assert cq.checkpoint() == end
    assert [cq.max_offset(t, 0) for t in ("CutA", "CutB")] == [keep_a, keep_b]
    assert all(u.physical_offset < end for t in ("CutA", "CutB") for u in units(cq, t, 0))
    assert len([k for k in all_keys(cq) if k[:1] == b"U"]) == 30
    cq.truncate_dirty(log.end)  # nothing past a later end
    assert cq.checkpoint() == end
    cq.shutdown()
    cq = open_cq(tmp_path / "cq")  # durable at once
    assert cq.checkpoint() == end and cq.max_offset("CutA", 0) == keep_a
    cq.shutdown()


def test_a_gap_the_commitlog_no_longer_holds_restarts_the_queue(tmp_path: Path):
    cq = open_cq(tmp_path / "cq", commit_min=lambda: 1000)
    cq.dispatch([("GapT", 0, i, i * 100, 100, 0, 1, b"") for i in range(5)], 500)
    # the commitlog between them expired before it was re-dispatched: offsets 5..9 are gone for good
    cq.dispatch([("GapT", 0, 10 + i, 1000 + i * 100, 100, 0, 1, b"") for i in range(3)], 1300)
    assert (cq.min_offset("GapT", 0), cq.max_offset("GapT", 0)) == (10, 13)
    assert [u.physical_offset for u in units(cq, "GapT", 0)] == [1000, 1100, 1200]
    assert len([k for k in all_keys(cq) if k[:1] == b"U"]) == 3
    cq.shutdown()


# -- search by time --------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [1, 2])
def test_search_by_time_uses_stored_times(tmp_path: Path, seed: int):
    cq = open_cq(tmp_path / "cq")  # its commitlog callback fails the test if called
    rng = random.Random(seed)
    log = Log()
    times: list[int] = []
    t = 10_000
    while len(times) < 700:
        t += rng.choice([0, 0, 1, 3, 50])
        n = rng.choice([1, 2, 8])
        requests = log.append("TimeT", 0, n, ts=t)
        cq.dispatch(requests + log.append("Noise", 0, 1, ts=t * 1000), log.end)
        times += [t] * n
    assert len(set(times)) < len(times)
    assert cq.store_times("TimeT", 0, 0, len(times)) == times
    probes = {times[0] - 5, times[-1] + 5, *rng.sample(times, 40), *(x + 1 for x in rng.sample(times, 20))}
    for ts in sorted(probes):
        lower = next((i for i, x in enumerate(times) if x >= ts), len(times))
        upper = max((i for i, x in enumerate(times) if x <= ts), default=0)
        assert cq.offset_by_time("TimeT", 0, ts, BoundaryType.LOWER) == lower, ts
        assert cq.offset_by_time("TimeT", 0, ts, BoundaryType.UPPER) == upper, ts
    cq.correct_min_offset(log.records[200][3])  # after expiry the search starts at the new min
    low = cq.min_offset("TimeT", 0)
    assert low > 0
    assert cq.offset_by_time("TimeT", 0, times[0], BoundaryType.LOWER) == low
    assert cq.offset_by_time("TimeT", 0, 0, BoundaryType.UPPER) == low
    cq.shutdown()


# -- many queues -----------------------------------------------------------------------------------------
def _db_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.is_file())


def test_files_stay_few_as_queues_grow_from_10_to_10000(tmp_path: Path):
    root = tmp_path / "cq"
    cq = open_cq(root, flush_interval_s=0)
    log = Log()
    for round_ in range(3):
        cq.dispatch([r for q in range(10) for r in log.append(f"Few{q}", round_ % 4, 20)], log.end)
        cq.flush()
    few = _db_files(root)
    for _ in range(3):  # 10,000 queues, each written in every round, a flush per round
        batch = [r for q in range(10_000) for r in log.append(f"Many{q // 8}", q % 8, 2)]
        for i in range(0, len(batch), 4096):  # as the reput service hands them over
            part = batch[i : i + 4096]
            cq.dispatch(part, part[-1][3] + SIZE)
        cq.flush()
    many = _db_files(root)
    assert len(cq.queue_max_offsets()) == 10_000 + 30
    assert all(cq.max_offset(f"Many{q // 8}", q % 8) == 6 for q in range(0, 10_000, 997))
    assert len(many) <= 25 and len(many) <= len(few) + 8, (few, many)
    cq.shutdown()
    assert len(_db_files(root)) <= 25
    assert len(os.listdir(root)) == len(_db_files(root))  # no directory per topic or queue


def test_a_gap_after_units_the_commitlog_still_holds_is_filled_with_empty_units(tmp_path: Path):
    """Records lost to damage on disk (the replay skipped them): the queue keeps its units before the hole (it
    restarted after it, and lost them), and the hole reads as nothing."""
    cq = open_cq(tmp_path / "cq", commit_min=lambda: 0)
    cq.dispatch([("HoleT", 0, i, i * 100, 100, 0, 1, b"") for i in range(5)], 500)
    cq.dispatch([("HoleT", 0, 7 + i, 700 + i * 100, 100, 0, 1, b"") for i in range(3)], 1000)
    assert (cq.min_offset("HoleT", 0), cq.max_offset("HoleT", 0)) == (0, 10)
    # the hole's units at the next record's offset (and time): the units' offsets never go down
    assert [(u.physical_offset, u.size) for u in units(cq, "HoleT", 0)] == [
        (0, 100), (100, 100), (200, 100), (300, 100), (400, 100), (700, 0), (700, 0), (700, 100), (800, 100),
        (900, 100)]
    cq.shutdown()

"""KvCommitLogDispatcher over a real MessageStore: apply order, CAS decided at apply time, replay determinism,
skipping what was applied before a restart, and restarts from a lagging applied offset."""

import random
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.kv import kv_dispatcher
from broker.kv.kv_dispatcher import CasOutcome, KvCommitLogDispatcher
from broker.kv.kv_record import DELETED, MAX_BODY_BYTES, KvOp, KvRecord, present
from broker.kv.kv_state_store import KvStateStore
from broker.kv.memory_kv_state_store import MemoryKvStateStore
from broker.kv.rocksdb_kv_state_store import RocksDBKvStateStore
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.store.message_store import MessageStore
from broker.store.put_message_result import PutMessageStatus
from common.kv_shard import KV_TOPIC
from tests.store.conftest import store_config

BACKENDS = ("rocksdb", "memory")
Batch = tuple[list[DispatchRequest], int]


def make_state(backend: str, root: Path) -> KvStateStore:
    # long intervals: nothing becomes durable unless a test forces it (or closes the state)
    if backend == "memory":
        return MemoryKvStateStore(root, snapshot_interval_s=3600)
    return RocksDBKvStateStore(root, flush_interval_s=3600)


def dump(state: KvStateStore) -> dict[int, list[tuple[bytes, bytes]]]:
    """Every partition's full contents, tombstones included."""
    return {p: state.scan(p, b"", b"", 1 << 30) for p in sorted(state.partition_sizes())}


class Recorder(CommitLogDispatcher):
    """Captures dispatch calls; its checkpoint (0 by default) makes a restart re-dispatch everything."""

    name = "recorder"

    def __init__(self, checkpoint: int = 0) -> None:
        self.batches: list[Batch] = []
        self._checkpoint = checkpoint

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        self.batches.append((list(requests), end_offset))

    def checkpoint(self) -> int:
        return self._checkpoint


class Node:
    """A message store on ``root/store`` with a KV dispatcher over a state store on ``state_root``."""

    def __init__(self, root: Path, backend: str, state_root: Path | None = None,
                 extra: CommitLogDispatcher | None = None, state: KvStateStore | None = None) -> None:
        self.state = state or make_state(backend, state_root or root / "kv")
        # the dispatcher flush service stays quiet: tests decide when state becomes durable
        self.store = MessageStore(store_config(root / "store", flush_interval_consume_queue_ms=600_000))
        self.kv = KvCommitLogDispatcher(self.state, self.store.commit_log.read_at)
        self.applied_seen: list[int] = []
        self.kv.apply_listeners.append(self.applied_seen.append)
        self.store.register_dispatcher(self.kv)
        if extra is not None:
            self.store.register_dispatcher(extra)
        self.store.start()

    def put(self, partition: int, *records: KvRecord) -> list[int]:
        """Append the records as one batch to queue ``partition``; wait until applied; their offsets."""
        encoded = [r.encode() for r in records]
        result = self.store.put_messages(KV_TOPIC, partition, [b for _, b in encoded], [p for p, _ in encoded],
                                         body_limit=MAX_BODY_BYTES)
        assert result.status is PutMessageStatus.PUT_OK, result.error
        assert self.store.wait_dispatched(result.append.end_offset)
        assert self.kv.applied_offset >= result.append.end_offset
        return result.append.physical_offsets

    def other(self, topic: str = "OtherTopic", queue_id: int = 0, body: bytes = b"payload") -> int:
        result = self.store.put_messages(topic, queue_id, [body], [b""])
        assert result.ok
        assert self.store.wait_dispatched(result.append.end_offset)
        return result.append.end_offset

    def end(self) -> int:
        return self.store.commit_log.max_offset()

    def stop(self, close_state: bool = True) -> None:
        self.store.shutdown()
        if close_state:
            self.state.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    """Stops (and closes) at the end whatever a test left running."""
    started: list[Node] = []
    yield started
    for node in started:
        node.store.shutdown()
        node.state.close()


def start(nodes: list[Node], *args, **kw) -> Node:
    node = Node(*args, **kw)
    nodes.append(node)
    return node


def put(key: bytes, value: bytes) -> KvRecord:
    return KvRecord(KvOp.PUT, key, value)


def delete(key: bytes) -> KvRecord:
    return KvRecord(KvOp.DELETE, key)


def cas(key: bytes, value: bytes, expected: bytes | None = None, base: bytes | None = None) -> KvRecord:
    return KvRecord(KvOp.CAS, key, value, expected, base)


# -- plain ops ---------------------------------------------------------------------------------------------
def test_put_delete_apply_per_partition(tmp_path: Path, backend: str, nodes: list[Node]):
    node = start(nodes, tmp_path, backend)
    node.put(0, put(b"a", b"1"))
    node.put(1, put(b"a", b"other-partition"))
    node.put(0, put(b"b", b""), put(b"\xff\x00", b"\x00\x01"))
    node.put(0, delete(b"b"))
    node.put(0, delete(b"never-there"))
    state = node.state
    assert state.get(0, [b"a", b"b", b"\xff\x00", b"never-there", b"x"]) == [
        present(b"1"), DELETED, present(b"\x00\x01"), DELETED, None]
    assert state.get(1, [b"a", b"b"]) == [present(b"other-partition"), None]
    assert node.kv.applied_ops == 6
    node.put(0, put(b"a", b"2"), delete(b"a"), put(b"a", b"3"))  # last write in a batch wins
    assert state.get(0, [b"a"]) == [present(b"3")]
    assert node.kv.take_outcome(node.put(0, put(b"a", b"4"))[0]) is None  # puts leave no outcome


def test_other_topics_are_ignored_but_move_the_applied_offset(tmp_path: Path, backend: str, nodes: list[Node]):
    node = start(nodes, tmp_path, backend)
    node.put(0, put(b"a", b"1"))
    stored = node.state.snapshot(0)[0]
    # a body that would decode as a KV record if topics were not checked
    props, body = put(b"a", b"evil").encode()
    result = node.store.put_messages("NotKv", 0, [body], [props])
    assert result.ok and node.store.wait_dispatched(result.append.end_offset)
    end = node.other()
    assert node.state.get(0, [b"a"]) == [present(b"1")]
    assert node.kv.applied_offset == end and node.kv.applied_ops == 1
    assert node.applied_seen[-1] == end
    assert node.state.snapshot(0)[0] == stored  # nothing written for other topics ...
    node.kv.flush()  # ... until a flush moves the mark past them
    assert node.state.snapshot(0)[0] == end


def test_apply_listeners_see_increasing_offsets(tmp_path: Path, backend: str, nodes: list[Node]):
    node = start(nodes, tmp_path, backend)
    for i in range(20):
        node.put(i % 3, put(b"k%d" % i, b"v"))
        node.other()
    assert node.applied_seen == sorted(node.applied_seen)
    assert node.applied_seen[-1] == node.end() == node.kv.applied_offset


# -- CAS ---------------------------------------------------------------------------------------------------
CAS_CASES = [
    # (setup ops in partition 0, the CAS, applied?, raw state after)
    pytest.param([], cas(b"k", b"new"), True, present(b"new"), id="expect-absent-and-absent"),
    pytest.param([put(b"k", b"old")], cas(b"k", b"new"), False, present(b"old"), id="expect-absent-but-present"),
    pytest.param([put(b"k", b"old"), delete(b"k")], cas(b"k", b"new"), True, present(b"new"),
                 id="expect-absent-and-deleted"),
    pytest.param([put(b"k", b"old")], cas(b"k", b"new", b"old"), True, present(b"new"), id="expected-matches"),
    pytest.param([put(b"k", b"old")], cas(b"k", b"new", b"other"), False, present(b"old"), id="expected-differs"),
    pytest.param([], cas(b"k", b"new", b"old"), False, None, id="expected-but-absent"),
    pytest.param([put(b"k", b"x"), delete(b"k")], cas(b"k", b"new", b"x"), False, DELETED, id="expected-but-deleted"),
    pytest.param([put(b"k", b"")], cas(b"k", b"new", b""), True, present(b"new"), id="expected-empty-value"),
    pytest.param([put(b"k", b"")], cas(b"k", b"new"), False, present(b""), id="empty-value-is-not-absent"),
    pytest.param([], cas(b"k", b"", b""), False, None, id="absent-is-not-empty-value"),
    # the base stands in only for a key the partition never saw
    pytest.param([], cas(b"k", b"new", b"b", present(b"b")), True, present(b"new"), id="base-matches"),
    pytest.param([], cas(b"k", b"new", b"x", present(b"b")), False, present(b"b"), id="base-differs"),
    pytest.param([], cas(b"k", b"new", None, present(b"b")), False, present(b"b"), id="base-present-expect-absent"),
    pytest.param([], cas(b"k", b"new", None, DELETED), True, present(b"new"), id="base-deleted-expect-absent"),
    pytest.param([], cas(b"k", b"new", b"b", DELETED), False, DELETED, id="base-deleted-expected-value"),
    pytest.param([put(b"k", b"mine")], cas(b"k", b"new", b"mine", present(b"b")), True, present(b"new"),
                 id="partition-beats-base-matching"),
    pytest.param([put(b"k", b"mine")], cas(b"k", b"new", b"b", present(b"b")), False, present(b"mine"),
                 id="partition-beats-base-not-matching"),
    pytest.param([put(b"k", b"x"), delete(b"k")], cas(b"k", b"new", b"b", present(b"b")), False, DELETED,
                 id="tombstone-beats-base"),
    pytest.param([put(b"k", b"x"), delete(b"k")], cas(b"k", b"new", None, present(b"b")), True, present(b"new"),
                 id="tombstone-beats-base-expect-absent"),
    pytest.param([put(b"other", b"b")], cas(b"k", b"new", b"b"), False, None, id="other-key-does-not-count"),
]


@pytest.mark.parametrize(("setup", "record", "applied", "after"), CAS_CASES)
def test_cas_outcomes(tmp_path: Path, backend: str, nodes: list[Node], setup: list[KvRecord], record: KvRecord,
                      applied: bool, after: bytes | None):
    node = start(nodes, tmp_path, backend)
    for op in setup:
        node.put(0, op)
    node.put(1, put(b"k", b"b"))  # another partition's state never counts
    physical = node.put(0, record)[0]
    outcome = node.kv.take_outcome(physical)
    assert outcome == CasOutcome(applied, after)
    assert node.kv.take_outcome(physical) is None  # taken once
    stored = None  # what the partition held before the CAS
    for op in setup:
        if op.key == b"k":
            stored = present(op.value) if op.op is KvOp.PUT else DELETED
    assert node.state.get(0, [b"k"]) == [after if applied else stored]
    assert node.state.get(1, [b"k"]) == [present(b"b")]


def test_cas_not_applied_writes_nothing_and_base_is_not_stored(tmp_path: Path, backend: str, nodes: list[Node]):
    node = start(nodes, tmp_path, backend)
    physical = node.put(0, cas(b"k", b"new", b"x", present(b"b")))[0]
    assert node.kv.take_outcome(physical) == CasOutcome(False, present(b"b"))
    assert node.state.get(0, [b"k"]) == [None]
    assert node.state.partition_sizes() == {}
    # the base keeps deciding while the partition has nothing for the key
    physical = node.put(0, cas(b"k", b"new", b"b", present(b"b")))[0]
    assert node.kv.take_outcome(physical) == CasOutcome(True, present(b"new"))
    physical = node.put(0, cas(b"k", b"newer", b"b", present(b"b")))[0]  # now the partition decides
    assert node.kv.take_outcome(physical) == CasOutcome(False, present(b"new"))


def test_cas_inside_one_batch_sees_earlier_records_of_the_batch(tmp_path: Path, backend: str, nodes: list[Node]):
    node = start(nodes, tmp_path, backend)
    node.put(0, put(b"k", b"start"))
    records = [
        put(b"k", b"a"),
        cas(b"k", b"b", b"a"),  # applied: sees the put above, not "start"
        cas(b"k", b"c", b"a"),  # not applied: k is b now
        delete(b"k"),
        cas(b"k", b"d", None, present(b"base")),  # applied: the batch's tombstone beats the base
        cas(b"k", b"e", b"d"),
        cas(b"j", b"j1", b"base", present(b"base")),  # applied via base
        cas(b"j", b"j2", b"base", present(b"base")),  # not applied: j1 was written in this batch
    ]
    offsets = node.put(0, *records)
    outcomes = [node.kv.take_outcome(p) for p in offsets]
    assert outcomes == [None, CasOutcome(True, present(b"b")), CasOutcome(False, present(b"b")), None,
                        CasOutcome(True, present(b"d")), CasOutcome(True, present(b"e")),
                        CasOutcome(True, present(b"j1")), CasOutcome(False, present(b"j1"))]
    assert node.state.get(0, [b"k", b"j"]) == [present(b"e"), present(b"j1")]


def test_outcomes_are_bounded(tmp_path: Path, backend: str, nodes: list[Node], monkeypatch: pytest.MonkeyPatch):
    from broker.kv import kv_dispatcher

    monkeypatch.setattr(kv_dispatcher, "MAX_KEPT_OUTCOMES", 5)
    node = start(nodes, tmp_path, backend)
    offsets = [node.put(0, cas(b"k%d" % i, b"v"))[0] for i in range(8)]
    assert [node.kv.take_outcome(p) is not None for p in offsets] == [False] * 3 + [True] * 5


# -- replay ------------------------------------------------------------------------------------------------
def random_ops(rnd: random.Random, count: int) -> list[tuple[int, list[KvRecord]]]:
    """Batches of mostly CAS ops on few keys and values, so outcomes depend on order."""
    keys, values = [b"k%d" % i for i in range(6)], [b"", b"a", b"b", b"c"]
    batches = []
    for _ in range(count):
        records = []
        for _ in range(rnd.choice((1, 1, 1, 2, 5))):
            key, value = rnd.choice(keys), rnd.choice(values)
            roll = rnd.random()
            if roll < 0.1:
                records.append(put(key, value))
            elif roll < 0.2:
                records.append(delete(key))
            else:
                expected = None if rnd.random() < 0.25 else rnd.choice(values)
                base = rnd.choice((None, None, DELETED, *(present(v) for v in values)))
                records.append(cas(key, value, expected, base))
        batches.append((rnd.choice((0, 1, 2)), records))
    return batches


def run_ops(node: Node, batches: list[tuple[int, list[KvRecord]]], rnd: random.Random) -> dict[int, CasOutcome]:
    outcomes = {}
    for partition, records in batches:
        for physical, record in zip(node.put(partition, *records), records, strict=True):
            if record.op is KvOp.CAS:
                outcome = node.kv.take_outcome(physical)
                assert outcome is not None
                outcomes[physical] = outcome
        if rnd.random() < 0.1:
            node.other()
    return outcomes


def collect(node: Node, offsets: list[int]) -> dict[int, CasOutcome | None]:
    return {p: node.kv.take_outcome(p) for p in offsets}


def test_replay_into_fresh_state_is_deterministic(tmp_path: Path, backend: str, nodes: list[Node]):
    rnd = random.Random(11)
    node = start(nodes, tmp_path, backend)
    outcomes = run_ops(node, random_ops(rnd, 150), rnd)
    assert any(o.applied for o in outcomes.values()) and not all(o.applied for o in outcomes.values())
    original, end, ops = dump(node.state), node.end(), node.kv.applied_ops
    node.stop()
    nodes.remove(node)

    shutil.rmtree(tmp_path / "kv")  # the state is gone: everything replays from the commitlog
    again = start(nodes, tmp_path, backend)
    assert again.kv.applied_offset == end
    assert again.kv.applied_ops == ops
    assert dump(again.state) == original
    assert collect(again, list(outcomes)) == outcomes  # the same CAS decisions
    # and a different backend replays to the same state too
    other_backend = "memory" if backend == "rocksdb" else "rocksdb"
    again.stop()
    nodes.remove(again)
    third = start(nodes, tmp_path, backend, state=make_state(other_backend, tmp_path / "kv-other"))
    assert dump(third.state) == original
    assert collect(third, list(outcomes)) == outcomes


def test_replay_over_existing_state_skips_applied_records(tmp_path: Path, backend: str, nodes: list[Node]):
    rnd = random.Random(12)
    node = start(nodes, tmp_path, backend)
    outcomes = run_ops(node, random_ops(rnd, 80), rnd)
    original, end = dump(node.state), node.end()
    node.stop()
    nodes.remove(node)

    recorder = Recorder(checkpoint=0)  # forces a re-dispatch of the whole commitlog
    again = start(nodes, tmp_path, backend, extra=recorder)
    assert recorder.batches and recorder.batches[0][0][0][3] == 0  # really replayed from the start
    assert again.kv.applied_offset == end
    assert again.kv.applied_ops == 0  # nothing applied twice
    assert dump(again.state) == original
    assert all(v is None for v in collect(again, list(outcomes)).values())
    # and it goes on from there
    physical = again.put(0, cas(b"fresh", b"v"))[0]
    assert again.kv.take_outcome(physical) == CasOutcome(True, present(b"v"))
    assert again.kv.applied_ops == 1


def test_restart_from_lagging_state_reapplies_exactly_the_tail(tmp_path: Path, backend: str, nodes: list[Node]):
    rnd = random.Random(13)
    node = start(nodes, tmp_path, backend)
    run_ops(node, random_ops(rnd, 60), rnd)
    head_end = node.end()
    node.stop()
    nodes.remove(node)
    shutil.copytree(tmp_path / "kv", tmp_path / "kv-lagging")  # state as of head_end

    node = start(nodes, tmp_path, backend)
    assert node.kv.applied_offset == head_end
    tail_batches = random_ops(rnd, 60)
    # an order-sensitive pair: replayed over the final state it would decide differently
    tail_batches += [(0, [put(b"z", b"a")]), (0, [cas(b"z", b"d", b"c"), cas(b"z", b"c", b"a")])]
    tail = run_ops(node, tail_batches, rnd)
    tail_ops = node.kv.applied_ops
    final, end = dump(node.state), node.end()
    assert node.state.get(0, [b"z"]) == [present(b"c")]
    node.stop()
    nodes.remove(node)

    recorder = Recorder(checkpoint=0)
    lagging = start(nodes, tmp_path, backend, state_root=tmp_path / "kv-lagging", extra=recorder)
    assert lagging.kv.applied_offset == end
    assert lagging.kv.applied_ops == tail_ops  # exactly the tail, once
    assert dump(lagging.state) == final
    assert collect(lagging, list(tail)) == tail


def test_batch_straddling_the_applied_offset(tmp_path: Path, backend: str, nodes: list[Node]):
    """Dispatch batches replayed after a restart may start below the applied offset: only the records at or
    past it apply (driven by hand with batches captured from a real store)."""
    recorder = Recorder()
    node = start(nodes, tmp_path, backend, extra=recorder)
    node.put(0, put(b"k", b"a"))
    node.put(0, cas(b"k", b"b", b"a"), cas(b"k", b"c", b"b"))
    node.other()
    node.put(0, cas(b"k", b"d", b"c"))
    requests = [r for batch, _ in recorder.batches for r in batch]
    end = recorder.batches[-1][1]
    kv_physical = [r[3] for r in requests if r[0] == KV_TOPIC]
    assert len(kv_physical) == 4

    state = make_state(backend, tmp_path / "manual")
    manual = KvCommitLogDispatcher(state, node.store.commit_log.read_at)
    manual.load()
    try:
        manual.dispatch(requests[:2], kv_physical[2])  # applied up to the middle of the CAS batch
        assert state.get(0, [b"k"]) == [present(b"b")]
        assert manual.applied_offset == kv_physical[2]
        manual.dispatch(requests, end)  # the whole log again, from the start
        assert manual.applied_ops == 4
        assert state.get(0, [b"k"]) == [present(b"d")]
        assert manual.take_outcome(kv_physical[1]) == CasOutcome(True, present(b"b"))  # from the first dispatch
        assert manual.take_outcome(kv_physical[2]) == CasOutcome(True, present(b"c"))
        assert manual.take_outcome(kv_physical[3]) == CasOutcome(True, present(b"d"))
        manual.dispatch(requests, end)  # at or below the applied offset: nothing
        manual.dispatch([], end)
        assert manual.applied_ops == 4
        assert manual.applied_offset == end
        assert state.snapshot(0)[0] == end
    finally:
        state.close()


@pytest.mark.parametrize("how", ["per-segment", "whole-log", "span-limit"])
def test_dispatches_spanning_other_topics_and_segments(tmp_path: Path, backend: str, nodes: list[Node],
                                                       monkeypatch: pytest.MonkeyPatch, how: str):
    """A dispatch's bodies are read in one piece when it lies in one segment and is small (per-segment: other
    topics' records between), else one read per record (whole-log: it runs into the next segments; span-limit:
    spread further than the limit); every way applies the same state."""
    if how == "span-limit":
        monkeypatch.setattr(kv_dispatcher, "MAX_SPAN_BYTES", 1)
    recorder = Recorder()
    node = start(nodes, tmp_path, backend, extra=recorder)
    for i in range(120):  # ~1.1 KiB each: three 64 KiB segments
        node.put(i % 2, put(b"k%d" % (i % 7), b"v%d-" % i + b"x" * 1000), delete(b"gone"))
        if i % 10 == 0:
            node.other(body=b"o" * 3000)
    segment_size = node.store.config.mapped_file_size_commit_log
    assert node.end() > 2 * segment_size, "the log must span segments"
    requests = [r for batch, _ in recorder.batches for r in batch]
    if how == "whole-log":
        dispatches = [(requests, node.end())]
    else:
        by_segment: dict[int, list[DispatchRequest]] = {}
        for r in requests:
            by_segment.setdefault(r[3] // segment_size, []).append(r)
        dispatches = [(batch, batch[-1][3] + batch[-1][4]) for batch in by_segment.values()]
        assert all(any(r[0] != KV_TOPIC for r in batch) for batch, _ in dispatches[:2])

    state = make_state(backend, tmp_path / "manual")
    manual = KvCommitLogDispatcher(state, node.store.commit_log.read_at)
    manual.load()
    try:
        for batch, end in dispatches:
            manual.dispatch(batch, end)
        assert manual.applied_ops == 240
        assert dump(state) == dump(node.state)
        assert state.get(1, [b"k6"]) == [present(b"v111-" + b"x" * 1000)]  # 111: the last i with i%7=6, i%2=1
        assert state.get(0, [b"gone"]) == [DELETED]
    finally:
        state.close()


def test_a_span_mostly_of_other_topics_is_not_copied(tmp_path: Path, backend: str, nodes: list[Node]):
    """Puts with 40 KiB of another topic between them, dispatched together: each body is read alone, not the span
    between them; a batch of puts side by side alone is one read."""
    recorder = Recorder()
    node = start(nodes, tmp_path, backend, extra=recorder)
    node.put(0, put(b"a", b"1"))
    node.other(body=b"o" * 40_000)
    node.put(0, put(b"b", b"2"), put(b"c", b"3"))
    requests = [r for batch, _ in recorder.batches for r in batch]
    reads: list[int] = []

    def read_at(offset: int, size: int) -> bytes:
        reads.append(size)
        return node.store.commit_log.read_at(offset, size)

    for name, dispatched, expected_reads in (("all", requests, 3), ("pair", requests[-2:], 1)):
        reads.clear()
        state = make_state(backend, tmp_path / name)
        manual = KvCommitLogDispatcher(state, read_at)
        manual.load()
        try:
            manual.dispatch(dispatched, node.end())
            assert len(reads) == expected_reads and max(reads) < 1000
            assert state.get(0, [b"b", b"c"]) == [present(b"2"), present(b"3")]
        finally:
            state.close()


# -- durability --------------------------------------------------------------------------------------------
def test_checkpoint_lags_until_the_state_is_flushed(tmp_path: Path, backend: str, nodes: list[Node]):
    node = start(nodes, tmp_path, backend)
    node.put(0, put(b"a", b"1"))
    node.kv.flush()  # not due (long interval)
    assert node.kv.checkpoint() == 0
    assert node.kv.applied_offset == node.end()
    node.state.flush(force=True)  # type: ignore[call-arg]
    node.kv.flush()
    assert node.kv.checkpoint() == node.end()
    node.put(0, put(b"a", b"2"))
    end = node.other()
    node.kv.flush()
    assert node.kv.checkpoint() < end  # lags again
    assert node.state.snapshot(0)[0] == end  # though the stored mark moved past the other topic


def test_memory_crash_restart_replays_from_the_last_snapshot(tmp_path: Path, nodes: list[Node]):
    rnd = random.Random(21)
    node = start(nodes, tmp_path, "memory")
    run_ops(node, random_ops(rnd, 40), rnd)
    node.state.flush(force=True)  # type: ignore[call-arg]
    node.kv.flush()
    snapshot_at = node.kv.checkpoint()
    assert snapshot_at == node.end()
    ops_before = node.kv.applied_ops
    tail = run_ops(node, random_ops(rnd, 40), rnd)
    tail_ops = node.kv.applied_ops - ops_before
    final, end = dump(node.state), node.end()
    node.stop(close_state=False)  # "crash" of the KV state: the store's final flush is not a snapshot
    nodes.remove(node)
    assert node.kv.checkpoint() == snapshot_at < end

    again = start(nodes, tmp_path, "memory")  # a new state store over the same (old) snapshot file
    assert again.kv.applied_offset == end
    assert again.kv.applied_ops == tail_ops  # only what the snapshot lacked
    assert dump(again.state) == final
    assert collect(again, list(tail)) == tail


def test_memory_crash_without_any_snapshot_replays_everything(tmp_path: Path, nodes: list[Node]):
    rnd = random.Random(22)
    node = start(nodes, tmp_path, "memory")
    outcomes = run_ops(node, random_ops(rnd, 40), rnd)
    final, ops = dump(node.state), node.kv.applied_ops
    node.stop(close_state=False)
    nodes.remove(node)
    again = start(nodes, tmp_path, "memory")
    assert again.kv.applied_ops == ops
    assert dump(again.state) == final
    assert collect(again, list(outcomes)) == outcomes


# -- concurrency of flush and dispatch ---------------------------------------------------------------------
class _Interleave:
    """Starts ``action`` on another thread (the reput thread) once, right before the wrapped call proceeds,
    and gives it time to get as far as it can: an interleaving as close to exact as locks allow."""

    def __init__(self, action) -> None:
        self.action = action
        self.thread: threading.Thread | None = None

    def fire(self) -> None:
        action, self.action = self.action, None
        if action is not None:
            self.thread = threading.Thread(target=action)
            self.thread.start()
            self.thread.join(0.3)  # unguarded code finishes in this time; guarded code waits for the lock


class _HookedLock:
    def __init__(self, lock, hook: _Interleave) -> None:
        self._lock, self._hook = lock, hook

    def __enter__(self):
        self._hook.fire()
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)


class _HookedDb:
    def __init__(self, db, hook: _Interleave) -> None:
        self._db, self._hook = db, hook

    def write(self, *args, **kw):
        self._hook.fire()
        return self._db.write(*args, **kw)

    def __getattr__(self, name):
        return getattr(self._db, name)


def test_flush_racing_a_dispatch_never_moves_the_applied_offset_back(tmp_path: Path, backend: str,
                                                                       nodes: list[Node]):
    """The dispatcher flush service calls ``flush`` on its own thread while the reput thread dispatches.
    Interleaving: flush reads the applied offset after a batch without KV records and starts writing that
    mark; the reput thread applies the next KV batch; flush's older mark lands last. The stored applied
    offset must not go back behind state that is already written (a restart would apply the batch twice)."""
    recorder = Recorder()
    node = start(nodes, tmp_path, backend, extra=recorder)
    node.put(0, put(b"z", b"a"))
    node.other()
    node.put(0, cas(b"z", b"d", b"c"), cas(b"z", b"c", b"a"))  # z: c; applied twice it would end as d
    (kv1, end1), (other, end2), (kv3, end3) = recorder.batches[-3:]

    state = make_state(backend, tmp_path / "raced")
    kv = KvCommitLogDispatcher(state, node.store.commit_log.read_at)
    kv.load()
    kv.dispatch(kv1, end1)
    kv.dispatch(other, end2)  # applied end2, stored end1: the next flush writes the mark
    hook = _Interleave(lambda: kv.dispatch(kv3, end3))  # the reput thread gets in
    if backend == "memory":
        state._lock = _HookedLock(state._lock, hook)  # after apply's offset check, before its write
    else:
        state._db = _HookedDb(state._db, hook)
    kv.flush()  # (on the flush service's thread in the broker)
    assert hook.action is None and hook.thread is not None
    hook.thread.join(10)
    assert kv.applied_offset == end3
    assert state.get(0, [b"z"]) == [present(b"c")]
    stored = state.snapshot(0)[0]
    state.close()

    # a restart replays from the stored offset
    replay = make_state(backend, tmp_path / "raced")
    again = KvCommitLogDispatcher(replay, node.store.commit_log.read_at)
    again.load()
    again.dispatch(kv3, end3)
    after_restart = replay.get(0, [b"z"])[0]
    replay.close()
    assert (stored, after_restart) == (end3, present(b"c")), \
        f"stored applied offset {stored} < {end3} (state already applied up to it); after restart z={after_restart}"

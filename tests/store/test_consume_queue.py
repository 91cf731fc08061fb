"""Consume queue: rebuild from the commitlog, search by time."""

import random
import shutil
from pathlib import Path

import pytest

from broker.store.config import StoreType
from broker.store.consume_queue.consume_queue_store import BoundaryType, CqUnit
from broker.store.consume_queue.file_consume_queue import UNIT_SIZE
from common.message_properties import encode_properties, tags_code
from tests.store.conftest import StoreFactory


def _queue_bytes(root: Path) -> dict[str, bytes]:
    out = {}
    for topic_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for queue_dir in sorted(topic_dir.iterdir()):
            data = b"".join(f.read_bytes() for f in sorted(queue_dir.iterdir()))
            used = -(-len(data.rstrip(b"\x00")) // UNIT_SIZE) * UNIT_SIZE  # a unit may end in zeros (no tag)
            out[f"{topic_dir.name}/{queue_dir.name}"] = data[:used]
    return out


def _queue_units(store) -> dict[tuple[str, int], list[CqUnit]]:
    """Every queue's units from min to max through the store-type-neutral read API."""
    cqs = store.consume_queue_store
    out = {}
    for (topic, queue_id), high in sorted(cqs.queue_max_offsets().items()):
        low = cqs.min_offset(topic, queue_id)
        units: list[CqUnit] = []
        while batch := cqs.read_units(topic, queue_id, low + len(units), 100):
            units.extend(map(CqUnit._make, batch))
        assert low + len(units) == high, (topic, queue_id, low, len(units), high)
        out[(topic, queue_id)] = units
    return out


def _store_times(store, queues) -> dict[tuple[str, int], list[int]]:
    """RocksDB keeps each unit's store time: all of them, per queue."""
    cqs = store.consume_queue_store
    return {(t, q): cqs.store_times(t, q, cqs.min_offset(t, q), cqs.max_offset(t, q)) for t, q in queues}


def test_rebuilt_consume_queue_is_identical(open_store: StoreFactory, tmp_path: Path, store_type: str):
    store = open_store()
    rng = random.Random(7)
    last = None
    for i in range(600):
        tags = rng.choice([None, "A", "B"])
        props = encode_properties({"TAGS": tags} if tags else {})
        last = store.put_messages(rng.choice(["CqA", "CqB"]), rng.randrange(4), [b"v" * rng.randrange(1, 900)],
                                  [props])
        assert last.ok, i
    store.wait_dispatched(last.append.end_offset)
    units = _queue_units(store)
    assert len(units) == 8 and all(units.values())
    assert sum(len(v) for v in units.values()) == 600
    assert {u.tags_code for v in units.values() for u in v} == {0, tags_code("A"), tags_code("B")}
    times = None
    if store_type is StoreType.DEFAULT_ROCKSDB:
        times = _store_times(store, units)
        assert times == {k: [store.commit_log.store_timestamp_at(u.physical_offset) for u in v]
                         for k, v in units.items()}
    store.shutdown()
    if store_type is StoreType.DEFAULT:
        cq_root = tmp_path / "store" / "consumequeue"
        original = _queue_bytes(cq_root)
        assert len(original) == 8 and all(original.values())
        assert sum(len(v) for v in original.values()) == 600 * UNIT_SIZE
    else:
        cq_root = tmp_path / "store" / "consumequeue_rocksdb"

    shutil.rmtree(cq_root)
    store = open_store()
    assert cq_root.is_dir()
    if store_type is StoreType.DEFAULT:
        assert _queue_bytes(cq_root) == original
    else:
        assert _store_times(store, units) == times
    assert _queue_units(store) == units  # entry by entry
    for q in range(4):  # and appends continue where the rebuilt queue ends
        before = store.max_offset("CqA", q)
        assert store.put_messages("CqA", q, [b"next"], [b""]).queue_offset == before


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_search_by_time_matches_brute_force(open_store: StoreFactory, seed: int):
    store = open_store()
    rng = random.Random(seed)
    for _ in range(300):  # bursts land many messages in one millisecond
        n = rng.choice([1, 1, 2, 8, 30])
        r = store.put_messages("TimeQ", 0, [b"t"] * n, [b""] * n)
    store.wait_dispatched(r.append.end_offset)
    units = []
    while batch := store.consume_queue_store.read_units("TimeQ", 0, len(units), 1000):
        units.extend(map(CqUnit._make, batch))
    times = [store.commit_log.store_timestamp_at(u.physical_offset) for u in units]
    assert len(times) == store.max_offset("TimeQ", 0) and times == sorted(times)
    assert len(set(times)) < len(times)  # the data really has ties
    probes = {times[0] - 5, times[-1] + 5, *rng.sample(times, 40), *(t + 1 for t in rng.sample(times, 20))}
    for ts in sorted(probes):
        lower = next((i for i, t in enumerate(times) if t >= ts), len(times))
        upper = max((i for i, t in enumerate(times) if t <= ts), default=0)
        assert store.offset_by_time("TimeQ", 0, ts, BoundaryType.LOWER) == lower, ts
        assert store.offset_by_time("TimeQ", 0, ts, BoundaryType.UPPER) == upper, ts


def test_unknown_queue_has_empty_bounds(open_store: StoreFactory):
    store = open_store()
    assert store.min_offset("Nope", 0) == store.max_offset("Nope", 0) == 0
    assert store.offset_by_time("Nope", 0, 123) == 0

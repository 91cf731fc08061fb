"""KV store acceptance against real daemons: linearizable compare-and-set under contention, durability across
SIGKILL, calls that wait for a restarting broker, snapshot export and import. Each runs in four modes that between
them cover both backends (kvStoreType), both flush modes, both store types, and a store created by kvInit or on
first use."""

import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import pytest

from client import Admin, KVClient, MQClientError
from client.static_route import VIRTUAL_BROKER_NAME
from common.kv_shard import DEFAULT_KV_SHARDS, KV_TOPIC, shard_of
from proto import kv_pb2
from tests.cluster import Cluster, Daemon, make_cluster, wait_until

SHARDS = 4  # what kvInit creates here; a store made on first use has DEFAULT_KV_SHARDS
SNAPSHOT_INTERVAL_MS = 500
# Clusters that restart use small commitlog segments: a restart zero-fills the rest of the last segment (1 GiB
# by default, seconds per restart), and the SIGKILL cycles then also recover across segment boundaries.
RESTART_SEGMENT_BYTES = 256 * 1024


@dataclass(frozen=True)
class KvMode:
    kv_type: str  # kvStoreType
    flush: str  # flushDiskType
    store_type: str  # storeType
    kv_init: bool  # False: no kvInit, the store provisions itself on first use

    @property
    def shards(self) -> int:
        return SHARDS if self.kv_init else DEFAULT_KV_SHARDS

    def __str__(self) -> str:
        return f"{self.kv_type}-{self.flush}-{self.store_type}-{'kvInit' if self.kv_init else 'firstUse'}"


KV_MODES = (
    KvMode("rocksdb", "ASYNC_FLUSH", "default", kv_init=True),
    KvMode("memory", "ASYNC_FLUSH", "defaultRocksDB", kv_init=False),
    KvMode("rocksdb", "SYNC_FLUSH", "defaultRocksDB", kv_init=False),
    KvMode("memory", "SYNC_FLUSH", "default", kv_init=True),
)


def kv_settings(mode: KvMode, **extra: object) -> dict[str, object]:
    return {"kvEnable": "true", "kvStoreType": mode.kv_type, "kvSnapshotInterval": SNAPSHOT_INTERVAL_MS,
            "flushDiskType": mode.flush, "storeType": mode.store_type, "registerNameServerPeriod": 1000, **extra}


def start_kv_cluster(workdir: Path, mode: KvMode, brokers: tuple[str, ...], **extra: object) -> Cluster:
    """Brokers with KV on; with ``mode.kv_init`` the shards are created up front, else by the first KV call."""
    cluster = make_cluster(workdir, brokers, **kv_settings(mode, **extra))
    if not mode.kv_init:
        return cluster
    try:
        with Admin(cluster.addr) as admin:
            admin.kv_init(SHARDS, cluster="DefaultCluster")
        with KVClient(cluster.addr) as kv:
            wait_until(lambda: _shards_or_zero(kv) == SHARDS, timeout=10, what="the KV route")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _shards_or_zero(kv: KVClient) -> int:
    try:
        return kv.shards(refresh=True)
    except MQClientError:
        return 0


def full_scan(kv: KVClient, prefix: bytes = b"", page: int = 337) -> list[tuple[bytes, bytes]]:
    """Every live entry with ``prefix``, paging with start_after; checks each page continues the last."""
    out: list[tuple[bytes, bytes]] = []
    after = b""
    while True:
        got = kv.scan(prefix, limit=page, start_after=after)
        keys = [k for k, _ in got]
        assert keys == sorted(set(keys)), "a scan page is not in strict key order"
        assert not got or got[0][0] > after, "a scan page repeats keys at or before start_after"
        out += got
        if len(got) < page:
            return out
        after = got[-1][0]


@pytest.fixture(scope="module", params=KV_MODES, ids=str)
def mode(request: pytest.FixtureRequest) -> KvMode:
    return request.param


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, mode: KvMode) -> Iterator[Cluster]:
    c = start_kv_cluster(tmp_path_factory.mktemp(f"kv-{mode}"), mode, ("broker-a", "broker-b"))
    yield c
    c.stop()


# -- 1. compare-and-set is linearizable ------------------------------------------------------------------
CAS_THREADS = 8
CAS_RUN_S = 2.0


def test_cas_counter_is_linearizable(cluster: Cluster):
    key = b"counter"
    with KVClient(cluster.addr) as kv:
        first = kv.cas(key, None, b"0")
        assert first.applied and first.current == b"0"
        again = kv.cas(key, None, b"0")  # the key exists now: an expect-absent swap must not apply
        assert not again.applied and again.current == b"0"

    applied_values: list[int] = []  # the value each successful swap wrote
    conflicts = [0]
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(CAS_THREADS)

    def bump(n: int) -> None:
        try:
            with KVClient(cluster.addr) as kv:
                mine, lost = [], 0
                start.wait()
                deadline = time.monotonic() + CAS_RUN_S
                while time.monotonic() < deadline:
                    old = kv.get(key)
                    assert old is not None
                    new = str(int(old) + 1).encode()
                    if n % 2:  # half the threads use the bool form, half the detailed one
                        if kv.compare_and_set(key, old, new):
                            mine.append(int(new))
                        else:
                            lost += 1
                        continue
                    result = kv.cas(key, old, new)
                    if result.applied:
                        assert result.current == new, (old, new, result)
                        mine.append(int(new))
                    else:
                        assert result.current is not None and result.current != old, (old, result)
                        lost += 1
            with lock:
                applied_values.extend(mine)
                conflicts[0] += lost
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=bump, args=(n,), name=f"cas-{n}") for n in range(CAS_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a CAS thread hung"
    assert not errors, errors

    with KVClient(cluster.addr) as kv:
        final = kv.get(key)
    successes = len(applied_values)
    assert successes > 0 and conflicts[0] > 0, f"no contention: {successes} swaps, {conflicts[0]} conflicts"
    assert final == str(successes).encode(), f"counter is {final!r} after {successes} successful swaps"
    # Each successful swap moved the counter by one from a distinct value: the swaps form one total order.
    assert sorted(applied_values) == list(range(1, successes + 1))


# -- 2. durability across SIGKILL ------------------------------------------------------------------------
KILL_CYCLES = 10
KILL_KEYS = 300
MEMORY_LOADED = re.compile(r"kv_memory_loaded keys=(\d+)")


@dataclass
class WriteModel:
    acked: dict[bytes, bytes] = field(default_factory=dict)  # key -> last acknowledged value
    unknown: dict[bytes, bytes] = field(default_factory=dict)  # key -> value of a put that raised
    seq: int = 0
    acked_this_cycle: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def write_until_failure(kv: KVClient, model: WriteModel, stop: threading.Event) -> None:
    """Put increasing values over KILL_KEYS names until a put fails (the broker died) or ``stop``."""
    while not stop.is_set():
        with model.lock:
            model.seq += 1
            seq = model.seq
        key, value = b"dur-%04d" % (seq % KILL_KEYS), b"%d" % seq
        try:
            kv.put(key, value)
        except MQClientError:
            with model.lock:
                model.unknown[key] = value
            return
        with model.lock:
            model.acked[key] = value
            model.acked_this_cycle += 1


def restart(cluster: Cluster, name: str) -> tuple[Daemon, str]:
    """Start ``name`` again on its store dir; returns the daemon and what it logged this time."""
    log_path = cluster.brokers[name].log_path
    before = log_path.stat().st_size if log_path.exists() else 0
    daemon = cluster.start_broker(name)

    def recovered() -> str:
        text = log_path.read_bytes()[before:].decode(errors="replace")
        return text if "store_recovered " in text else ""

    return daemon, wait_until(recovered, timeout=10, what=f"the store_recovered line of {name}")


@pytest.mark.slow
def test_acknowledged_puts_survive_sigkill(tmp_path: Path, mode: KvMode):
    cluster = start_kv_cluster(tmp_path, mode, ("broker-a",), mappedFileSizeCommitLog=RESTART_SEGMENT_BYTES)
    model = WriteModel()
    rng = random.Random(0xC0FFEE)
    all_keys = [b"dur-%04d" % i for i in range(KILL_KEYS)]
    restart_logs: list[str] = []
    try:
        for cycle in range(KILL_CYCLES):
            broker = cluster.brokers["broker-a"]
            stop = threading.Event()
            model.acked_this_cycle = 0
            # A short retry budget: once the broker is dead the in-flight put fails fast and stays "unknown".
            with KVClient(cluster.addr, rpc_timeout_ms=5000, retry_timeout_ms=100) as writer_kv:
                writer = threading.Thread(target=write_until_failure, args=(writer_kv, model, stop), daemon=True)
                writer.start()
                wait_until(lambda w=writer: model.acked_this_cycle > 0 or not w.is_alive(), timeout=15,
                           what=f"the first acknowledged put of cycle {cycle}")
                assert model.acked_this_cycle > 0, f"cycle {cycle}: the writer failed before any put was acked"
                # The kill lands at a random point of the write stream; every third cycle lets the broker live
                # past its first checkpoint and memory snapshot (flushed every second), so recovery must also
                # combine a snapshot with the commitlog written after it.
                time.sleep(rng.uniform(1.1, 1.5) if cycle % 3 == 2 else rng.uniform(0.2, 1.0))
                broker.kill()
                assert broker.proc.returncode == -9, broker.proc.returncode
                stop.set()
                writer.join(timeout=30)
                assert not writer.is_alive(), f"cycle {cycle}: the writer did not stop after the kill"

            _, restart_log = restart(cluster, "broker-a")
            assert "store_recovered mode=abnormal" in restart_log, \
                f"cycle {cycle}: restart after SIGKILL did not recover abnormally:\n{restart_log[-2000:]}"
            restart_logs.append(restart_log)

            with KVClient(cluster.addr) as kv:
                kv.shards(refresh=True)
                values = dict(zip(all_keys, kv.get_batch(all_keys), strict=True))
            for key, value in values.items():
                allowed = {model.acked.get(key), model.unknown.get(key, model.acked.get(key))}
                assert value in allowed, (f"cycle {cycle}: {key!r} holds {value!r}; last acknowledged "
                                          f"{model.acked.get(key)!r}, in flight {model.unknown.get(key)!r}")
                if value is not None:
                    model.acked[key] = value  # what the broker kept is now the known state
            model.unknown.clear()

        # After the last restart the full state equals the model: nothing extra, nothing missing.
        with KVClient(cluster.addr) as kv:
            assert dict(full_scan(kv, b"dur-")) == model.acked
        assert len(model.acked) > KILL_KEYS // 2, f"only {len(model.acked)} keys were ever written"
        if mode.kv_type == "memory":  # at least one restart started from a snapshot rather than an empty map
            loaded = [int(m.group(1)) for text in restart_logs for m in MEMORY_LOADED.finditer(text)]
            assert any(n > 0 for n in loaded), f"no restart loaded a memory snapshot: {loaded}"
    finally:
        cluster.stop()


# -- 3. a shard's broker restarting -----------------------------------------------------------------------


def test_calls_to_a_restarting_broker_s_shards_wait_for_it(cluster: Cluster, mode: KvMode):
    """A clean stop unregisters the broker: the route then names no leader for its shards. A put and a batched
    get of keys there, issued meanwhile, wait for the broker's return (within the client's retry timeout)
    instead of failing at once; what was stored before the stop is there after it."""
    with KVClient(cluster.addr) as kv, Admin(cluster.addr) as admin:
        total = kv.shards(refresh=True)
        leaders = admin.client.logic_leaders(KV_TOPIC, refresh=True)
        on_a = next(s for s in range(total) if leaders[s] == "broker-a")
        on_b = next(s for s in range(total) if leaders[s] == "broker-b")
        key_a, kept_a, key_b = (next(k for k in (b"restart-%s-%d" % (tag, i) for i in count())
                                     if shard_of(k, total) == shard)
                                for tag, shard in ((b"put", on_a), (b"kept", on_a), (b"b", on_b)))
        kv.put(kept_a, b"kept")
        kv.put(key_b, b"on-b")

        cluster.brokers["broker-a"].stop()
        wait_until(lambda: admin.client.logic_leaders(KV_TOPIC, refresh=True)[on_a] == VIRTUAL_BROKER_NAME,
                   timeout=10, what=f"shard {on_a} without a leader in the route")
        outcome: dict[str, object] = {}

        def call(name: str, fn: Callable[[], object]) -> threading.Thread:
            def run() -> None:
                try:
                    outcome[name] = fn()
                except BaseException as exc:
                    outcome[name] = exc
            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            return thread

        threads = [call("put", lambda: kv.put(key_a, b"during")), call("get", lambda: kv.get_batch([kept_a, key_b]))]
        restart(cluster, "broker-a")
        for thread in threads:
            thread.join(30)
        assert outcome == {"put": None, "get": [b"kept", b"on-b"]}, outcome
        assert kv.get_batch([key_a, kept_a, key_b]) == [b"during", b"kept", b"on-b"]


# -- 4. snapshot export and import -----------------------------------------------------------------------
SNAP_KEYS = 2000


def load_snapshot_data(kv: KVClient) -> tuple[list[bytes], dict[bytes, bytes]]:
    """~2,000 keys (a few binary), then some deleted and some overwritten; returns all keys and the live model."""
    keys = [b"snap/%05d" % i for i in range(SNAP_KEYS)] + [b"snap/\x00bin-%d\xff" % i for i in range(20)]
    model = {k: b"v1-" + k for k in keys}
    deleted = keys[::7]
    overwritten = [k for k in keys[3::5] if k not in set(deleted)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: kv.put(k, model[k]), keys))
        for k in overwritten:
            model[k] = b"v2-" + k + b"\x00" * 17
        list(pool.map(lambda k: kv.put(k, model[k]), overwritten))
        list(pool.map(kv.delete, deleted))
    for k in deleted:
        del model[k]
    kv.put(keys[0], b"resurrected")  # deleted, then written again
    model[keys[0]] = b"resurrected"
    return keys, model


def test_snapshot_export_import(tmp_path: Path, cluster: Cluster, mode: KvMode):
    shards = mode.shards
    with KVClient(cluster.addr) as src:
        keys, model = load_snapshot_data(src)
        source_scan = full_scan(src)
        assert {k: v for k, v in source_scan if k.startswith(b"snap/")} == model
        assert src.shards() == shards
        chunks = [src.export_snapshot(shard) for shard in range(shards)]
        exported = 0
        for shard, shard_chunks in enumerate(chunks):
            header = shard_chunks[0].header
            assert shard_chunks[0].HasField("header") and header.shard == shard and header.total_shards == shards
            entries = [e for c in shard_chunks[1:] for e in c.entries]
            assert [e.key for e in entries] == sorted(e.key for e in entries)
            assert all(shard_of(e.key, shards) == shard for e in entries)
            exported += len(entries)
        assert exported == len(source_scan)
        source_values = src.get_batch(keys)
    assert source_values == [model.get(k) for k in keys]

    dest = start_kv_cluster(tmp_path / "dest", mode, ("broker-x",), mappedFileSizeCommitLog=RESTART_SEGMENT_BYTES)
    try:
        with KVClient(dest.addr) as kv:
            assert full_scan(kv) == []
            imported = [kv.import_snapshot(shard_chunks) for shard_chunks in chunks]
            assert sum(imported) == len(source_scan)
            assert full_scan(kv) == source_scan
            assert kv.get_batch(keys) == source_values

            busy = next(c for c in chunks if any(chunk.entries for chunk in c))
            assert kv.import_snapshot(busy) == sum(len(chunk.entries) for chunk in busy)  # again: nothing to do
            other = [kv_pb2.KvSnapshotChunk.FromString(chunk.SerializeToString()) for chunk in busy]
            changed = next(chunk for chunk in other if chunk.entries)
            changed.entries[0].value = changed.entries[0].value + b"-other"
            with pytest.raises(MQClientError, match="already holds data"):
                kv.import_snapshot(other)  # the shard holds another value of that key
            assert full_scan(kv) == source_scan  # the refused import changed nothing

        # The imported entries went through the commitlog: they outlive a restart.
        dest.brokers["broker-x"].stop()
        dest.start_broker("broker-x")
        with KVClient(dest.addr) as kv:
            kv.shards(refresh=True)
            assert kv.get_batch(keys) == source_values
            assert full_scan(kv) == source_scan
    finally:
        dest.stop()

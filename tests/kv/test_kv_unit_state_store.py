"""KV state stores (RocksDB and in-memory): reads, scans, applied offset, snapshots, persistence."""

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.kv.kv_record import DELETED, present
from broker.kv.kv_state_store import KvStateStore, in_scan, prefix_end
from broker.kv.memory_kv_state_store import SNAPSHOT_FILE, MemoryKvStateStore
from broker.kv.rocksdb_kv_state_store import RocksDBKvStateStore

BACKENDS = ("rocksdb", "memory")
Opener = Callable[..., KvStateStore]


def make_state(backend: str, root: Path, **kw: float) -> KvStateStore:
    if backend == "memory":
        return MemoryKvStateStore(root, kw.get("interval", 3600.0))
    return RocksDBKvStateStore(root, kw.get("interval", 3600.0))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def open_state(tmp_path: Path, backend: str) -> Iterator[Opener]:
    """Opens (load) a state store on ``tmp_path / name``; closes what is still open at the end."""
    opened: list[KvStateStore] = []

    def factory(name: str = "kv", **kw: float) -> KvStateStore:
        state = make_state(backend, tmp_path / name, **kw)
        state.load()
        opened.append(state)
        return state

    yield factory
    for state in opened:
        state.close()


def brute_scan(model: dict[bytes, bytes], prefix: bytes, start_after: bytes, limit: int) -> list[tuple[bytes, bytes]]:
    return sorted((k, v) for k, v in model.items() if in_scan(k, prefix, start_after))[:limit]


# -- helpers of the interface module -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prefix", "end"),
    [
        (b"a", b"b"),
        (b"ab", b"ac"),
        (b"a\xff", b"b"),
        (b"a\xff\xff", b"b"),
        (b"\x00", b"\x01"),
        (b"\xfe", b"\xff"),
        (b"\xff", None),
        (b"\xff\xff\xff", None),
        (b"", None),
    ],
)
def test_prefix_end(prefix: bytes, end: bytes | None):
    assert prefix_end(prefix) == end


def test_prefix_end_bounds_every_extension():
    rnd = random.Random(7)
    for _ in range(500):
        prefix = bytes(rnd.choice((0, 1, 0x7F, 0xFE, 0xFF)) for _ in range(rnd.randint(1, 4)))
        end = prefix_end(prefix)
        for _ in range(5):
            ext = prefix + bytes(rnd.choice((0, 0xFF, 0x80)) for _ in range(rnd.randint(0, 3)))
            assert end is None or ext < end
        if end is not None:
            assert not end.startswith(prefix) and end > prefix


def test_in_scan():
    assert in_scan(b"ab", b"a", b"")
    assert not in_scan(b"ab", b"a", b"ab")
    assert in_scan(b"ab", b"a", b"aa\xff")
    assert not in_scan(b"b", b"a", b"")


# -- reads -------------------------------------------------------------------------------------------------
def test_empty_store(open_state: Opener):
    state = open_state()
    assert state.get(0, [b"a", b"b"]) == [None, None]
    assert state.get(3, []) == []
    assert state.scan(0, b"", b"", 10) == []
    assert state.partition_sizes() == {}
    offset, entries = state.snapshot(0)
    assert offset == 0 and list(entries) == []


def test_get_and_multi_get(open_state: Opener):
    state = open_state()
    state.apply({(0, b"a"): present(b"1"), (0, b"b"): DELETED, (0, b"\x00\xff"): present(b""),
                 (1, b"a"): present(b"other")}, 100)
    assert state.get(0, [b"a"]) == [present(b"1")]
    assert state.get(0, [b"b", b"missing", b"a", b"\x00\xff", b"a"]) == [
        DELETED, None, present(b"1"), present(b""), present(b"1")]
    assert state.get(1, [b"a", b"b"]) == [present(b"other"), None]
    assert state.get(2, [b"a"]) == [None]


def test_apply_overwrites_and_keeps_tombstones(open_state: Opener):
    state = open_state()
    state.apply({(0, b"k"): present(b"1")}, 10)
    state.apply({(0, b"k"): DELETED}, 20)
    assert state.get(0, [b"k"]) == [DELETED]
    assert state.scan(0, b"", b"", 10) == [(b"k", DELETED)]
    state.apply({(0, b"k"): present(b"2")}, 30)
    assert state.get(0, [b"k"]) == [present(b"2")]
    assert state.partition_sizes() == {0: 1}


def test_scan_prefix_start_after_limit(open_state: Opener):
    state = open_state()
    keys = [b"a", b"a\x00", b"ab", b"abc", b"abd", b"ac", b"b", b"ba", b"\xff", b"\xff\x00", b"\xff\xff",
            b"\xff\xff\xff", b"\x00"]
    model = {k: (DELETED if i % 4 == 3 else present(b"v%d" % i)) for i, k in enumerate(keys)}
    state.apply({(7, k): v for k, v in model.items()}, 1)
    cases = [
        (b"", b"", 100),
        (b"a", b"", 100),
        (b"ab", b"", 100),
        (b"ab", b"ab", 100),
        (b"ab", b"abc", 1),
        (b"a", b"ab\xff", 2),
        (b"a", b"\x00", 100),  # start_after below the prefix
        (b"a", b"b", 100),  # start_after past the prefix
        (b"\xff", b"", 100),
        (b"\xff\xff", b"", 100),
        (b"\xff\xff", b"\xff\xff", 100),
        (b"\xff", b"\xff\x00", 1),
        (b"", b"\xff\xff", 100),
        (b"zz", b"", 100),
        (b"", b"", 1),
        (b"", b"", 5),
    ]
    for prefix, start_after, limit in cases:
        assert state.scan(7, prefix, start_after, limit) == brute_scan(model, prefix, start_after, limit), \
            (prefix, start_after, limit)


def test_scan_returns_tombstones(open_state: Opener):
    state = open_state()
    state.apply({(0, b"a"): present(b"1"), (0, b"b"): DELETED, (0, b"c"): present(b"3")}, 5)
    assert state.scan(0, b"", b"", 10) == [(b"a", present(b"1")), (b"b", DELETED), (b"c", present(b"3"))]
    assert state.scan(0, b"", b"a", 1) == [(b"b", DELETED)]


def test_partitions_are_isolated(open_state: Opener):
    state = open_state()
    # neighbouring partition numbers and keys at the edges of the byte range
    writes = {}
    for partition in (0, 1, 255, 256, 65_536):
        for key in (b"\x00", b"k", b"\xff", b"\xff\xff"):
            writes[(partition, key)] = present(b"%d" % partition)
    state.apply(writes, 1)
    for partition in (0, 1, 255, 256, 65_536):
        expected = [(k, present(b"%d" % partition)) for k in (b"\x00", b"k", b"\xff", b"\xff\xff")]
        assert state.scan(partition, b"", b"", 100) == expected
        assert state.scan(partition, b"\xff", b"", 100) == expected[2:]
        assert state.scan(partition, b"\xff\xff", b"", 100) == expected[3:]
        assert state.scan(partition, b"", b"\xff\xff", 100) == []
        assert state.get(partition, [b"k"]) == [present(b"%d" % partition)]
    assert state.scan(2, b"", b"", 100) == []
    assert state.scan(257, b"\xff", b"", 100) == []
    assert state.partition_sizes() == {0: 4, 1: 4, 255: 4, 256: 4, 65_536: 4}


def test_scan_random_against_brute_force(open_state: Opener):
    rnd = random.Random(42)
    state = open_state()
    alphabet = (0x00, 0x01, 0x61, 0x62, 0xFE, 0xFF)
    models: dict[int, dict[bytes, bytes]] = {0: {}, 1: {}}
    offset = 0
    for _ in range(30):  # several applies so the memory backend's sorted index is rebuilt in between
        writes = {}
        for _ in range(rnd.randint(1, 20)):
            partition = rnd.choice((0, 1))
            key = bytes(rnd.choice(alphabet) for _ in range(rnd.randint(1, 4)))
            raw = DELETED if rnd.random() < 0.25 else present(bytes([rnd.randrange(256)]))
            writes[(partition, key)] = raw
            models[partition][key] = raw
        offset += rnd.randint(1, 100)
        state.apply(writes, offset)
        for _ in range(20):
            partition = rnd.choice((0, 1))
            prefix = bytes(rnd.choice(alphabet) for _ in range(rnd.randint(0, 2)))
            start_after = bytes(rnd.choice(alphabet) for _ in range(rnd.randint(0, 3)))
            limit = rnd.randint(1, 30)
            assert state.scan(partition, prefix, start_after, limit) == \
                brute_scan(models[partition], prefix, start_after, limit), (partition, prefix, start_after, limit)
    for partition, model in models.items():
        keys = list(model)
        assert state.get(partition, keys) == [model[k] for k in keys]
        assert state.partition_sizes()[partition] == len(model)


def test_scan_pages_cover_everything(open_state: Opener):
    state = open_state()
    model = {b"key-%04d" % i: present(b"%d" % i) for i in range(0, 500, 3)}
    state.apply({(0, k): v for k, v in model.items()}, 9)
    for limit in (1, 2, 7, 50, 1000):
        seen, cursor = [], b""
        while True:
            page = state.scan(0, b"key-", cursor, limit)
            seen += page
            if len(page) < limit:
                break
            cursor = page[-1][0]
        assert seen == sorted(model.items())


# -- applied offset ----------------------------------------------------------------------------------------
def test_applied_offset_persists_across_close_and_load(open_state: Opener, tmp_path: Path, backend: str):
    state = open_state()
    assert state.load is not None
    state.apply({(0, b"a"): present(b"1"), (3, b"b"): DELETED}, 1234)
    state.apply({}, 5678)  # the offset alone moves too
    state.close()
    again = make_state(backend, tmp_path / "kv")
    assert again.load() == 5678
    assert again.get(0, [b"a"]) == [present(b"1")]
    assert again.get(3, [b"b"]) == [DELETED]
    assert again.snapshot(0)[0] == 5678
    assert again.partition_sizes() == {0: 1, 3: 1}
    again.apply({(0, b"a"): present(b"2")}, 6000)
    again.close()
    third = make_state(backend, tmp_path / "kv")
    assert third.load() == 6000
    assert third.get(0, [b"a"]) == [present(b"2")]
    third.close()


def test_applied_offset_may_not_go_back(open_state: Opener):
    state = open_state()
    state.apply({(0, b"a"): present(b"1")}, 100)
    state.apply({}, 100)  # equal is fine
    with pytest.raises(AssertionError, match="went back"):
        state.apply({(0, b"a"): present(b"2")}, 99)
    assert state.get(0, [b"a"]) == [present(b"1")]  # nothing written
    assert state.snapshot(0)[0] == 100


def test_flush_is_due_by_interval_and_reports_durable(open_state: Opener):
    state = open_state(interval=3600.0)
    assert state.flush() == 0
    state.apply({(0, b"a"): present(b"1")}, 50)
    assert state.flush() == 0  # not due yet: durable lags
    assert state.flush(force=True) == 50  # type: ignore[call-arg]
    assert state.flush() == 50
    state.apply({(0, b"a"): present(b"2")}, 70)
    assert state.flush() == 50
    due = open_state("due", interval=0.0)
    due.apply({(0, b"a"): present(b"1")}, 80)
    assert due.flush() == 80


# -- snapshot ----------------------------------------------------------------------------------------------
def test_snapshot_is_isolated_from_later_writes(open_state: Opener):
    state = open_state()
    before = {b"a": present(b"1"), b"b": present(b"2"), b"c": DELETED, b"e": present(b"5"), b"\xff": present(b"f")}
    state.apply({(0, k): v for k, v in before.items()}, 100)
    state.apply({(1, b"a"): present(b"other")}, 110)
    offset, entries = state.snapshot(0)
    # writes after the snapshot: overwrite, delete, revive a tombstone, new keys before/between/after
    state.apply({(0, b"a"): present(b"changed"), (0, b"b"): DELETED, (0, b"c"): present(b"alive"),
                 (0, b"\x00"): present(b"new-first"), (0, b"d"): present(b"new-mid"),
                 (0, b"\xff\xff"): present(b"new-last"), (1, b"z"): present(b"z")}, 200)
    first = next(entries)
    state.apply({(0, b"e"): DELETED, (0, b"b"): present(b"again")}, 300)  # also while iterating
    assert offset == 110
    assert [first, *entries] == sorted(before.items())
    # a new snapshot sees the new state
    offset, entries = state.snapshot(0)
    assert offset == 300
    assert dict(entries) == {b"\x00": present(b"new-first"), b"a": present(b"changed"), b"b": present(b"again"),
                             b"c": present(b"alive"), b"d": present(b"new-mid"), b"e": DELETED,
                             b"\xff": present(b"f"), b"\xff\xff": present(b"new-last")}


def test_snapshot_of_many_keys_under_writes(open_state: Opener):
    rnd = random.Random(3)
    state = open_state()
    model = {b"k%05d" % rnd.randrange(100_000): present(b"v%d" % i) for i in range(2000)}
    state.apply({(4, k): v for k, v in model.items()}, 10)
    offset, entries = state.snapshot(4)
    got = []
    for n, entry in enumerate(entries):
        got.append(entry)
        if n % 100 == 0:
            writes = {(4, b"k%05d" % rnd.randrange(100_000)): present(b"later") for _ in range(50)}
            writes.update({(4, k): DELETED for k in rnd.sample(sorted(model), 20)})
            state.apply(writes, 10 + n + 1)
    assert offset == 10
    assert got == sorted(model.items())


# -- memory backend: snapshot file -------------------------------------------------------------------------
def test_memory_flush_writes_a_snapshot_that_load_restores(tmp_path: Path):
    root = tmp_path / "mem"
    state = MemoryKvStateStore(root, snapshot_interval_s=3600)
    assert state.load() == 0
    assert not (root / SNAPSHOT_FILE).exists()
    model = {(0, b"a"): present(b"1"), (0, b"b"): DELETED, (2, b"\xff" * 1024): present(b"x" * 70_000),
             (65_536, b"\x00"): present(b"")}
    state.apply(model, 777)
    assert state.flush() == 0 and not (root / SNAPSHOT_FILE).exists()  # not due
    assert state.flush(force=True) == 777
    assert (root / SNAPSHOT_FILE).exists() and not (root / "memory.tmp").exists()
    state.apply({(0, b"a"): present(b"after-snapshot")}, 900)  # never flushed: lost on "crash"

    restored = MemoryKvStateStore(root)
    assert restored.load() == 777
    for (partition, key), raw in model.items():
        assert restored.get(partition, [key]) == [raw]
    assert restored.scan(0, b"", b"", 10) == [(b"a", present(b"1")), (b"b", DELETED)]
    assert restored.partition_sizes() == {0: 2, 2: 1, 65_536: 1}
    assert restored.snapshot(2)[0] == 777


def test_memory_snapshot_written_when_due(tmp_path: Path):
    state = MemoryKvStateStore(tmp_path / "mem", snapshot_interval_s=0.0)
    state.load()
    state.apply({(0, b"a"): present(b"1")}, 5)
    assert state.flush() == 5
    assert MemoryKvStateStore(tmp_path / "mem").load() == 5


def test_memory_close_writes_the_snapshot(tmp_path: Path):
    state = MemoryKvStateStore(tmp_path / "mem", snapshot_interval_s=3600)
    state.load()
    state.apply({(1, b"k"): present(b"v")}, 42)
    state.close()
    again = MemoryKvStateStore(tmp_path / "mem")
    assert again.load() == 42 and again.get(1, [b"k"]) == [present(b"v")]


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda d: d[:-1] + bytes([d[-1] ^ 1]), id="crc-byte"),
        pytest.param(lambda d: d[:20] + bytes([d[20] ^ 0x40]) + d[21:], id="entry-byte"),
        pytest.param(lambda d: d[: len(d) // 2], id="truncated-half"),
        pytest.param(lambda d: d[:5], id="truncated-head"),
        pytest.param(lambda d: b"", id="empty"),
        pytest.param(lambda d: b"X" + d[1:], id="magic"),
    ],
)
def test_memory_corrupted_snapshot_fails_loudly(tmp_path: Path, corrupt: Callable[[bytes], bytes]):
    root = tmp_path / "mem"
    state = MemoryKvStateStore(root)
    state.load()
    state.apply({(0, b"a"): present(b"1"), (0, b"b"): present(b"2")}, 10)
    state.close()
    path = root / SNAPSHOT_FILE
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.raises(AssertionError):
        MemoryKvStateStore(root).load()


def test_memory_snapshot_with_bad_magic_and_valid_crc_fails(tmp_path: Path):
    import zlib

    from broker.kv.memory_kv_state_store import CRC, HEAD

    root = tmp_path / "mem"
    root.mkdir()
    data = HEAD.pack(b"NOTKVSNP", 5)
    (root / SNAPSHOT_FILE).write_bytes(data + CRC.pack(zlib.crc32(data)))
    with pytest.raises(AssertionError, match="not a KV snapshot"):
        MemoryKvStateStore(root).load()


def test_rocksdb_applied_offset_lags_until_flush(tmp_path: Path):
    state = RocksDBKvStateStore(tmp_path / "r", flush_interval_s=3600)
    assert state.load() == 0
    state.apply({(0, b"a"): present(b"1")}, 10)
    assert state.flush() == 0
    assert state.flush(force=True) == 10
    state.apply({(0, b"a"): present(b"2")}, 20)
    assert state.flush() == 10
    state.close()  # closing flushes
    again = RocksDBKvStateStore(tmp_path / "r")
    assert again.load() == 20
    assert again.get(0, [b"a"]) == [present(b"2")]
    again.close()
    again.close()  # idempotent


def test_get_each_reads_keys_of_several_partitions_in_request_order(open_state: Opener):
    state = open_state()
    state.apply({(0, b"a"): present(b"0a"), (1, b"a"): present(b"1a"), (1, b"b"): DELETED,
                 (7, b""): present(b"empty key")}, 10)
    partitions = [1, 0, 2, 1, 7, 0, 1]
    keys = [b"a", b"a", b"a", b"b", b"", b"b", b"a"]
    expected = [present(b"1a"), present(b"0a"), None, DELETED, present(b"empty key"), None, present(b"1a")]
    assert state.get_each(partitions, keys) == expected
    assert state.get_each(partitions, keys) == [state.get(p, [k])[0] for p, k in zip(partitions, keys, strict=True)]
    assert state.get_each([], []) == []

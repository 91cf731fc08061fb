"""KvChainReader over a chain of items: newest item decides a key, tombstones hide older values, pagination,
older_get filling only missing slots, merged_entries. Items are local partitions of one state store (and, in
a few tests, a fake peer broker answering PHYSICAL requests from its own state store)."""

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.kv.kv_chain_reader import KvChainReader, entry_state, to_entry
from broker.kv.kv_record import DELETED, PRESENT_TAG, present
from broker.kv.kv_state_store import KvStateStore, in_scan
from broker.kv.memory_kv_state_store import MemoryKvStateStore
from broker.kv.rocksdb_kv_state_store import RocksDBKvStateStore
from broker.out.peer_brokers import PeerBrokerError
from common.refusal import Refusal
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from proto import kv_pb2

BACKENDS = ("rocksdb", "memory")
ME = "broker-a"
Model = dict[bytes, bytes]


def make_state(backend: str, root: Path) -> KvStateStore:
    return MemoryKvStateStore(root) if backend == "memory" else RocksDBKvStateStore(root)


class FakePeers:
    """Answers PHYSICAL Get/Scan for other brokers from their own state stores, as the KV processor does."""

    def __init__(self, states: dict[str, KvStateStore]) -> None:
        self.states = states
        self.calls: list[tuple[str, str]] = []
        self.fail: str | None = None
        self.fail_code = ResponseCode.SYSTEM_ERROR
        self.answer_at_most: int | None = None  # keys a Get answers (the rest asked again), as a capped answer

    def call(self, bname: str, method: str, request, service=None, replica_ok: bool = False):
        self.calls.append((bname, method))
        if self.fail:
            return _response(method, code=self.fail_code, remark=self.fail)
        state = self.states[bname]
        if method == "Get":
            raws = state.get(request.queue_id, list(request.keys))[:self.answer_at_most]
            return kv_pb2.KvGetResponse(code=ResponseCode.SUCCESS, states=[r or b"" for r in raws])
        entries = state.scan(request.queue_id, request.prefix, request.start_after, request.limit)
        return kv_pb2.KvScanResponse(code=ResponseCode.SUCCESS, entries=[to_entry(k, r) for k, r in entries],
                                     exhausted=len(entries) < request.limit)


def _response(method: str, **kw):
    return kv_pb2.KvGetResponse(**kw) if method == "Get" else kv_pb2.KvScanResponse(**kw)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def states(tmp_path: Path, backend: str) -> Iterator[Callable[[str], KvStateStore]]:
    opened: list[KvStateStore] = []

    def factory(name: str) -> KvStateStore:
        state = make_state(backend, tmp_path / name)
        state.load()
        opened.append(state)
        return state

    yield factory
    for state in opened:
        state.close()


def item(queue_id: int, bname: str = ME, gen: int = 0) -> LogicQueueMappingItem:
    return LogicQueueMappingItem(gen=gen, queue_id=queue_id, bname=bname)


def no_peers():
    raise AssertionError("all items are local: no peer call expected")


def fill(state: KvStateStore, partition: int, model: Model, offset: int) -> None:
    state.apply({(partition, k): v for k, v in model.items()}, offset)


def brute_live(models_newest_first: list[Model], prefix: bytes = b"", start_after: bytes = b"") -> list:
    merged: Model = {}
    for model in models_newest_first:
        for k, v in model.items():
            merged.setdefault(k, v)
    return sorted((k, v) for k, v in merged.items() if v[0] == PRESENT_TAG and in_scan(k, prefix, start_after))


def check_scan(reader: KvChainReader, chain: list[LogicQueueMappingItem], expected_all: list, prefix: bytes,
               start_after: bytes, limit: int) -> list:
    entries, exhausted = reader.scan(chain, 0, prefix, start_after, limit)
    assert entries == expected_all[:limit], (prefix, start_after, limit)
    if len(expected_all) > limit:
        assert not exhausted, (prefix, start_after, limit)
    if exhausted:
        assert len(expected_all) <= limit, (prefix, start_after, limit)
    return entries


def paginate(reader: KvChainReader, chain: list[LogicQueueMappingItem], prefix: bytes, limit: int) -> list:
    """A client's loop: start after the last key until the reader says nothing follows."""
    out, cursor = [], b""
    for _ in range(10_000):
        entries, exhausted = reader.scan(chain, 0, prefix, cursor, limit)
        assert len(entries) <= limit
        out += entries
        if exhausted:
            return out
        if entries:
            cursor = entries[-1][0]
    raise AssertionError("pagination does not end")


# -- wire states --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [None, DELETED, present(b""), present(b"v"), present(b"\x00\xff")])
def test_entry_round_trip(raw: bytes | None):
    entry = to_entry(b"k", raw)
    assert entry.key == b"k"
    assert entry_state(entry) == raw


# -- scan ---------------------------------------------------------------------------------------------------
def test_scan_newest_item_decides(states):
    state = states("s")
    oldest = {b"a": present(b"a0"), b"b": present(b"b0"), b"c": present(b"c0"), b"d": present(b"d0"),
              b"g": present(b"g0")}
    middle = {b"b": present(b"b1"), b"c": DELETED, b"e": present(b"e1"), b"h": DELETED}
    newest = {b"a": DELETED, b"c": present(b"c2"), b"f": present(b"f2"), b"h": present(b"h2")}
    for partition, model in ((1, oldest), (2, middle), (3, newest)):
        fill(state, partition, model, partition)
    chain = [item(1), item(2), item(3)]
    reader = KvChainReader(state, no_peers, ME)
    entries, exhausted = reader.scan(chain, 0, b"", b"", 100)
    assert exhausted
    assert entries == [(b"b", present(b"b1")), (b"c", present(b"c2")), (b"d", present(b"d0")),
                       (b"e", present(b"e1")), (b"f", present(b"f2")), (b"g", present(b"g0")),
                       (b"h", present(b"h2"))]
    assert entries == brute_live([newest, middle, oldest])
    # a single-item chain is just that partition's live entries
    assert reader.scan([item(2)], 0, b"", b"", 100) == ([(b"b", present(b"b1")), (b"e", present(b"e1"))], True)
    # the chain's order matters, not the partition numbers
    assert reader.scan([item(3), item(1)], 0, b"", b"", 100)[0] == brute_live([oldest, newest])


def test_scan_skips_pages_of_tombstones(states):
    state = states("s")
    older = {b"k%03d" % i: present(b"old") for i in range(200)}
    newest = {b"k%03d" % i: DELETED for i in range(199)}  # everything deleted but the last key
    fill(state, 1, older, 1)
    fill(state, 2, newest, 2)
    reader = KvChainReader(state, no_peers, ME)
    chain = [item(1), item(2)]
    assert reader.scan(chain, 0, b"", b"", 3) == ([(b"k199", present(b"old"))], True)
    # a full answer may say "more may follow" (False) without it being so: the next page is then empty
    assert reader.scan(chain, 0, b"", b"", 1)[0] == [(b"k199", present(b"old"))]
    assert reader.scan(chain, 0, b"", b"k199", 1) == ([], True)
    assert reader.scan(chain, 0, b"k1", b"", 10) == ([(b"k199", present(b"old"))], True)


def test_scan_exhausted_flag(states):
    state = states("s")
    fill(state, 1, {b"a": present(b"1"), b"b": present(b"2")}, 1)
    fill(state, 2, {b"c": present(b"3")}, 2)
    reader = KvChainReader(state, no_peers, ME)
    chain = [item(1), item(2)]
    assert reader.scan(chain, 0, b"", b"", 3) == ([(b"a", present(b"1")), (b"b", present(b"2")),
                                                   (b"c", present(b"3"))], True)
    entries, exhausted = reader.scan(chain, 0, b"", b"", 2)
    assert entries == [(b"a", present(b"1")), (b"b", present(b"2"))] and not exhausted
    assert reader.scan(chain, 0, b"", b"b", 2) == ([(b"c", present(b"3"))], True)
    assert reader.scan(chain, 0, b"", b"c", 2) == ([], True)
    assert reader.scan(chain, 0, b"x", b"", 2) == ([], True)


def random_models(rnd: random.Random, count: int, keys: int) -> list[Model]:
    alphabet = (0x00, 0x61, 0x62, 0xFF)
    models = []
    for depth in range(count):
        model: Model = {}
        for _ in range(keys):
            key = bytes(rnd.choice(alphabet) for _ in range(rnd.randint(1, 4)))
            # newer items carry more tombstones
            model[key] = DELETED if rnd.random() < 0.15 + 0.2 * depth else present(b"%d-%d" % (depth, len(model)))
        models.append(model)
    return models  # oldest first


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_scan_pagination_against_brute_force(states, seed: int):
    rnd = random.Random(seed)
    state = states("s")
    models = random_models(rnd, 3, 80)
    partitions = rnd.sample(range(10), 3)
    for offset, (partition, model) in enumerate(zip(partitions, models, strict=True), 1):
        fill(state, partition, model, offset)
    chain = [item(p) for p in partitions]
    newest_first = models[::-1]
    reader = KvChainReader(state, no_peers, ME)
    every_key = sorted({k for m in models for k in m})
    for prefix in (b"", b"a", b"\xff", b"\x00a", b"b\xff"):
        full = brute_live(newest_first, prefix)
        for limit in (1, 2, 3, 5, 8, 13, 40, 500):
            assert paginate(reader, chain, prefix, limit) == full, (prefix, limit)
        for _ in range(25):
            start_after = rnd.choice([*every_key, b"", b"a", b"\xff\xff\xff\xff\xff"])
            limit = rnd.choice((1, 2, 4, 7, 30))
            check_scan(reader, chain, brute_live(newest_first, prefix, start_after), prefix, start_after, limit)


def test_scan_mixed_local_and_remote_items(tmp_path: Path, states):
    rnd = random.Random(5)
    mine, theirs = states("a"), states("b")
    models = random_models(rnd, 4, 60)
    # oldest on broker-b queue 0, then broker-a queue 0, broker-b queue 3, and the leader: broker-a queue 1
    placement = [("broker-b", 0), (ME, 0), ("broker-b", 3), (ME, 1)]
    for offset, ((bname, queue_id), model) in enumerate(zip(placement, models, strict=True), 1):
        fill(mine if bname == ME else theirs, queue_id, model, offset)
    peers = FakePeers({"broker-b": theirs})
    reader = KvChainReader(mine, lambda: peers, ME)
    chain = [item(q, b, gen) for gen, (b, q) in enumerate(placement)]
    full = brute_live(models[::-1])
    for limit in (1, 3, 10, 1000):
        assert paginate(reader, chain, b"", limit) == full
    assert set(peers.calls) == {("broker-b", "Scan")}
    # older_get reaches the remote items too
    keys = [*[k for m in models for k in m][:40], b"never"]
    found = reader.older_get(chain, keys, mine.get(1, keys))
    assert found == [brute_get(models[::-1], k) for k in keys]
    peers.fail = "down"
    with pytest.raises(PeerBrokerError, match="down"):
        reader.scan(chain, 0, b"", b"", 10)


def test_an_older_item_answering_part_of_a_get_is_asked_again_for_the_rest(tmp_path: Path, states):
    """An older item's answer is capped as any (224 MiB): a batch of large values it held failed for good after a
    remap (the KV review: 70 values of 4 MiB, "Sent message larger than max")."""
    mine, theirs = states("a"), states("b")
    model = {b"k%02d" % i: present(b"v%02d" % i) for i in range(10)}
    fill(theirs, 0, model, 1)
    peers = FakePeers({"broker-b": theirs})
    peers.answer_at_most = 3
    reader = KvChainReader(mine, lambda: peers, ME)
    keys = sorted(model)
    assert reader.older_get([item(0, "broker-b"), item(1)], keys, [None] * len(keys)) == [model[k] for k in keys]
    assert len(peers.calls) == 4


def test_an_older_item_whose_kv_store_is_off_is_refused_at_once_not_retried(tmp_path: Path, states):
    """Answered SYSTEM_BUSY, every get of a key it held waited the client's whole retry timeout (15 s) to fail."""
    peers = FakePeers({"broker-b": states("b")})
    peers.fail, peers.fail_code = "the KV store is off on broker broker-b (kvEnable=false)", \
        ResponseCode.SERVICE_NOT_AVAILABLE
    reader = KvChainReader(states("a"), lambda: peers, ME)
    with pytest.raises(Refusal, match="kvEnable=false") as refused:
        reader.older_get([item(0, "broker-b"), item(1)], [b"k"], [None])
    assert refused.value.code == ResponseCode.SERVICE_NOT_AVAILABLE and not isinstance(refused.value, PeerBrokerError)


def test_a_local_older_partition_is_read_once_its_writes_are_applied(states):
    """A shard moved away and back: its leader's older partition is on the same broker, and was read without
    waiting for a write it took before the move (the KV review: an acknowledged put hidden for good)."""
    state = states("s")
    fill(state, 0, {b"k": present(b"old")}, 1)
    pending = [True]

    def check_applied(partition: int) -> None:
        if pending[0] and partition == 0:
            raise Refusal(ResponseCode.SYSTEM_BUSY, "not applied yet")

    reader = KvChainReader(state, no_peers, ME, check_applied)
    chain = [item(0), item(1)]
    with pytest.raises(Refusal, match="not applied yet"):
        reader.older_get(chain, [b"k"], [None])
    with pytest.raises(Refusal, match="not applied yet"):
        reader.scan(chain, 0, b"", b"", 10)
    pending[0] = False
    assert reader.older_get(chain, [b"k"], [None]) == [present(b"old")]


def brute_get(models_newest_first: list[Model], key: bytes) -> bytes | None:
    for model in models_newest_first:
        if key in model:
            return model[key]
    return None


# -- older_get ----------------------------------------------------------------------------------------------
def test_older_get_fills_only_missing_slots(states):
    state = states("s")
    oldest = {b"a": present(b"a0"), b"b": present(b"b0"), b"c": present(b"c0"), b"d": present(b"d0")}
    middle = {b"b": DELETED, b"c": present(b"c1")}
    newest = {b"a": present(b"a2"), b"d": DELETED}
    for partition, model in ((5, oldest), (6, middle), (7, newest)):
        fill(state, partition, model, partition)
    reader = KvChainReader(state, no_peers, ME)
    chain = [item(5), item(6), item(7)]
    keys = [b"a", b"b", b"c", b"d", b"e", b"a"]
    found = state.get(7, keys)
    assert found == [present(b"a2"), None, None, DELETED, None, present(b"a2")]
    filled = reader.older_get(chain, keys, found)
    assert filled == [present(b"a2"), DELETED, present(b"c1"), DELETED, None, present(b"a2")]
    assert found == [present(b"a2"), None, None, DELETED, None, present(b"a2")]  # the input is not modified
    # slots already filled are never looked up again, even if older items disagree
    assert reader.older_get(chain, [b"b"], [present(b"given")]) == [present(b"given")]
    # a chain of one item has nothing older
    assert reader.older_get([item(7)], keys, found) == found
    assert reader.older_get(chain, [], []) == []


def test_older_get_stops_when_nothing_is_missing(tmp_path: Path, states):
    mine, theirs = states("a"), states("b")
    fill(mine, 1, {b"k": present(b"mine")}, 1)
    fill(mine, 0, {b"j": present(b"older-mine")}, 2)
    fill(theirs, 0, {b"j": present(b"theirs"), b"x": present(b"x")}, 1)
    peers = FakePeers({"broker-b": theirs})
    reader = KvChainReader(mine, lambda: peers, ME)
    chain = [item(0, "broker-b"), item(0), item(1)]
    assert reader.older_get(chain, [b"k", b"j"], mine.get(1, [b"k", b"j"])) == [present(b"mine"),
                                                                                 present(b"older-mine")]
    assert peers.calls == []  # the local older item answered everything
    assert reader.older_get(chain, [b"x", b"y"], [None, None]) == [present(b"x"), None]
    assert peers.calls == [("broker-b", "Get")]


# -- merged_entries -----------------------------------------------------------------------------------------
def test_merged_entries(states):
    rnd = random.Random(9)
    state = states("s")
    models = random_models(rnd, 3, 150)
    models[0].update({b"\x61\x61%04d" % i: present(b"bulk") for i in range(2100)})  # more than one page
    models[1].update({b"\x61\x61%04d" % i: DELETED for i in range(0, 2100, 7)})
    for partition, model in enumerate(models):
        fill(state, partition, model, partition + 1)
    reader = KvChainReader(state, no_peers, ME)
    chain = [item(0), item(1), item(2)]
    offset, newest = state.snapshot(2)
    assert offset == 3
    merged = list(reader.merged_entries(chain, 0, newest))
    assert merged == brute_live(models[::-1])
    assert len(merged) > 1800
    # only the leader's item
    assert list(reader.merged_entries([item(2)], 0, state.snapshot(2)[1])) == brute_live([models[2]])
    # the leader's partition empty: the older items decide
    assert list(reader.merged_entries([item(0), item(1), item(9)], 0, iter([]))) == brute_live(models[1::-1])

"""Concurrent KV writes through real brokers (group commit): a compare-and-set race on one key has exactly one
winner and every loser sees it; concurrent puts are all acknowledged after they applied, the last one per key
wins; gets answer packed states to clients that ask for them and one field per key to clients that do not."""

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from broker.processor.kv_processor import pack_states
from client import KVClient, MQClientError
from client.client_instance import CHANNEL_OPTIONS
from client.kv_client import response_states
from common.response_code import ResponseCode
from proto import broker_pb2, kv_pb2, kv_pb2_grpc
from tests.cluster import Cluster
from tests.kv.test_kv_acceptance import KvMode, start_kv_cluster

MODES = (
    KvMode("rocksdb", "ASYNC_FLUSH", "default", kv_init=True),
    KvMode("memory", "SYNC_FLUSH", "defaultRocksDB", kv_init=True),
)
RACERS = 16
ROUNDS = 5


@pytest.fixture(scope="module", params=MODES, ids=str)
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    mode: KvMode = request.param
    c = start_kv_cluster(tmp_path_factory.mktemp(f"kv-concurrent-{mode}"), mode, ("broker-a",))
    yield c
    c.stop()


def race(n: int, work) -> list:
    """``work(i)`` from ``n`` threads released together; their results in order."""
    start = threading.Barrier(n)

    def one(i: int):
        start.wait()
        return work(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def test_cas_race_on_one_key_has_one_winner(cluster: Cluster):
    clients = [KVClient(cluster.addr) for _ in range(RACERS)]
    try:
        for c in clients:
            c.shards()  # routes fetched before the race
        for r in range(ROUNDS):
            key = b"race-%d" % r
            results = race(RACERS, lambda i, key=key: clients[i].cas(key, None, b"racer-%02d" % i))
            winners = [i for i, res in enumerate(results) if res.applied]
            assert len(winners) == 1, f"round {r}: {len(winners)} winners"
            won = b"racer-%02d" % winners[0]
            assert all(res.current == won for res in results), (r, results)
            # and again on a value every racer expects: one swap, the rest see it
            results = race(RACERS, lambda i, key=key, won=won: clients[i].cas(key, won, b"second-%02d" % i))
            winners = [i for i, res in enumerate(results) if res.applied]
            assert len(winners) == 1, f"round {r}, second race: {len(winners)} winners"
            assert clients[0].get(key) == b"second-%02d" % winners[0]
    finally:
        for c in clients:
            c.close()


def test_concurrent_puts_are_acknowledged_after_apply(cluster: Cluster):
    keys = [b"conc-%03d" % i for i in range(40)]
    with KVClient(cluster.addr) as kv:
        kv.shards()

        def writer(i: int) -> list[tuple[bytes, bytes]]:
            done = []
            for n in range(25):
                key, value = keys[(i * 7 + n) % len(keys)], b"%02d-%02d" % (i, n)
                kv.put(key, value)
                assert kv.get(key) is not None  # acknowledged, so applied: readable at once
                done.append((key, value))
            return done

        written = race(RACERS, writer)
        final = dict(zip(keys, kv.get_batch(keys), strict=True))
    by_key: dict[bytes, set[bytes]] = {}
    for done in written:
        for key, value in done:
            by_key.setdefault(key, set()).add(value)
    for key, values in by_key.items():
        assert final[key] in values, (key, final[key])


def test_get_answers_packed_or_unpacked_as_asked(cluster: Cluster):
    keys = [b"pack-%02d" % i for i in range(64)]
    with KVClient(cluster.addr) as kv:
        for i, key in enumerate(keys[:48]):
            kv.put(key, b"v" * i)  # empty values too
        kv.delete(keys[1])
        addr = cluster.brokers["broker-a"].addr
    expected = [b"\x01" + b"v" * i if i < 48 and i != 1 else b"" for i in range(64)]
    with grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) as channel:
        stub = kv_pb2_grpc.KvServiceStub(channel)
        old = stub.Get(kv_pb2.KvGetRequest(keys=keys, addressing=broker_pb2.LOGIC), timeout=10)
        new = stub.Get(kv_pb2.KvGetRequest(keys=keys, addressing=broker_pb2.LOGIC, pack_states=True), timeout=10)
    assert old.code == new.code == ResponseCode.SUCCESS
    assert list(old.states) == expected and not old.packed_states  # a client that predates packing
    assert not new.states and response_states(new) == expected


def test_packed_states_round_trip():
    for states in ([b""], [b"\x01", b"", b"\x00", b"\x01" + b"x" * 70_000], [b"\x01abc"] * 4096):
        assert response_states(kv_pb2.KvGetResponse(packed_states=pack_states(states))) == states
        assert response_states(kv_pb2.KvGetResponse(states=states)) == states


@pytest.mark.parametrize("packed", [
    b"\x00\x00",  # shorter than the count
    b"\x00\x00\x00\x02\x00\x00\x00\x00",  # two lengths announced, one there
    b"\x00\x00\x00\x01\x00\x00\x00\x05ab",  # a state shorter than its length
    b"\x00\x00\x00\x00x",  # bytes after the last state
])
def test_malformed_packed_states_are_refused(packed: bytes):
    with pytest.raises(MQClientError, match="packed bytes"):
        response_states(kv_pb2.KvGetResponse(packed_states=packed))

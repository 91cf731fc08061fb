"""KV values below the KV limit (4 MiB) whose record no commitlog segment holds (mappedFileSizeCommitLog=1 MiB, as
tests and small deployments use): a put, a compare-and-set or an import of one is refused INVALID_ARGUMENT naming
the record's size and the commitlog's limit, before it joins a group commit, so other writers of the shard are
unaffected. Before, the commitlog's refusal came back SERVICE_NOT_AVAILABLE (retryable) and failed every write of
the group it was appended with, naming the other client's record."""

import re
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from client import KVClient, MQClientError
from client.client_instance import CHANNEL_OPTIONS
from common.kv_shard import shard_of
from proto import kv_pb2, kv_pb2_grpc
from tests.cluster import Cluster
from tests.kv.test_kv_acceptance import SHARDS, KvMode, start_kv_cluster

SEGMENT = 1 << 20
LIMIT = SEGMENT - 8  # a segment less its end marker
MIB = 1 << 20
BIG = b"B" * (2 * MIB)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_kv_cluster(tmp_path_factory.mktemp("kv-small-segments"),
                         KvMode("rocksdb", "ASYNC_FLUSH", "default", kv_init=True), ("broker-a",),
                         mappedFileSizeCommitLog=SEGMENT)
    yield c
    c.stop()


def refusal(call) -> str:
    with pytest.raises(MQClientError) as refused:
        call()
    return str(refused.value)


def assert_names_size_and_limit(line: str, low: int, code: str = "INVALID_PARAMETER") -> None:
    """``code``: a stream's answer code, or a unary call's gRPC status as the SDK words it."""
    assert code in line, line
    found = re.search(r"KV record of (\d+) bytes", line)
    assert found is not None and low < int(found.group(1)) < low + 1024, line
    assert f"exceeds {LIMIT} bytes" in line and f"mappedFileSizeCommitLog={SEGMENT}" in line, line


def test_a_value_no_segment_holds_is_refused_naming_its_size_and_the_limit(cluster: Cluster):
    with KVClient(cluster.addr) as kv:
        kv.put(b"fits", b"f" * (900 * 1024))
        assert_names_size_and_limit(refusal(lambda: kv.put(b"big", BIG)), len(BIG))
        assert kv.cas(b"c", None, b"w" * (600 * 1024)).applied  # a record of 600 KiB
        # expected and new value together: 1.2 MiB
        line = refusal(lambda: kv.cas(b"c", b"w" * (600 * 1024), b"z" * (600 * 1024)))
        assert_names_size_and_limit(line, 1200 * 1024)
        assert kv.get_batch([b"fits", b"big", b"c"]) == [b"f" * (900 * 1024), None, b"w" * (600 * 1024)]
    with (grpc.insecure_channel(cluster.brokers["broker-a"].addr, options=CHANNEL_OPTIONS) as channel,
          pytest.raises(grpc.RpcError) as unary):  # the unary Write: gRPC's own code
        kv_pb2_grpc.KvServiceStub(channel).Write(kv_pb2.KvWriteRequest(op=kv_pb2.KV_PUT, key=b"big", value=BIG),
                                                 timeout=10)
    assert unary.value.code() is grpc.StatusCode.INVALID_ARGUMENT and f"exceeds {LIMIT} bytes" in unary.value.details()


def test_an_import_with_a_value_no_segment_holds_writes_nothing(cluster: Cluster):
    shard = 1
    keys = [k for k in (b"imp-%d" % i for i in range(200)) if shard_of(k, SHARDS) == shard][:3]
    entries = [kv_pb2.KvEntry(key=k, state=kv_pb2.KV_PRESENT, value=v)
               for k, v in zip(keys, (b"small", BIG, b"small too"), strict=True)]
    chunks = [kv_pb2.KvSnapshotChunk(header=kv_pb2.KvSnapshotHeader(shard=shard, total_shards=SHARDS)),
              kv_pb2.KvSnapshotChunk(entries=entries)]
    with KVClient(cluster.addr) as kv:
        assert_names_size_and_limit(refusal(lambda: kv.import_snapshot(chunks)), len(BIG), "invalid argument")
        assert kv.get_batch(keys) == [None, None, None]


def test_writes_grouped_with_a_refused_value_all_apply(cluster: Cluster):
    """Small writes to the big key's shard, from 8 threads, while another keeps putting the big value: every small
    write applies (before, about half failed with the big record's refusal)."""
    with KVClient(cluster.addr) as kv:
        target = shard_of(b"big", SHARDS)
        keys = [k for k in (b"s%d" % i for i in range(400)) if shard_of(k, SHARDS) == target][:8]
        stop = time.monotonic() + 2
        refusals: list[str] = []
        failures: list[str] = []
        counts = [0] * len(keys)

        def big() -> None:
            while time.monotonic() < stop:
                refusals.append(refusal(lambda: kv.put(b"big", BIG)))

        def small(i: int) -> None:
            while time.monotonic() < stop:
                try:
                    kv.put(keys[i], b"small-%d" % counts[i])
                    counts[i] += 1
                except MQClientError as exc:
                    failures.append(str(exc))

        threads = [threading.Thread(target=big), *(threading.Thread(target=small, args=(i,)) for i in range(8))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == [], failures[:3]
        assert refusals and all("INVALID_PARAMETER" in r for r in refusals), refusals[:3]
        assert min(counts) > 0
        assert kv.get_batch(keys) == [b"small-%d" % (n - 1) for n in counts]

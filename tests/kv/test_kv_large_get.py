"""A batched get whose values pass what one answer may carry: 64 values of exactly 4 MiB (the KV limit) are 256 MiB
and some bytes, past gRPC's 256 MiB a message. The broker answers the first keys' values that fit (224 MiB) and
says how many in the remark; ``KVClient.get_batch`` asks again for the others, so any batch the API accepts works.
Before, the answer broke the stream (RESOURCE_EXHAUSTED, a traceback in the broker's log)."""

from collections.abc import Iterator

import grpc
import pytest

from client import KVClient
from client.client_instance import CHANNEL_OPTIONS
from client.kv_client import response_states
from common.kv_shard import MAX_VALUE_BYTES
from common.response_code import ResponseCode
from proto import broker_pb2, kv_pb2, kv_pb2_grpc
from tests.cluster import Cluster
from tests.kv.test_kv_acceptance import KvMode, start_kv_cluster

VALUES = 64


def value(i: int) -> bytes:
    return bytes([65 + i % 26]) * MAX_VALUE_BYTES


def key(i: int) -> bytes:
    return b"big/%03d" % i


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_kv_cluster(tmp_path_factory.mktemp("kv-large-get"),
                         KvMode("rocksdb", "ASYNC_FLUSH", "default", kv_init=True), ("broker-a",))
    try:
        with KVClient(c.addr) as kv:
            for i in range(VALUES):
                kv.put(key(i), value(i))
            kv.put(b"small", b"s")
        yield c
    finally:
        c.stop()


def test_a_batched_get_of_64_values_of_4_mib_answers_them_all(cluster: Cluster):
    keys = [b"small", *(key(i) for i in range(VALUES // 2)), b"absent", *(key(i) for i in range(VALUES // 2, VALUES))]
    with KVClient(cluster.addr) as kv:
        got = kv.get_batch(keys)
        assert len(got) == len(keys) and got[0] == b"s" and got[VALUES // 2 + 1] is None
        big = got[1 : VALUES // 2 + 1] + got[VALUES // 2 + 2 :]
        assert [v == value(i) for i, v in enumerate(big)] == [True] * VALUES
        assert kv.get(b"small") == b"s"  # the stream still serves
    assert "Traceback" not in cluster.brokers["broker-a"].log()


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "one-field-a-key"])
def test_the_broker_answers_the_first_values_that_fit_and_says_so(cluster: Cluster, packed: bool):
    keys = [key(i) for i in range(VALUES)]
    with grpc.insecure_channel(cluster.brokers["broker-a"].addr, options=CHANNEL_OPTIONS) as channel:
        response = kv_pb2_grpc.KvServiceStub(channel).Get(
            kv_pb2.KvGetRequest(keys=keys, addressing=broker_pb2.LOGIC, pack_states=packed), timeout=60)
    assert response.code == ResponseCode.SUCCESS, response.remark
    states = response_states(response)
    assert len(states) == 55  # 224 MiB of 4 MiB values and their lengths
    assert response.remark == "55 of 64 keys answered (an answer holds at most 224 MiB): ask again for the others"
    assert all(s == b"\x01" + value(i) for i, s in enumerate(states))

"""The KV store provisions itself on first use: with kvEnable=true and no kvInit, concurrent first writes from
many clients make one store (one creation, on exactly the brokers with KV on), and every write is readable."""

import threading
from pathlib import Path

import pytest

from client import Admin, KVClient, MQClientError
from common.kv_shard import DEFAULT_KV_SHARDS, KV_TOPIC
from tests.cluster import make_cluster

CLIENTS = 8


def test_concurrent_first_uses_make_one_store(tmp_path: Path) -> None:
    cluster = make_cluster(tmp_path, broker_names=(), registerNameServerPeriod=1000)
    try:
        cluster.settings = {"registerNameServerPeriod": 1000, "kvEnable": "false"}
        cluster.start_broker("broker-a")  # first by name, KV off: it must be passed over
        cluster.settings = {"registerNameServerPeriod": 1000, "kvEnable": "true", "flushDiskType": "SYNC_FLUSH"}
        cluster.start_broker("broker-b")
        cluster.start_broker("broker-c")
        start = threading.Barrier(CLIENTS)
        errors: list[BaseException] = []

        def first_use(n: int) -> None:
            try:
                with KVClient(cluster.addr) as kv:
                    start.wait()
                    kv.put(b"first-%d" % n, b"v%d" % n)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=first_use, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors

        logs = {name: d.log() for name, d in cluster.brokers.items()}
        creations = sum(text.count("kv_provisioned ") for text in logs.values())
        assert creations == 1, f"the KV store was created {creations} times"
        assert "kv_provisioned " in logs["broker-b"], "the first broker by name with KV on did not coordinate"
        with Admin(cluster.addr) as admin:
            status = admin.static_topic_status(KV_TOPIC)
            assert status is not None and status.total_queues == DEFAULT_KV_SHARDS
            leaders = {q.leader_broker for q in status.queues}
            assert leaders == {"broker-b", "broker-c"}, leaders
        with KVClient(cluster.addr) as kv:
            assert kv.shards() == DEFAULT_KV_SHARDS
            got = kv.get_batch([b"first-%d" % n for n in range(CLIENTS)])
            assert got == [b"v%d" % n for n in range(CLIENTS)]
    finally:
        cluster.stop()


def test_no_broker_with_kv_on_is_a_clear_error(tmp_path: Path) -> None:
    cluster = make_cluster(tmp_path, broker_names=("broker-a",), registerNameServerPeriod=1000)
    try:
        with KVClient(cluster.addr) as kv, pytest.raises(MQClientError, match="kvEnable=true"):
            kv.put(b"k", b"v")
        assert cluster.brokers["broker-a"].alive
    finally:
        cluster.stop()

"""Fail-stop on a real broker: an injected fsync failure or dispatcher-invariant failure stops it taking writes.
No write is acknowledged after the fault, clients get a clear error, the log says why once, runtime info shows
it; after a restart (without the fault) the store recovers and serves every acknowledged message."""

import time
from pathlib import Path

import pytest

from client import Admin, KVClient, Message, MQClientError, Producer, PullConsumer
from tests.cluster import make_cluster, wait_until

TOPIC = "FailStopT"


@pytest.mark.parametrize(("fault", "flush", "why"), [
    ("fsync@40", "SYNC_FLUSH", "fsync of the commitlog failed"),
    ("fsync@40", "ASYNC_FLUSH", "fsync of the commitlog failed"),
    ("dispatch@40", "SYNC_FLUSH", "dispatch failed"),
    ("dispatch@40", "ASYNC_FLUSH", "dispatch failed"),
])
def test_injected_fault_stops_writes_and_restart_recovers(tmp_path: Path, fault: str, flush: str, why: str) -> None:
    settings = {"registerNameServerPeriod": 1000, "flushDiskType": flush, "kvEnable": "true",
                "flushIntervalCommitLog": 10}
    cluster = make_cluster(tmp_path, broker_names=(), **settings)
    try:
        cluster.brokers["broker-a"] = broker = cluster_start(cluster, {"PYROCKETMQ_FAULTS": fault}, settings)
        cluster.create_topic(TOPIC, queues=2)
        acked: list[bytes] = []
        refused: MQClientError | None = None
        with Producer(cluster.addr, retry_times=0) as producer:
            # Until the fault: under ASYNC_FLUSH the 40th fsync comes on the flusher's clock (every 10 ms, with data
            # to flush), not after a number of sends, and a busy machine runs it late.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                body = b"m-%06d" % len(acked)
                try:
                    producer.send(Message(TOPIC, body))
                except MQClientError as exc:
                    refused = exc
                    break
                acked.append(body)
            assert refused is not None, "writes were still acknowledged after the injected fault"
            assert "SERVICE_NOT_AVAILABLE" in str(refused) and why in str(refused), str(refused)
            with pytest.raises(MQClientError, match=why):  # and every later write too
                producer.send(Message(TOPIC, b"later"))
        with KVClient(cluster.addr, retry_timeout_ms=500) as kv, pytest.raises(MQClientError):
            kv.put(b"k", b"v")
        with Admin(cluster.addr) as admin:
            info = admin.broker_runtime_info(broker.addr)
        assert info["storeWriteable"] == "false" and why in info["storeRefusal"], info
        assert broker.alive
        log = broker.log()
        assert log.count("store_fail_stop ") == 1 and why in log, log[-3000:]

        assert broker.stop() == 0
        cluster.brokers["broker-a"] = broker = cluster_start(cluster, None, settings)
        assert "store_recovered mode=abnormal" in broker.log(), "a fail-stopped store must be checked at restart"
        with PullConsumer(cluster.addr, group="fs-g") as consumer:
            def bodies() -> set[bytes]:
                got: set[bytes] = set()
                for mq in consumer.queues(TOPIC):
                    offset = 0
                    while (result := consumer.pull(mq, offset, 1024)).messages:
                        got.update(m.body for m in result.messages)
                        offset = result.next_begin_offset
                return got
            found = wait_until(lambda: (b := bodies()) >= set(acked) and b, timeout=15, what="acknowledged messages")
        assert set(acked) <= found
        with Producer(cluster.addr) as producer:
            producer.send(Message(TOPIC, b"after restart"))
        with KVClient(cluster.addr) as kv:
            kv.put(b"k", b"v")
            assert kv.get(b"k") == b"v"
    finally:
        cluster.stop()


def cluster_start(cluster, env: dict[str, str] | None, settings: dict[str, object]):
    from tests.cluster import start_broker

    return start_broker(cluster.workdir, "broker-a", cluster.addr, env=env, **settings)

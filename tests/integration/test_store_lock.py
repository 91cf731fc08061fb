"""One owner per store directory: a second broker on a held store exits 1 with one line naming the directory
and the holder's pid, touches nothing, and the first keeps serving."""

import os
import subprocess
import sys
from pathlib import Path

from client import Message, Producer, PullConsumer
from tests.cluster import REPO, make_cluster, wait_until, write_broker_conf


def snapshot(root: Path) -> tuple[set[str], dict[str, bytes]]:
    """Every file under the store, and the commitlog's bytes (the first broker's own periodic checkpoint writes
    may change other files' times while the test runs)."""
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    return files, {p.name: p.read_bytes() for p in sorted((root / "commitlog").iterdir())}


def test_second_broker_on_a_held_store_exits_with_one_line(tmp_path: Path) -> None:
    cluster = make_cluster(tmp_path, broker_names=("broker-a",), registerNameServerPeriod=1000,
                           autoCreateTopicEnable="true", flushDiskType="SYNC_FLUSH")
    try:
        first = cluster.brokers["broker-a"]
        with Producer(cluster.addr) as producer:
            sent = [producer.send(Message("LockT", b"before %d" % i)) for i in range(10)]
        store = tmp_path / "broker-a" / "store"
        before = snapshot(store)
        conf = write_broker_conf(tmp_path / "second.conf", {
            "brokerName": "broker-a", "brokerIP1": "127.0.0.1", "listenPort": 0, "storePathRootDir": store,
            "namesrvAddr": cluster.addr, "kvEnable": "true", "storeType": "defaultRocksDB"})
        second = subprocess.run([sys.executable, "-m", "broker.main", "-c", str(conf)], cwd=REPO, timeout=60,
                                capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert second.returncode == 1, second.stderr
        errors = [line for line in second.stderr.splitlines() if not line[:4].isdigit()]  # not log lines
        assert len(errors) == 1, second.stderr
        assert str(store) in errors[0] and f"pid {first.proc.pid}" in errors[0], errors[0]
        assert "Traceback" not in second.stderr and "ready on" not in second.stdout
        after = snapshot(store)
        assert after[1] == before[1], "the refused broker changed the commitlog"
        created = after[0] - before[0]
        assert not {f for f in created if f.startswith(("kv", "metadata", "consumequeue_rocksdb"))}, created

        assert first.alive
        with Producer(cluster.addr) as producer:
            sent.append(producer.send(Message("LockT", b"after")))
        with PullConsumer(cluster.addr, group="lock-g") as consumer:
            def all_read() -> int:
                return sum(len(consumer.pull(mq, 0, 64).messages) for mq in consumer.queues("LockT"))
            wait_until(lambda: all_read() == len(sent), what="every message readable")
    finally:
        cluster.stop()

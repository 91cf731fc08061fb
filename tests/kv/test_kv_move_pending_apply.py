"""KV shards moved between brokers.

A shard moved while its old leader still holds a write it took but has not applied (a SYNC_MASTER whose slave is
slow): the new leader reads the old partition for a CAS's base, and the old leader answers that read only once
every write it took there is applied. It answered from what was applied: two compare-and-set "if absent" of one
key both succeeded, and the first, applied later, was hidden for good under the second's value. A broker with the
KV store off refuses to lead shards."""

import signal
import threading
from pathlib import Path

import pytest

from client import Admin, KVClient, MQClientError
from common.kv_shard import shard_of
from tests.cluster import start_broker, start_namesrv, wait_until

SETTINGS = {"registerNameServerPeriod": 1000, "brokerNotActiveTimeoutMillis": 3000, "kvEnable": "true"}


@pytest.mark.parametrize("back", [False, True], ids=["moved", "moved-and-back"])
def test_a_cas_on_a_shard_moved_while_a_cas_waited_to_apply_sees_it(tmp_path: Path, back: bool) -> None:
    """``back``: the shard moves to broker-b and back to broker-a, whose new partition reads the old one, on the same
    broker: that read did not wait for the write to apply (the KV review: an acknowledged put hidden for good)."""
    ns = start_namesrv(tmp_path / "ns")
    daemons = [ns]
    try:
        a = start_broker(tmp_path / "a", "broker-a", ns.addr, brokerRole="SYNC_MASTER", **SETTINGS)
        daemons.append(a)
        with Admin(ns.addr) as admin:
            ha = admin.broker_runtime_info(a.addr)["haServerAddr"]
            slave = start_broker(tmp_path / "slave", "broker-a", ns.addr, brokerId=1, brokerRole="SLAVE",
                                 haMasterAddress=ha, **SETTINGS)
            daemons.append(slave)
            daemons.append(start_broker(tmp_path / "b", "broker-b", ns.addr, **SETTINGS))
            wait_until(lambda: admin.broker_runtime_info(a.addr)["haSlaves"] == "1", what="the slave to connect")
            admin.kv_init(2, brokers=["broker-a"])
            with KVClient(ns.addr) as kv:
                wait_until(lambda: kv.shards(refresh=True) == 2, what="the KV route")
                kv.put(b"warm", b"1")
            key = b"lock-1"
            answers: dict[str, object] = {}

            def cas(name: str) -> None:
                with KVClient(ns.addr, retry_timeout_ms=30_000) as kv:
                    answers[name] = kv.cas(key, None, name.encode())

            slave.proc.send_signal(signal.SIGSTOP)  # the old leader's CAS waits for its slave, unapplied
            before = int(admin.broker_runtime_info(a.addr)["commitLogMaxOffset"])
            first = threading.Thread(target=cas, args=("owner-X",))
            first.start()
            wait_until(lambda: int(admin.broker_runtime_info(a.addr)["commitLogMaxOffset"]) > before,
                       what="X appended on broker-a")
            admin.migrate_logical_queue("rmq_sys_KV", shard_of(key, 2), "broker-b")
            if back:
                admin.migrate_logical_queue("rmq_sys_KV", shard_of(key, 2), "broker-a")
            second = threading.Thread(target=cas, args=("owner-Y",))
            second.start()
            second.join(1.0)  # refused (SYSTEM_BUSY) and retried while X is not applied
            assert "owner-Y" not in answers, "the new leader decided its CAS before the old leader applied X"
            slave.proc.send_signal(signal.SIGCONT)
            first.join(30)
            second.join(30)
        results = {name: result.applied for name, result in answers.items()}  # type: ignore[attr-defined]
        assert results == {"owner-X": True, "owner-Y": False}, answers
        with KVClient(ns.addr) as kv:
            assert kv.get(key) == b"owner-X"
    finally:
        for d in daemons:
            if d.alive:
                d.proc.send_signal(signal.SIGCONT)
        for d in reversed(daemons):
            if d.alive:
                d.stop(strict=False)


def test_kv_shards_are_not_placed_on_a_broker_with_the_kv_store_off(tmp_path: Path) -> None:
    """A rebalance placed shards on a broker with kvEnable=false: their keys could neither be read nor written, and
    moving them back left its link in their chains, unreadable for good. It refuses to lead them; nothing moves."""
    ns = start_namesrv(tmp_path / "ns")
    daemons = [ns]
    try:
        daemons.append(start_broker(tmp_path / "a", "broker-a", ns.addr, kvEnable="true",
                                    registerNameServerPeriod=1000))
        with Admin(ns.addr) as admin, KVClient(ns.addr, retry_timeout_ms=3000) as kv:
            admin.kv_init(4, brokers=["broker-a"])
            wait_until(lambda: kv.shards(refresh=True) == 4, what="the KV route")
            keys = [b"k%d" % i for i in range(20)]
            for key in keys:
                kv.put(key, b"v-" + key)
            daemons.append(start_broker(tmp_path / "c", "broker-c", ns.addr, registerNameServerPeriod=1000))
            wait_until(lambda: len(admin.brokers(cluster="DefaultCluster")) == 2, what="broker-c registered")
            with pytest.raises(MQClientError, match="kvEnable=false"):
                admin.rebalance_logical_queues("DefaultCluster")
            status = admin.static_topic_status("rmq_sys_KV")
            assert status is not None and {q.leader_broker for q in status.queues} == {"broker-a"}
            assert [kv.get(key) for key in keys] == [b"v-" + key for key in keys]
            kv.put(b"k0", b"new")
            assert kv.get(b"k0") == b"new"
    finally:
        for d in reversed(daemons):
            if d.alive:
                d.stop(strict=False)

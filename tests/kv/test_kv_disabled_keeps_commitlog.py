"""A broker restarted with ``kvEnable=false`` over a store that holds KV state keeps the commitlog the KV store has
not applied. It let those segments expire: KV puts acknowledged just before a SIGKILL (in the commitlog, not yet
flushed into the KV store) were gone once KV was on again, which served the older values without a word."""

import signal
from pathlib import Path

import pytest

from broker.kv.kv_disabled_hold import disabled_kv_hold
from broker.kv.memory_kv_state_store import MemoryKvStateStore
from broker.store.config import MessageStoreConfig
from broker.store.disk_usage_watcher import DiskUsage
from broker.store.message_store import MessageStore
from client import Admin, KVClient, Message, Producer
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until
from tests.ha.test_replication import runtime

SEGMENT = 65536
SETTINGS = {"flushDiskType": "SYNC_FLUSH", "registerNameServerPeriod": 1000, "mappedFileSizeCommitLog": SEGMENT,
            "fileReservedTime": "0.0003", "deleteWhen": "*", "cleanResourceInterval": 200}


def test_kv_off_keeps_the_commitlog_its_store_has_not_applied(tmp_path: Path):
    ns = start_namesrv(tmp_path / "namesrv")
    broker: Daemon | None = None

    def restart(kv_enable: str) -> Daemon:
        return start_broker(tmp_path, "broker-a", ns.addr, kvEnable=kv_enable, **SETTINGS)

    def min_offset() -> int:
        assert broker is not None
        return int(runtime(ns.addr, broker)["commitLogMinOffset"])

    try:
        broker = restart("true")
        keys = [b"gap/%03d" % i for i in range(400)]
        with KVClient(ns.addr) as kv:
            for key in keys:
                kv.put(key, b"v1-" + bytes(100))  # over a segment: the first may expire, the KV state stays
        broker.stop()  # graceful: the KV store is flushed to here
        broker = restart("true")
        applied = int(runtime(ns.addr, broker)["commitLogMaxOffset"])
        with KVClient(ns.addr) as kv:
            for key in keys[:20]:
                kv.put(key, b"v2")  # acknowledged (fsynced into the commitlog), not flushed into the KV store
        broker.stop(signal.SIGKILL)
        broker = restart("false")
        with Admin(ns.addr) as admin:
            admin.create_topic("Filler", brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
            wait_until(lambda: "Filler" in admin.topic_list(), what="the filler topic's route")
        with Producer(ns.addr) as producer:
            for _ in range(40):
                producer.send_batch([Message("Filler", bytes(1000)) for _ in range(20)])
        # Segments expire once a second old and dispatched (every checkpoint past them): ones the KV store has
        # not applied never do while it is off. (A negative: watched for a few seconds.)
        wait_until(lambda: min_offset() > 0, timeout=20, what="the first segment to expire")
        try:
            wait_until(lambda: min_offset() > applied, timeout=4)
            raise AssertionError(f"expired past {applied}, what the KV store has not applied")
        except TimeoutError:
            pass
        broker.stop()
        broker = restart("true")
        with KVClient(ns.addr) as kv:
            got = wait_until(lambda: kv.get_batch(keys[:20]), what="the KV values")
        assert got == [b"v2"] * 20
        assert "kv_disabled_store_kept" in (tmp_path / "broker-a" / "broker-a.log").read_text()
    finally:
        if broker is not None and broker.alive:
            broker.stop(strict=False)
        ns.stop(strict=False)


def test_the_hold_yields_to_a_disk_past_the_forcible_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The hold never moves while KV stays off: with a full disk it stopped even the forced expiry, and with it every
    write of the broker. Past diskSpaceCleanForciblyRatio the forced expiry passes it (said, and said again as a
    dispatcher_gap when KV comes back)."""
    kv = MemoryKvStateStore(tmp_path / "kv")
    kv.load()
    kv.apply({(0, b"k"): b"\x01v"}, 100)  # KV was on once
    kv.close()
    store = MessageStore(MessageStoreConfig(str(tmp_path / "store"), mapped_file_size_commit_log=SEGMENT,
                                            destroy_mapped_file_grace_ms=0))
    hold = disabled_kv_hold(tmp_path / "kv")
    assert hold is not None
    store.register_dispatcher(hold)
    store.start()
    try:
        for _ in range(40):
            assert store.put_messages("T", 0, [b"x" * 4000] * 4, [b""] * 4).ok
        assert store.wait_dispatched(store.commit_log.max_offset())
        clean = store.clean_service
        assert clean.run_once(ignore_delete_when=True) == 0  # young segments, a roomy disk: the hold stands anyway
        monkeypatch.setattr(clean.disk_watcher, "check", lambda: DiskUsage(tmp_path, 99, 100))
        assert clean.run_once(ignore_delete_when=True) > 0
        assert store.commit_log.min_offset() > 100
    finally:
        store.shutdown()

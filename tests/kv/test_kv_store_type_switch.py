"""A broker started with the other ``kvStoreType`` than the one whose state its KV directory holds: it opened the
configured backend (empty, or an older copy of its own) and served it as the KV data: every value whose commitlog
records had expired read as absent, and a memory -> rocksdb -> memory round trip served old values and a deleted
key. It refuses to start now, with one line naming both ways out, and touches nothing."""

from pathlib import Path

from client import KVClient
from tests.cluster import Daemon, DaemonStartError, start_broker, start_namesrv

SETTINGS = {"kvEnable": "true", "registerNameServerPeriod": 1000}


def refused(tmp_path: Path, ns: str, store_type: str) -> str:
    log = tmp_path / "broker-a" / "broker-a.log"
    seen = len(log.read_text())
    try:
        start_broker(tmp_path, "broker-a", ns, kvStoreType=store_type, **SETTINGS).stop()
    except DaemonStartError as exc:
        assert "exited (1)" in str(exc), str(exc)
    else:
        raise AssertionError(f"the broker started with kvStoreType={store_type}")
    text = log.read_text()[seen:]
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.strip() and not line[:4].isdigit()]  # not log lines
    assert len(lines) == 1, text
    return lines[0]


def test_the_other_kv_store_type_is_refused_and_the_data_stays(tmp_path: Path) -> None:
    ns = start_namesrv(tmp_path / "namesrv")
    broker: Daemon | None = None
    try:
        broker = start_broker(tmp_path, "broker-a", ns.addr, kvStoreType="rocksdb", **SETTINGS)
        with KVClient(ns.addr) as kv:
            for i in range(5):
                kv.put(b"switch/%d" % i, b"v%d" % i)
        broker.stop()
        line = refused(tmp_path, ns.addr, "memory")
        assert line.startswith("mqbroker: cannot start: kvStoreType=memory, but ") and \
            "holds kvStoreType=rocksdb state" in line and "set kvStoreType=rocksdb" in line, line
        broker = start_broker(tmp_path, "broker-a", ns.addr, kvStoreType="rocksdb", **SETTINGS)
        with KVClient(ns.addr) as kv:
            assert [kv.get(b"switch/%d" % i) for i in range(5)] == [b"v%d" % i for i in range(5)]
    finally:
        if broker is not None and broker.alive:
            broker.stop()
        ns.stop()

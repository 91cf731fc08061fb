"""A compare-and-set whose broker cannot be reached (it is down, a failover under way) failed at once ("failed to
connect", nothing sent) for as long as the route named the dead address, where puts waited for the broker back. It
is sent again now, as a put is, once the route names a reachable broker; a failure after it was sent still
surfaces, saying it may have applied."""

import threading
from pathlib import Path

from client import KVClient
from client.replica_health import channel_connected
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until

SETTINGS = {"kvEnable": "true", "registerNameServerPeriod": 1000, "brokerNotActiveTimeoutMillis": 3000}


def test_a_cas_waits_for_its_broker_back_as_a_put_does(tmp_path: Path) -> None:
    ns = start_namesrv(tmp_path / "namesrv")
    brokers: list[Daemon] = []
    try:
        brokers.append(start_broker(tmp_path, "broker-a", ns.addr, **SETTINGS))
        with KVClient(ns.addr, retry_timeout_ms=90_000) as kv:  # (a broker start on a busy machine)
            kv.put(b"lease", b"v1")
            addr = brokers[0].addr
            brokers[0].kill()  # the route still names it: its address refuses connections
            # The client has seen the connection reset (under load it came after the CAS went out on the old stream:
            # "may have applied", as it must say then; this test is of a CAS that finds no connection).
            wait_until(lambda: not channel_connected(kv._instance.channel(addr)), what="the client to see the kill")
            restart = threading.Timer(1.0, lambda: brokers.append(start_broker(tmp_path, "broker-a", ns.addr,
                                                                               **SETTINGS)))
            restart.start()
            try:
                result = kv.cas(b"lease", b"v1", b"v2")  # was: MQClientError ... failed to connect, at once
            finally:
                restart.join()
            assert result.applied and result.current == b"v2"
            assert kv.get(b"lease") == b"v2"
    finally:
        for b in brokers:
            if b.alive:
                b.stop()
        ns.stop()

"""A broker registers with each of its name servers on its own: one name server that stalls (SIGSTOP: its
registrations wait for their 30 s timeout) does not starve the others of heartbeats, so they keep routing the
broker; the broker's stop does not wait for it either. Real daemons."""

import os
import signal
import time
from pathlib import Path

from client import Admin
from tests.cluster import start_broker, start_namesrv, wait_until


def test_a_stalled_name_server_does_not_make_the_others_expire_the_broker(tmp_path: Path) -> None:
    stalled, healthy = start_namesrv(tmp_path / "ns1"), start_namesrv(tmp_path / "ns2")
    broker = start_broker(tmp_path / "broker", "broker-a", f"{stalled.addr};{healthy.addr}",
                          registerNameServerPeriod=500, brokerNotActiveTimeoutMillis=3000)
    paused = False
    try:
        with Admin(healthy.addr) as admin:
            admin.create_topic("StallNsT", brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
            wait_until(lambda: "StallNsT" in admin.topic_list(), what="the route at the healthy name server")
            os.kill(stalled.proc.pid, signal.SIGSTOP)
            paused = True
            until = time.monotonic() + 8  # well past the 3 s after which a silent broker expires
            while time.monotonic() < until:
                route = admin.client.route("StallNsT", refresh=True)
                assert [b.broker_name for b in route.broker_datas] == ["broker-a"]
                time.sleep(0.5)
        assert "broker_expired" not in healthy.log()
        started = time.monotonic()
        assert broker.stop(timeout=30) == 0
        assert time.monotonic() - started < 15
    finally:
        if paused:
            os.kill(stalled.proc.pid, signal.SIGCONT)
        for daemon in (broker, stalled, healthy):
            if daemon.alive:
                daemon.stop(strict=False)

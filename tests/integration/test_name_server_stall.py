"""Name servers that stall (SIGSTOP: calls to them wait for their timeouts). A broker registers with each of
its name servers on its own, so one that stalls does not starve the others of heartbeats and they keep routing
the broker; the broker's stop does not wait for it either. Clients keep their last routes while no name server
answers. Real daemons."""

import logging
import os
import signal
import time
from pathlib import Path

import pytest

from client import Admin, Message, MQClientError, Producer, PushConsumer, push_consumer
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


def test_clients_keep_their_last_routes_while_no_name_server_answers(tmp_path: Path, monkeypatch, caplog) -> None:
    """Brokers outlive a name server outage, and so do their clients: a route refresh no name server answers
    keeps the last route (asked for again 30 s later, not at every call), so producers send, push consumers keep
    their sessions and queues, and offsets are committed, until the name server is back."""
    monkeypatch.setattr(push_consumer, "REBALANCE_INTERVAL_S", 0.5)  # sessions refreshed (routes asked) often
    caplog.set_level(logging.INFO, logger="client")
    namesrv = start_namesrv(tmp_path / "ns")
    broker = start_broker(tmp_path / "broker", "broker-a", namesrv.addr, registerNameServerPeriod=1000)
    received: list[bytes] = []
    paused = False
    try:
        with Admin(namesrv.addr) as admin:
            admin.create_topic("NsOutT", brokers=["broker-a"], read_queue_nums=2, write_queue_nums=2)
            wait_until(lambda: "NsOutT" in admin.topic_list(), what="the route")
        with Producer(namesrv.addr) as producer, PushConsumer(namesrv.addr, group="ns-out", topic="NsOutT",
                                                              handler=lambda m: received.append(m.body),
                                                              consume_from_first=True):
            producer.send(Message("NsOutT", b"before"))
            wait_until(lambda: received == [b"before"], what="the first message")
            os.kill(namesrv.proc.pid, signal.SIGSTOP)
            paused = True
            assert producer.client.route("NsOutT", refresh=True).broker_datas  # the last route, once it timed out
            started = time.monotonic()
            producer.client.route("NsOutT", refresh=True)  # not asked again at once
            assert time.monotonic() - started < 1
            bodies = [b"during-%d" % i for i in range(20)]
            for body in bodies:
                producer.send(Message("NsOutT", body))
                time.sleep(0.2)  # several rebalance passes (each refreshes the consumer's routes) meanwhile
            wait_until(lambda: set(bodies) <= set(received), timeout=15, what="messages sent during the outage")
            assert any("route_kept topic=NsOutT" in r.getMessage() for r in caplog.records)
            assert not any("queue_released" in r.getMessage() for r in caplog.records)
            with Producer(namesrv.addr) as newcomer, pytest.raises(MQClientError, match="route of NsOutT"):
                newcomer.send(Message("NsOutT", b"no route yet"))  # nothing to fall back on: a clear error
            os.kill(namesrv.proc.pid, signal.SIGCONT)
            paused = False
    finally:
        if paused:
            os.kill(namesrv.proc.pid, signal.SIGCONT)
        for daemon in (broker, namesrv):
            if daemon.alive:
                daemon.stop(strict=False)

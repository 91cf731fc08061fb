"""Connections that die without a word (a NAT or firewall drops the flow; the peer's host vanishes): the kernel
says nothing for minutes, or never behind a middlebox that keeps acknowledging. Between real daemons, through
``tests/net_fault_proxy.py``, which freezes the connections open at that moment and forwards new ones.

- A slave's replication stream hears from its master at least every 5 s (heartbeats): silent for 15 s, it is
  replaced. Kept, it waited for good, and its SYNC_MASTER answered every send "no slave" all that time.
- A broker's registration that gets no answer dials the name server afresh next time. It kept the dead
  connection, and the broker dropped out of every route for good."""

import time

import grpc

from client import Admin
from proto import broker_pb2, broker_pb2_grpc
from tests.cluster import make_cluster, start_broker, wait_until
from tests.ha.test_replication import TOPIC, Group
from tests.net_fault_proxy import net_fault_proxy


def _send(addr: str, body: bytes) -> int:
    stub = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(addr))
    return stub.SendMessage(broker_pb2.SendMessageRequest(topic=TOPIC, queue_id=0, bodies=[body]), timeout=10).code


def test_a_replication_stream_on_a_dead_connection_is_replaced(tmp_path):
    g = Group(tmp_path, "SYNC_MASTER", with_slave=False, syncFlushTimeout="1000")
    try:
        with net_fault_proxy(g.ha_addr) as proxy:
            g.slave = start_broker(tmp_path / "slave", "broker-a", g.ns.addr, brokerId=1, brokerRole="SLAVE",
                                   haMasterAddress=proxy.addr, **g.settings)
            g.create_topic(1)
            g.wait_slaves(1)
            wait_until(lambda: _send(g.master.addr, b"before") == 0, what="a send the slave confirms")
            proxy.freeze()
            frozen_at = time.monotonic()
            assert _send(g.master.addr, b"during") != 0  # the slave cannot confirm it: the link is dead
            wait_until(lambda: _send(g.master.addr, b"after") == 0, timeout=45,
                       what="the slave on a new connection, confirming sends again")
            assert time.monotonic() - frozen_at < 40 and proxy.accepted >= 2
        assert "replication_silent" in g.slave.log()
    finally:
        g.stop()


def test_a_broker_whose_registrations_get_no_answer_dials_the_name_server_afresh(tmp_path):
    c = make_cluster(tmp_path, broker_names=())
    try:
        with net_fault_proxy(c.addr) as proxy, Admin(c.addr) as admin:
            c.brokers["broker-a"] = start_broker(tmp_path, "broker-a", proxy.addr, registerNameServerPeriod=1000,
                                                 brokerNotActiveTimeoutMillis=4000)
            admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)

            def routed() -> bool:
                return TOPIC in admin.topic_list() and bool(admin.topic_route(TOPIC).queue_datas)

            wait_until(routed, what="the topic's route")
            proxy.freeze()
            wait_until(lambda: not routed(), timeout=20, what="the name server to expire the silent broker")
            wait_until(routed, timeout=30, what="the broker registered again, on a new connection")
            assert proxy.accepted >= 2
        assert "register_failed" in c.brokers["broker-a"].log()
    finally:
        c.stop()


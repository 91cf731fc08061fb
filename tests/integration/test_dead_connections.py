"""Connections that die without a word (a NAT or firewall drops the flow; the peer's host vanishes): the kernel
says nothing for minutes, or never behind a middlebox that keeps acknowledging. Between real daemons, through
``tests/net_fault_proxy.py``, which freezes the connections open at that moment and forwards new ones.

- A slave's replication stream hears from its master at least every 5 s (heartbeats): silent for 15 s, it is
  replaced (unless keepalive found the connection dead first). Kept, it waited for good, and its SYNC_MASTER
  answered every send "no slave" all that time.
- A broker's registration that gets no answer dials the name server afresh next time. It kept the dead
  connection, and the broker dropped out of every route for good.
- Every channel pings a connection it hears nothing on (``common/grpc_keepalive.py``) and drops it when the ping
  goes unanswered: the SDK's route lookups went on a dead connection to the name server until their deadlines, for
  minutes. The daemons let those pings come (gRPC's servers otherwise hang up on a client that pings an idle
  connection more often than every 5 minutes)."""

import time

import grpc

from client import Admin, Message, MQClientError, Producer, SendStatus
from cluster.daemon_process import start_namesrv
from common import tls
from proto import broker_pb2, broker_pb2_grpc, common_pb2, namesrv_pb2_grpc
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
        # Whichever saw it first: the stream's own silence watch (15 s), or the channel's keepalive.
        assert "replication_silent" in g.slave.log() or "Stream removed" in g.slave.log()
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
            # (Whether the name server expires it meanwhile is a race with the new connection: not waited for.)
            wait_until(lambda: proxy.accepted >= 2, timeout=30, what="the broker to dial the name server afresh")
            wait_until(routed, timeout=30, what="the broker registered again, on the new connection")
        assert "register_failed" in c.brokers["broker-a"].log()
    finally:
        c.stop()



def test_an_sdk_channel_on_a_dead_connection_is_dropped_and_dialled_afresh(tmp_path):
    c = make_cluster(tmp_path, broker_names=("broker-a",))
    try:
        c.create_topic("DeadBefore", 1)
        c.create_topic("DeadAfter", 1)
        with net_fault_proxy(c.addr) as proxy, Producer(proxy.addr) as producer:
            assert producer.send(Message("DeadBefore", b"before")).status is SendStatus.SEND_OK
            proxy.freeze()
            frozen_at = time.monotonic()

            def sent() -> bool:  # a topic not looked up yet: its route must come through the name server
                try:
                    return producer.send(Message("DeadAfter", b"after")).status is SendStatus.SEND_OK
                except MQClientError:
                    return False

            wait_until(sent, timeout=110, what="the new topic's route, looked up on a new connection")
            assert time.monotonic() - frozen_at < 100 and proxy.accepted >= 2  # keepalive: within about 70 s
    finally:
        c.stop()


def test_the_daemons_let_an_idle_connection_be_pinged(tmp_path):
    ns = start_namesrv(tmp_path)
    try:
        with net_fault_proxy(ns.addr) as proxy:
            # Pings every 5 s, the most often a daemon allows: four of them in 22 s, with no call under way.
            channel = tls.channel(proxy.addr, [("grpc.keepalive_time_ms", 5000)])
            stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
            stub.GetNamesrvRuntimeInfo(common_pb2.Empty(), timeout=10)
            time.sleep(22)
            stub.GetNamesrvRuntimeInfo(common_pb2.Empty(), timeout=10)
            channel.close()
            assert proxy.accepted == 1, "the name server hung up on the pinging client (too_many_pings)"
    finally:
        ns.stop()

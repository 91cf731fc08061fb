"""PeerBrokers finds a peer again when it comes back at another address: a static topic's older items and the
timer's forwards go on within about a second, not after the 30 s refresh. Real gRPC servers on real sockets: a
name server's cluster info, and a broker that answers GetBrokerRuntimeInfo."""

import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from broker.out import peer_brokers
from broker.out.peer_brokers import PeerBrokerError, PeerBrokers
from proto import broker_pb2, broker_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc


class ClusterInfo(namesrv_pb2_grpc.NamesrvServiceServicer):
    def __init__(self) -> None:
        self.addr = ""
        self.slave_addr = ""  # broker-b's slave (id 1), when it has one
        self.asked = 0
        self.failing = False

    def GetBrokerClusterInfo(self, request, context):
        self.asked += 1
        if self.failing:
            context.abort(grpc.StatusCode.UNAVAILABLE, "name server failing")
        answer = namesrv_pb2.ClusterInfo()
        answer.broker_addr_table["broker-b"].broker_addrs[0] = self.addr
        if self.slave_addr:
            answer.broker_addr_table["broker-b"].broker_addrs[1] = self.slave_addr
        return answer


class RuntimeInfo(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self, role: str = "MASTER", stall_s: float = 0.0) -> None:
        self.role, self.stall_s = role, stall_s

    def GetBrokerRuntimeInfo(self, request, context):
        time.sleep(self.stall_s)
        return broker_pb2.BrokerRuntimeInfo(table={"brokerName": "broker-b", "role": self.role})


def serve(add: object, servicer: object) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(2))
    add(servicer, server)  # type: ignore[operator]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
def namesrv() -> Iterator[tuple[ClusterInfo, str]]:
    info = ClusterInfo()
    server, addr = serve(namesrv_pb2_grpc.add_NamesrvServiceServicer_to_server, info)
    yield info, addr
    server.stop(None)


def runtime(peers: PeerBrokers) -> str:
    return peers.call("broker-b", "GetBrokerRuntimeInfo", common_pb2.Empty()).table["brokerName"]


def test_a_peer_back_at_another_address_is_found_again_after_a_failed_call(namesrv):
    info, ns_addr = namesrv
    first, info.addr = serve(broker_pb2_grpc.add_BrokerServiceServicer_to_server, RuntimeInfo())
    now = [100.0]  # an injected clock: a slow machine's failed calls must not count as time passing
    peers = PeerBrokers([ns_addr], "broker-a", "127.0.0.1:1", clock=lambda: now[0])
    try:
        assert runtime(peers) == "broker-b" and info.asked == 1
        first.stop(None)  # broker-b is gone, and comes back elsewhere
        second, info.addr = serve(broker_pb2_grpc.add_BrokerServiceServicer_to_server, RuntimeInfo())
        with pytest.raises(PeerBrokerError, match="UNAVAILABLE"):
            runtime(peers)
        with pytest.raises(PeerBrokerError, match="UNAVAILABLE"):  # not looked up again at once
            runtime(peers)
        assert info.asked == 1
        now[0] += peer_brokers.REFRESH_UNREACHABLE_AFTER_S + 0.01
        assert runtime(peers) == "broker-b" and info.asked == 2
        assert runtime(peers) == "broker-b" and info.asked == 2  # found: cached again
        second.stop(None)
    finally:
        peers.close()


def test_while_no_name_server_answers_the_addresses_held_are_used_and_asked_for_later(namesrv):
    info, ns_addr = namesrv
    broker, info.addr = serve(broker_pb2_grpc.add_BrokerServiceServicer_to_server, RuntimeInfo())
    peers = PeerBrokers([ns_addr], "broker-a", "127.0.0.1:1")
    try:
        assert runtime(peers) == "broker-b" and info.asked == 1
        info.failing = True  # from now on the name server answers UNAVAILABLE
        peers._fetched_at -= peer_brokers.REFRESH_AFTER_S + 1  # the addresses are due for a refresh
        assert runtime(peers) == "broker-b" and info.asked == 2  # asked, failed: the address held is used
        assert runtime(peers) == "broker-b" and info.asked == 2  # not asked again at every call
    finally:
        broker.stop(None)
        peers.close()


def test_a_read_a_replica_may_answer_goes_to_the_slave_while_the_master_is_down(namesrv):
    """A KV shard moved off broker-b was unreadable while broker-b's master was down, its slave up (the KV review):
    older items were asked of the master only."""
    info, ns_addr = namesrv
    master, info.addr = serve(broker_pb2_grpc.add_BrokerServiceServicer_to_server, RuntimeInfo())
    slave, info.slave_addr = serve(broker_pb2_grpc.add_BrokerServiceServicer_to_server, RuntimeInfo("SLAVE"))
    peers = PeerBrokers([ns_addr], "broker-a", "127.0.0.1:1")

    def role(replica_ok: bool) -> str:
        return peers.call("broker-b", "GetBrokerRuntimeInfo", common_pb2.Empty(), replica_ok=replica_ok).table["role"]

    try:
        assert role(True) == "MASTER"  # the master while it answers
        master.stop(None)
        with pytest.raises(PeerBrokerError, match="UNAVAILABLE"):
            role(False)
        assert role(True) == "SLAVE"
        slave.stop(None)
        with pytest.raises(PeerBrokerError, match="UNAVAILABLE"):
            role(True)
    finally:
        peers.close()


def test_a_slow_master_is_not_passed_over_for_its_slave(namesrv, monkeypatch: pytest.MonkeyPatch):
    """A stalled master (alive, past the call's timeout) may hold acknowledged writes its slave lacks (an
    ASYNC_MASTER's): only a master that cannot be reached is passed over (the diff review)."""
    monkeypatch.setattr(peer_brokers, "RPC_TIMEOUT_S", 0.3)
    info, ns_addr = namesrv
    master, info.addr = serve(broker_pb2_grpc.add_BrokerServiceServicer_to_server, RuntimeInfo(stall_s=1.0))
    slave, info.slave_addr = serve(broker_pb2_grpc.add_BrokerServiceServicer_to_server, RuntimeInfo("SLAVE"))
    peers = PeerBrokers([ns_addr], "broker-a", "127.0.0.1:1")
    try:
        with pytest.raises(PeerBrokerError, match="DEADLINE_EXCEEDED"):
            peers.call("broker-b", "GetBrokerRuntimeInfo", common_pb2.Empty(), replica_ok=True)
    finally:
        peers.close()
        master.stop(None)
        slave.stop(None)

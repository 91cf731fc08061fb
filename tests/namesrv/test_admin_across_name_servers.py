"""Admin commands with several name servers, one of them restarted a moment ago (it has not heard from every broker
yet) or down: "every broker of the cluster" means every one, and a change made on each name server is tried on
each and says where it was not made."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from client import Admin, MQClientError
from cluster.daemon_process import Daemon, start_namesrv
from common.response_code import ResponseCode
from proto import broker_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.cluster import start_broker, wait_until

OLD, NEW = "BeforeRestartT", "AfterRestartT"


@dataclass
class TwoNameServers:
    workdir: Path
    ns: list[Daemon]
    brokers: dict[str, Daemon]

    @property
    def addrs(self) -> str:
        return ";".join(n.addr for n in self.ns)

    def stop(self) -> None:
        for d in [*self.brokers.values(), *self.ns]:
            d.stop(strict=False)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TwoNameServers]:
    """Two name servers; broker-a registers every second, broker-b every 10 minutes (so a restarted name server does
    not hear from it again within the test)."""
    c = TwoNameServers(tmp_path, [start_namesrv(tmp_path / "ns1"), start_namesrv(tmp_path / "ns2")], {})
    try:
        c.brokers["broker-a"] = start_broker(tmp_path, "broker-a", c.addrs, registerNameServerPeriod=1000)
        c.brokers["broker-b"] = start_broker(tmp_path, "broker-b", c.addrs, registerNameServerPeriod=600_000)
        yield c
    finally:
        c.stop()


def _route_brokers(ns_addr: str, topic: str) -> set[str] | None:
    with grpc.insecure_channel(ns_addr) as channel:
        answer = namesrv_pb2_grpc.NamesrvServiceStub(channel).GetRouteInfoByTopic(
            namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=5)
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    return {q.broker_name for q in answer.route.queue_datas}


def _broker_has(broker: Daemon, topic: str) -> bool:
    with grpc.insecure_channel(broker.addr) as channel:
        configs = broker_pb2_grpc.BrokerServiceStub(channel).GetAllTopicConfig(common_pb2.Empty(), timeout=5).configs
    return any(c.topic_name == topic for c in configs)


def test_cluster_wide_topic_commands_reach_every_broker_right_after_a_name_server_restart(
        cluster: TwoNameServers) -> None:
    """updateTopic -c and deleteTopic -c took "the cluster's brokers" from the restarted name server: the topic was
    made on broker-a only, and deleted from broker-a only while every name server forgot it for the whole cluster
    (broker-b kept it and its messages; the name servers then disagreed about it for good)."""
    with Admin(cluster.addrs) as admin:
        admin.create_topic(OLD, cluster="DefaultCluster", read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: all(_route_brokers(n.addr, OLD) == {"broker-a", "broker-b"} for n in cluster.ns),
                   what="the topic routed to both brokers by both name servers")
    port = cluster.ns[0].addr.rpartition(":")[2]
    cluster.ns[0].kill()
    cluster.ns[0] = start_namesrv(cluster.workdir / "ns1", "-p", port)
    wait_until(lambda: _route_brokers(cluster.ns[0].addr, OLD) == {"broker-a"},
               what="broker-a registered again with the restarted name server")
    with Admin(cluster.addrs) as admin:  # a fresh client (an mqadmin process): it asks the restarted one first
        assert admin.create_topic(NEW, cluster="DefaultCluster", read_queue_nums=1,
                                  write_queue_nums=1) == ["broker-a", "broker-b"]
        assert admin.delete_topic(OLD, "DefaultCluster") == ["broker-a", "broker-b"]
    assert not _broker_has(cluster.brokers["broker-b"], OLD)
    assert _broker_has(cluster.brokers["broker-b"], NEW)


def test_a_write_perm_change_is_tried_on_every_name_server_and_says_where_it_failed(
        cluster: TwoNameServers) -> None:
    """wipeWritePerm stopped at the first name server that did not answer: those after it kept routing writes to the
    broker being drained, and the error did not say which were changed."""
    with Admin(cluster.addrs) as admin:
        admin.create_topic(OLD, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: all(_route_brokers(n.addr, OLD) for n in cluster.ns), what="the topic routed")
    down = "127.0.0.1:1"
    with Admin(f"{cluster.ns[0].addr};{down};{cluster.ns[1].addr}", rpc_timeout_ms=2000) as admin, \
            pytest.raises(MQClientError) as raised:
        admin.set_write_perm("broker-a", False)
    message = str(raised.value)
    assert down in message and f"done at {cluster.ns[0].addr}, {cluster.ns[1].addr}" in message, message
    for ns in cluster.ns:
        with grpc.insecure_channel(ns.addr) as channel:
            route = namesrv_pb2_grpc.NamesrvServiceStub(channel).GetRouteInfoByTopic(
                namesrv_pb2.GetRouteInfoRequest(topic=OLD), timeout=5).route
        assert [q.perm & 2 for q in route.queue_datas] == [0], f"write perm kept at {ns.addr}"


def test_delete_topic_goes_on_past_a_dead_master_that_never_had_the_topic(cluster: TwoNameServers) -> None:
    """deleteTopic -c asks every master of the cluster: one dead (still registered, for up to the expiry) failed the
    command, even where it had deleted the topic (the diff review)."""
    with Admin(cluster.addrs) as admin:
        admin.create_topic(OLD, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: all(_route_brokers(n.addr, OLD) for n in cluster.ns), what="the topic routed")
        cluster.brokers["broker-b"].kill()
        assert admin.delete_topic(OLD, "DefaultCluster") == ["broker-a"]
    assert not _broker_has(cluster.brokers["broker-a"], OLD)
    assert all(_route_brokers(n.addr, OLD) is None for n in cluster.ns)

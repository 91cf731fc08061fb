"""ACL users and policies reach a master's replicas (real daemons): mqadmin and the SDK change them on masters only,
and a slave copies its master's tables (``GetAclCopy``, watched through ``WaitMetadataChange``), so a promoted
replica lets in everyone its master did. Before, it knew only its bootstrap user: after a failover every other
user was refused (``UNAUTHENTICATED: unknown access key``)."""

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, Message, Producer
from client.acl_admin import AclAdmin
from client.errors import MQClientError
from common.acl import sign
from proto import acl_pb2, acl_pb2_grpc, broker_pb2, broker_pb2_grpc, common_pb2
from tests.acl.test_acl_cluster import NAMESRV_ARGS, ROOT, SETTINGS
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until

TOPIC = "AclReplicaT"
ALICE = ("alice", "alice-secret")
CAROL = ("carol", "carol-secret")
# A change reaches the slave through its watch (within about a second), well before its next periodic copy (5 s).
WATCHED_S = 3.0


class Daemons:
    def __init__(self) -> None:
        self.all: list[Daemon] = []

    def add(self, daemon: Daemon) -> Daemon:
        self.all.append(daemon)
        return daemon

    def stop(self) -> None:
        for d in reversed(self.all):
            if d.alive:
                d.stop(strict=False)


@pytest.fixture
def daemons() -> Iterator[Daemons]:
    d = Daemons()
    try:
        yield d
    finally:
        d.stop()


def runtime(ns: str, broker: Daemon) -> dict[str, str]:
    try:
        with Admin(ns, credentials=ROOT) as admin:
            return admin.broker_runtime_info(broker.addr)
    except MQClientError:  # not answering for a moment (starting, promoted)
        return {}


def acl_stub(addr: str) -> acl_pb2_grpc.AclServiceStub:
    return acl_pb2_grpc.AclServiceStub(grpc.insecure_channel(addr))


def users_of(addr: str) -> set[str]:
    """The users the broker at ``addr`` holds (read from it, not from its master)."""
    answer = acl_stub(addr).ListUser(acl_pb2.AclListRequest(), timeout=5, metadata=sign(*ROOT))
    return {u.username for u in answer.users}


def policies_of(addr: str) -> dict[str, set[tuple[str, tuple[str, ...], str]]]:
    answer = acl_stub(addr).ListAcl(acl_pb2.AclListRequest(), timeout=5, metadata=sign(*ROOT))
    return {p.subject: {(e.resource, tuple(e.actions), e.decision) for e in p.entries} for p in answer.policies}


def has_topic(addr: str, topic: str) -> bool:
    configs = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(addr)).GetAllTopicConfig(
        common_pb2.Empty(), timeout=5, metadata=sign(*ROOT)).configs
    return any(c.topic_name == topic for c in configs)


ALICE_POLICY = {(f"Topic:{TOPIC}", ("Pub", "Sub"), "Allow")}


def make_users_on_the_master_and_see_them_on(ns: str, slave: Daemon) -> None:
    """alice (Pub and Sub on TOPIC) and carol made through the masters, the slave holding both; carol deleted, and
    gone from the slave as well."""
    with Admin(ns, credentials=ROOT) as admin:
        acl = AclAdmin(admin)
        acl.create_user(*ALICE, cluster="DefaultCluster")
        acl.create_acl("User:alice", [f"Topic:{TOPIC}"], ["Pub", "Sub"], "Allow", cluster="DefaultCluster")
        acl.create_user(*CAROL, cluster="DefaultCluster")
        wait_until(lambda: {"root", "alice", "carol"} <= users_of(slave.addr)
                   and policies_of(slave.addr).get("User:alice") == ALICE_POLICY,
                   timeout=WATCHED_S, interval=0.05, what="the master's users and policy on its slave")
        acl.delete_user(CAROL[0], cluster="DefaultCluster")
        wait_until(lambda: "carol" not in users_of(slave.addr), timeout=WATCHED_S, interval=0.05,
                   what="the user deleted on the master gone from its slave")


def test_a_promoted_replica_lets_in_the_users_its_master_had_and_not_those_it_deleted(tmp_path: Path,
                                                                                       daemons: Daemons) -> None:
    ns = daemons.add(start_namesrv(tmp_path / "namesrv", *NAMESRV_ARGS, "--enable-controller",
                                   "--controller-store-path", str(tmp_path / "controller")))
    settings = {**SETTINGS, "enableControllerMode": "true", "controllerAddr": ns.addr,
                "controllerHeartBeatTimeoutMills": 3000, "brokerNotActiveTimeoutMillis": 3000}
    r1 = daemons.add(start_broker(tmp_path / "r1", "broker-a", ns.addr, brokerId=1, **settings))
    wait_until(lambda: runtime(ns.addr, r1).get("replicaRole") == "MASTER", timeout=20, what="replica 1 elected")
    r2 = daemons.add(start_broker(tmp_path / "r2", "broker-a", ns.addr, brokerId=2, **settings))
    wait_until(lambda: runtime(ns.addr, r1).get("syncStateSet") == "1,2", timeout=20, what="replica 2 in sync")
    with Admin(ns.addr, credentials=ROOT) as admin:
        admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
    wait_until(lambda: has_topic(r2.addr, TOPIC), timeout=20, what="the replica's copy of its master's topic")

    make_users_on_the_master_and_see_them_on(ns.addr, r2)
    # The copy carries secrets: only a super user (the brokers' inner credentials, root) may read it, signed.
    copy = acl_stub(r1.addr).GetAclCopy(common_pb2.Empty(), timeout=5, metadata=sign(*ROOT))
    assert {(u.username, u.password) for u in copy.users} >= {ALICE, ROOT}
    for metadata, code in ((sign(*ALICE), grpc.StatusCode.PERMISSION_DENIED),
                           (None, grpc.StatusCode.UNAUTHENTICATED),
                           (sign(ROOT[0], "not-the-secret"), grpc.StatusCode.UNAUTHENTICATED)):
        with pytest.raises(grpc.RpcError) as err:
            acl_stub(r1.addr).GetAclCopy(common_pb2.Empty(), timeout=5, metadata=metadata)
        assert err.value.code() is code, err.value.details()
        assert ALICE[1] not in (err.value.details() or "")

    r1.kill()
    wait_until(lambda: runtime(ns.addr, r2).get("replicaRole") == "MASTER", timeout=20, what="replica 2 promoted")

    def alice_sends() -> bool:
        try:
            with Producer(ns.addr, credentials=ALICE, retry_times=0, send_timeout_ms=3000) as producer:
                producer.send(Message(TOPIC, b"after failover"))
            return True
        except MQClientError as exc:
            assert "UNAUTHENTICATED" not in str(exc) and "permission" not in str(exc), str(exc)
            return False  # the route still names the dead master: not yet
    wait_until(alice_sends, timeout=20, interval=0.2, what="alice's send to the promoted replica")
    with Producer(ns.addr, credentials=CAROL, retry_times=0) as producer, \
            pytest.raises(MQClientError, match="unknown access key 'carol'"):
        producer.send(Message(TOPIC, b"deleted user"))


def test_a_restarted_slave_keeps_its_copy_of_the_acl_tables(tmp_path: Path, daemons: Daemons) -> None:
    """A static master/slave pair (RocksDB metadata): the copy is on the slave's disk, so the slave restarted while
    its master is down still lets alice in (authenticated and authorized)."""
    ns = daemons.add(start_namesrv(tmp_path / "namesrv", *NAMESRV_ARGS))
    settings = {**SETTINGS, "storeType": "defaultRocksDB", "brokerNotActiveTimeoutMillis": 3000,
                "slaveReadEnable": "true"}
    master = daemons.add(start_broker(tmp_path / "master", "broker-a", ns.addr, brokerRole="ASYNC_MASTER",
                                      **settings))
    slave_settings = {**settings, "brokerId": 1, "brokerRole": "SLAVE",
                      "haMasterAddress": runtime(ns.addr, master)["haServerAddr"]}
    slave = daemons.add(start_broker(tmp_path / "slave", "broker-a", ns.addr, **slave_settings))
    with Admin(ns.addr, credentials=ROOT) as admin:
        admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
    wait_until(lambda: has_topic(slave.addr, TOPIC), timeout=20, what="the slave's copy of its master's topic")

    make_users_on_the_master_and_see_them_on(ns.addr, slave)
    master.stop()
    slave.stop()
    slave = daemons.add(start_broker(tmp_path / "slave", "broker-a", ns.addr, **slave_settings))
    assert users_of(slave.addr) == {"root", "alice"}
    assert policies_of(slave.addr) == {"User:alice": ALICE_POLICY}

    reads = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(slave.addr))
    request = broker_pb2.QueueRequest(topic=TOPIC, queue_id=0)
    assert reads.GetMaxOffset(request, timeout=5, metadata=sign(*ALICE)).offset == 0  # Sub on the topic: allowed
    with pytest.raises(grpc.RpcError) as err:
        reads.GetMaxOffset(request, timeout=5, metadata=sign(*CAROL))
    assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED, err.value.details()

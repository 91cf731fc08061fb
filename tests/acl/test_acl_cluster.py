"""ACL on, with real daemons: a name server that refuses unsigned broker registration, two brokers with
authentication and authorization on, the SDK and mqadmin signing their calls."""

import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, Message, Producer
from client.acl_admin import AclAdmin
from client.errors import MQClientError
from common.acl import sign
from proto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.admin_cli.helpers import fails, ok
from tests.cluster import Cluster, make_cluster, wait_until

ROOT = ("root", "root-secret")
INNER = ("inner-ak", "inner-secret")
SETTINGS = {
    "authenticationEnabled": "true",
    "authorizationEnabled": "true",
    "initAuthenticationUser": json.dumps({"username": ROOT[0], "password": ROOT[1]}),
    "innerClientAuthenticationCredentials": json.dumps({"accessKey": INNER[0], "secretKey": INNER[1]}),
    "registerNameServerPeriod": 1000,
}
NAMESRV_ARGS = ("--authentication-enabled", "--inner-client-authentication-credentials",
                SETTINGS["innerClientAuthenticationCredentials"], "--init-authentication-user",
                SETTINGS["initAuthenticationUser"])
TOPIC = "AclTopic"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("acl"), namesrv_args=NAMESRV_ARGS, **SETTINGS)
    try:
        with Admin(c.addr, credentials=ROOT) as admin:
            wait_until(lambda: len(admin.all_masters()) == 2, what="both brokers registered (signed)")
            admin.create_topic(TOPIC, cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)
            wait_until(lambda: TOPIC in admin.topic_list(), what="topic routed")
            acl = AclAdmin(admin)
            acl.create_user("alice", "alice-secret", cluster="DefaultCluster")
            acl.create_user("bob", "bob-secret", cluster="DefaultCluster")
            acl.create_acl("User:alice", [f"Topic:{TOPIC}"], ["Pub"], "Allow", cluster="DefaultCluster")
        yield c
    finally:
        c.stop()


def _send(cluster: Cluster, credentials: tuple[str, str] | None) -> None:
    with Producer(cluster.addr, credentials=credentials, retry_times=0) as producer:
        producer.send(Message(TOPIC, b"hello"))


def test_a_producer_with_pub_succeeds_and_one_without_is_refused(cluster: Cluster) -> None:
    _send(cluster, ("alice", "alice-secret"))
    with pytest.raises(MQClientError, match=f"no Pub permission on Topic:{TOPIC}"):
        _send(cluster, ("bob", "bob-secret"))
    with pytest.raises(MQClientError, match=r"not signed|UNAUTHENTICATED"):
        _send(cluster, None)


def test_a_recall_needs_pub_on_the_topic(cluster: Cluster) -> None:
    with Producer(cluster.addr, credentials=("alice", "alice-secret"), retry_times=0) as alice, \
            Producer(cluster.addr, credentials=("bob", "bob-secret"), retry_times=0) as bob:
        sent = alice.send(Message(TOPIC, b"later", deliver_at_ms=int(time.time() * 1000) + 60_000))
        with pytest.raises(MQClientError, match=f"no Pub permission on Topic:{TOPIC}"):
            bob.recall(TOPIC, sent.recall_handle)
        assert alice.recall(TOPIC, sent.recall_handle) == sent.msg_id


def test_admin_rpcs_need_admin(cluster: Cluster) -> None:
    with Admin(cluster.addr, credentials=("alice", "alice-secret")) as admin, \
            pytest.raises(MQClientError, match="admin permission"):
        admin.create_topic("NotAllowed", cluster="DefaultCluster")
    with Admin(cluster.addr) as admin, pytest.raises(MQClientError, match="not signed"):
        admin.create_topic("NotAllowed", cluster="DefaultCluster")


def _fake_registration(addr: str, metadata: list[tuple[str, str]] | None) -> None:
    request = namesrv_pb2.RegisterBrokerRequest(cluster_name="DefaultCluster", broker_name="evil", broker_id=0,
                                                broker_addr="127.0.0.1:1")
    with grpc.insecure_channel(addr) as channel:
        namesrv_pb2_grpc.NamesrvServiceStub(channel).RegisterBroker(request, timeout=5, metadata=metadata)


def test_a_fake_broker_registration_without_credentials_is_refused(cluster: Cluster) -> None:
    for metadata in (None, sign("alice", "alice-secret"), sign(INNER[0], "guessed")):
        with pytest.raises(grpc.RpcError) as info:
            _fake_registration(cluster.addr, metadata)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED, info.value.details()
        assert INNER[1] not in info.value.details()
    with Admin(cluster.addr) as admin:  # route reads stay open
        assert "evil" not in {b.broker_name for b in admin.all_brokers()}


def _runtime_info(addr: str, metadata: list[tuple[str, str]]) -> None:
    from proto import broker_pb2_grpc

    with grpc.insecure_channel(addr) as channel:
        broker_pb2_grpc.BrokerServiceStub(channel).GetBrokerRuntimeInfo(common_pb2.Empty(), timeout=5,
                                                                        metadata=metadata)


def test_a_wrong_signature_and_a_stale_date_are_refused(cluster: Cluster) -> None:
    import time

    addr = cluster.brokers["broker-a"].addr
    _runtime_info(addr, sign("alice", "alice-secret"))
    for metadata, reason in ((sign("alice", "not-the-secret"), "wrong signature"),
                             (sign("alice", "alice-secret", now=time.time() - 3600), "server's clock")):
        with pytest.raises(grpc.RpcError) as info:
            _runtime_info(addr, metadata)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert reason in info.value.details()
        assert "alice-secret" not in info.value.details()


def test_mqadmin_user_and_acl_commands(cluster: Cluster) -> None:
    root = {"ROCKETMQ_ACCESS_KEY": ROOT[0], "ROCKETMQ_SECRET_KEY": ROOT[1]}
    ok(cluster.addr, "createUser", "-u", "carol", "-p", "carol-secret", env=root)
    assert "carol" in ok(cluster.addr, "listUser", env=root)
    assert "carol-secret" not in ok(cluster.addr, "--json", "listUser", env=root)
    ok(cluster.addr, "createAcl", "-s", "User:carol", "-r", "Topic:Acl*", "-a", "Pub,Sub", "-d", "Allow", env=root)
    listed = json.loads(ok(cluster.addr, "--json", "listAcl", "-s", "User:carol", env=root))
    assert "Topic:Acl*" in json.dumps(listed)
    _send(cluster, ("carol", "carol-secret"))
    ok(cluster.addr, "--access-key", ROOT[0], "--secret-key", ROOT[1], "updateUser", "-u", "carol", "-p", "new")
    ok(cluster.addr, "deleteAcl", "-s", "User:carol", env=root)
    ok(cluster.addr, "deleteUser", "-u", "carol", env=root)
    assert "carol" not in ok(cluster.addr, "listUser", env=root)
    # not an admin: refused, saying why
    line = fails(cluster.addr, "--access-key", "alice", "--secret-key", "alice-secret", "createUser", "-u", "x",
                 "-p", "y")
    assert "admin permission" in line
    assert "not signed" in fails(cluster.addr, "listUser")


def test_users_survive_a_restart_in_the_metadata_store(cluster: Cluster) -> None:
    store = Path(cluster.workdir) / "broker-a" / "store" / "config" / "users.json"
    users = {u["username"] for u in json.loads(store.read_text())["users"]}
    assert {"root", "alice", "bob"} <= users

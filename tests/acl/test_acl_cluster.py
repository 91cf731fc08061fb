"""ACL on, with real daemons: a name server that refuses unsigned broker registration, two brokers with
authentication and authorization on, the SDK and mqadmin signing their calls."""

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, Message, MessageQueue, Producer
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



def grant_users(admin: Admin, topics: tuple[str, ...], grants: dict[tuple[str, str], list[str]]) -> None:
    """Topics made on every broker of the cluster and routed, and each user made with Pub and Sub on its
    resources (the resource-check tests' setup, beside the broker's and the proxy's)."""
    for topic in topics:
        admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=1, write_queue_nums=1)
    wait_until(lambda: set(topics) <= set(admin.topic_list()), what="topics routed")
    acl = AclAdmin(admin)
    for (user, password), resources in grants.items():
        acl.create_user(user, password, cluster="DefaultCluster")
        acl.create_acl(f"User:{user}", resources, ["Pub", "Sub"], "Allow", cluster="DefaultCluster")

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


ROOT_ENV = {"ROCKETMQ_ACCESS_KEY": ROOT[0], "ROCKETMQ_SECRET_KEY": ROOT[1]}


def test_mqadmin_send_and_consume_message_sign_with_the_credentials(cluster: Cluster) -> None:
    ok(cluster.addr, "--access-key", ROOT[0], "--secret-key", ROOT[1], "sendMessage", "-t", TOPIC, "-p", "by-flag")
    ok(cluster.addr, "sendMessage", "-t", TOPIC, "-p", "by-env", env=ROOT_ENV)
    out = ok(cluster.addr, "consumeMessage", "-t", TOPIC, "-c", "1000", env=ROOT_ENV)
    assert "by-flag" in out and "by-env" in out
    # alice may send (Pub) but not read: the refusal is the broker's, so the call was signed as alice
    ok(cluster.addr, "--access-key", "alice", "--secret-key", "alice-secret", "sendMessage", "-t", TOPIC, "-p", "a")
    assert "no Sub permission" in fails(cluster.addr, "--access-key", "alice", "--secret-key", "alice-secret",
                                        "consumeMessage", "-t", TOPIC)


@pytest.mark.parametrize("access_key", ["\u00e9", "a\nb", "a\x01b", "a,b", "a/b", " a"],
                         ids=["non-ascii", "newline", "control", "comma", "slash", "leading-space"])
def test_an_access_key_that_cannot_sign_is_refused_up_front(cluster: Cluster, access_key: str) -> None:
    for args, env in (((("--access-key", access_key, "--secret-key", "x")), None),
                      ((), {"ROCKETMQ_ACCESS_KEY": access_key, "ROCKETMQ_SECRET_KEY": "x"})):
        for command in (["clusterList"], ["sendMessage", "-t", TOPIC, "-p", "x"]):
            line = fails(cluster.addr, *args, *command, env=env)  # one line: no gRPC core log before it
            assert "access key" in line and "printable ASCII" in line, line
    with pytest.raises(MQClientError, match="printable ASCII"):
        Producer(cluster.addr, credentials=(access_key, "x"))
    with pytest.raises(MQClientError, match="printable ASCII"):
        Admin(cluster.addr, credentials=(access_key, "x"))


@pytest.mark.parametrize("username", ["\u00e9", "a\nb", "a\x01b", "a,b", "a/b", "a "],
                         ids=["non-ascii", "newline", "control", "comma", "slash", "trailing-space"])
def test_a_username_that_cannot_sign_is_refused(cluster: Cluster, username: str) -> None:
    line = fails(cluster.addr, "createUser", "-u", username, "-p", "pw", env=ROOT_ENV)
    assert "username" in line and "printable ASCII" in line, line
    with Admin(cluster.addr, credentials=ROOT) as admin:  # the broker refuses it (not only the CLI)
        with pytest.raises(MQClientError, match=r"invalid argument: username .* printable ASCII"):
            AclAdmin(admin).create_user(username, "pw", cluster="DefaultCluster")
        assert username not in {u for users in AclAdmin(admin).list_users(cluster="DefaultCluster").values()
                                for u, _ in users}


def test_create_acl_needs_an_existing_user(cluster: Cluster) -> None:
    line = fails(cluster.addr, "createAcl", "-s", "User:nosuch", "-r", f"Topic:{TOPIC}", "-a", "Pub", env=ROOT_ENV)
    assert "User:nosuch does not exist" in line, line
    assert "nosuch" not in ok(cluster.addr, "listAcl", env=ROOT_ENV)


@pytest.mark.parametrize("resource", ["Topic:a b", "Topic:**", "Topic:*a*", "Topic:a*b", "Group:a/b", "Group:**",
                                      "Topic:" + "a" * 128])
def test_create_acl_refuses_an_invalid_resource_name(cluster: Cluster, resource: str) -> None:
    line = fails(cluster.addr, "createAcl", "-s", "User:alice", "-r", resource, "-a", "Pub", env=ROOT_ENV)
    assert "invalid argument: resource" in line, line


def test_create_acl_takes_names_prefixes_and_any(cluster: Cluster) -> None:
    ok(cluster.addr, "createUser", "-u", "erin", "-p", "erin-secret", env=ROOT_ENV)
    for resource in ("Topic:%RETRY%g1", "Topic:orders-*", "Topic:*", "Group:billing", "Group:bill*", "*"):
        ok(cluster.addr, "createAcl", "-s", "User:erin", "-r", resource, "-a", "Sub", env=ROOT_ENV)
    listed = {e["resource"] for e in json.loads(ok(cluster.addr, "--json", "listAcl", "-s", "User:erin",
                                                   env=ROOT_ENV))}
    assert listed == {"Topic:%RETRY%g1", "Topic:orders-*", "Topic:*", "Group:billing", "Group:bill*", "*"}
    ok(cluster.addr, "deleteUser", "-u", "erin", env=ROOT_ENV)


def test_delete_acl_of_a_missing_subject_says_there_is_nothing_to_delete(cluster: Cluster) -> None:
    line = fails(cluster.addr, "deleteAcl", "-s", "User:nosuch", env=ROOT_ENV)
    assert "User:nosuch does not exist: no ACL to delete" in line, line
    line = fails(cluster.addr, "deleteAcl", "-s", "User:bob", env=ROOT_ENV)  # bob exists, has no policy
    assert "no ACL of User:bob" in line, line


def test_update_user_needs_a_password_or_a_type(cluster: Cluster) -> None:
    line = fails(cluster.addr, "updateUser", "-u", "bob", env=ROOT_ENV)
    assert "-p" in line and "-t" in line, line
    with Admin(cluster.addr, credentials=ROOT) as admin, \
            pytest.raises(MQClientError, match=r"invalid argument: .*nothing to update"):
        AclAdmin(admin).update_user("bob", cluster="DefaultCluster")


def test_acl_mistakes_are_invalid_parameter_and_health_names_the_acl_service(cluster: Cluster):
    """A user's mistake is never SYSTEM_ERROR (left for system faults): an ACL of a subject that does not exist, a
    user made twice, an ACL to delete that is not there were. And health and reflection name AclService too."""
    from grpc_health.v1 import health_pb2

    from tests.metrics.test_metrics_daemons import health, reflected_services

    with Admin(cluster.addr, credentials=ROOT) as admin:
        acl = AclAdmin(admin)
        with pytest.raises(MQClientError, match=r"INVALID_PARAMETER: subject User:nobody does not exist"):
            acl.create_acl("User:nobody", ["Topic:x"], ["Pub"], "Allow", cluster="DefaultCluster")
        with pytest.raises(MQClientError, match=r"INVALID_PARAMETER: user 'alice' already exists"):
            acl.create_user("alice", "again-secret", cluster="DefaultCluster")
        with pytest.raises(MQClientError, match=r"INVALID_PARAMETER: no ACL of User:bob"):
            acl.delete_acl("User:bob", cluster="DefaultCluster")
    broker = next(iter(cluster.brokers.values()))
    assert "rmq.AclService" in reflected_services(broker.addr)
    assert health(broker.addr, "rmq.AclService") == health_pb2.HealthCheckResponse.SERVING


def test_cluster_list_with_a_wrong_secret_says_denied_not_no_answer(cluster: Cluster) -> None:
    """Every broker answered UNAUTHENTICATED, and clusterList showed them all as NO ANSWER and exited 0: an
    operator with a typo in the secret was told the whole cluster was down."""
    line = fails(cluster.addr, "--access-key", "root", "--secret-key", "wrong", "clusterList")
    assert "every broker refused these credentials" in line and "UNAUTHENTICATED" in line, line
    rows = json.loads(ok(cluster.addr, "--access-key", ROOT[0], "--secret-key", ROOT[1], "clusterList", "--json"))
    assert {r["status"] for r in rows} == {"OK"}


def test_a_user_created_on_some_brokers_only_says_where_it_was(cluster: Cluster) -> None:
    """createUser -c over a cluster where one broker already had the user failed naming that broker only: the
    operator could not tell it had been created on the others (and a retry then failed on those)."""
    with Admin(cluster.addr, credentials=ROOT) as admin:
        AclAdmin(admin).create_user("dora", "dora-secret", brokers=["broker-b"])
    line = fails(cluster.addr, "--access-key", ROOT[0], "--secret-key", ROOT[1], "createUser", "-u", "dora",
                 "-p", "dora-secret", "-c", "DefaultCluster")
    assert "on broker-b" in line and "(done on broker-a)" in line, line


def _open_producer_outlives_a_credential_change(ns_addr: str, user: tuple[str, str],
                                                change: Callable[[AclAdmin], object]) -> None:
    """``user``'s producer, its send stream open, is refused on the stream once ``change`` took its credentials
    away; a producer opened again with them is refused too."""
    queue = MessageQueue(TOPIC, "broker-a", 0)  # the broker whose stream is open
    with Producer(ns_addr, credentials=user, retry_times=0) as producer:
        producer.send(Message(TOPIC, b"before"), queue=queue)
        with Admin(ns_addr, credentials=ROOT) as admin:
            change(AclAdmin(admin))
        with pytest.raises(MQClientError, match="UNAUTHENTICATED"):
            producer.send(Message(TOPIC, b"after"), queue=queue)
    with pytest.raises(MQClientError, match="UNAUTHENTICATED"):
        _send_as(ns_addr, user)


def _send_as(ns_addr: str, credentials: tuple[str, str]) -> None:
    with Producer(ns_addr, credentials=credentials, retry_times=0) as producer:
        producer.send(Message(TOPIC, b"hello"))


def test_a_changed_password_ends_the_streams_opened_with_the_old_one(cluster: Cluster) -> None:
    """Credentials were checked when a stream opened only: a client holding a leaked secret kept sending and pulling
    on its open streams for as long as it ran after the operator changed the password."""
    dan = ("dan", "dan-secret")
    with Admin(cluster.addr, credentials=ROOT) as admin:
        AclAdmin(admin).create_user(*dan, cluster="DefaultCluster")
        AclAdmin(admin).create_acl("User:dan", [f"Topic:{TOPIC}"], ["Pub"], "Allow", cluster="DefaultCluster")
    _open_producer_outlives_a_credential_change(
        cluster.addr, dan, lambda acl: acl.update_user("dan", "new-secret", cluster="DefaultCluster"))
    _send_as(cluster.addr, ("dan", "new-secret"))


def test_with_authentication_only_a_deleted_user_s_streams_end(tmp_path: Path) -> None:
    """With authorization off nothing at all was checked after a stream opened: a deleted user's client went on."""
    c = make_cluster(tmp_path, ("broker-a",), **{**SETTINGS, "authorizationEnabled": "false"})
    try:
        with Admin(c.addr, credentials=ROOT) as admin:
            wait_until(lambda: len(admin.all_masters()) == 1, what="the broker registered")
            admin.create_topic(TOPIC, cluster="DefaultCluster", read_queue_nums=1, write_queue_nums=1)
            wait_until(lambda: TOPIC in admin.topic_list(), what="topic routed")
            AclAdmin(admin).create_user("erin", "erin-secret", cluster="DefaultCluster")
        _open_producer_outlives_a_credential_change(
            c.addr, ("erin", "erin-secret"), lambda acl: acl.delete_user("erin", cluster="DefaultCluster"))
    finally:
        c.stop()

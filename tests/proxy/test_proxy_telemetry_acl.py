"""ACL on the settings a v2 client reports on its Telemetry stream (mqproxy and brokers with ACL on): a producer's
publishing topics need Pub (the proxy pushes it the transaction checks of those topics, whole messages), a
consumer's group and subscribed topics Sub; refused settings are answered FORBIDDEN, naming the user, permission
and resource, and are not kept. mallory may Pub and Sub only on Mine / mine-cg, carol on Secret."""

import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from client import Admin
from client.acl_admin import AclAdmin
from common.acl import sign
from proto.v2 import definition_pb2 as d
from proto.v2 import service_pb2 as s
from proto.v2 import service_pb2_grpc as sg
from tests.acl.test_acl_cluster import NAMESRV_ARGS, ROOT, SETTINGS, grant_users
from tests.cluster import wait_until
from tests.collected_stream import collected
from tests.proxy.conftest import ProxyCluster, running_proxy_cluster

MALLORY = ("mallory", "mallory-secret")
CAROL = ("carol", "carol-secret")
SECRET, MINE = "Secret", "Mine"
PROXY_ARGS = ("--authentication-enabled", "--authorization-enabled", "--inner-client-authentication-credentials",
              str(SETTINGS["innerClientAuthenticationCredentials"]))
TX_SETTINGS = {"transactionTimeOut": 1000, "transactionCheckInterval": 1000, "transactionCheckMax": 1000}


@pytest.fixture(scope="module")
def acl_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    with running_proxy_cluster(Path(tmp_path_factory.mktemp("proxy-telemetry-acl")), proxy_args=PROXY_ARGS,
                               namesrv_args=NAMESRV_ARGS, **SETTINGS, **TX_SETTINGS) as pc:
        with Admin(pc.namesrv, credentials=ROOT) as admin:
            wait_until(lambda: len(admin.all_masters()) == 2, what="both brokers registered (signed)")
            grant_users(admin, (SECRET, MINE), {MALLORY: [f"Topic:{MINE}", "Group:mine-cg"],
                                                CAROL: [f"Topic:{SECRET}"]})
        yield pc


def _producer(*topics: str) -> d.Settings:
    return d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(topics=[d.Resource(name=t) for t in topics]))


def _consumer(group: str, topic: str) -> d.Settings:
    return d.Settings(client_type=d.SIMPLE_CONSUMER, subscription=d.Subscription(
        group=d.Resource(name=group), subscriptions=[d.SubscriptionEntry(topic=d.Resource(name=topic))]))


@contextmanager
def _telemetry(endpoint: str, user: tuple[str, str], client_id: str, settings: d.Settings
               ) -> Iterator["queue.Queue[s.TelemetryCommand]"]:
    """A Telemetry stream as ``user`` that reports ``settings`` and stays open; what the proxy sends on it."""
    stop = threading.Event()

    def commands() -> Iterator[s.TelemetryCommand]:
        yield s.TelemetryCommand(settings=settings)
        stop.wait(120)

    with grpc.insecure_channel(endpoint) as channel, collected(sg.MessagingServiceStub(channel).Telemetry(
            commands(), metadata=[*sign(*user), ("x-mq-client-id", client_id)]), stop.set, errors=False) as got:
        yield got


def _settings_answer(got: "queue.Queue[s.TelemetryCommand]") -> d.Status:
    answer = got.get(timeout=15)
    assert answer.WhichOneof("command") in ("settings", None), answer
    return answer.status


@pytest.mark.parametrize(("settings", "needed"), [
    (_producer(MINE, SECRET), f"no Pub permission on Topic:{SECRET}"),
    (_consumer("secret-cg", MINE), "no Sub permission on Group:secret-cg"),
    (_consumer("mine-cg", SECRET), f"no Sub permission on Topic:{SECRET}"),
], ids=["publishing", "group", "subscription"])
def test_settings_naming_what_the_user_may_not_use_are_forbidden(acl_proxy: ProxyCluster, settings: d.Settings,
                                                                 needed: str) -> None:
    with _telemetry(acl_proxy.endpoint, MALLORY, "mallory-cli", settings) as got:
        status = _settings_answer(got)
    assert status.code == d.Code.FORBIDDEN, status
    assert f"user 'mallory' has {needed} (Telemetry)" in status.message


def test_settings_naming_the_users_own_topics_and_group_are_answered(acl_proxy: ProxyCluster) -> None:
    for settings in (_producer(MINE), _consumer("mine-cg", MINE)):
        with _telemetry(acl_proxy.endpoint, MALLORY, "mallory-cli", settings) as got:
            status = _settings_answer(got)
        assert status.code == d.Code.OK, status


def _transactional_send(endpoint: str, client_id: str = "victim-cli", message_id: str = "V1") -> str:
    with grpc.insecure_channel(endpoint) as channel:
        answer = sg.MessagingServiceStub(channel).SendMessage(s.SendMessageRequest(messages=[d.Message(
            topic=d.Resource(name=SECRET), body=b"secret-tx-via-proxy", system_properties=d.SystemProperties(
                message_id=message_id, message_type=d.TRANSACTION))]),
            metadata=[*sign(*ROOT), ("x-mq-client-id", client_id)], timeout=10)
    assert answer.status.code == d.Code.OK, answer.status
    return answer.entries[0].transaction_id


def _orphan_checks(got: "queue.Queue[s.TelemetryCommand]", wait_s: float) -> list[s.TelemetryCommand]:
    out, deadline = [], time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            command = got.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if command.WhichOneof("command") == "recover_orphaned_transaction_command":
            out.append(command)
            break
    return out


def test_a_transaction_check_goes_only_to_a_producer_allowed_to_publish_its_topic(acl_proxy: ProxyCluster) -> None:
    with _telemetry(acl_proxy.endpoint, MALLORY, "mallory-tx", _producer(SECRET)) as mallory:
        assert _settings_answer(mallory).code == d.Code.FORBIDDEN
        tx = _transactional_send(acl_proxy.endpoint)  # never ended: the brokers check it every second
        assert _orphan_checks(mallory, 6) == [], "the check of Secret's transaction went to mallory"
        with _telemetry(acl_proxy.endpoint, CAROL, "carol-tx", _producer(SECRET)) as carol:
            assert _settings_answer(carol).code == d.Code.OK
            (check,) = _orphan_checks(carol, 30)
        command = check.recover_orphaned_transaction_command
        assert command.transaction_id == tx and command.message.body == b"secret-tx-via-proxy"
        assert _orphan_checks(mallory, 0.5) == []


def test_a_producer_whose_user_lost_pub_after_its_settings_gets_no_more_checks(acl_proxy: ProxyCluster) -> None:
    """Settings are let in once, when they come; a check carries the whole message, so each is asked for again:
    dave's stream stayed open after his grant and account were deleted, and went on getting Secret's checks."""
    dave = ("dave", "dave-secret")
    with Admin(acl_proxy.namesrv, credentials=ROOT) as admin:
        acl = AclAdmin(admin)
        acl.create_user(*dave, cluster="DefaultCluster")
        acl.create_acl("User:dave", [f"Topic:{SECRET}"], ["Pub"], "Allow", cluster="DefaultCluster")
        with _telemetry(acl_proxy.endpoint, dave, "dave-tx", _producer(SECRET)) as got:
            assert _settings_answer(got).code == d.Code.OK
            acl.delete_acl("User:dave", cluster="DefaultCluster")
            acl.delete_user("dave", cluster="DefaultCluster")
            _transactional_send(acl_proxy.endpoint, client_id="victim-3", message_id="V3")  # never ended
            assert _orphan_checks(got, 6) == [], "a check of Secret's transaction went to dave, revoked"
    assert "transaction_check_withheld" in acl_proxy.proxy.log() and "user=dave" in acl_proxy.proxy.log()


def test_a_stream_opened_under_another_users_client_id_gets_none_of_its_checks(acl_proxy: ProxyCluster) -> None:
    """A client id proves nothing (any caller may name one): mallory, opening Telemetry under the id root's producer
    sent a half message with, was handed that transaction's checks, whole messages of a topic she may not read."""
    _transactional_send(acl_proxy.endpoint, client_id="victim-2", message_id="V2")  # never ended
    with _telemetry(acl_proxy.endpoint, MALLORY, "victim-2", _producer(MINE)) as mallory:
        assert _settings_answer(mallory).code == d.Code.OK  # her own topic
        assert _orphan_checks(mallory, 6) == [], "a check of Secret's transaction went to mallory"


def _notify_termination(endpoint: str, user: tuple[str, str], client_id: str) -> d.Status:
    """NotifyClientTermination as ``user``, on a connection of its own."""
    with grpc.insecure_channel(endpoint, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        return sg.MessagingServiceStub(channel).NotifyClientTermination(
            s.NotifyClientTerminationRequest(group=d.Resource(name="mine-cg")),
            metadata=[*sign(*user), ("x-mq-client-id", client_id)], timeout=10).status


def test_only_the_user_of_a_clients_stream_may_say_it_terminates(acl_proxy: ProxyCluster) -> None:
    """mallory, naming carol's client id, would have stopped the renewing of carol's messages and dropped her
    topics' transaction checks; carol herself may, from any connection."""
    with _telemetry(acl_proxy.endpoint, CAROL, "carol-cli", _producer(SECRET)) as carol:
        assert _settings_answer(carol).code == d.Code.OK
        forged = _notify_termination(acl_proxy.endpoint, MALLORY, "carol-cli")
        assert forged.code == d.Code.FORBIDDEN, forged
        assert _notify_termination(acl_proxy.endpoint, CAROL, "carol-cli").code == d.Code.OK


def test_only_the_user_of_a_clients_stream_may_open_it_again(acl_proxy: ProxyCluster) -> None:
    """mallory, opening Telemetry under carol's client id, replaced carol's stream, and closing hers ended the
    renewing of carol's messages (they went to other consumers while carol still handled them)."""
    with _telemetry(acl_proxy.endpoint, CAROL, "carol-cli-2", _producer(SECRET)) as carol:
        assert _settings_answer(carol).code == d.Code.OK
        with _telemetry(acl_proxy.endpoint, MALLORY, "carol-cli-2", _producer(MINE)) as mallory:
            assert _settings_answer(mallory).code == d.Code.FORBIDDEN
        assert _notify_termination(acl_proxy.endpoint, MALLORY, "carol-cli-2").code == d.Code.FORBIDDEN  # still hers
        assert carol.empty(), "carol's stream was ended"


def _send_as(endpoint: str, user: tuple[str, str], topic: str) -> d.Status:
    with grpc.insecure_channel(endpoint, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        return sg.MessagingServiceStub(channel).SendMessage(s.SendMessageRequest(messages=[d.Message(
            topic=d.Resource(name=topic), body=b"per-broker", system_properties=d.SystemProperties(
                message_id=f"{user[0]}-{topic}-{time.monotonic_ns()}", message_type=d.NORMAL))]),
            metadata=[*sign(*user), ("x-mq-client-id", f"{user[0]}-cli")], timeout=10).status


def test_a_per_broker_policy_is_decided_by_the_broker_of_the_topic(acl_proxy: ProxyCluster) -> None:
    """The proxy asked the lowest-addressed master about every call, whichever broker served it: a grant made on one
    broker only (createAcl -b) let v2 clients publish to a topic of another broker, where SDK sends were refused."""
    dora = ("dora", "dora-secret")
    with Admin(acl_proxy.namesrv, credentials=ROOT) as admin:
        for topic, broker in (("OnA", "broker-a"), ("OnB", "broker-b")):
            admin.create_topic(topic, brokers=[broker], read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: {"OnA", "OnB"} <= set(admin.topic_list()), what="topics routed")
        acl = AclAdmin(admin)
        acl.create_user(*dora, cluster="DefaultCluster")
        acl.create_acl("User:dora", ["Topic:OnA"], ["Pub"], "Allow", brokers=["broker-b"])  # not where OnA is
        acl.create_acl("User:dora", ["Topic:OnB"], ["Pub"], "Allow", brokers=["broker-a"])  # not where OnB is
    assert _send_as(acl_proxy.endpoint, dora, "OnA").code == d.Code.FORBIDDEN
    assert _send_as(acl_proxy.endpoint, dora, "OnB").code == d.Code.FORBIDDEN
    with Admin(acl_proxy.namesrv, credentials=ROOT) as admin:
        AclAdmin(admin).create_acl("User:dora", ["Topic:OnA"], ["Pub"], "Allow", brokers=["broker-a"])
    assert _send_as(acl_proxy.endpoint, dora, "OnA").code == d.Code.OK

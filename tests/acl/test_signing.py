"""Signing, verification and policy decisions (no daemons)."""

import json
import time
from collections.abc import Callable

import grpc
import pytest

from common.acl import (
    ALLOW,
    DENY,
    AclEntry,
    AclError,
    Authority,
    Caller,
    User,
    check_topic,
    decide,
    method_action,
    request_resources,
    sign,
    signature,
    verify,
)
from proto import (
    acl_pb2,
    broker_pb2,
    consumer_pb2,
    controller_pb2,
    ha_pb2,
    kv_pb2,
    namesrv_pb2,
    pop_pb2,
    tiered_pb2,
    transaction_pb2,
)

SECRETS = {"alice": "alice-secret"}


def _verify(metadata: list[tuple[str, str]], now: float | None = None) -> str:
    return verify(dict(metadata), SECRETS.get, now=now)


def test_signature_is_hmac_sha1_of_the_date_as_the_official_client_makes_it() -> None:
    # hmac.new(b"sk", b"20240101T010101Z", sha1).hexdigest(): what rocketmq/v5/util/signature.py computes
    import hashlib
    import hmac

    assert signature("sk", "20240101T010101Z") == hmac.new(b"sk", b"20240101T010101Z", hashlib.sha1).hexdigest()
    md = dict(sign("ak", "sk", now=1704070861))
    assert md["x-mq-date-time"] == "20240101T010101Z"
    assert md["authorization"] == ("MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature="
                                   + signature("sk", "20240101T010101Z"))


def test_a_good_signature_is_accepted_and_upper_case_hex_too() -> None:
    md = sign("alice", "alice-secret")
    assert _verify(md) == "alice"
    auth = dict(md)["authorization"]
    head, _, sig = auth.rpartition("Signature=")
    assert _verify([md[0], ("authorization", head + "Signature=" + sig.upper())]) == "alice"


# Signed when the test runs, not when it is collected: a whole suite may take longer than the clock skew allowed.
@pytest.mark.parametrize("metadata, reason", [
    (lambda: [], "not signed"),
    (lambda: sign("alice", "wrong-secret"), "wrong signature"),
    (lambda: sign("mallory", "x"), "unknown access key"),
    (lambda: sign("alice", "alice-secret", now=time.time() - 3600), "from the server's clock"),
    (lambda: [("x-mq-date-time", "yesterday"), ("authorization", "MQv2-HMAC-SHA1 Credential=alice, "
                                                                 "SignedHeaders=x-mq-date-time, Signature=00")],
     "not yyyy"),
    (lambda: [("authorization", "Basic abc")], "algorithm"),
    (lambda: [sign("alice", "alice-secret")[0], ("authorization", "MQv2-HMAC-SHA1 Credential=alice, "
                                                                   "SignedHeaders=x-mq-date-time, Signature=\u00e9")],
     "wrong signature"),  # before: TypeError from compare_digest, answered UNKNOWN with a traceback logged
])
def test_refusals_say_which_check_failed_and_never_the_secret(metadata: Callable[[], list[tuple[str, str]]],
                                                              reason: str) -> None:
    with pytest.raises(AclError) as info:
        _verify(metadata())
    assert info.value.status is grpc.StatusCode.UNAUTHENTICATED
    assert reason in str(info.value)
    assert "alice-secret" not in str(info.value)


def test_policies_most_specific_wins_and_deny_beats_allow() -> None:
    entries = [AclEntry("Topic:pre*", ("Pub",), ALLOW), AclEntry("Topic:pre-secret", ("Pub",), DENY),
               AclEntry("Group:G", ("Sub",), ALLOW), AclEntry("*", ("Sub",), ALLOW)]
    assert decide(entries, "Topic:pre-a", "Pub") == ALLOW
    assert decide(entries, "Topic:pre-secret", "Pub") == DENY
    assert decide(entries, "Topic:other", "Pub") is None
    assert decide(entries, "Topic:other", "Sub") == ALLOW
    assert decide([AclEntry("Topic:T", ("All",))], "Topic:T", "Sub") == ALLOW


def test_methods_and_resources() -> None:
    assert method_action("/rmq.BrokerService/DeleteTopic") == "Admin"
    assert method_action("/rmq.AclService/CreateUser") == "Admin"
    assert method_action("/rmq.NamesrvService/RegisterBroker") == "Admin"
    assert method_action("/rmq.BrokerService/SendMessageStream") == "Pub"
    assert method_action("/rmq.BrokerService/RecallMessage") == "Pub"
    assert method_action("/rmq.PopService/PopMessage") == "Sub"
    assert method_action("/rmq.BrokerService/GetBrokerRuntimeInfo") is None
    frame = broker_pb2.SendStreamFrame(requests=[broker_pb2.SendMessageRequest(topic="A"),
                                                 broker_pb2.SendMessageRequest(topic="B")])
    assert request_resources("/rmq.BrokerService/SendMessageStream", frame) == ["Topic:A", "Topic:B"]
    pull = broker_pb2.PullMessageRequest(topic="T", consumer_group="G")
    assert request_resources("/rmq.BrokerService/PullMessage", pull) == ["Topic:T", "Group:G"]
    # A push consumer pulls, and asks offsets of, its group's retry topic: the group's (as its session), no grant on
    # Topic:%RETRY%G needed; another group's retries need that group too. A send there stays the topic's.
    for method, request in (("/rmq.BrokerService/PullMessageStream", broker_pb2.PullStreamFrame(requests=[
            broker_pb2.PullMessageRequest(topic="%RETRY%G", consumer_group="G")])),
            ("/rmq.BrokerService/QueryConsumerOffset", broker_pb2.QueryConsumerOffsetRequest(
                topic="%RETRY%G", consumer_group="G")),
            ("/rmq.BrokerService/GetMaxOffset", broker_pb2.QueueRequest(topic="%RETRY%G", queue_id=0))):
        assert request_resources(method, request)[0] == "Group:G", method
    other = broker_pb2.PullMessageRequest(topic="%RETRY%H", consumer_group="G")
    assert request_resources("/rmq.BrokerService/PullMessage", other) == ["Group:H", "Group:G"]
    send = broker_pb2.SendMessageRequest(topic="%RETRY%G")
    assert request_resources("/rmq.BrokerService/SendMessage", send) == ["Topic:%RETRY%G"]


# Methods any authenticated user may call: they read no message, KV entry, offset, topic's or group's metadata.
# ProducerSession names only producer groups (no resource, as upstream): what it is sent is checked instead (a
# transaction check goes only to a session whose user may Pub the message's topic).
UNCHECKED_METHODS = {
    "/rmq.BrokerService/GetBrokerRuntimeInfo", "/rmq.NamesrvService/GetRouteInfoByTopic",
    "/rmq.NamesrvService/GetBrokerClusterInfo", "/rmq.NamesrvService/GetAllTopicList",
    "/rmq.NamesrvService/GetNamesrvRuntimeInfo", "/rmq.ControllerService/GetSyncStateData",
    "/rmq.TransactionService/ProducerSession",
}


def test_every_method_of_our_services_needs_a_permission_unless_it_reads_no_data() -> None:
    """A new method is checked by ACL from its first day: one left out of the tables would be open to any
    authenticated user (as KvService/GetStream would have been)."""
    modules = (acl_pb2, broker_pb2, consumer_pb2, controller_pb2, ha_pb2, kv_pb2, namesrv_pb2, pop_pb2, tiered_pb2,
               transaction_pb2)
    methods = {f"/{service.full_name}/{method.name}" for module in modules
               for service in module.DESCRIPTOR.services_by_name.values() for method in service.methods}
    assert methods >= UNCHECKED_METHODS
    assert {m for m in methods if method_action(m) is None} == UNCHECKED_METHODS
    assert method_action("/rmq.KvService/GetStream") == "Sub"
    assert request_resources("/rmq.KvService/GetStream", kv_pb2.KvGetFrame()) == ["Topic:rmq_sys_KV"]


def test_consumer_sessions_and_locks_name_their_groups_and_topics() -> None:
    frame = consumer_pb2.HeartbeatFrame(client_id="c", consumers=[consumer_pb2.ConsumerData(
        group="G", subscriptions=[consumer_pb2.Subscription(topic="T"), consumer_pb2.Subscription(topic="%RETRY%G")],
        queues=[consumer_pb2.QueueRef(topic="U"), consumer_pb2.QueueRef(topic="%RETRY%H")])])
    assert request_resources("/rmq.ConsumerService/ConsumerSession", frame) == ["Group:G", "Topic:T", "Topic:U",
                                                                                "Group:H"]
    lock = consumer_pb2.LockBatchRequest(group="G", queues=[consumer_pb2.QueueRef(topic="T")])
    assert request_resources("/rmq.ConsumerService/UnlockBatchMQ", lock) == ["Group:G", "Topic:T"]


def test_a_topic_a_handler_read_is_checked_for_its_caller() -> None:
    class Store(Authority):
        def entries(self, username: str) -> list[AclEntry]:
            return [AclEntry("*", ("Sub",))]

    authority = Store([User("root", "pw", "Super"), User("bob", "pw")])
    check_topic("Anything", "Sub", "/rmq.BrokerService/ViewMessageById")  # no caller recorded: ACL off
    Caller("bob", authority).check_topic("T", "Sub", "/rmq.BrokerService/ViewMessageById")
    with pytest.raises(AclError, match=r"user 'bob' has no Sub permission on Topic:RMQ_SYS_TRANS_HALF_TOPIC "
                                       r"\(ViewMessageById\): a system topic, for Super users only"):
        Caller("bob", authority).check_topic("RMQ_SYS_TRANS_HALF_TOPIC", "Sub", "/rmq.BrokerService/ViewMessageById")
    assert not Caller("bob", authority).may("T", "Pub", "/rmq.TransactionService/ProducerSession")
    assert Caller("root", authority).may("rmq_sys_wheel_timer", "Sub", "/rmq.BrokerService/ViewMessageById")


def test_authority_names_the_permission_and_resource() -> None:
    class Store(Authority):
        def entries(self, username: str) -> list[AclEntry]:
            return [AclEntry("Topic:T", ("Pub",))] if username == "bob" else []

    authority = Store([User("root", "pw", "Super"), User("bob", "pw")])
    authority.check("root", "Admin", (), "/rmq.BrokerService/DeleteTopic")
    authority.check("bob", "Pub", ["Topic:T"], "/rmq.BrokerService/SendMessage")
    with pytest.raises(AclError, match="no Pub permission on Topic:U") as info:
        authority.check("bob", "Pub", ["Topic:U"], "/rmq.BrokerService/SendMessage")
    assert info.value.status is grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(AclError, match="admin permission"):
        authority.check("bob", "Admin", (), "/rmq.BrokerService/DeleteTopic")


@pytest.mark.parametrize("access_key", ["\u00e9", "a\nb", "a\x01b", "a\x7fb", "a,b", "a/b", " a", "a "])
def test_an_access_key_that_cannot_sign_is_refused_where_the_signer_is_made(access_key: str) -> None:
    from common.acl import Signer, parse_credentials, parse_user

    with pytest.raises(ValueError, match=r"access key .* printable ASCII"):
        Signer(access_key, "secret")
    with pytest.raises(ValueError, match=r"innerClientAuthenticationCredentials: accessKey .* printable ASCII"):
        parse_credentials(json.dumps({"accessKey": access_key, "secretKey": "s"}))
    with pytest.raises(ValueError, match=r"initAuthenticationUser: username .* printable ASCII"):
        parse_user(json.dumps({"username": access_key, "password": "p"}))


def test_access_keys_that_sign_are_taken() -> None:
    from common.acl import Signer

    for access_key in ("alice", "a b", "a:b=c", "A-z_0.9@x", "~!"):
        name = verify(dict(Signer(access_key, "\u00e9-secret").metadata()), {access_key: "\u00e9-secret"}.get)
        assert name == access_key


@pytest.mark.parametrize("raw, want", [("*", "*"), ("topic:T1", "Topic:T1"), ("Topic:*", "Topic:*"),
                                       ("Topic:%RETRY%g", "Topic:%RETRY%g"), ("Group:pre-*", "Group:pre-*"),
                                       (" Group : g_1 ", "Group:g_1")])
def test_resources_valid_for_their_type_are_taken(raw: str, want: str) -> None:
    from common.acl import checked_resource

    assert checked_resource(raw) == want


@pytest.mark.parametrize("raw", ["Topic:a b", "Topic:**", "Topic:*a*", "Topic:a*b", "Group:a/b", "Topic:\u00e9",
                                 "Topic:" + "a" * 128, "Topic:" + "a" * 128 + "*", "Cluster:c", "Topic:", "**"])
def test_resources_invalid_for_their_type_are_refused(raw: str) -> None:
    from common.acl import checked_resource

    with pytest.raises(ValueError, match="resource"):
        checked_resource(raw)

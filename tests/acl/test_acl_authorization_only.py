"""Authorization on, authentication off (a setup upstream allows: the client port then trusts the user a call
names, unverified). The daemons say so loudly at start, and the replication port still serves only calls signed
with the inner credentials, verified: it hands out the whole commitlog."""

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, Message, Producer
from common.acl import sign
from tests.acl.test_acl_cluster import INNER, NAMESRV_ARGS, ROOT, SETTINGS
from tests.acl.test_acl_internal_links import SignedGroup, refused_replication
from tests.cluster import start_daemon, wait_until

AUTHZ_ONLY = {**SETTINGS, "authenticationEnabled": "false", "authorizationEnabled": "true"}
WARNING = "ANY caller can claim ANY user"
TOPIC = "AuthzOnlyT"


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SignedGroup]:
    g = SignedGroup(tmp_path_factory.mktemp("acl-authz-only"), AUTHZ_ONLY, NAMESRV_ARGS)  # authorization only
    try:
        with Admin(g.ns.addr, credentials=ROOT) as admin:
            wait_until(lambda: admin.broker_runtime_info(g.master.addr)["haSlaves"] == "1", timeout=20,
                       what="the slave to connect (signed with the inner credentials)")
        yield g
    finally:
        g.stop()


def test_the_replication_port_takes_only_the_inner_credentials(group: SignedGroup) -> None:
    with Admin(group.ns.addr, credentials=ROOT) as admin:
        admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: TOPIC in admin.topic_list(), what="topic routed")
    with Producer(group.ns.addr, credentials=ROOT) as producer:  # SYNC_MASTER: acknowledged = on the slave
        producer.send(Message(TOPIC, b"replicated"))
    forged = [("authorization", f"MQv2-HMAC-SHA1 Credential={INNER[0]}, SignedHeaders=x-mq-date-time, "
                                "Signature=00"), ("x-mq-date-time", "20000101T000000Z")]
    for metadata, reason in ((None, "not signed"), (sign(*ROOT), "unknown access key 'root'"),
                             (forged, "x-mq-date-time"), (sign(INNER[0], "guessed"), "wrong signature")):
        err = refused_replication(group.ha_addr, metadata)
        assert err.code() is grpc.StatusCode.UNAUTHENTICATED, err.details()
        assert reason in (err.details() or "") and INNER[1] not in (err.details() or "")


def test_the_broker_warns_at_start_that_callers_are_trusted(group: SignedGroup) -> None:
    for broker in (group.master, group.slave):
        warnings = [line for line in broker.log().splitlines() if WARNING in line]
        assert len(warnings) == 1 and "WARNING" in warnings[0], broker.log()[-2000:]


def test_mqproxy_warns_at_start_that_callers_are_trusted(group: SignedGroup, tmp_path: Path) -> None:
    proxy = start_daemon("mqproxy", "proxy.main", [
        "-n", group.ns.addr, "--host", "127.0.0.1", "-p", "0", "--authorization-enabled",
        "--inner-client-authentication-credentials", str(SETTINGS["innerClientAuthenticationCredentials"])],
        tmp_path / "mqproxy")
    try:
        warnings = [line for line in proxy.log().splitlines() if WARNING in line]
        assert len(warnings) == 1 and "WARNING" in warnings[0], proxy.log()[-2000:]
    finally:
        proxy.stop(strict=False)
    both = start_daemon("mqproxy", "proxy.main", [
        "-n", group.ns.addr, "--host", "127.0.0.1", "-p", "0", "--authorization-enabled", "--authentication-enabled",
        "--inner-client-authentication-credentials", str(SETTINGS["innerClientAuthenticationCredentials"])],
        tmp_path / "mqproxy-both")
    try:
        assert WARNING not in both.log()
    finally:
        both.stop(strict=False)

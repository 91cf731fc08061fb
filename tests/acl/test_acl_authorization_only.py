"""Authorization on, authentication off (a setup upstream allows: the client port then trusts the user a call
names, unverified). The daemons say so loudly at start, and the replication port still serves only calls signed
with the inner credentials, verified: it hands out the whole commitlog."""

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, Message, Producer
from common.acl import sign
from proto import ha_pb2, ha_pb2_grpc
from tests.acl.test_acl_cluster import INNER, NAMESRV_ARGS, ROOT, SETTINGS
from tests.cluster import Daemon, start_broker, start_daemon, start_namesrv, wait_until

AUTHZ_ONLY = {**SETTINGS, "authenticationEnabled": "false", "authorizationEnabled": "true"}
WARNING = "ANY caller can claim ANY user"
TOPIC = "AuthzOnlyT"


class AuthzOnlyGroup:
    """A name server (ACL on), a SYNC_MASTER and its SLAVE with authorization only."""

    def __init__(self, workdir: Path) -> None:
        self.ns = start_namesrv(workdir / "namesrv", *NAMESRV_ARGS)
        self.daemons: list[Daemon] = [self.ns]
        self.master = self._start(workdir / "master", brokerRole="SYNC_MASTER")
        with Admin(self.ns.addr, credentials=ROOT) as admin:
            self.ha_addr = admin.broker_runtime_info(self.master.addr)["haServerAddr"]
        self.slave = self._start(workdir / "slave", brokerId=1, brokerRole="SLAVE", haMasterAddress=self.ha_addr)

    def _start(self, workdir: Path, **settings: object) -> Daemon:
        daemon = start_broker(workdir, "broker-a", self.ns.addr, **AUTHZ_ONLY, **settings)
        self.daemons.append(daemon)
        return daemon

    def stop(self) -> None:
        for d in reversed(self.daemons):
            if d.alive:
                d.stop(strict=False)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthzOnlyGroup]:
    g = AuthzOnlyGroup(tmp_path_factory.mktemp("acl-authz-only"))
    try:
        with Admin(g.ns.addr, credentials=ROOT) as admin:
            wait_until(lambda: admin.broker_runtime_info(g.master.addr)["haSlaves"] == "1", timeout=20,
                       what="the slave to connect (signed with the inner credentials)")
        yield g
    finally:
        g.stop()


def _replicate(addr: str, metadata: list[tuple[str, str]] | None) -> grpc.RpcError:
    hello = ha_pb2.ReplicaHandshake(cluster_name="DefaultCluster", broker_name="broker-a", broker_id=7,
                                    commit_log_end=0, mapped_file_size=1 << 30)
    with grpc.insecure_channel(addr) as channel, pytest.raises(grpc.RpcError) as err:
        list(ha_pb2_grpc.HaServiceStub(channel).Replicate(iter([ha_pb2.ReplicaFrame(handshake=hello)]), timeout=5,
                                                          metadata=metadata))
    return err.value


def test_the_replication_port_takes_only_the_inner_credentials(group: AuthzOnlyGroup) -> None:
    with Admin(group.ns.addr, credentials=ROOT) as admin:
        admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: TOPIC in admin.topic_list(), what="topic routed")
    with Producer(group.ns.addr, credentials=ROOT) as producer:  # SYNC_MASTER: acknowledged = on the slave
        producer.send(Message(TOPIC, b"replicated"))
    forged = [("authorization", f"MQv2-HMAC-SHA1 Credential={INNER[0]}, SignedHeaders=x-mq-date-time, "
                                "Signature=00"), ("x-mq-date-time", "20000101T000000Z")]
    for metadata, reason in ((None, "not signed"), (sign(*ROOT), "unknown access key 'root'"),
                             (forged, "x-mq-date-time"), (sign(INNER[0], "guessed"), "wrong signature")):
        err = _replicate(group.ha_addr, metadata)
        assert err.code() is grpc.StatusCode.UNAUTHENTICATED, err.details()
        assert reason in (err.details() or "") and INNER[1] not in (err.details() or "")


def test_the_broker_warns_at_start_that_callers_are_trusted(group: AuthzOnlyGroup) -> None:
    for broker in (group.master, group.slave):
        warnings = [line for line in broker.log().splitlines() if WARNING in line]
        assert len(warnings) == 1 and "WARNING" in warnings[0], broker.log()[-2000:]


def test_mqproxy_warns_at_start_that_callers_are_trusted(group: AuthzOnlyGroup, tmp_path: Path) -> None:
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

"""TLS (issue 18, item 2) end to end on real daemons: a CA and a server certificate for 127.0.0.1 made at test time
(``cluster/tls_certs.py``); a name server, a broker and mqproxy serving TLS only on port 0, the broker registering
over TLS (``tlsClientCaPath``), the proxy reaching the cluster over TLS (``--tls-ca``); the SDK and mqadmin given the
CA produce, consume and list; without the CA (plaintext) or with another CA they fail with one clear line."""

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from broker.broker_config import ConfigError, load_broker_config
from client import Admin, Message, MQClientError, Producer, PullConsumer
from client.results import SendStatus
from cluster.tls_certs import TlsFiles, make_tls_files
from common import tls
from tests.admin_cli.helpers import fails, mqadmin, ok
from tests.cluster import Daemon, start_broker, start_daemon, start_namesrv, wait_until

CLUSTER = "DefaultCluster"


@dataclass
class TlsCluster:
    files: TlsFiles
    other: TlsFiles  # a CA that did not sign the servers' certificate
    namesrv: Daemon
    broker: Daemon
    proxy: Daemon

    @property
    def addr(self) -> str:
        return self.namesrv.addr

    @property
    def ca(self) -> str:
        return str(self.files.ca)


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    work = tmp_path_factory.mktemp("tls")
    files = make_tls_files(work / "certs")
    other = make_tls_files(work / "certs", name="other")
    server_flags = ("--tls-enable", "--tls-cert", str(files.cert), "--tls-key", str(files.key))
    started: list[Daemon] = []
    try:
        namesrv = start_namesrv(work / "namesrv", *server_flags)
        started.append(namesrv)
        broker = start_broker(work, "broker-tls", namesrv.addr, tlsEnable="true", tlsServerCertPath=files.cert,
                              tlsServerKeyPath=files.key, tlsClientCaPath=files.ca)
        started.append(broker)
        proxy = start_daemon("proxy", "proxy.main", ["-n", namesrv.addr, "--host", "127.0.0.1", "-p", "0",
                                                     *server_flags, "--tls-ca", str(files.ca)], work / "proxy")
        started.append(proxy)
        cluster = TlsCluster(files, other, namesrv, broker, proxy)
        with Admin(cluster.addr, tls_ca=cluster.ca) as admin:  # the broker registered over TLS
            wait_until(lambda: any(b.addr == broker.addr for b in admin.all_masters()), what="broker registered")
        yield cluster
    finally:
        for daemon in reversed(started):
            if daemon.alive:
                daemon.stop()


def test_sdk_produces_and_consumes_over_tls(tls_cluster: TlsCluster) -> None:
    topic = f"TlsTopic-{uuid.uuid4().hex[:8]}"
    with Admin(tls_cluster.addr, tls_ca=tls_cluster.ca) as admin:
        admin.create_topic(topic, cluster=CLUSTER, read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: topic in admin.topic_list(), what="topic route")
    bodies = [f"m{i}".encode() for i in range(20)]
    with Producer(tls_cluster.addr, group="tls-pg", tls_ca=tls_cluster.ca) as producer:
        for body in bodies:
            producer.send(Message(topic, body))
    got: list[bytes] = []
    with PullConsumer(tls_cluster.addr, group="tls-cg", tls_ca=tls_cluster.ca) as consumer:
        for mq in consumer.queues(topic):
            got.extend(m.body for m in consumer.pull(mq, offset=0, max_nums=32).messages)
    assert sorted(got) == sorted(bodies)


def test_mqadmin_with_tls_ca(tls_cluster: TlsCluster) -> None:
    out = ok(tls_cluster.addr, "--tls-ca", tls_cluster.ca, "clusterList")
    assert "broker-tls" in out
    ok(tls_cluster.addr, "--tls-ca", tls_cluster.ca, "topicList")
    out = ok(tls_cluster.addr, "clusterList", env={"ROCKETMQ_TLS_CA": tls_cluster.ca})
    assert "broker-tls" in out
    # the KV commands reach the cluster over TLS too (its KV store is off: the answer says so)
    assert "has kvEnable=true" in fails(tls_cluster.addr, "--tls-ca", tls_cluster.ca, "kvGet", "-k", "k")


def test_mqadmin_without_or_with_another_ca_fails_in_one_line(tls_cluster: TlsCluster) -> None:
    line = fails(tls_cluster.addr, "--timeout", "3000", "clusterList")
    assert "tls" in line.lower(), line
    line = fails(tls_cluster.addr, "--timeout", "3000", "--tls-ca", str(tls_cluster.other.ca), "topicList")
    assert "CERTIFICATE_VERIFY_FAILED" in line, line
    line = fails(tls_cluster.addr, "--tls-ca", str(tls_cluster.files.ca) + ".missing", "topicList")
    assert "cannot read the TLS CA file" in line, line


def test_sdk_without_or_with_another_ca_is_refused(tls_cluster: TlsCluster) -> None:
    with pytest.raises(MQClientError, match="TLS only"), Admin(tls_cluster.addr, rpc_timeout_ms=3000) as admin:
        admin.topic_list()
    with (pytest.raises(MQClientError, match="CERTIFICATE_VERIFY_FAILED"),
          Admin(tls_cluster.addr, rpc_timeout_ms=3000, tls_ca=str(tls_cluster.other.ca)) as admin):
        admin.topic_list()
    with pytest.raises(MQClientError, match="cannot read the TLS CA file"):
        Producer(tls_cluster.addr, tls_ca=str(tls_cluster.files.ca) + ".missing")


@pytest.mark.parametrize("daemon", ["broker", "proxy"])
def test_ports_serve_tls_only(tls_cluster: TlsCluster, daemon: str) -> None:
    addr = getattr(tls_cluster, daemon).addr
    with tls.channel(addr, ca=tls.read_ca(tls_cluster.ca)) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(addr) as channel, pytest.raises(grpc.RpcError) as info:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE


def test_broker_refuses_tls_without_certificate(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tlsEnable=true"):
        load_broker_config("tlsEnable=true\ntlsServerKeyPath=/k.pem\n")
    config = load_broker_config(f"tlsEnable=true\ntlsServerCertPath={tmp_path}/c.pem\ntlsServerKeyPath={tmp_path}/k"
                                f"\ntlsClientTrustCertPath={tmp_path}/ca.pem\n")
    assert config.tls_client_ca_path == f"{tmp_path}/ca.pem" and config.tls_server() is not None
    assert load_broker_config("").tls_server() is None


def test_daemons_with_unreadable_certificate_fail_in_one_line(tmp_path: Path) -> None:
    from namesrv.main import main as namesrv_main

    assert namesrv_main(["-p", "0", "--tls-enable", "--tls-cert", str(tmp_path / "none.pem")]) == 2
    assert namesrv_main(["-p", "0", "--tls-enable", "--tls-cert", str(tmp_path / "c.pem"), "--tls-key",
                         str(tmp_path / "k.pem")]) == 1


def test_mqadmin_help_names_tls_ca() -> None:
    assert "--tls-ca" in mqadmin(None, "--help").stdout


def test_replication_over_tls(tmp_path: Path) -> None:
    """A SYNC_MASTER and its slave with TLS on every port: a send is acknowledged only once the slave has it, so
    the slave's replication link (haListenPort), its metadata sync and both registrations run over TLS."""
    files = make_tls_files(tmp_path / "certs")
    ca = str(files.ca)
    conf = {"tlsEnable": "true", "tlsServerCertPath": files.cert, "tlsServerKeyPath": files.key,
            "tlsClientCaPath": files.ca, "registerNameServerPeriod": 1000}
    started: list[Daemon] = []
    try:
        ns = start_namesrv(tmp_path / "namesrv", "--tls-enable", "--tls-cert", str(files.cert), "--tls-key",
                           str(files.key))
        started.append(ns)
        master = start_broker(tmp_path / "master", "broker-a", ns.addr, brokerRole="SYNC_MASTER", **conf)
        started.append(master)
        with Admin(ns.addr, tls_ca=ca) as admin:
            ha_addr = admin.broker_runtime_info(master.addr)["haServerAddr"]
        slave = start_broker(tmp_path / "slave", "broker-a", ns.addr, brokerId=1, brokerRole="SLAVE",
                             haMasterAddress=ha_addr, slaveReadEnable="true", **conf)
        started.append(slave)
        with Admin(ns.addr, tls_ca=ca) as admin:
            admin.create_topic("TlsHa", cluster=CLUSTER, read_queue_nums=1, write_queue_nums=1)
            wait_until(lambda: "TlsHa" in admin.topic_list(), what="topic route")
        with Producer(ns.addr, group="tls-ha-pg", tls_ca=ca, send_timeout_ms=10_000) as producer:
            result = producer.send(Message("TlsHa", b"replicated"))
        with Admin(ns.addr, tls_ca=ca) as admin:
            wait_until(lambda: int(admin.broker_runtime_info(slave.addr)["commitLogMaxOffset"]) > 0, timeout=15,
                       what="slave caught up")
        assert result.status is SendStatus.SEND_OK and result.queue_offset == 0
    finally:
        for daemon in reversed(started):
            if daemon.alive:
                daemon.stop(strict=False)

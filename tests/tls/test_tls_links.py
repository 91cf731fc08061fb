"""A daemon's own links under TLS (issue 18): the broker's S3 tier trusts tlsClientCaPath for an https endpoint
of its own (moto over https with a certificate from the test CA), and a plaintext link of the proxy's to a TLS
cluster tells the v2 client which daemon setting is missing, not the SDK's ``tls_ca=``."""

import uuid
from pathlib import Path

import grpc
import pytest

from broker.tiered.provider import s3_file_segment
from broker.tiered.provider.s3_file_segment import S3Config, ensure_bucket
from client import grpc_errors
from client.grpc_errors import StatusError, rpc_error
from cluster.s3_server import ACCESS_KEY, REGION, SECRET_KEY, s3_server_process
from cluster.tls_certs import make_tls_files
from common import tls
from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from tests.cluster import Daemon, start_broker, start_daemon, start_namesrv

# -- 4. the S3 tier trusts the broker's CA ------------------------------------------------------------------------

def test_s3_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tls, "_process_ca_path", "/etc/rocketmq/ca.pem")
    assert s3_file_segment.ca_bundle(S3Config("b", "https://s3.internal:9000")) == "/etc/rocketmq/ca.pem"
    assert s3_file_segment.ca_bundle(S3Config("b", "https://s3.internal:9000", ca_path="/own.pem")) == "/own.pem"
    assert s3_file_segment.ca_bundle(S3Config("b")) is None  # AWS's own endpoint: boto3's bundle, not a private CA
    monkeypatch.setattr(tls, "_process_ca_path", None)
    assert s3_file_segment.ca_bundle(S3Config("b", "https://s3.internal:9000")) is None


def test_s3_tier_over_https_trusts_tls_client_ca_path(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "certs")
    with s3_server_process(https=(files.cert, files.key, files.ca)) as server:
        endpoint = server.endpoint
        started: list[Daemon] = []
        try:
            started.append(start_namesrv(tmp_path / "namesrv", "--tls-enable", "--tls-cert", str(files.cert),
                                         "--tls-key", str(files.key)))
            # the bucket is made (or found) at start: a CA the S3 client ignored stops the broker there
            started.append(start_broker(
                tmp_path, "broker-s3", started[0].addr, tlsEnable="true", tlsServerCertPath=files.cert,
                tlsServerKeyPath=files.key, tlsClientCaPath=files.ca, tieredStoreEnable="true",
                tieredBackendServiceProvider="s3", tieredStoreS3Endpoint=endpoint,
                tieredStoreS3Bucket=f"tier-{uuid.uuid4().hex[:12]}", tieredStoreS3Region=REGION,
                tieredStoreS3AccessKey=ACCESS_KEY, tieredStoreS3SecretKey=SECRET_KEY))
            assert "tiered_s3_bucket_created" in started[1].log()
        finally:
            for daemon in reversed(started):
                daemon.stop(strict=False)
        # a process without tlsClientCaPath (a Spark job's) passes the CA in its S3Config
        bucket = f"tier-{uuid.uuid4().hex[:12]}"
        assert ensure_bucket(S3Config(bucket, endpoint, REGION, ACCESS_KEY, SECRET_KEY, ca_path=str(files.ca)))


# -- 5. the TLS hint names the setting of whoever opened the failing link ----------------------------------------

def test_tls_only_hint_names_the_daemon_setting_in_a_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = StatusError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; Socket closed")
    monkeypatch.setattr(tls, "_daemon", False)
    assert "tls_ca=, mqadmin --tls-ca" in str(rpc_error("route of T", "127.0.0.1:9876", closed))
    monkeypatch.setattr(tls, "_daemon", True)
    message = str(rpc_error("route of T", "127.0.0.1:9876", closed))
    assert grpc_errors.DAEMON_TLS_ONLY_HINT in message and "tls_ca=" not in message, message


def test_a_tls_client_at_a_plaintext_server_is_told_so() -> None:
    """The review's: a client given a CA, pointed at a plaintext daemon, heard only "WRONG_VERSION_NUMBER"."""
    wrong = StatusError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; last error: UNKNOWN: Tls "
                        "handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:100000f7:SSL "
                        "routines:OPENSSL_internal:WRONG_VERSION_NUMBER")
    assert "the server does not speak TLS" in str(rpc_error("route of T", "127.0.0.1:9876", wrong))


def test_proxy_without_tls_ca_before_a_tls_cluster_names_its_own_setting(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "certs")
    started: list[Daemon] = []
    try:
        started.append(start_namesrv(tmp_path / "namesrv", "--tls-enable", "--tls-cert", str(files.cert),
                                     "--tls-key", str(files.key)))
        proxy = start_daemon("proxy", "proxy.main", ["-n", started[0].addr, "--host", "127.0.0.1", "-p", "0"],
                             tmp_path / "proxy")
        started.append(proxy)
        with grpc.insecure_channel(proxy.addr) as channel:
            reply = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
                service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="TlsHintTopic")),
                metadata=[("x-mq-client-id", f"hint-{uuid.uuid4().hex[:8]}")], timeout=30)
    finally:
        for daemon in reversed(started):
            daemon.stop(strict=False)
    message = reply.status.message
    assert "Socket closed" in message and "mqproxy --tls-ca" in message and "tls_ca=" not in message, message

"""Bad TLS material is refused where it is loaded, in one line naming the file and the problem (issue 18): a server
certificate and key that do not make a pair (mismatched, swapped, unparsable), a CA file that looks like PEM but
holds no certificate, a certificate outside its validity window; a certificate that does not name the address
the daemon serves is warned about in one log line. gRPC itself would take all of these, then fail the bind with
three core log lines blaming the port, or fail every handshake later."""

import datetime
import logging
import os
import subprocess
import sys
from concurrent import futures
from pathlib import Path
from typing import NamedTuple

import grpc
import pytest

from client import MQClientError, Producer
from cluster.tls_certs import make_tls_files, subject_alt_names
from common import tls
from tests.admin_cli.helpers import fails
from tests.cluster import REPO, start_broker, start_namesrv, write_broker_conf

GARBAGE_PEM = "-----BEGIN CERTIFICATE-----\nnotbase64!!\n-----END CERTIFICATE-----\n"


class Pair(NamedTuple):
    cert: Path
    key: Path


def self_signed(directory: Path, name: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                valid_days: tuple[float, float] = (-1, 2), common_name: str | None = None) -> Pair:
    """A self-signed server certificate for ``hosts`` (no SANs when empty), valid from/to now + ``valid_days``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or name)])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now + datetime.timedelta(days=valid_days[0]))
               .not_valid_after(now + datetime.timedelta(days=valid_days[1])))
    sans = subject_alt_names(hosts)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(key, hashes.SHA256())
    directory.mkdir(parents=True, exist_ok=True)
    pair = Pair(directory / f"{name}.pem", directory / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return pair


def bad_pairs(directory: Path) -> dict[str, tuple[Path, Path, str]]:
    """case -> (certificate, key, what the error must say)."""
    one, two = self_signed(directory, "one"), self_signed(directory, "two")
    garbage = directory / "garbage.pem"
    garbage.write_text(GARBAGE_PEM)
    return {
        "mismatch": (one.cert, two.key, f"the TLS key {two.key} does not match the certificate {one.cert}"),
        "swapped": (one.key, one.cert, f"the TLS certificate {one.key} holds no certificate (it holds a PRIVATE KEY"),
        "garbage certificate": (garbage, one.key, f"the TLS certificate {garbage} holds no certificate"),
        "garbage key": (one.cert, garbage, f"the TLS key {garbage} holds no private key"),
    }


def run_daemon(module: str, *args: str, timeout: float = 30.0) -> tuple[int, list[str]]:
    """Exit code and stderr lines of a daemon that must refuse to start; one that starts fails the test."""
    env = {k: v for k, v in os.environ.items() if k not in ("GRPC_VERBOSITY", "GRPC_TRACE")}
    try:
        proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:  # run() killed it
        pytest.fail(f"{module} started (still running after {timeout}s) instead of refusing: {exc.stdout!r}")
    assert "ready on" not in proc.stdout, proc.stdout
    return proc.returncode, proc.stderr.splitlines()


def daemon_args(daemon: str, work: Path, cert: Path, key: Path) -> tuple[str, ...]:
    """``(module, *args)`` of a daemon serving TLS with ``cert`` and ``key``, its peers unreachable."""
    flags = ("--tls-enable", "--tls-cert", str(cert), "--tls-key", str(key))
    if daemon == "namesrv":
        return ("namesrv.main", "--host", "127.0.0.1", "-p", "0", *flags)
    if daemon == "proxy":
        return ("proxy.main", "-n", "127.0.0.1:1", "--host", "127.0.0.1", "-p", "0", *flags)
    conf = write_broker_conf(work / f"{daemon}.conf", {
        "brokerName": "broker-bad", "brokerIP1": "127.0.0.1", "listenPort": 0, "namesrvAddr": "127.0.0.1:1",
        "storePathRootDir": work / "store", "tlsEnable": "true", "tlsServerCertPath": cert,
        "tlsServerKeyPath": key})
    return ("broker.main", "-c", str(conf))


# -- 1. a certificate and key that do not make a pair -------------------------------------------------------------

@pytest.mark.parametrize("case", ["mismatch", "swapped", "garbage certificate", "garbage key"])
def test_bad_pair_is_refused_naming_the_files(tmp_path: Path, case: str) -> None:
    cert, key, message = bad_pairs(tmp_path)[case]
    with pytest.raises(tls.TlsError) as info:
        tls.ServerTls(str(cert), str(key)).credentials()
    assert message in str(info.value)


@pytest.mark.parametrize("daemon", ["namesrv", "proxy", "broker"])
def test_daemon_with_mismatched_pair_exits_1_in_one_line(tmp_path: Path, daemon: str) -> None:
    cert, key, message = bad_pairs(tmp_path)["mismatch"]
    code, lines = run_daemon(*daemon_args(daemon, tmp_path, cert, key))
    assert code == 1 and len(lines) == 1, lines  # no gRPC core lines before it
    assert message in lines[0] and "listen" not in lines[0], lines


# -- 2. a CA file that looks like PEM but holds no certificate ----------------------------------------------------

def test_ca_without_certificate_is_refused(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text(GARBAGE_PEM)
    key_only = self_signed(tmp_path, "srv").key
    for path in (garbage, key_only):
        with pytest.raises(tls.TlsError, match=f"the TLS CA file {path} holds no certificate"):
            tls.read_ca(str(path))
    with pytest.raises(tls.TlsError, match="holds no certificate"):
        tls.set_process_ca(str(garbage))
    files = make_tls_files(tmp_path / "good")
    assert tls.read_ca(str(files.ca)) == files.ca.read_bytes()


def test_sdk_and_mqadmin_refuse_a_ca_without_certificate(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text(GARBAGE_PEM)
    with pytest.raises(MQClientError, match=f"the TLS CA file {garbage} holds no certificate"):
        Producer("127.0.0.1:1", tls_ca=str(garbage))
    line = fails("127.0.0.1:1", "--timeout", "3000", "--tls-ca", str(garbage), "clusterList")
    assert f"the TLS CA file {garbage} holds no certificate" in line, line


@pytest.mark.parametrize("daemon", ["proxy", "broker"])
def test_daemon_with_a_ca_without_certificate_exits_1_in_one_line(tmp_path: Path, daemon: str) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text(GARBAGE_PEM)
    if daemon == "proxy":
        args: tuple[str, ...] = ("proxy.main", "-n", "127.0.0.1:1", "--host", "127.0.0.1", "-p", "0",
                                 "--tls-ca", str(garbage))
    else:
        conf = write_broker_conf(tmp_path / "broker.conf", {
            "brokerName": "broker-ca", "brokerIP1": "127.0.0.1", "listenPort": 0, "namesrvAddr": "127.0.0.1:1",
            "storePathRootDir": tmp_path / "store", "tlsClientCaPath": garbage})
        args = ("broker.main", "-c", str(conf))
    code, lines = run_daemon(*args, timeout=20)
    assert code == 1 and len(lines) == 1, lines
    assert f"the TLS CA file {garbage} holds no certificate" in lines[0], lines


# -- 3. a certificate outside its validity window, or not naming the address served -----------------------------

@pytest.mark.parametrize(("days", "message"), [((-10, -1), "expired on"), ((1, 10), "is not valid before")])
def test_certificate_outside_its_validity_is_refused(tmp_path: Path, days: tuple[float, float],
                                                     message: str) -> None:
    pair = self_signed(tmp_path, "dated", valid_days=days)
    with pytest.raises(tls.TlsError, match=f"the TLS certificate {pair.cert} {message}"):
        tls.ServerTls(str(pair.cert), str(pair.key)).credentials()


def test_daemon_with_expired_certificate_exits_1_in_one_line(tmp_path: Path) -> None:
    pair = self_signed(tmp_path, "expired", valid_days=(-10, -1))
    code, lines = run_daemon(*daemon_args("namesrv", tmp_path, pair.cert, pair.key))
    assert code == 1 and len(lines) == 1, lines
    assert f"the TLS certificate {pair.cert} expired on" in lines[0], lines


def mismatch_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "tls_certificate_host_mismatch" in r.getMessage()]


def test_certificate_not_naming_the_host_is_warned_once(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tls, "_warned", set())
    other = self_signed(tmp_path, "other", hosts=("10.9.9.9",))
    good = self_signed(tmp_path, "good")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    try:
        with caplog.at_level(logging.WARNING, logger="common.tls"):
            tls.add_port(server, "127.0.0.1:0", tls.ServerTls(str(good.cert), str(good.key)))
            assert mismatch_warnings(caplog) == []
            for _ in range(2):  # a broker binds two ports with one certificate: one line
                tls.add_port(server, "127.0.0.1:0", tls.ServerTls(str(other.cert), str(other.key)))
            tls.add_port(server, "0.0.0.0:0", tls.ServerTls(str(other.cert), str(other.key)))  # names no host
    finally:
        server.stop(None)
    [line] = mismatch_warnings(caplog)
    assert f"cert={other.cert} host=127.0.0.1 sans=IP:10.9.9.9" in line, line


@pytest.mark.parametrize(("hosts", "common_name", "host", "named"), [
    (("127.0.0.1", "localhost"), None, "127.0.0.1", True),
    (("127.0.0.1", "localhost"), None, "localhost", True),
    (("127.0.0.1",), None, "127.0.0.2", False),
    (("::1",), None, "::1", True),
    (("*.rmq.example",), None, "broker-a.rmq.example", True),
    (("*.rmq.example",), None, "a.b.rmq.example", False),
    (("10.9.9.9",), "broker.rmq.example", "broker.rmq.example", False),  # SANs given: the common name is not used
    ((), "broker.rmq.example", "broker.rmq.example", True),
])
def test_names_host(tmp_path: Path, hosts: tuple[str, ...], common_name: str | None, host: str,
                    named: bool) -> None:
    pair = self_signed(tmp_path, "leaf", hosts=hosts, common_name=common_name)
    leaf = tls._leaf(str(pair.cert), pair.cert.read_bytes())
    assert leaf is not None and tls.names_host(leaf, host) is named


def test_broker_serving_a_certificate_for_another_host_warns_in_one_line(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "certs", hosts=("10.9.9.9",))
    namesrv = start_namesrv(tmp_path / "namesrv")
    try:
        broker = start_broker(tmp_path, "broker-host", namesrv.addr, tlsEnable="true",
                              tlsServerCertPath=files.cert, tlsServerKeyPath=files.key)
        broker.stop()
    finally:
        namesrv.stop()
    lines = [line for line in broker.log().splitlines() if "tls_certificate_host_mismatch" in line]
    assert len(lines) == 1 and "host=127.0.0.1" in lines[0], lines

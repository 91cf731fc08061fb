"""TLS on gRPC: a daemon's port serves either plaintext or TLS (gRPC cannot mix them on one port), and every client
side trusts a CA file when TLS is on.

Servers: ``add_port(server, address, ServerTls(cert, key))`` (``None``: plaintext). Clients: ``channel`` /
``aio_channel`` open a TLS channel when given a CA (PEM bytes read from a file), else the process's own trust
(``set_process_ca``: what a daemon's outgoing connections use: broker.conf ``tlsClientTrustCertPath``, mqproxy
``--tls-ca``), else plaintext.

Every file is checked when it is loaded, with Python's ``ssl`` (OpenSSL): gRPC takes any PEM-looking bytes, and
then either fails the bind with three core log lines that name neither the file nor the problem (a server's
certificate and key) or fails every handshake later (a CA file).
"""

import _ssl
import ipaddress
import logging
import re
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from common import grpc_keepalive

log = logging.getLogger(__name__)
_lock = threading.Lock()  # the process CA and the host warnings given


class TlsError(OSError):
    """A certificate, key or CA file that cannot be read or used; the message names the file."""


def _read(path: str, what: str) -> bytes:
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read the TLS {what} {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise TlsError(f"the TLS {what} {path} is not PEM")
    return data


def _detail(exc: ssl.SSLError) -> str:
    """OpenSSL's words for the failure, without the ``(_ssl.c:NNNN)`` source position."""
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", text)


def _swap_hint(data: bytes, block: str) -> str:
    return f" (it holds a {block} block: certificate and key swapped?)" if f"{block}-----".encode() in data else ""


# CPython's decoder of a certificate file into the dict ``getpeercert()`` gives: the stdlib's one way to read a
# certificate's dates and names (``cryptography`` is only a dev dependency). Absent (another Python): not checked.
_decode_cert = getattr(_ssl, "_test_decode_cert", None)


def _leaf(cert_path: str, data: bytes) -> dict[str, Any] | None:
    """The chain file's first certificate (the one served), decoded; None where this Python cannot decode one."""
    if _decode_cert is None:
        return None
    try:
        return dict(_decode_cert(str(Path(cert_path).expanduser())))
    except (ssl.SSLError, ValueError):
        hint = _swap_hint(data, "PRIVATE KEY")
        raise TlsError(f"the TLS certificate {cert_path} holds no certificate{hint}") from None


def _never_prompt() -> bytes:
    return b""  # an encrypted key fails to load instead of OpenSSL asking on the terminal


def _check_pair(cert_path: str, key_path: str, key: bytes) -> None:
    """The key must parse and belong to the certificate: clients could not complete a handshake otherwise."""
    if b"PRIVATE KEY-----" not in key:
        hint = _swap_hint(key, "CERTIFICATE")
        raise TlsError(f"the TLS key {key_path} holds no private key{hint}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(Path(cert_path).expanduser(), Path(key_path).expanduser(), password=_never_prompt)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TlsError(f"the TLS key {key_path} does not match the certificate {cert_path}") from None
        raise TlsError(f"the TLS certificate {cert_path} and key {key_path} cannot be used: {_detail(exc)}") from None


def _check_validity(cert_path: str, leaf: dict[str, Any], now: float) -> None:
    """An expired (or not yet valid) certificate fails every client's handshake: refuse to serve it."""
    if now > ssl.cert_time_to_seconds(leaf["notAfter"]):
        raise TlsError(f"the TLS certificate {cert_path} expired on {leaf['notAfter']}")
    if now < ssl.cert_time_to_seconds(leaf["notBefore"]):
        raise TlsError(f"the TLS certificate {cert_path} is not valid before {leaf['notBefore']}")


def _dns_matches(pattern: str, host: str) -> bool:
    pattern, host = pattern.lower().rstrip("."), host.lower().rstrip(".")
    if pattern.startswith("*."):  # a wildcard stands for exactly one leftmost label
        return host.partition(".")[2] == pattern[2:] and "." in host
    return pattern == host


def _ip_equals(value: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    try:
        return ipaddress.ip_address(value.strip()) == ip
    except ValueError:
        return False


def names_host(leaf: dict[str, Any], host: str) -> bool:
    """Whether a client dialing ``host`` accepts this certificate's names (SANs; without any, the common name)."""
    sans: tuple[tuple[str, str], ...] = leaf.get("subjectAltName", ())
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return any(kind == "IP Address" and _ip_equals(value, ip) for kind, value in sans)
    names = [value for kind, value in sans if kind == "DNS"] if sans else [
        value for rdn in leaf.get("subject", ()) for key, value in rdn if key == "commonName"]
    return any(_dns_matches(name, host) for name in names)


# a wildcard bind advertises no one name the certificate could be checked against
_ANY_HOST = frozenset({"", "0.0.0.0", "::", "*"})
_warned: set[tuple[str, str]] = set()  # (certificate, host): a broker binds two ports with one certificate


def _warn_unless_named(cert_path: str, leaf: dict[str, Any], host: str) -> None:
    if host in _ANY_HOST or names_host(leaf, host):
        return
    with _lock:
        if (cert_path, host) in _warned:
            return
        _warned.add((cert_path, host))
    sans = ",".join(f"{kind.replace(' Address', '')}:{value}" for kind, value in leaf.get("subjectAltName", ()))
    log.warning("tls_certificate_host_mismatch cert=%s host=%s sans=%s detail=%r", cert_path, host, sans or "-",
                "the certificate does not name the address this daemon serves; clients dialing it will fail "
                "hostname verification")


@dataclass(frozen=True, slots=True)
class ServerTls:
    cert_path: str  # PEM certificate chain (leaf first)
    key_path: str  # PEM private key

    def credentials(self, host: str = "") -> grpc.ServerCredentials:
        """Checked before gRPC sees them (see the module's doc); ``host``: the address served, warned about when
        the certificate does not name it."""
        key, cert = _read(self.key_path, "key"), _read(self.cert_path, "certificate")
        leaf = _leaf(self.cert_path, cert)
        _check_pair(self.cert_path, self.key_path, key)
        if leaf is not None:
            _check_validity(self.cert_path, leaf, time.time())
            _warn_unless_named(self.cert_path, leaf, host)
        return grpc.ssl_server_credentials([(key, cert)])


def server_tls(enable: bool, cert_path: str, key_path: str) -> ServerTls | None:
    """The server side's settings, ``None`` when TLS is off; on without a certificate and key is an error."""
    if not enable:
        return None
    missing = [name for name, value in (("certificate", cert_path), ("key", key_path)) if not value.strip()]
    if missing:
        raise TlsError(f"TLS is enabled but no {' or '.join(missing)} path is given")
    return ServerTls(cert_path.strip(), key_path.strip())


def _host_of(address: str) -> str:
    return address.rsplit(":", 1)[0].strip("[]")


def add_port(server: Any, address: str, tls: ServerTls | None) -> int:
    """Bind ``address`` on a gRPC (sync or aio) server, TLS only when ``tls`` is given; returns the bound port.
    A certificate, key or pair that cannot serve raises :class:`TlsError` before the bind."""
    if tls is None:
        return int(server.add_insecure_port(address))
    return int(server.add_secure_port(address, tls.credentials(_host_of(address))))


def _check_ca(path: str, data: bytes) -> None:
    """At least one certificate, every block parsed: gRPC would take the file and fail each handshake later."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cadata=data.decode("ascii", "ignore"))  # a str is PEM (bytes: DER)
    except ssl.SSLError as exc:
        raise TlsError(f"the TLS CA file {path} holds no certificate: {_detail(exc)}") from None


def read_ca(path: str) -> bytes:
    data = _read(path, "CA file")
    _check_ca(path, data)
    return data


_process_ca: bytes | None = None
_process_ca_path: str | None = None
_daemon = False


def set_process_ca(path: str | None) -> None:
    """The CA this process's own outgoing connections trust (None or empty: plaintext). A daemon sets it once."""
    global _process_ca, _process_ca_path, _daemon
    with _lock:
        _process_ca = read_ca(path) if path else None
        _process_ca_path = str(Path(path).expanduser()) if path else None
        _daemon = True


def process_ca_path() -> str | None:
    """The file ``set_process_ca`` read (for connections not made by gRPC: the broker's S3 tier)."""
    return _process_ca_path


def is_daemon() -> bool:
    """``set_process_ca`` was called: this process is a daemon (mqbroker, mqproxy) whose own connections its CA
    setting governs, not an application's ``tls_ca``."""
    return _daemon


def _credentials(ca: bytes | None) -> grpc.ChannelCredentials | None:
    ca = ca if ca is not None else _process_ca
    return grpc.ssl_channel_credentials(root_certificates=ca) if ca is not None else None


# gRPC's reconnect backoff grows to 120 s by default: a peer back after a long outage (a broker to its clients, a
# name server or master to a broker) would stay unreachable through that channel for up to two minutes. Capped at
# 1 s, every channel this project opens reconnects within a second of its peer's return.
RECONNECT_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 1000))


def with_client_defaults(options: Any) -> list[tuple[str, Any]]:
    """``options`` and, for what they do not name, the reconnect backoff and keepalive (``common/grpc_keepalive``)
    every channel this project opens has."""
    given = list(options or ())
    named = {name for name, _ in given}
    return given + [option for option in (*RECONNECT_OPTIONS, *grpc_keepalive.CLIENT_OPTIONS)
                    if option[0] not in named]


def channel(addr: str, options: Any = None, ca: bytes | None = None) -> grpc.Channel:
    """A sync channel: TLS when ``ca`` (or the process's CA) is given, else plaintext."""
    options = with_client_defaults(options)
    creds = _credentials(ca)
    if creds is None:
        return grpc.insecure_channel(addr, options=options)
    return grpc.secure_channel(addr, creds, options=options)


def aio_channel(addr: str, options: Any = None, ca: bytes | None = None) -> grpc.aio.Channel:
    options = with_client_defaults(options)
    creds = _credentials(ca)
    if creds is None:
        return grpc.aio.insecure_channel(addr, options=options)
    return grpc.aio.secure_channel(addr, creds, options=options)

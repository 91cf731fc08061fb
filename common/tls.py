"""TLS on gRPC: a daemon's port serves either plaintext or TLS (gRPC cannot mix them on one port), and every client
side trusts a CA file when TLS is on.

Servers: ``add_port(server, address, ServerTls(cert, key))`` (``None``: plaintext). Clients: ``channel`` /
``aio_channel`` open a TLS channel when given a CA (PEM bytes read from a file), else the process's own trust
(``set_process_ca``: what a daemon's outgoing connections use: broker.conf ``tlsClientTrustCertPath``, mqproxy
``--tls-ca``), else plaintext.
"""

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc


class TlsError(OSError):
    """A certificate, key or CA file that cannot be read; the message names the file."""


def _read(path: str, what: str) -> bytes:
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read the TLS {what} {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise TlsError(f"the TLS {what} {path} is not PEM")
    return data


@dataclass(frozen=True, slots=True)
class ServerTls:
    cert_path: str  # PEM certificate chain (leaf first)
    key_path: str  # PEM private key

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(_read(self.key_path, "key"), _read(self.cert_path, "certificate"))])


def server_tls(enable: bool, cert_path: str, key_path: str) -> ServerTls | None:
    """The server side's settings, ``None`` when TLS is off; on without a certificate and key is an error."""
    if not enable:
        return None
    missing = [name for name, value in (("certificate", cert_path), ("key", key_path)) if not value.strip()]
    if missing:
        raise TlsError(f"TLS is enabled but no {' or '.join(missing)} path is given")
    return ServerTls(cert_path.strip(), key_path.strip())


def add_port(server: Any, address: str, tls: ServerTls | None) -> int:
    """Bind ``address`` on a gRPC (sync or aio) server, TLS only when ``tls`` is given; returns the bound port."""
    if tls is None:
        return int(server.add_insecure_port(address))
    return int(server.add_secure_port(address, tls.credentials()))


def read_ca(path: str) -> bytes:
    return _read(path, "CA file")


_process_ca: bytes | None = None
_lock = threading.Lock()


def set_process_ca(path: str | None) -> None:
    """The CA this process's own outgoing connections trust (None or empty: plaintext). A daemon sets it once."""
    global _process_ca
    with _lock:
        _process_ca = read_ca(path) if path else None


def _credentials(ca: bytes | None) -> grpc.ChannelCredentials | None:
    ca = ca if ca is not None else _process_ca
    return grpc.ssl_channel_credentials(root_certificates=ca) if ca is not None else None


# gRPC's reconnect backoff grows to 120 s by default: a peer back after a long outage (a broker to its clients, a
# name server or master to a broker) would stay unreachable through that channel for up to two minutes. Capped at
# 1 s, every channel this project opens reconnects within a second of its peer's return.
RECONNECT_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 1000))


def with_reconnect_backoff(options: Any) -> list[tuple[str, Any]]:
    given = list(options or ())
    named = {name for name, _ in given}
    return given + [option for option in RECONNECT_OPTIONS if option[0] not in named]


def channel(addr: str, options: Any = None, ca: bytes | None = None) -> grpc.Channel:
    """A sync channel: TLS when ``ca`` (or the process's CA) is given, else plaintext."""
    options = with_reconnect_backoff(options)
    creds = _credentials(ca)
    if creds is None:
        return grpc.insecure_channel(addr, options=options)
    return grpc.secure_channel(addr, creds, options=options)


def aio_channel(addr: str, options: Any = None, ca: bytes | None = None) -> grpc.aio.Channel:
    options = with_reconnect_backoff(options)
    creds = _credentials(ca)
    if creds is None:
        return grpc.aio.insecure_channel(addr, options=options)
    return grpc.aio.secure_channel(addr, creds, options=options)

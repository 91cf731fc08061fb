"""Turning gRPC failures and business codes into MQClientError with a useful message."""

import grpc

from client.errors import MQClientError
from common import tls
from common.response_code import code_name

TLS_ONLY_HINT = "if the server is TLS only, give the client its CA: tls_ca=, mqadmin --tls-ca or ROCKETMQ_TLS_CA"
# In a daemon the failing link is its own (the proxy's to a broker, relayed to a v2 client who cannot fix it)
DAEMON_TLS_ONLY_HINT = ("if the server is TLS only, give this daemon's own connections its CA: mqproxy --tls-ca, "
                        "broker.conf tlsClientCaPath")
# What a TLS client hears from a plaintext server ("wrong version number": its first bytes are no TLS record)
PLAINTEXT_HINT = "the server does not speak TLS: it is plaintext, or this is not its TLS port"


class StatusError(grpc.RpcError):
    """A failure with a gRPC status that no call raised itself: a request of a broken or silent stream.
    ``connected``: whether the channel it went on was connected as it failed (None: not known here)."""

    def __init__(self, code: grpc.StatusCode, details: str = "", connected: bool | None = None) -> None:
        super().__init__(details)
        self._code = code
        self._details = details
        self.connected = connected

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def never_sent(exc: grpc.RpcError) -> bool:
    """Whether the call failed before its request left: no connection to the server could be made (gRPC's own
    words for it), so a request that must not be applied twice (a compare-and-set) may be sent again."""
    code = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    return code is grpc.StatusCode.UNAVAILABLE and "failed to connect" in details


def rpc_error(what: str, addr: str, exc: grpc.RpcError) -> MQClientError:
    status = exc.code() if hasattr(exc, "code") else None
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    if status is grpc.StatusCode.INVALID_ARGUMENT:
        return MQClientError(f"{what} refused by {addr}: invalid argument: {detail}", status=status.name)
    name = status.name if status is not None else "ERROR"
    if status is grpc.StatusCode.UNAVAILABLE and "Socket closed" in (detail or "") \
            and "Stream removed" not in (detail or ""):
        detail = f"{detail} ({tls_only_hint()})"  # plaintext at a TLS port (not a stream that broke once up)
    elif status is grpc.StatusCode.UNAVAILABLE and "WRONG_VERSION_NUMBER" in (detail or ""):
        detail = f"{detail} ({PLAINTEXT_HINT})"  # TLS at a plaintext port: the server's answer is no TLS record
    return MQClientError(f"{what} failed at {addr}: {name}: {detail}", status=status.name if status else None)


def tls_only_hint() -> str:
    return DAEMON_TLS_ONLY_HINT if tls.is_daemon() else TLS_ONLY_HINT


def business_error(what: str, addr: str, code: int, remark: str) -> MQClientError:
    return MQClientError(f"{what} failed at {addr}: {code_name(code)}: {remark}", code)

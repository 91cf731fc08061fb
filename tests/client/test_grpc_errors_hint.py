"""The TLS hint goes with a connection refused as plaintext at a TLS port ("Socket closed" before anything was
said), not with a stream that broke after it was up ("Stream removed (Socket closed)": a broker killed mid-stream
read as a TLS problem)."""

import grpc

from client.grpc_errors import StatusError, rpc_error

HINT = "if the server is TLS only"


def test_the_tls_hint_is_for_a_refused_handshake_not_a_broken_stream() -> None:
    refused = StatusError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; last error: UNAVAILABLE: "
                          "ipv4:127.0.0.1:1: Socket closed")
    assert HINT in str(rpc_error("send", "127.0.0.1:1", refused))
    broken = StatusError(grpc.StatusCode.UNAVAILABLE, "Stream removed (Socket closed)")
    assert HINT not in str(rpc_error("send", "127.0.0.1:1", broken))  # was there

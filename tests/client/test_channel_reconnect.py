"""A peer back after an outage is reachable again within a second through a channel that failed all along: the
project's channels cap gRPC's reconnect backoff (which otherwise grows to 120 s). Real sockets, a real server."""

import socket
import time
from concurrent import futures

import grpc

from common import grpc_keepalive, tls

ECHO = "/test.Echo/Echo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def echo_server(port: int) -> grpc.Server:
    handler = grpc.method_handlers_generic_handler("test.Echo", {
        "Echo": grpc.unary_unary_rpc_method_handler(lambda request, context: request)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def call(channel: grpc.Channel) -> bool:
    """One fail-fast call, as a producer sends: True when it was answered."""
    try:
        channel.unary_unary(ECHO)(b"ping", timeout=1.0)
        return True
    except grpc.RpcError as exc:
        assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), exc
        return False


def test_a_channel_that_failed_for_seconds_reaches_its_returned_peer_within_a_second():
    port = free_port()
    with tls.channel(f"127.0.0.1:{port}") as channel:
        # Long enough for gRPC's default backoff to leave ~6 s (4.6 to 7.2 with its jitter) between the peer's
        # return and the next attempt; capped, the attempts come every 1 s (+-20%), so 3 s leaves a loaded
        # machine room and still tells the two apart.
        outage_end = time.monotonic() + 10.0
        while time.monotonic() < outage_end:
            assert not call(channel)
            time.sleep(0.05)
        server = echo_server(port)
        try:
            back = time.monotonic()
            while not call(channel):
                assert time.monotonic() - back < 3.0, "the channel did not reconnect within 3 s of its peer's return"
                time.sleep(0.05)
        finally:
            server.stop(None)


def test_options_a_caller_gives_win_over_the_channel_defaults():
    options = tls.with_client_defaults([("grpc.max_reconnect_backoff_ms", 5000), ("grpc.max_send_message_length", 1),
                                        ("grpc.keepalive_time_ms", 1234)])
    assert dict(options) == {"grpc.max_reconnect_backoff_ms": 5000, "grpc.max_send_message_length": 1,
                             "grpc.initial_reconnect_backoff_ms": 200, "grpc.keepalive_time_ms": 1234,
                             **{k: v for k, v in grpc_keepalive.CLIENT_OPTIONS if k != "grpc.keepalive_time_ms"}}

"""HTTP/2 keepalive on every gRPC connection this project opens or accepts.

A connection can die without a word: a NAT or firewall drops the flow, the peer's host vanishes, a middlebox keeps
acknowledging what it no longer forwards. The kernel then says nothing for about 15 minutes, or never, and every
call on the channel (the SDK's sends and pulls, mqproxy's calls to brokers, a broker's registrations and its
controller session) waited for its deadline all that time, because the channel kept the dead connection.

A client pings a connection it has heard nothing on for ``KEEPALIVE_TIME_MS`` and closes it when the ping is not
answered within ``PING_TIMEOUT_MS``; its calls fail UNAVAILABLE and the next call dials afresh. So a dead
connection is found within about 70 s. Idle connections are pinged too (an idle channel's dead connection would
cost its next call a whole deadline), with no limit on pings without data (gRPC's default stops after two).
A ping is a few bytes, answered by gRPC's own threads: a busy Python process still answers it.

The timeout is long because a ping's answer queues behind whatever the peer is still sending, and it applies to
every ping (gRPC's flow-control probes too): at 10 s, a 3 MiB message on a healthy 100 KB/s link failed at every
try (the link was taken for dead while the data drained), where it took 32 s before. This gRPC (1.85) times a
keepalive ping out by ``grpc.http2.ping_timeout_ms``; ``grpc.keepalive_timeout_ms`` alone did not change it. Both
are set, for versions that read either.

A server allows those pings (by default it counts a ping without data more often than every 5 minutes as abuse
and drops the connection after two), and pings its own idle clients, so a dead consumer's long poll or stream is
let go of as well.
"""

KEEPALIVE_TIME_MS = 10_000
PING_TIMEOUT_MS = 60_000

CLIENT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", PING_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", PING_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)

SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.keepalive_time_ms", 3 * KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", PING_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", PING_TIMEOUT_MS),
    ("grpc.http2.max_pings_without_data", 0),
)

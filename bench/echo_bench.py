"""The ceiling every figure is divided by: a bare gRPC echo (``bench/echo_server.py``, an aio server in its own
process, like a broker) driven from this process with the same client concurrency as the scenarios.

- unary: one 1 KiB payload per call, ``window`` calls in flight (calls/s);
- batch: 64 x 1 KiB per call, ``window`` calls in flight (msgs/s);
- stream: the same 64 x 1 KiB frames echoed on one bidirectional stream, ``window`` frames in flight, through
  the SDK's own stream plumbing (``client/rpc_stream.py``; the frame is the payload of a message with a
  request id) (msgs/s): the ceiling of the SDK's send stream;
- pull: pulls of 64 on the SDK's pull stream, ``window`` in flight, each answered at once with 64 stored records
  of 1 KiB held in memory, and read into the SDK's pulled messages as a pull consumer's are (msgs/s): the ceiling
  of SDK consumption, what a broker that reads nothing would give;
- p50 / p99: round trip of one 1 KiB call, paced at the latency scenario's rate (ms);
- rss: the echo server's resident memory after all that (MiB).

The runner measures it at the start and at the end of a run and uses the mean; the two are kept in the JSON
so a run whose machine got busier half-way shows it.
"""

import time
from concurrent.futures import Future

import grpc

from bench.daemons import Daemon
from bench.echo_server import METHOD, PULL_STREAM_METHOD, STREAM_METHOD
from bench.harness import BATCH, BODY, Config, Metric, paced, percentile, windowed_rate
from client.message_decoding import decode_pulled
from client.rpc_stream import RpcStream
from common.encoded_fields import bytes_field
from proto import broker_pb2

METRICS = [
    Metric("echo.unary", "gRPC echo, unary 1 KiB", "calls/s", echo="unary", short="echo unary"),
    Metric("echo.batch", "gRPC echo, batch of 64 x 1 KiB", "msgs/s", echo="batch", short="echo batch"),
    Metric("echo.stream", "gRPC stream echo, frames of 64 x 1 KiB", "msgs/s", echo="stream", short="echo stream"),
    Metric("echo.pull", "gRPC pull echo, 64 x 1 KiB from memory", "msgs/s", echo="pull",
           short="echo pull"),
    Metric("echo.p50", "gRPC echo round trip p50 at the latency rate", "ms", echo="p50", short="echo p50"),
    Metric("echo.p99", "gRPC echo round trip p99 at the latency rate", "ms", echo="p99", short="echo p99"),
    Metric("echo.rss", "gRPC echo server RSS", "MiB", echo="rss", short="echo RSS"),
]
RECORDS_FIELD = broker_pb2.SendMessageRequest.DESCRIPTOR.fields_by_name["records"].number
KEYS = ("unary", "batch", "stream", "pull", "p50", "p99", "rss")


def measure(server: Daemon, cfg: Config) -> dict[str, float]:
    channel = grpc.insecure_channel(server.addr, options=[("grpc.max_receive_message_length", 64 << 20),
                                                          ("grpc.max_send_message_length", 64 << 20)])
    try:
        echo = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)  # bytes as they are
        batch = BODY * BATCH
        unary_rate = windowed_rate(lambda: echo.future(BODY, timeout=10), lambda r: 1, cfg.window, cfg.seconds,
                                   cfg.warmup)
        batch_rate = windowed_rate(lambda: echo.future(batch, timeout=10), lambda r: BATCH, cfg.window,
                                   cfg.seconds, cfg.warmup)
        stream_rate = _stream_rate(channel, batch, cfg)
        pull_rate = _pull_rate(channel, cfg)
        samples: list[float] = []

        def one(_: int) -> None:
            t0 = time.perf_counter()
            echo(BODY, timeout=10)
            samples.append((time.perf_counter() - t0) * 1000)

        paced(cfg.latency_rate, cfg.latency_seconds, one)
        return {"unary": unary_rate, "batch": batch_rate, "stream": stream_rate, "pull": pull_rate,
                "p50": percentile(samples, 50),
                "p99": percentile(samples, 99), "rss": server.rss_mib()}
    finally:
        channel.close()


def open_echo_stream(channel: grpc.Channel, window: int) -> RpcStream:
    """The echo's stream as the SDK uses its streams: frames of requests, each with its request id; each frame
    comes back as it went (read as one answer a request)."""
    call = channel.stream_stream(STREAM_METHOD, request_serializer=None, response_deserializer=_as_answers)
    return RpcStream(call, "echo-stream", window=window)


def echo_on_stream(stream: RpcStream, payload: bytes) -> "Future[broker_pb2.SendMessageResponse]":
    """One request carrying ``payload`` as an encoded ``records`` field, echoed on ``stream``."""
    return stream.call(broker_pb2.SendMessageRequest(), 10, bytes_field(RECORDS_FIELD, payload))


def _stream_rate(channel: grpc.Channel, frame: bytes, cfg: Config) -> float:
    """Frames of ``BATCH`` records echoed on one stream, ``window`` in flight."""
    stream = open_echo_stream(channel, cfg.window)
    try:
        return windowed_rate(lambda: echo_on_stream(stream, frame), lambda r: BATCH, cfg.window, cfg.seconds,
                             cfg.warmup)
    finally:
        stream.close()


def _pull_rate(channel: grpc.Channel, cfg: Config) -> float:
    """Pulls of ``BATCH`` on one stream, ``window`` in flight, counted as ``cluster_bench.consume_rate`` counts a
    pull consumer's (the answer's records read into the SDK's pulled messages)."""
    call = channel.stream_stream(PULL_STREAM_METHOD, request_serializer=None,
                                 response_deserializer=broker_pb2.PullStreamAnswers.FromString)
    stream = RpcStream(call, "echo-pull-stream", window=cfg.window)

    def pull() -> "Future[broker_pb2.PullMessageResponse]":  # a request each, as the SDK's pull_async builds
        return stream.call(broker_pb2.PullMessageRequest(consumer_group="bench", topic="BenchT", max_msg_nums=BATCH),
                           10)

    try:
        return windowed_rate(pull,
                             lambda r: len(decode_pulled(r.records, r.offset_delta, "*")), cfg.window, cfg.seconds,
                             cfg.warmup)
    finally:
        stream.close()


def _as_answers(frame: bytes) -> broker_pb2.SendStreamAnswers:
    # The echoed frame holds the requests themselves (records included): read it, answer each one by its id.
    requests = broker_pb2.SendStreamFrame.FromString(frame).requests
    return broker_pb2.SendStreamAnswers(responses=[broker_pb2.SendMessageResponse(request_id=r.request_id)
                                                   for r in requests])


def combine(runs: list[dict[str, float]]) -> dict[str, float]:
    """The mean of each figure over the runs that have it."""
    return {k: sum(r[k] for r in runs) / len(runs) for k in KEYS if runs and all(k in r for r in runs)}

"""A bare gRPC echo server (the ceiling every cluster benchmark is compared with): aio server, bytes in,
the same bytes out (``Echo``); a bidirectional stream that answers each frame with the same frame
(``EchoStream``, the ceiling of the SDK's send stream); and a pull stream that answers every pull of a frame with
the same 64 records of 1 KiB held in memory (``PullStream``, the ceiling of the SDK's pull stream: a broker that
reads nothing). ``python -m bench.echo_server`` prints ``echo ready on HOST:PORT``."""

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import grpc

from common.message_properties import encode_properties
from common.response_code import ResponseCode
from common.wire_batch import encode_wire_batch
from proto import broker_pb2

SERVICE = "bench.Echo"
METHOD = f"/{SERVICE}/Echo"
STREAM_METHOD = f"/{SERVICE}/EchoStream"
PULL_STREAM_METHOD = f"/{SERVICE}/PullStream"
PULLED = 64
# What every pull is answered with: records as a broker stores them, of the size the benchmarks send.
RECORDS = encode_wire_batch(b"BenchT", [os.urandom(1024)] * PULLED, [encode_properties({"TAGS": "TagA"})] * PULLED,
                            born_timestamp=1, born_host=bytes(8))


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def _echo_stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


async def _pull_stream(frames: AsyncIterator[broker_pb2.PullStreamFrame],
                       context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    async for frame in frames:
        yield broker_pb2.PullStreamAnswers(responses=[
            broker_pb2.PullMessageResponse(code=ResponseCode.SUCCESS, records=RECORDS, request_id=r.request_id,
                                           next_begin_offset=r.queue_offset + PULLED) for r in frame.requests],
        ).SerializeToString()


async def serve() -> None:
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20),
                                      ("grpc.max_send_message_length", 64 << 20)])
    pull_stream = grpc.stream_stream_rpc_method_handler(
        _pull_stream, request_deserializer=broker_pb2.PullStreamFrame.FromString)
    handler = grpc.method_handlers_generic_handler(SERVICE, {"Echo": grpc.unary_unary_rpc_method_handler(_echo),
                                                             "EchoStream": grpc.stream_stream_rpc_method_handler(
                                                                 _echo_stream),
                                                             "PullStream": pull_stream})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"echo ready on 127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)


if __name__ == "__main__":
    asyncio.run(serve())

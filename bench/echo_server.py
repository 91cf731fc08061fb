"""A bare gRPC echo server (the ceiling every cluster benchmark is compared with): aio server, bytes in,
the same bytes out (``Echo``); and a bidirectional stream that answers each frame with the same frame
(``EchoStream``, the ceiling of the SDK's send and pull streams). ``python -m bench.echo_server`` prints
``echo ready on HOST:PORT``."""

import asyncio
import signal
from collections.abc import AsyncIterator

import grpc

SERVICE = "bench.Echo"
METHOD = f"/{SERVICE}/Echo"
STREAM_METHOD = f"/{SERVICE}/EchoStream"


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def _echo_stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


async def serve() -> None:
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20),
                                      ("grpc.max_send_message_length", 64 << 20)])
    handler = grpc.method_handlers_generic_handler(SERVICE, {"Echo": grpc.unary_unary_rpc_method_handler(_echo),
                                                             "EchoStream": grpc.stream_stream_rpc_method_handler(
                                                                 _echo_stream)})
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

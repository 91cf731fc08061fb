"""Lets grpcio-testing drive our grpc.aio servicers.

What grpcio-testing can do: ``grpc_testing.server_from_dictionary`` dispatches an RPC by its method descriptor to a
servicer, feeds it a request (or a request stream), runs it in a thread of its own, and reports the outcome as
gRPC would (``termination()`` -> response, status code, details), with a ``ServicerContext`` whose ``abort``
records the status. What it cannot do: call ``async def`` handlers (it calls the method and takes the coroutine
object for the response), and it never serializes messages or runs server interceptors.

So each servicer is wrapped in a :class:`SyncServicer`: every RPC method becomes a plain function that runs the
real coroutine on the event loop that owns the broker (or name server) and blocks for its result, and the
context handed to the coroutine is :class:`AioContext`, whose ``async abort`` records the status on
grpc_testing's context and then raises ``grpc.aio.AbortError`` exactly as grpc.aio does (so our RPC boundary sees
what it sees in production). The tests do the serializing themselves.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass


class AioContext:
    """The part of ``grpc.aio.ServicerContext`` our handlers use, over grpc_testing's sync context."""

    def __init__(self, sync_context: grpc.ServicerContext) -> None:
        self._sync = sync_context

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: tuple = ()) -> None:
        with contextlib.suppress(Exception):  # grpc_testing records the status, then raises a bare Exception
            self._sync.abort(code, details)
        raise grpc.aio.AbortError()

    def peer(self) -> str:  # grpc_testing's context has none
        return "ipv4:127.0.0.1:0"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sync, name)


async def _aiter(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


class SyncServicer:
    """The RPC methods of ``service`` on ``servicer``, as blocking functions grpc_testing can call."""

    def __init__(self, servicer: object, service: ServiceDescriptor, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for method in service.methods:
            handler = getattr(servicer, method.name, None)
            if handler is not None:
                setattr(self, method.name, self._bridge(handler, method))

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _bridge(self, handler: Callable[..., Any], method: MethodDescriptor) -> Callable[..., Any]:
        if method.server_streaming:
            decode = GetMessageClass(method.output_type).FromString

            def streamed(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                if method.client_streaming:  # grpc_testing's request iterator blocks: drain it in this thread
                    request = _aiter(list(request))
                stream = handler(request, AioContext(context))
                while True:
                    try:
                        item = self._run(stream.__anext__())
                    except (StopAsyncIteration, grpc.aio.AbortError):  # done, or the status is recorded
                        return
                    yield decode(item) if isinstance(item, bytes) else item  # answer frames leave encoded

            return streamed

        def unary(request: Any, context: grpc.ServicerContext) -> Any:
            if method.client_streaming:  # grpc_testing's request iterator blocks: drain it in this thread
                request = _aiter(list(request))
            try:
                return self._run(handler(request, AioContext(context)))
            except grpc.aio.AbortError:  # the status is recorded; grpc_testing ignores what follows
                return None

        return unary

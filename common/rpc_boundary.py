"""The one place where a gRPC handler's outcome becomes what the caller sees (broker and name server alike).

- ``Refusal`` (a business outcome): the RPC's response message with ``code`` and ``remark``. An RPC whose
  response has no code (a stream, or a list of everything) answers gRPC FAILED_PRECONDITION naming the code.
- ``RequestError`` (a malformed request): gRPC INVALID_ARGUMENT with its message.
- a full disk (ENOSPC, or RocksDB saying so): logged on one line and answered as a ``Refusal`` with
  SERVICE_NOT_AVAILABLE, "disk full: ...", as the commitlog refuses a write when its disk fills.
- anything else: logged once at ERROR with its traceback and the RPC's name, and answered gRPC INTERNAL naming
  the exception (never gRPC's bare UNKNOWN).
- bytes that are not the request message at all: INVALID_ARGUMENT too. gRPC decodes a request before any
  handler runs and answers a decode failure with a bare UNKNOWN (and a traceback in the log), so servers install
  :class:`RequestDecoding`, which hands the handler an :class:`UndecodableRequest` instead.

Servicer classes opt in with the ``@rpc_boundary(SERVICE_DESCRIPTOR)`` class decorator, which wraps each RPC
method they define; handlers below it raise and never build error responses themselves.
"""

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.descriptor import Descriptor, MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from common.refusal import Refusal
from common.request_error import RequestError
from common.response_code import code_name
from common.storage_refusal import disk_full_refusal, is_disk_full

log = logging.getLogger(__name__)

MAX_DETAILS_CHARS = 1000  # status details travel in an HTTP/2 trailer: keep them well under its size limit
S = TypeVar("S", bound=type)
# A response message class with ``code`` and ``remark`` fields, built with them as keywords (the protobuf stubs
# type a bare ``type[Message]`` as taking no fields).
CodedResponseClass = Callable[..., Message]


def rpc_boundary(service: ServiceDescriptor) -> Callable[[S], S]:
    """Class decorator: guard every method of ``service`` the servicer class defines (the others stay
    UNIMPLEMENTED, as generated)."""

    def wrap(cls: S) -> S:
        for method in service.methods:
            impl = cls.__dict__.get(method.name)
            if impl is not None:
                setattr(cls, method.name, _guarded(impl, method))
        return cls

    return wrap


class UndecodableRequest:
    """What a request whose bytes do not parse decodes to (see :class:`RequestDecoding`)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class RequestDecoding(grpc.aio.ServerInterceptor):
    """Decodes requests without raising: bytes that do not parse become an :class:`UndecodableRequest`, which
    the guarded handler answers INVALID_ARGUMENT. On bidirectional streams it also lets already encoded answer
    frames (bytes) through."""

    def __init__(self) -> None:
        self._handlers: dict[str, tuple[Any, Any]] = {}  # method -> (its handler, the lenient copy): made once

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Any],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        cached = self._handlers.get(method)
        if cached is None or cached[0] is not handler:
            lenient = handler._replace(request_deserializer=_lenient(handler.request_deserializer))
            if handler.request_streaming and handler.response_streaming and handler.response_serializer:
                lenient = lenient._replace(response_serializer=_passing_bytes(handler.response_serializer))
            cached = handler, lenient
            self._handlers[method] = cached
        return cached[1]


def _lenient(decode: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decoded(data: bytes) -> Any:
        try:
            return decode(data)
        except Exception as exc:  # DecodeError, or what the parser raises for invalid UTF-8 and the like
            return UndecodableRequest(str(exc) or type(exc).__name__)

    return decoded


def _passing_bytes(encode: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A bidirectional stream may answer with frames it encoded itself (``common/stream_answers.py``)."""

    def encoded(response: Any) -> bytes:
        return response if type(response) is bytes else encode(response)

    return encoded


async def _checked_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, UndecodableRequest):
            raise RequestError(f"a request message does not parse: {request.reason}")
        yield request


def refusal_response_class(output: Descriptor) -> CodedResponseClass | None:
    """The response message a refusal is answered with; None when it has no code and remark to carry it."""
    fields = output.fields_by_name
    return GetMessageClass(output) if "code" in fields and "remark" in fields else None


def _guarded(impl: Callable[..., Any], method: MethodDescriptor) -> Callable[..., Any]:
    rpc = method.full_name
    response_class = None if method.server_streaming else refusal_response_class(method.output_type)

    if method.server_streaming:
        async def streamed(self: object, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                _check_decoded(request)
                async for item in impl(self, request, context):
                    yield item
            except grpc.aio.AbortError:  # the handler aborted on purpose: its status stands
                raise
            except Exception as exc:
                await _fail(context, rpc, exc, None)

        streamed.__name__ = impl.__name__
        return streamed

    async def unary(self: object, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            if method.client_streaming:
                return await impl(self, _checked_stream(request), context)
            _check_decoded(request)
            return await impl(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            return await _fail(context, rpc, exc, response_class)

    unary.__name__ = impl.__name__
    return unary


def _check_decoded(request: Any) -> None:
    if isinstance(request, UndecodableRequest):
        raise RequestError(f"the request does not parse: {request.reason}")


async def _fail(context: grpc.aio.ServicerContext, rpc: str, exc: Exception,
                response_class: CodedResponseClass | None) -> Message:
    """The answer for a handler that raised ``exc``: a refusal's response, or an abort (which raises)."""
    if isinstance(exc, Refusal):
        if response_class is not None:
            return response_class(code=exc.code, remark=exc.remark)
        await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"{code_name(exc.code)}: {exc.remark}")
    if isinstance(exc, RequestError):
        await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    if is_disk_full(exc):  # not a bug: one line, and the caller is told the disk is full
        log.error("rpc_refused_disk_full rpc=%s error=%r", rpc, exc)
        return await _fail(context, rpc, disk_full_refusal(exc), response_class)
    log.error("rpc_failed rpc=%s error=%s", rpc, type(exc).__name__, exc_info=exc)
    await _abort(context, grpc.StatusCode.INTERNAL, f"{rpc} failed: {type(exc).__name__}: {exc}")


async def _abort(context: grpc.aio.ServicerContext, status: grpc.StatusCode, details: str) -> NoReturn:
    if len(details) > MAX_DETAILS_CHARS:
        details = f"{details[:MAX_DETAILS_CHARS]}... ({len(details) - MAX_DETAILS_CHARS} more characters)"
    # Lone surrogates cannot travel as UTF-8: escape them rather than fail the abort itself.
    await context.abort(status, details.encode("utf-8", "backslashreplace").decode("utf-8"))
    raise AssertionError("unreachable: abort raises")


class GenericHandlersOnly:
    """Passed to a generated ``add_*Servicer_to_server`` in place of the server: keeps the generic handler and
    drops the registered-method table. grpc's aio server waits on one future per registered method for every
    call it takes; a generic handler is a dictionary lookup (about 5% more unary calls a second here)."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        pass  # the generic handler added with them serves the same methods

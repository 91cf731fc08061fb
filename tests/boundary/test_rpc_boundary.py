"""The RPC boundary alone: what a handler raises becomes a response code, INVALID_ARGUMENT, FAILED_PRECONDITION
or INTERNAL (logged once, with the RPC's name and the traceback). Driven through grpcio-testing."""

import asyncio
import errno
import logging
import types
from collections.abc import Iterator
from typing import Any

import grpc
import grpc_testing
import pytest

from common.refusal import Refusal
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.rpc_boundary import MAX_DETAILS_CHARS, RequestDecoding, UndecodableRequest, rpc_boundary
from proto import broker_pb2, common_pb2, kv_pb2, kv_pb2_grpc
from tests.boundary.aio_bridge import SyncServicer
from tests.boundary.in_process import LoopThread

KV_SERVICE = kv_pb2.DESCRIPTOR.services_by_name["KvService"]
METHODS = KV_SERVICE.methods_by_name


@rpc_boundary(KV_SERVICE)
class RaisingKvServicer(kv_pb2_grpc.KvServiceServicer):
    """Every RPC raises ``self.error`` (after one chunk, for the stream); None answers normally."""

    error: Exception | None = None

    async def Write(self, request, context):
        if self.error is not None:
            raise self.error
        return kv_pb2.KvWriteResponse(code=ResponseCode.SUCCESS, applied=True)

    async def ExportSnapshot(self, request, context):
        yield kv_pb2.KvSnapshotChunk(header=kv_pb2.KvSnapshotHeader(shard=request.shard))
        if self.error is not None:
            raise self.error

    async def ImportSnapshot(self, request_iterator, context):
        chunks = [chunk async for chunk in request_iterator]
        if self.error is not None:
            raise self.error
        return kv_pb2.KvImportResponse(code=ResponseCode.SUCCESS, imported=len(chunks))

    async def Get(self, request, context):  # aborts by itself: the boundary leaves that status alone
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "handler's own status")


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    thread = LoopThread()
    yield thread.loop
    thread.stop()


@pytest.fixture
def servicer() -> RaisingKvServicer:
    return RaisingKvServicer()


@pytest.fixture
def server(servicer: RaisingKvServicer, loop: asyncio.AbstractEventLoop) -> Any:
    return grpc_testing.server_from_dictionary({KV_SERVICE: SyncServicer(servicer, KV_SERVICE, loop)},
                                               grpc_testing.strict_real_time())


@pytest.fixture
def boundary_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.ERROR, logger="common.rpc_boundary")
    return caplog


def write(server: Any) -> tuple[Any, grpc.StatusCode, str]:
    rpc = server.invoke_unary_unary(METHODS["Write"], (), kv_pb2.KvWriteRequest(key=b"k"), 10)
    response, _, code, details = rpc.termination()
    return response, code, details


def test_a_normal_answer_passes_through(server):
    response, code, _ = write(server)
    assert code is grpc.StatusCode.OK and response.code == ResponseCode.SUCCESS and response.applied


def test_a_refusal_is_the_response_code_and_remark(server, servicer, boundary_log):
    servicer.error = Refusal(ResponseCode.NOT_LEADER_FOR_QUEUE, "broker b does not lead shard 3")
    response, code, _ = write(server)
    assert code is grpc.StatusCode.OK
    assert (response.code, response.remark) == (501, "broker b does not lead shard 3")
    assert not boundary_log.records


def test_a_request_error_is_invalid_argument_with_its_message(server, servicer, boundary_log):
    servicer.error = RequestError("key is empty")
    _, code, details = write(server)
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "key is empty")
    assert not boundary_log.records


def test_an_unexpected_exception_is_internal_and_logged_once_with_its_traceback(server, servicer, boundary_log):
    servicer.error = ZeroDivisionError("division by zero")
    _, code, details = write(server)
    assert code is grpc.StatusCode.INTERNAL
    assert details == "rmq.KvService.Write failed: ZeroDivisionError: division by zero"
    (record,) = boundary_log.records
    assert record.levelno == logging.ERROR and "rpc=rmq.KvService.Write" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device", "config/mapping.json"),
                                   Exception("IO error: No space left on device: While appending to file: 9.sst")],
                         ids=["ENOSPC", "rocksdb"])
def test_a_full_disk_is_a_refusal_logged_on_one_line(server, servicer, boundary_log, error):
    servicer.error = error
    response, code, _ = write(server)
    assert code is grpc.StatusCode.OK
    assert response.code == ResponseCode.SERVICE_NOT_AVAILABLE and response.remark.startswith("disk full: ")
    assert "No space left on device" in response.remark
    (record,) = boundary_log.records
    assert record.getMessage().startswith("rpc_refused_disk_full rpc=rmq.KvService.Write error=")
    assert record.exc_info is None


def test_other_os_errors_are_still_bugs_with_their_traceback(server, servicer, boundary_log):
    servicer.error = PermissionError(errno.EACCES, "Permission denied")
    _, code, _ = write(server)
    assert code is grpc.StatusCode.INTERNAL
    (record,) = boundary_log.records
    assert record.exc_info is not None


def test_long_details_are_cut(server, servicer):
    servicer.error = RequestError("x" * (MAX_DETAILS_CHARS * 5))
    _, code, details = write(server)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert len(details) < MAX_DETAILS_CHARS + 100 and details.endswith("more characters)")


def test_a_refusal_in_a_stream_is_failed_precondition_naming_the_code(server, servicer):
    servicer.error = Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, "the KV store is off (kvEnable=false)")
    rpc = server.invoke_unary_stream(METHODS["ExportSnapshot"], (), kv_pb2.KvSnapshotRequest(shard=2), 10)
    _, code, details = rpc.termination()
    assert rpc.take_response().header.shard == 2  # what was sent before the refusal stays sent
    assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert details == "SERVICE_NOT_AVAILABLE: the KV store is off (kvEnable=false)"


def test_a_client_stream_gets_the_same_treatment(server, servicer):
    servicer.error = RequestError("a snapshot starts with a header chunk")
    rpc = server.invoke_stream_unary(METHODS["ImportSnapshot"], (), 10)
    rpc.send_request(kv_pb2.KvSnapshotChunk())
    rpc.requests_closed()
    _, _, code, details = rpc.termination()
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "a snapshot starts with a header chunk")


def test_a_handler_that_aborts_keeps_its_status(server, boundary_log):
    rpc = server.invoke_unary_unary(METHODS["Get"], (), kv_pb2.KvGetRequest(), 10)
    _, _, code, details = rpc.termination()
    assert (code, details) == (grpc.StatusCode.PERMISSION_DENIED, "handler's own status")
    assert not boundary_log.records


def test_a_refusal_without_a_response_code_is_failed_precondition(loop):
    service = broker_pb2.DESCRIPTOR.services_by_name["BrokerService"]

    @rpc_boundary(service)
    class Refusing:
        async def GetAllTopicConfig(self, request, context):  # TopicConfigList has no code field
            raise Refusal(ResponseCode.SYSTEM_BUSY, "busy")

    server = grpc_testing.server_from_dictionary({service: SyncServicer(Refusing(), service, loop)},
                                                 grpc_testing.strict_real_time())
    rpc = server.invoke_unary_unary(service.methods_by_name["GetAllTopicConfig"], (), common_pb2.Empty(), 10)
    _, _, code, details = rpc.termination()
    assert (code, details) == (grpc.StatusCode.FAILED_PRECONDITION, "SYSTEM_BUSY: busy")


def test_bytes_that_do_not_parse_are_invalid_argument(server, loop):
    """``RequestDecoding`` (installed on the real servers) turns them into an UndecodableRequest."""

    async def continuation(details: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(None, request_deserializer=kv_pb2.KvWriteRequest.FromString)

    details = types.SimpleNamespace(method="/rmq.KvService/Write", invocation_metadata=())
    handler = asyncio.run_coroutine_threadsafe(RequestDecoding().intercept_service(continuation, details),
                                               loop).result()
    decode = handler.request_deserializer
    request = decode(b"\xff")
    assert isinstance(request, UndecodableRequest) and decode(b"\x12\x01k") == kv_pb2.KvWriteRequest(key=b"k")
    rpc = server.invoke_unary_unary(METHODS["Write"], (), request, 10)
    _, _, code, details = rpc.termination()
    assert code is grpc.StatusCode.INVALID_ARGUMENT and details.startswith("the request does not parse: ")


def test_a_message_of_a_stream_that_does_not_parse_is_invalid_argument(server):
    rpc = server.invoke_stream_unary(METHODS["ImportSnapshot"], (), 10)
    rpc.send_request(kv_pb2.KvSnapshotChunk())
    rpc.send_request(UndecodableRequest("Wire format was corrupt"))
    rpc.requests_closed()
    _, _, code, details = rpc.termination()
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT,
                               "a request message does not parse: Wire format was corrupt")

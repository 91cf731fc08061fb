"""KVClient against a broker that predates KvService's streams (a rolling upgrade with clients upgraded first): the
stream answers UNIMPLEMENTED, having done nothing, and the write or get goes as the unary call both serve. Before,
every put and get failed ("Method not found!")."""

from concurrent.futures import Future
from typing import Any

import grpc

from client import KVClient
from client.grpc_errors import StatusError
from proto import kv_pb2

ADDR = "127.0.0.1:1"


class _UnimplementedStream:
    def __init__(self) -> None:
        self.calls = 0

    def call(self, request: Any, timeout_s: float) -> "Future[Any]":
        self.calls += 1
        future: Future[Any] = Future()
        future.set_exception(StatusError(grpc.StatusCode.UNIMPLEMENTED, "Method not found!"))
        return future


class _UnaryKv:
    def __init__(self) -> None:
        self.writes: list[kv_pb2.KvWriteRequest] = []
        self.Get = self

    def Write(self, request: kv_pb2.KvWriteRequest, timeout: float) -> kv_pb2.KvWriteResponse:
        self.writes.append(request)
        return kv_pb2.KvWriteResponse(code=0)

    def future(self, request: kv_pb2.KvGetRequest, timeout: float) -> "Future[kv_pb2.KvGetResponse]":
        answer: Future[kv_pb2.KvGetResponse] = Future()
        answer.set_result(kv_pb2.KvGetResponse(code=0, states=[b"v"] * len(request.keys)))
        return answer


def test_writes_and_gets_go_unary_to_a_broker_without_the_streams() -> None:
    kv = KVClient("127.0.0.1:9")
    stream, unary = _UnimplementedStream(), _UnaryKv()
    instance: Any = kv._instance
    instance.kv_write_stream = instance.kv_get_stream = lambda addr: stream
    instance.stub = lambda stub_class, addr: unary
    try:
        request = kv_pb2.KvWriteRequest(op=kv_pb2.KV_PUT, key=b"k", value=b"v")
        assert kv._write_at(ADDR, request).code == 0 and unary.writes == [request]
        assert kv._write_at(ADDR, request).code == 0 and stream.calls == 1  # the stream is not asked again
        call = kv._get_call(ADDR, [b"k"], [0])
        out: list[bytes | None] = [None]
        assert kv._get_from(ADDR, [0], call, out, deadline=float("inf")) == (0, 0.0)  # asked again at once
        assert kv._get_from(ADDR, [0], kv._get_call(ADDR, [b"k"], [0]), out, deadline=float("inf"))[0] == 1
        assert stream.calls == 2
    finally:
        kv.close()

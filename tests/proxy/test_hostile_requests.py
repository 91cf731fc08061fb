"""Every RPC of ``apache.rocketmq.v2.MessagingService`` gets structurally valid requests with hostile values (built
from the descriptors by ``tests/boundary/hostile_requests.py``) and bytes that are no request at all, over a real
socket. Each answer is a v2 status with a code (never 0, never a gRPC error), and afterwards the proxy is up and
its log holds no traceback: nothing reached the catch-all."""

import uuid
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings

from proto.v2 import definition_pb2, service_pb2
from tests.boundary.hostile_requests import method_id, requests_for
from tests.proxy.conftest import ProxyCluster

SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
REQUESTS_PER_RPC = 12
CALL_TIMEOUT_S = 3.0  # a receive long-polls at most until just before this
UNDECODABLE = [b"\xff", b"\x08" + b"\xff" * 11, bytes(range(256))]
TOPIC = f"ProxyHostile_{uuid.uuid4().hex[:8]}"
KNOWN = {"name": [TOPIC, "HostileG"], "host": ["127.0.0.1"], "receipt_handle": ["v1|broker-a|0|0|1|1|0"],
         "expression": ["*", "A || B"]}


@pytest.fixture(scope="module")
def channel(proxy_cluster: ProxyCluster):
    proxy_cluster.cluster.create_topic(TOPIC, 2)
    with grpc.insecure_channel(proxy_cluster.endpoint) as ch:
        yield ch


def _encode(message: Message | bytes) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


def call(channel: grpc.Channel, method: MethodDescriptor, request: Any) -> list[Any]:
    path = f"/{SERVICE.full_name}/{method.name}"
    decode = GetMessageClass(method.output_type).FromString
    metadata = [("x-mq-client-id", "hostile-client")]
    if method.client_streaming:
        bidi = channel.stream_stream(path, request_serializer=_encode, response_deserializer=decode)
        return list(bidi(iter(request), timeout=CALL_TIMEOUT_S, metadata=metadata))
    if method.server_streaming:
        stream = channel.unary_stream(path, request_serializer=_encode, response_deserializer=decode)
        return list(stream(request, timeout=CALL_TIMEOUT_S, metadata=metadata))
    unary = channel.unary_unary(path, request_serializer=_encode, response_deserializer=decode)
    return [unary(request, timeout=CALL_TIMEOUT_S, metadata=metadata)]


def check(method: MethodDescriptor, request: Any, answers: list[Any]) -> None:
    if not method.client_streaming:  # Telemetry answers only commands that need an answer
        assert answers, (method_id(method), request)
    if method.server_streaming and not method.client_streaming:
        assert answers[0].HasField("status"), (method_id(method), answers[0])  # the status comes first
    for answer in answers:
        if answer.HasField("status"):
            assert answer.status.code != definition_pb2.CODE_UNSPECIFIED and answer.status.message, (
                method_id(method), request, answer)
    assert not any(a.HasField("status") and a.status.code == definition_pb2.INTERNAL_SERVER_ERROR
                   and "failed:" in a.status.message for a in answers), answers  # the catch-all's wording


@pytest.mark.parametrize("method", list(SERVICE.methods), ids=method_id)
def test_hostile_requests_get_a_status(proxy_cluster: ProxyCluster, channel: grpc.Channel,
                                       method: MethodDescriptor) -> None:
    @settings(max_examples=REQUESTS_PER_RPC, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(requests_for(method, KNOWN))
    def one_call(request: Any) -> None:
        check(method, request, call(channel, method, request))

    one_call()
    for payload in UNDECODABLE:
        request = [payload] if method.client_streaming else payload
        answers = call(channel, method, request)
        check(method, payload, answers)
        assert answers[0].status.code == definition_pb2.BAD_REQUEST, (method_id(method), answers)
    assert proxy_cluster.proxy.alive, f"the proxy died after {method_id(method)}"


def test_the_proxy_survived_without_a_traceback(proxy_cluster: ProxyCluster) -> None:
    log = proxy_cluster.proxy.log()
    assert proxy_cluster.proxy.alive
    assert "Traceback" not in log and "rpc_failed" not in log, log[-4000:]

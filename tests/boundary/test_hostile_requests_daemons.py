"""One pass over real sockets against real daemons: every RPC of every service gets a few hostile requests.

Afterwards both daemons are up, neither log holds a traceback (nothing reached the RPC boundary's catch-all, and
nothing else broke), the protected messages and KV keys read back byte-equal, and a restarted broker (whatever
the hostile admin requests persisted) starts and still serves them.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings

from client import Admin
from tests.boundary.hostile_requests import all_methods, method_id, requests_for
from tests.boundary.outcomes import Outcome, check_outcome
from tests.boundary.protected_data import KNOWN_NAMES, ProtectedData
from tests.cluster import Cluster, make_cluster

BROKER = "broker-a"
REQUESTS_PER_RPC = 10
# Bytes that are no message of any type: a truncated tag, an over-long varint, field number 0.
UNDECODABLE = [b"\xff", b"\x08" + b"\xff" * 11, bytes(range(256))]
# Field 2 as a string of invalid UTF-8: undecodable where field 2 is a string, an unknown field elsewhere.
ODD_WIRE = [b"\x12\x03\xff\xfe\xfd", b"\x0a\x02\xc3\x28"]
CALL_TIMEOUT_S = 30.0
SETTINGS = {"kvEnable": "true", "tieredStoreEnable": "true", "tieredBackendServiceProvider": "memory",
            "autoCreateTopicEnable": "true", "longPollingMaxSuspendMs": 100, "registerNameServerPeriod": 1000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(Path(tmp_path_factory.mktemp("boundary-daemons")), (BROKER,), **SETTINGS)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def protected(cluster: Cluster) -> ProtectedData:
    data = ProtectedData()
    data.seed(cluster.brokers[BROKER].addr, cluster.addr, BROKER)
    data.assert_intact(cluster.brokers[BROKER].addr, "seeding")
    return data


@pytest.fixture(scope="module")
def channels(cluster: Cluster) -> Iterator[dict[str, grpc.Channel]]:
    options = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
    with Admin(cluster.addr) as admin:  # replication listens on a port of its own
        ha_addr = admin.broker_runtime_info(cluster.brokers[BROKER].addr)["haServerAddr"]
    opened = {"NamesrvService": grpc.insecure_channel(cluster.addr, options=options),
              "HaService": grpc.insecure_channel(ha_addr, options=options),
              "broker": grpc.insecure_channel(cluster.brokers[BROKER].addr, options=options)}
    yield opened
    for channel in opened.values():
        channel.close()


def _encode(message: Message | bytes) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


def call(channel: grpc.Channel, method: MethodDescriptor, request: Any) -> Outcome:
    """Any RPC by its descriptor, over a real channel; ``request`` may be raw bytes."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    decode = GetMessageClass(method.output_type).FromString
    try:
        if method.client_streaming and method.server_streaming:
            bidi = channel.stream_stream(path, request_serializer=_encode, response_deserializer=decode)
            return Outcome(list(bidi(iter(request), timeout=CALL_TIMEOUT_S)), grpc.StatusCode.OK, "")
        if method.client_streaming:
            stub = channel.stream_unary(path, request_serializer=_encode, response_deserializer=decode)
            return Outcome([stub(iter(request), timeout=CALL_TIMEOUT_S)], grpc.StatusCode.OK, "")
        if method.server_streaming:
            stream = channel.unary_stream(path, request_serializer=_encode, response_deserializer=decode)
            return Outcome(list(stream(request, timeout=CALL_TIMEOUT_S)), grpc.StatusCode.OK, "")
        unary = channel.unary_unary(path, request_serializer=_encode, response_deserializer=decode)
        return Outcome([unary(request, timeout=CALL_TIMEOUT_S)], grpc.StatusCode.OK, "")
    except grpc.RpcError as exc:
        return Outcome([], exc.code(), exc.details() or "")


@pytest.mark.parametrize("method", all_methods(), ids=method_id)
def test_hostile_requests_over_sockets(cluster: Cluster, protected: ProtectedData, channels: dict[str, grpc.Channel],
                                       method: MethodDescriptor) -> None:
    channel = channels.get(method.containing_service.name, channels["broker"])

    @settings(max_examples=REQUESTS_PER_RPC, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(requests_for(method, KNOWN_NAMES))
    def one_call(request: Any) -> None:
        check_outcome(method, request, call(channel, method, request))

    one_call()
    assert cluster.namesrv.alive and cluster.brokers[BROKER].alive, f"a daemon died after {method_id(method)}"


@pytest.mark.parametrize("method", all_methods(), ids=method_id)
def test_undecodable_bytes_over_sockets(cluster: Cluster, channels: dict[str, grpc.Channel],
                                        method: MethodDescriptor) -> None:
    """gRPC decodes before any handler runs: bytes that do not parse must still be INVALID_ARGUMENT (saying so),
    not a bare UNKNOWN."""
    channel = channels.get(method.containing_service.name, channels["broker"])
    for payload in UNDECODABLE + ODD_WIRE:
        request = [payload] if method.client_streaming else payload
        outcome = call(channel, method, request)
        check_outcome(method, payload, outcome)
        if payload in UNDECODABLE:
            assert outcome.code is grpc.StatusCode.INVALID_ARGUMENT, (method_id(method), payload[:16], outcome)
            assert "does not parse" in outcome.details, outcome.details
    assert cluster.namesrv.alive and cluster.brokers[BROKER].alive


def test_daemons_survived_without_a_traceback_and_data_is_intact(cluster: Cluster, protected: ProtectedData) -> None:
    broker = cluster.brokers[BROKER]
    assert cluster.namesrv.alive and broker.alive
    for daemon in (cluster.namesrv, broker):
        log = daemon.log()
        assert "Traceback" not in log and "rpc_failed" not in log, f"{daemon.name} log:\n{log[-4000:]}"
    protected.assert_intact(broker.addr, "every RPC")
    assert broker.stop() == 0
    restarted = cluster.start_broker(BROKER)  # on the same store: what the hostile requests persisted must load
    protected.assert_intact(restarted.addr, "a restart")
    assert "Traceback" not in restarted.log()

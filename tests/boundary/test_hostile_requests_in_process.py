"""Every RPC of every service, in process, with structurally valid requests whose values are hostile.

For each RPC (found from the descriptors, see ``hostile_requests``): the handler answers OK (with one of our
response codes, when the response has a code) or INVALID_ARGUMENT (or FAILED_PRECONDITION for a refusal on an
RPC whose response has no code), never INTERNAL or UNKNOWN; nothing reaches the RPC boundary's catch-all (it
logs ``rpc_failed``); the response serializes; and afterwards the protected messages and KV keys read back
byte-equal. grpcio-testing dispatches the calls (see ``aio_bridge`` for what it can and cannot do here).
"""

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from hypothesis import HealthCheck, given, settings

from proto import consumer_pb2
from tests.boundary.hostile_requests import all_methods, method_id, requests_for, wire_round_trip
from tests.boundary.in_process import InProcessCluster, start_in_process_cluster, stop_in_process_cluster
from tests.boundary.outcomes import Outcome, check_outcome
from tests.boundary.protected_data import KNOWN_NAMES

EXAMPLES_PER_RPC = 100
CALL_TIMEOUT_S = 30.0


class BoundaryFailures(logging.Handler):
    """Collects what reached the RPC boundary's catch-all (it logs at ERROR)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[str]:
        taken, self.records = self.records, []
        return [self.format(r) for r in taken]


# (storeType, kvStoreType): each store type once, each KV backend once.
BACKENDS = [("default", "memory"), ("defaultRocksDB", "rocksdb")]


@pytest.fixture(scope="module", params=BACKENDS, ids=lambda b: f"{b[0]}+kv-{b[1]}")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    store_type, kv_store_type = request.param
    c = start_in_process_cluster(Path(tmp_path_factory.mktemp("boundary")), store_type, kv_store_type)
    try:
        c.seed()
        c.assert_intact("seeding")
        yield c
    finally:
        stop_in_process_cluster(c)


@pytest.fixture(scope="module")
def failures() -> Iterator[BoundaryFailures]:
    handler = BoundaryFailures()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("common.rpc_boundary")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def invoke(server: Any, method: MethodDescriptor, request: Any) -> Outcome:
    """One call through grpcio-testing's server, as a client would see it."""
    if method.client_streaming and method.server_streaming:
        bidi = server.invoke_stream_stream(method, (), CALL_TIMEOUT_S)
        for r in request:
            bidi.send_request(r)
        bidi.requests_closed()
        _, code, details = bidi.termination()
        return Outcome(_taken(bidi), code, details)
    if method.client_streaming:
        rpc = server.invoke_stream_unary(method, (), CALL_TIMEOUT_S)
        for r in request:
            rpc.send_request(r)
        rpc.requests_closed()
        response, _, code, details = rpc.termination()
        return Outcome([response] if response is not None else [], code, details)
    if method.server_streaming:
        rpc = server.invoke_unary_stream(method, (), request, CALL_TIMEOUT_S)
        _, code, details = rpc.termination()
        return Outcome(_taken(rpc), code, details)
    rpc = server.invoke_unary_unary(method, (), request, CALL_TIMEOUT_S)
    response, _, code, details = rpc.termination()
    return Outcome([response] if response is not None else [], code, details)


def _taken(rpc: Any) -> list[Any]:
    responses = []
    while True:
        try:
            responses.append(rpc.take_response())
        except ValueError:  # "No more responses!"
            return responses


@pytest.mark.parametrize("method", all_methods(), ids=method_id)
def test_hostile_requests_are_answered_cleanly(cluster: InProcessCluster, failures: BoundaryFailures,
                                              method: MethodDescriptor) -> None:
    failures.take()

    @settings(max_examples=EXAMPLES_PER_RPC, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(requests_for(method, KNOWN_NAMES))
    def one_call(request: Any) -> None:
        request = [wire_round_trip(r) for r in request] if method.client_streaming else wire_round_trip(request)
        outcome = invoke(cluster.server, method, request)
        assert not (leaked := failures.take()), f"{method_id(method)}: reached the catch-all: {leaked}"
        check_outcome(method, request, outcome)

    one_call()
    cluster.assert_intact(method_id(method))


def test_a_sent_back_message_id_holding_a_property_separator_is_refused_as_invalid(
        cluster: InProcessCluster, failures: BoundaryFailures) -> None:
    """Found by the test above: the id went into the message's properties unchecked (a catch-all error)."""
    method = consumer_pb2.DESCRIPTOR.services_by_name["ConsumerService"].methods_by_name["ConsumerSendMsgBack"]
    request = consumer_pb2.SendMsgBackRequest(group="g", topic="ProbeT", body=b"x", msg_id="\x02", delay_level=1,
                                              max_reconsume_times=1)
    outcome = invoke(cluster.server, method, request)
    assert not failures.take()
    assert outcome.code == grpc.StatusCode.INVALID_ARGUMENT and "msg_id" in outcome.details, outcome

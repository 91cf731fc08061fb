"""What a client may see for a hostile request, and the check of it (shared by the in-process and daemon tests)."""

from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor

from common.response_code import ResponseCode
from common.rpc_boundary import refusal_response_class
from tests.boundary.hostile_requests import method_id

# SYSTEM_ERROR is for faults of the system, never for what a caller sent: a hostile request must not get it.
CODES = {int(c) for c in ResponseCode} - {int(ResponseCode.SYSTEM_ERROR)}


@dataclass
class Outcome:
    responses: list[Any]
    code: grpc.StatusCode
    details: str


def check_outcome(method: MethodDescriptor, request: Any, outcome: Outcome) -> None:
    """OK with one of our response codes, or INVALID_ARGUMENT (FAILED_PRECONDITION where no response code can
    carry a refusal) with a message: never INTERNAL, UNKNOWN or a code we do not know."""
    where = f"{method_id(method)}({str(request)[:300]!r})"
    allowed = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}
    if method.server_streaming or refusal_response_class(method.output_type) is None:
        allowed.add(grpc.StatusCode.FAILED_PRECONDITION)  # a refusal where no response code can carry it
    assert outcome.code in allowed, f"{where}: {outcome.code.name}: {outcome.details}"
    if outcome.code is not grpc.StatusCode.OK:
        assert outcome.details, f"{where}: {outcome.code.name} without a message"
        return
    for response in outcome.responses:
        response.SerializeToString()  # what the wire would need (e.g. a remark that is not valid UTF-8 fails)
        # A stream's answer frame carries one response a request.
        inner = response.responses if "responses" in response.DESCRIPTOR.fields_by_name else [response]
        for answer in inner:
            if "code" in answer.DESCRIPTOR.fields_by_name:
                assert answer.code in CODES, f"{where}: response code {answer.code} is not a ResponseCode"

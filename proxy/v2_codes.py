"""Outcomes in v2 terms: every v2 response carries a ``Status`` whose code is never 0 ("response is illegal" to
the clients), so a processor raises :class:`ProxyError` and the servicer answers it as a status."""

import grpc

from common.refusal import says_master_changing
from common.response_code import ResponseCode, code_name
from proto.v2 import definition_pb2

Code = definition_pb2.Code

# A logic queue whose leadership is moving (a static topic's remap, until the route names the new leader): transient,
# so not INTERNAL_SERVER_ERROR. The official clients' producers retry it (unlike TOO_MANY_REQUESTS, which the Python
# client's producer gives up on), and a PushConsumer receives again.
LEADER_MOVING = Code.HA_NOT_AVAILABLE
# A broker the proxy cannot reach (killed, restarting, mid-failover: gRPC UNAVAILABLE) or that has no master right
# now. v2 has no "service unavailable" code; PROXY_TIMEOUT is its gateway code (HTTP 504: no answer from the
# upstream server), which the official clients raise as ProxyTimeoutException and retry as any transient failure
# (producers on another queue, PushConsumers after a back-off). Upstream's proxy lets a connect failure fall to its
# catch-all INTERNAL_SERVER_ERROR, which reads as a bug in the proxy to whoever watches the clients' errors.
BROKER_UNAVAILABLE = Code.PROXY_TIMEOUT


class ProxyError(Exception):
    """A request the proxy answers with a non-OK status: the code and a message saying what was wrong."""

    def __init__(self, code: definition_pb2.Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> definition_pb2.Status:
        return definition_pb2.Status(code=self.code, message=self.message)


def ok_status() -> definition_pb2.Status:
    return definition_pb2.Status(code=Code.OK, message="OK")


# The broker's business codes (RocketMQ's ResponseCode) as the v2 codes upstream's proxy answers for them.
_FROM_RESPONSE_CODE: dict[int, definition_pb2.Code] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.SYSTEM_ERROR: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.PULL_NOT_FOUND: Code.MESSAGE_NOT_FOUND,
    ResponseCode.QUERY_NOT_FOUND: Code.NOT_FOUND,  # MESSAGE_NOT_FOUND is "nothing now" to v2 clients, no error
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.SUBSCRIPTION_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.INVALID_PARAMETER: Code.BAD_REQUEST,
    ResponseCode.INVALID_RECEIPT_HANDLE: Code.INVALID_RECEIPT_HANDLE,
    ResponseCode.NOT_LEADER_FOR_QUEUE: LEADER_MOVING,
}


def from_response_code(code: int) -> definition_pb2.Code:
    """The v2 code of a broker's response code; INTERNAL_SERVER_ERROR for one without a v2 meaning."""
    return _FROM_RESPONSE_CODE.get(code, Code.INTERNAL_SERVER_ERROR)


def refusal(code: int, message: str) -> ProxyError:
    """A broker's response code as a v2 error; NOT_LEADER_FOR_QUEUE says why (its remark names only the broker)."""
    if code == ResponseCode.NOT_LEADER_FOR_QUEUE:
        message += " (a remap of the static topic moved the logic queue to another broker)"
    if code == ResponseCode.INVALID_PARAMETER and "exceeds maxMessageSize" in message:
        return ProxyError(Code.MESSAGE_BODY_TOO_LARGE, message)  # the brokers' limit, below the one the proxy says
    if code in (ResponseCode.NO_PERMISSION, ResponseCode.SERVICE_NOT_AVAILABLE) and says_master_changing(message):
        return ProxyError(BROKER_UNAVAILABLE, message)  # a failover under way, not a permission: clients retry
    return ProxyError(from_response_code(code), message)


def broker_refusal(what: str, code: int, remark: str) -> ProxyError:
    return refusal(code, f"{what}: {code_name(code)}: {remark}")


def overall_status(statuses: list[definition_pb2.Status]) -> definition_pb2.Status:
    """The status of a response with one entry per item: OK when all are; otherwise the one code they share (a
    single item's own status: clients read only this one), or MULTIPLE_RESULTS when they differ."""
    if all(s.code == Code.OK for s in statuses):
        return ok_status()
    codes = {s.code for s in statuses}
    if len(codes) == 1:
        first = next(s for s in statuses if s.code != Code.OK)
        return definition_pb2.Status(code=first.code, message=first.message)
    return definition_pb2.Status(code=Code.MULTIPLE_RESULTS, message="; ".join(
        s.message for s in statuses if s.code != Code.OK)[:1000])


def rpc_failure(what: str, addr: str, exc: grpc.RpcError) -> ProxyError:
    """A failed call to a broker as a v2 status."""
    status = exc.code() if hasattr(exc, "code") else None
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    if status is grpc.StatusCode.UNIMPLEMENTED:
        return ProxyError(Code.NOT_IMPLEMENTED, f"{what}: the broker at {addr} does not serve it ({detail})")
    if status is grpc.StatusCode.DEADLINE_EXCEEDED:
        return ProxyError(Code.PROXY_TIMEOUT, f"{what}: the broker at {addr} did not answer in time")
    if status is grpc.StatusCode.UNAVAILABLE:
        return ProxyError(BROKER_UNAVAILABLE, f"{what}: the broker at {addr} is unreachable now (retry): {detail}")
    if status is grpc.StatusCode.INVALID_ARGUMENT:
        return ProxyError(Code.BAD_REQUEST, f"{what}: refused by the broker at {addr}: {detail}")
    name = status.name if status is not None else "ERROR"
    return ProxyError(Code.INTERNAL_SERVER_ERROR, f"{what} failed at the broker at {addr}: {name}: {detail}")

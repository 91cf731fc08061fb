"""A pull's answer: the response, and where to park it when it found nothing (long polling).

Shared by the pull processor and the static-topic service (which reads a logic queue's local items itself)."""

from dataclasses import dataclass

from broker.store.get_message_result import GetMessageResult, GetMessageStatus
from common.response_code import ResponseCode
from proto import broker_pb2

DEFAULT_MAX_BYTES = 4 * 1024 * 1024


@dataclass(slots=True)
class PullOutcome:
    response: broker_pb2.PullMessageResponse
    hold: tuple[str, int, int] | None = None  # (topic, physical queue, physical offset) to park on when caught up


def to_response(result: GetMessageResult, requested: int) -> broker_pb2.PullMessageResponse:
    """Store status to RocketMQ pull codes: FOUND -> SUCCESS; caught up -> PULL_NOT_FOUND (may be parked);
    filtered out -> PULL_RETRY_IMMEDIATELY; outside the queue -> PULL_OFFSET_MOVED."""
    s = result.status
    if s is GetMessageStatus.FOUND:
        code = ResponseCode.SUCCESS
    elif s is GetMessageStatus.OFFSET_OVERFLOW_ONE or (s is GetMessageStatus.NO_MESSAGE
                                                       and requested == result.next_begin_offset):
        code = ResponseCode.PULL_NOT_FOUND
    elif s is GetMessageStatus.NO_MATCHED_MESSAGE:
        code = ResponseCode.PULL_RETRY_IMMEDIATELY
    else:
        code = ResponseCode.PULL_OFFSET_MOVED
    return broker_pb2.PullMessageResponse(
        code=code, remark="" if code == ResponseCode.SUCCESS else s.value,
        next_begin_offset=result.next_begin_offset, min_offset=result.min_offset, max_offset=result.max_offset,
        records=b"".join(result.messages),
    )

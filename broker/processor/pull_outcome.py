"""A pull's answer: the response, and where to park it when it found nothing (long polling).

Shared by the pull processor and the static-topic service (which reads a logic queue's local items itself)."""

from dataclasses import dataclass

from broker.store.get_message_result import GetMessageResult, GetMessageStatus
from common.encoded_fields import bytes_field
from common.response_code import ResponseCode
from proto import broker_pb2

DEFAULT_MAX_BYTES = 4 * 1024 * 1024


RECORDS_FIELD = broker_pb2.PullMessageResponse.DESCRIPTOR.fields_by_name["records"].number


@dataclass(slots=True)
class PullOutcome:
    response: broker_pb2.PullMessageResponse
    hold: tuple[str, int, int] | None = None  # (topic, physical queue, physical offset) to park on when caught up
    records: bytes = b""  # the stored records found, kept out of ``response`` until it is sent (copied once)
    # Nothing here to park on (a static topic's older link on another broker, not read to its end yet): the pull is
    # asked again after this long, within its suspend time, rather than answered at once and re-pulled in a loop.
    retry_after_s: float = 0.0

    def full_response(self) -> broker_pb2.PullMessageResponse:
        if self.records:
            self.response.records = self.records
        return self.response

    def encoded_records(self) -> tuple[bytes, ...]:
        """``records`` as an encoded field of the response (``common/encoded_fields.py``)."""
        return bytes_field(RECORDS_FIELD, self.records) if self.records else ()


def to_response(result: GetMessageResult, requested: int, with_records: bool = True) -> broker_pb2.PullMessageResponse:
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
        records=b"".join(result.messages) if with_records else b"",
    )

"""Pull: read a queue from an offset; the servicer parks a pull that finds nothing (long polling)."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.processor.request_checks import checked_group, checked_queue_id, topic_config
from broker.processor.subscription_filter import tags_codes_of
from broker.request_error import require
from broker.statictopic.logic_queue_context import NotLeaderError
from broker.store.get_message_result import GetMessageResult, GetMessageStatus
from common.perm import is_readable
from common.response_code import ResponseCode
from proto import broker_pb2

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController

MAX_PULL_NUMS = 1024
DEFAULT_MAX_BYTES = 4 * 1024 * 1024


@dataclass(slots=True)
class PullOutcome:
    response: broker_pb2.PullMessageResponse
    hold: tuple[str, int, int] | None = None  # (topic, physical queue, physical offset) to park on when caught up


class PullMessageProcessor:
    def __init__(self, controller: "BrokerController") -> None:
        self.controller = controller

    def pull(self, request: broker_pb2.PullMessageRequest) -> PullOutcome:
        c = self.controller
        group = checked_group(request.consumer_group)
        require(request.queue_offset >= 0, f"queue offset {request.queue_offset} is negative")
        require(1 <= request.max_msg_nums <= MAX_PULL_NUMS,
                f"max_msg_nums {request.max_msg_nums} is outside 1..{MAX_PULL_NUMS}")
        require(request.max_bytes >= 0, f"max_bytes {request.max_bytes} is negative")
        config = topic_config(c.topic_config_manager, request.topic)
        try:  # a static topic is answered by its mapping, even on a broker that holds none of its queues
            ctx = c.static_topics.context(request.topic, request.queue_id, request.addressing)
        except NotLeaderError as exc:
            return PullOutcome(broker_pb2.PullMessageResponse(code=ResponseCode.NOT_LEADER_FOR_QUEUE, remark=str(exc)))
        if config is None:
            return PullOutcome(broker_pb2.PullMessageResponse(
                code=ResponseCode.TOPIC_NOT_EXIST, remark=f"topic {request.topic} does not exist on this broker"))
        if not is_readable(config.perm):
            return PullOutcome(broker_pb2.PullMessageResponse(
                code=ResponseCode.NO_PERMISSION, remark=f"topic {config.topic_name} is not readable here"))
        subscription = c.subscription_group_manager.find(group)
        if subscription is not None and not subscription.consume_enable:
            return PullOutcome(broker_pb2.PullMessageResponse(
                code=ResponseCode.NO_PERMISSION, remark=f"consumer group {group} is disabled"))
        codes = tags_codes_of(request.sub_expression)
        if ctx is not None:
            if request.commit_offset >= 0:
                c.static_topics.commit_offset(ctx, group, request.commit_offset)
            return c.static_topics.pull(ctx, request)
        checked_queue_id(config, request.queue_id, writing=False)
        if request.commit_offset >= 0:
            c.consumer_offset_manager.commit_offset(group, config.topic_name, request.queue_id,
                                                    request.commit_offset)
        result = c.store.get_message(config.topic_name, request.queue_id, request.queue_offset,
                                     request.max_msg_nums, request.max_bytes or DEFAULT_MAX_BYTES,
                                     set(codes) if codes is not None else None)
        response = to_response(result, request.queue_offset)
        caught_up = response.code == ResponseCode.PULL_NOT_FOUND
        return PullOutcome(response, (config.topic_name, request.queue_id, request.queue_offset) if caught_up else None)


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

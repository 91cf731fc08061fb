"""Query messages by key (index) and by message id (commitlog offset)."""

from typing import TYPE_CHECKING

from broker.processor.request_checks import checked_topic
from broker.request_error import require
from common.response_code import ResponseCode
from proto import broker_pb2

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController


class QueryMessageProcessor:
    def __init__(self, controller: "BrokerController") -> None:
        self.controller = controller

    def query_by_key(self, request: broker_pb2.QueryMessageRequest) -> broker_pb2.MessagesResponse:
        topic = checked_topic(request.topic)
        require(bool(request.key), "key is empty")
        max_num = request.max_num or 32
        require(1 <= max_num <= 1024, f"max_num {max_num} is outside 1..1024")
        end = request.end_timestamp or 2**62
        require(0 <= request.begin_timestamp <= end, "begin timestamp is after end timestamp")
        found = self.controller.store.query_message_records(topic, request.key, max_num, request.begin_timestamp,
                                                            end)
        if not found:
            return broker_pb2.MessagesResponse(code=ResponseCode.QUERY_NOT_FOUND,
                                               remark=f"no message with key {request.key} in {topic}")
        return broker_pb2.MessagesResponse(code=ResponseCode.SUCCESS, records=b"".join(found))

    def view_by_offset(self, request: broker_pb2.ViewMessageRequest) -> broker_pb2.MessagesResponse:
        require(request.commit_log_offset >= 0, f"commit log offset {request.commit_log_offset} is negative")
        raw = self.controller.store.commit_log.read_record(request.commit_log_offset)
        if raw is None:
            return broker_pb2.MessagesResponse(code=ResponseCode.QUERY_NOT_FOUND,
                                               remark=f"no message at commit log offset {request.commit_log_offset}")
        return broker_pb2.MessagesResponse(code=ResponseCode.SUCCESS, records=raw)

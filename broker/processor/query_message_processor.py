"""Query messages by key (index) and by message id (commitlog offset)."""

from broker.processor.request_checks import checked_topic
from broker.store.message_store_reader import MessageStoreReader
from common.refusal import Refusal
from common.request_error import require
from common.response_code import ResponseCode
from proto import broker_pb2


class QueryMessageProcessor:
    def __init__(self, store: MessageStoreReader) -> None:
        self.store = store

    def query_by_key(self, request: broker_pb2.QueryMessageRequest) -> broker_pb2.MessagesResponse:
        topic = checked_topic(request.topic)
        require(bool(request.key), "key is empty")
        max_num = request.max_num or 32
        require(1 <= max_num <= 1024, f"max_num {max_num} is outside 1..1024")
        end = request.end_timestamp or 2**62
        require(0 <= request.begin_timestamp <= end, "begin timestamp is after end timestamp")
        found = self.store.query_message_records(topic, request.key, max_num, request.begin_timestamp, end)
        if not found:
            raise Refusal(ResponseCode.QUERY_NOT_FOUND, f"no message with key {request.key[:200]} in {topic}")
        return broker_pb2.MessagesResponse(code=ResponseCode.SUCCESS, records=b"".join(found))

    def view_by_offset(self, request: broker_pb2.ViewMessageRequest) -> broker_pb2.MessagesResponse:
        require(request.commit_log_offset >= 0, f"commit log offset {request.commit_log_offset} is negative")
        raw = self.store.select_one_message_by_offset(request.commit_log_offset)
        if raw is None:
            raise Refusal(ResponseCode.QUERY_NOT_FOUND, f"no message at commit log offset {request.commit_log_offset}")
        return broker_pb2.MessagesResponse(code=ResponseCode.SUCCESS, records=raw)

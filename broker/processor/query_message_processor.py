"""Query messages by key (index) and by message id (commitlog offset)."""

from broker.processor.request_checks import checked_topic
from broker.store.message_store_reader import MessageStoreReader
from common.acl import SUB, check_topic
from common.message_codec import CorruptRecordError, decode_record
from common.refusal import Refusal
from common.request_error import require
from common.response_code import ResponseCode
from proto import broker_pb2

VIEW_METHOD = "/rmq.BrokerService/ViewMessageById"
UNREADABLE_TOPIC = "rmq_sys_unreadable_record"  # a system topic name: Super users only


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
        # The request names only an offset: the record's own topic is what the caller needs Sub on.
        check_topic(_record_topic(raw), SUB, VIEW_METHOD)
        return broker_pb2.MessagesResponse(code=ResponseCode.SUCCESS, records=raw)


def _record_topic(raw: bytes) -> str:
    """The topic of the record at the start of ``raw``; a record that does not decode counts as the broker's own
    (only a Super user sees it, as before)."""
    try:
        return decode_record(raw, verify_crc=False).topic
    except CorruptRecordError:
        return UNREADABLE_TOPIC

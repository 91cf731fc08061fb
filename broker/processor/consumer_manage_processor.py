"""Consumer offsets (commit, query) and queue offsets (min, max, search by time)."""

from typing import TYPE_CHECKING

from broker.processor.request_checks import checked_group, checked_queue_id, topic_config
from broker.request_error import require
from broker.store.consume_queue.consume_queue_store import BoundaryType
from common.response_code import ResponseCode
from common.topic_config import TopicConfig
from proto import broker_pb2, common_pb2

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController


class ConsumerManageProcessor:
    def __init__(self, controller: "BrokerController") -> None:
        self.controller = controller

    def _queue(self, topic: str, queue_id: int) -> TopicConfig | None:
        config = topic_config(self.controller.topic_config_manager, topic)
        if config is not None:
            checked_queue_id(config, queue_id, writing=False)
        return config

    @staticmethod
    def _no_topic(topic: str) -> broker_pb2.OffsetResponse:
        return broker_pb2.OffsetResponse(code=ResponseCode.TOPIC_NOT_EXIST, remark=f"topic {topic} does not exist",
                                         offset=-1)

    def update_offset(self, request: broker_pb2.UpdateConsumerOffsetRequest) -> common_pb2.CommandResponse:
        group = checked_group(request.consumer_group)
        require(request.commit_offset >= 0, f"commit offset {request.commit_offset} is negative")
        if self._queue(request.topic, request.queue_id) is None:
            return common_pb2.CommandResponse(code=ResponseCode.TOPIC_NOT_EXIST,
                                              remark=f"topic {request.topic} does not exist")
        self.controller.consumer_offset_manager.commit_offset(group, request.topic, request.queue_id,
                                                              request.commit_offset)
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    def query_offset(self, request: broker_pb2.QueryConsumerOffsetRequest) -> broker_pb2.OffsetResponse:
        group = checked_group(request.consumer_group)
        if self._queue(request.topic, request.queue_id) is None:
            return self._no_topic(request.topic)
        offset = self.controller.consumer_offset_manager.query_offset(group, request.topic, request.queue_id)
        if offset < 0:
            where = f"{request.topic}/{request.queue_id}"
            return broker_pb2.OffsetResponse(code=ResponseCode.QUERY_NOT_FOUND, offset=-1,
                                             remark=f"group {group} has no offset on {where}")
        return broker_pb2.OffsetResponse(code=ResponseCode.SUCCESS, offset=offset)

    def min_offset(self, request: broker_pb2.QueueRequest) -> broker_pb2.OffsetResponse:
        if self._queue(request.topic, request.queue_id) is None:
            return self._no_topic(request.topic)
        return broker_pb2.OffsetResponse(offset=self.controller.store.min_offset(request.topic, request.queue_id))

    def max_offset(self, request: broker_pb2.QueueRequest) -> broker_pb2.OffsetResponse:
        if self._queue(request.topic, request.queue_id) is None:
            return self._no_topic(request.topic)
        return broker_pb2.OffsetResponse(offset=self.controller.store.max_offset(request.topic, request.queue_id))

    def search_offset(self, request: broker_pb2.SearchOffsetRequest) -> broker_pb2.OffsetResponse:
        require(request.timestamp >= 0, f"timestamp {request.timestamp} is negative")
        if self._queue(request.topic, request.queue_id) is None:
            return self._no_topic(request.topic)
        boundary = BoundaryType.UPPER if request.upper else BoundaryType.LOWER
        offset = self.controller.store.offset_by_time(request.topic, request.queue_id, request.timestamp, boundary)
        return broker_pb2.OffsetResponse(offset=offset)

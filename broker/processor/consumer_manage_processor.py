"""Consumer offsets (commit, query) and queue offsets (min, max, search by time).

On a static topic's logic queue these are answered in logic terms by the queue's leader (see
``broker/statictopic/static_topic_service.py``); otherwise straight from this broker's store."""

from typing import TYPE_CHECKING

from broker.out.peer_brokers import PeerBrokerError
from broker.processor.request_checks import checked_group, checked_queue_id, topic_config
from broker.request_error import require
from broker.statictopic.logic_queue_context import LogicQueueContext, NotLeaderError
from broker.store.consume_queue.consume_queue_store import BoundaryType
from common.response_code import ResponseCode
from proto import broker_pb2, common_pb2

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController


class _Refused(Exception):
    """A business outcome that ends the request: (code, remark)."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class ConsumerManageProcessor:
    def __init__(self, controller: "BrokerController") -> None:
        self.controller = controller

    def _queue(self, topic: str, queue_id: int, addressing: int) -> LogicQueueContext | None:
        """The logic queue's context for a static topic, None for a plain queue; raises _Refused."""
        c = self.controller
        config = topic_config(c.topic_config_manager, topic)
        try:
            ctx = c.static_topics.context(topic, queue_id, addressing)
        except NotLeaderError as exc:
            raise _Refused(ResponseCode.NOT_LEADER_FOR_QUEUE, str(exc)) from None
        if ctx is None:
            if config is None:
                raise _Refused(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
            checked_queue_id(config, queue_id, writing=False)
        return ctx

    @staticmethod
    def _offset(call, *args) -> broker_pb2.OffsetResponse:
        try:
            return broker_pb2.OffsetResponse(code=ResponseCode.SUCCESS, offset=call(*args))
        except _Refused as exc:
            return broker_pb2.OffsetResponse(code=exc.code, remark=exc.remark, offset=-1)
        except PeerBrokerError as exc:
            return broker_pb2.OffsetResponse(code=ResponseCode.SYSTEM_ERROR, remark=str(exc), offset=-1)

    def update_offset(self, request: broker_pb2.UpdateConsumerOffsetRequest) -> common_pb2.CommandResponse:
        group = checked_group(request.consumer_group)
        require(request.commit_offset >= 0, f"commit offset {request.commit_offset} is negative")
        c = self.controller
        try:
            ctx = self._queue(request.topic, request.queue_id, request.addressing)
            if ctx is not None:
                c.static_topics.commit_offset(ctx, group, request.commit_offset)
            else:
                c.consumer_offset_manager.commit_offset(group, request.topic, request.queue_id, request.commit_offset)
        except _Refused as exc:
            return common_pb2.CommandResponse(code=exc.code, remark=exc.remark)
        except PeerBrokerError as exc:
            return common_pb2.CommandResponse(code=ResponseCode.SYSTEM_ERROR, remark=str(exc))
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    def query_offset(self, request: broker_pb2.QueryConsumerOffsetRequest) -> broker_pb2.OffsetResponse:
        group = checked_group(request.consumer_group)
        c = self.controller

        def query() -> int:
            ctx = self._queue(request.topic, request.queue_id, request.addressing)
            if ctx is not None:
                return c.static_topics.query_offset(ctx, group)
            return c.consumer_offset_manager.query_offset(group, request.topic, request.queue_id)

        response = self._offset(query)
        if response.code == ResponseCode.SUCCESS and response.offset < 0:
            where = f"{request.topic}/{request.queue_id}"
            return broker_pb2.OffsetResponse(code=ResponseCode.QUERY_NOT_FOUND, offset=-1,
                                             remark=f"group {group} has no offset on {where}")
        return response

    def min_offset(self, request: broker_pb2.QueueRequest) -> broker_pb2.OffsetResponse:
        c = self.controller

        def query() -> int:
            ctx = self._queue(request.topic, request.queue_id, request.addressing)
            return c.static_topics.min_offset(ctx) if ctx else c.store.min_offset(request.topic, request.queue_id)

        return self._offset(query)

    def max_offset(self, request: broker_pb2.QueueRequest) -> broker_pb2.OffsetResponse:
        c = self.controller

        def query() -> int:
            ctx = self._queue(request.topic, request.queue_id, request.addressing)
            return c.static_topics.max_offset(ctx) if ctx else c.store.max_offset(request.topic, request.queue_id)

        return self._offset(query)

    def search_offset(self, request: broker_pb2.SearchOffsetRequest) -> broker_pb2.OffsetResponse:
        require(request.timestamp >= 0, f"timestamp {request.timestamp} is negative")
        c = self.controller

        def query() -> int:
            ctx = self._queue(request.topic, request.queue_id, request.addressing)
            if ctx is not None:
                return c.static_topics.search_offset(ctx, request.timestamp, request.upper)
            boundary = BoundaryType.UPPER if request.upper else BoundaryType.LOWER
            return c.store.offset_by_time(request.topic, request.queue_id, request.timestamp, boundary)

        return self._offset(query)

"""Consumer offsets (commit, query) and queue offsets (min, max, search by time).

On a static topic's logic queue these are answered in logic terms by the queue's leader (see
``broker/statictopic/static_topic_service.py``); otherwise straight from this broker's store."""

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.request_checks import checked_group, checked_queue_id, topic_config
from broker.statictopic.logic_queue_context import LogicQueueContext
from broker.statictopic.static_topic_service import StaticTopicService
from broker.store.consume_queue.consume_queue_store import BoundaryType
from broker.store.message_store_reader import MessageStoreReader
from common.refusal import Refusal
from common.request_error import require
from common.response_code import ResponseCode
from proto import broker_pb2, common_pb2


class ConsumerManageProcessor:
    def __init__(self, topic_config_manager: TopicConfigManager, consumer_offset_manager: ConsumerOffsetManager,
                 static_topics: StaticTopicService, store: MessageStoreReader) -> None:
        self.topic_config_manager = topic_config_manager
        self.consumer_offset_manager = consumer_offset_manager
        self.static_topics = static_topics
        self.store = store

    def _queue(self, topic: str, queue_id: int, addressing: int) -> LogicQueueContext | None:
        """The logic queue's context for a static topic, None for a plain queue; raises Refusal."""
        config = topic_config(self.topic_config_manager, topic)
        ctx = self.static_topics.context(topic, queue_id, addressing)
        if ctx is None:
            if config is None:
                raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
            checked_queue_id(config, queue_id, writing=False)
        return ctx

    @staticmethod
    def _offset(offset: int) -> broker_pb2.OffsetResponse:
        return broker_pb2.OffsetResponse(code=ResponseCode.SUCCESS, offset=offset)

    def update_offset(self, request: broker_pb2.UpdateConsumerOffsetRequest) -> common_pb2.CommandResponse:
        group = checked_group(request.consumer_group)
        if request.clear:
            return self._clear_offset(group, request)
        require(request.commit_offset >= 0, f"commit offset {request.commit_offset} is negative")
        ctx = self._queue(request.topic, request.queue_id, request.addressing)
        if ctx is not None:
            self.static_topics.commit_offset(ctx, group, request.commit_offset)
        else:
            self.consumer_offset_manager.commit_offset(group, request.topic, request.queue_id, request.commit_offset)
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    def _clear_offset(self, group: str, request: broker_pb2.UpdateConsumerOffsetRequest) -> common_pb2.CommandResponse:
        """A static topic's leader forgets a group's offset on a newer link here (``StaticTopicService.commit_offset``:
        the group went back to an older link). Physical queues only: a logic queue's offset is the leader's to move."""
        require(request.addressing == broker_pb2.PHYSICAL, "clear takes a physical queue (addressing PHYSICAL)")
        require(self.static_topics.mapping_manager.get(request.topic) is not None,
                f"topic {request.topic} is not a static topic here: clear is for a static topic's links")
        self.consumer_offset_manager.delete_offsets([(group, request.topic, request.queue_id)])
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    def query_offset(self, request: broker_pb2.QueryConsumerOffsetRequest) -> broker_pb2.OffsetResponse:
        group = checked_group(request.consumer_group)
        ctx = self._queue(request.topic, request.queue_id, request.addressing)
        if ctx is not None:
            offset = self.static_topics.query_offset(ctx, group)
        else:
            offset = self.consumer_offset_manager.query_offset(group, request.topic, request.queue_id)
        if offset < 0:  # an answer, not a refusal: clients read "nothing committed" (-1) from it
            where = f"{request.topic}/{request.queue_id}"
            return broker_pb2.OffsetResponse(code=ResponseCode.QUERY_NOT_FOUND, offset=-1,
                                             remark=f"group {group} has no offset on {where}")
        return self._offset(offset)

    def min_offset(self, request: broker_pb2.QueueRequest) -> broker_pb2.OffsetResponse:
        ctx = self._queue(request.topic, request.queue_id, request.addressing)
        if ctx is not None:
            return self._offset(self.static_topics.min_offset(ctx))
        return self._offset(self.store.min_offset(request.topic, request.queue_id))

    def max_offset(self, request: broker_pb2.QueueRequest) -> broker_pb2.OffsetResponse:
        ctx = self._queue(request.topic, request.queue_id, request.addressing)
        if ctx is not None:
            return self._offset(self.static_topics.max_offset(ctx))
        if self.static_topics.mapping_manager.get(request.topic) is not None:
            # A static topic's physical queue: a remap closes the old leader's link here, so every acknowledged
            # message counts, dispatched or not (one not yet dispatched was left out of the link, and lost to it).
            return self._offset(self.store.next_queue_offset(request.topic, request.queue_id))
        return self._offset(self.store.max_offset(request.topic, request.queue_id))

    def search_offset(self, request: broker_pb2.SearchOffsetRequest) -> broker_pb2.OffsetResponse:
        require(request.timestamp >= 0, f"timestamp {request.timestamp} is negative")
        ctx = self._queue(request.topic, request.queue_id, request.addressing)
        if ctx is not None:
            return self._offset(self.static_topics.search_offset(ctx, request.timestamp, request.upper))
        boundary = BoundaryType.UPPER if request.upper else BoundaryType.LOWER
        return self._offset(self.store.offset_by_time(request.topic, request.queue_id, request.timestamp, boundary))

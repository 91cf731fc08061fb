"""Send: a single message or a batch to one queue."""

import logging
from typing import TYPE_CHECKING

from broker.processor.request_checks import checked_queue_id, checked_topic
from broker.request_error import RequestError, require
from broker.statictopic.logic_queue_context import NotLeaderError
from broker.store.put_message_result import PutMessageStatus
from common.kv_shard import KV_TOPIC
from common.perm import is_writeable
from common.response_code import ResponseCode
from common.topic_config import TopicConfig
from proto import broker_pb2

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController

log = logging.getLogger(__name__)

MAX_BATCH_MESSAGES = 4096


class SendMessageProcessor:
    def __init__(self, controller: "BrokerController") -> None:
        self.controller = controller

    def send(self, request: broker_pb2.SendMessageRequest) -> broker_pb2.SendMessageResponse:
        c = self.controller
        bodies = list(request.bodies)
        require(len(bodies) > 0, "batch is empty: no message bodies")
        require(len(bodies) <= MAX_BATCH_MESSAGES, f"batch of {len(bodies)} messages exceeds {MAX_BATCH_MESSAGES}")
        properties = list(request.properties) or [b""] * len(bodies)
        require(len(properties) == len(bodies), f"{len(bodies)} bodies but {len(properties)} property blocks")
        total = sum(map(len, bodies))
        limit = c.config.max_message_size
        require(total <= limit, f"batch of {total} bytes exceeds maxMessageSize {limit}")
        topic = checked_topic(request.topic)
        require(topic != KV_TOPIC, f"topic {KV_TOPIC} holds the KV store's operations: write it with a KV client")
        try:  # a static topic is answered by its mapping, even on a broker that holds none of its queues
            ctx = c.static_topics.context(topic, request.queue_id, request.addressing)
        except NotLeaderError as exc:
            return broker_pb2.SendMessageResponse(code=ResponseCode.NOT_LEADER_FOR_QUEUE, remark=str(exc))
        config = c.topic_config_manager.select(topic) or (None if ctx else self._auto_create(topic))
        if config is None:
            return broker_pb2.SendMessageResponse(code=ResponseCode.TOPIC_NOT_EXIST,
                                                  remark=f"topic {request.topic} does not exist on this broker")
        if not is_writeable(config.perm):
            return broker_pb2.SendMessageResponse(code=ResponseCode.NO_PERMISSION,
                                                  remark=f"topic {config.topic_name} is not writeable here")
        queue_id = ctx.leader.queue_id if ctx is not None else request.queue_id
        checked_queue_id(config, queue_id, writing=True)
        result = c.store.put_messages(config.topic_name, queue_id, bodies, properties,
                                      born_timestamp=request.born_timestamp or None,
                                      born_host=request.born_host or "127.0.0.1:0", flag=request.flag,
                                      sys_flag=request.sys_flag)
        if result.status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
            raise RequestError(result.error)
        if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
            return broker_pb2.SendMessageResponse(code=ResponseCode.SERVICE_NOT_AVAILABLE, remark=result.error)
        code = ResponseCode.SUCCESS if result.ok else ResponseCode.FLUSH_DISK_TIMEOUT
        assert result.append is not None
        # A static topic answers in logic terms (-1 while the new leader's logic offset is undecided).
        queue_offset = ctx.leader.logic_loosely(result.queue_offset) if ctx is not None else result.queue_offset
        return broker_pb2.SendMessageResponse(code=code, queue_id=request.queue_id, queue_offset=queue_offset,
                                              store_host=result.store_host,
                                              physical_offsets=result.append.physical_offsets)

    def _auto_create(self, topic: str) -> TopicConfig | None:
        c = self.controller
        if not c.config.auto_create_topic_enable:
            return None
        n = c.config.default_topic_queue_nums
        config = TopicConfig(topic, read_queue_nums=n, write_queue_nums=n)
        c.update_topic(config)
        log.info("topic_auto_created topic=%s queues=%d", topic, n)
        return config

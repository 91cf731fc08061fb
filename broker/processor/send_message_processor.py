"""Send: a single message or a batch to one queue. A delayed batch (every message with a delay level or a
delivery time) is stored in the timer topic instead, and delivered to its queue when due (``broker/timer/``); a
transaction's half message in the half topic, until its transaction ends (``broker/transaction/``)."""

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.request_checks import checked_born_host, checked_queue_id, checked_send_topic
from broker.statictopic.static_topic_service import StaticTopicService
from broker.store.message_store import MessageStore
from broker.store.put_message_result import PutMessageResult, PutMessageStatus
from broker.timer.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, DEFAULT_TIMER_MAX_DELAY_SEC, parse_delay_levels
from broker.timer.delay_router import DelayRouter, is_delayed_needle_in
from broker.timer.timer_batch import timer_properties, timer_wire_batch
from broker.timer.timer_recall import recall_handles
from broker.transaction.half_message import half_properties, half_wire_batch, is_half_needle_in
from common.kv_shard import KV_TOPIC
from common.message_codec import CorruptRecordError
from common.message_properties import MAX_USER_PROPERTIES_SIZE, user_properties_refusal
from common.perm import is_writeable
from common.refusal import Refusal
from common.request_error import RequestError, require
from common.response_code import ResponseCode
from common.timer_topic import TIMER_QUEUE_ID, TIMER_TOPIC
from common.topic_config import TopicConfig
from common.transaction_topic import HALF_QUEUE_ID, HALF_TOPIC, TRANSACTION_PREPARED_TYPE, with_transaction_type
from common.wire_batch import WireBatch
from proto import broker_pb2

log = logging.getLogger(__name__)

MAX_BATCH_MESSAGES = 4096
DEFAULT_DELAY_ROUTER = DelayRouter(parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL), DEFAULT_TIMER_MAX_DELAY_SEC * 1000)


@dataclass(frozen=True, slots=True)
class SendLimits:
    """The broker.conf values a send is checked against."""

    max_message_size: int
    auto_create_topic_enable: bool
    default_topic_queue_nums: int


class SendMessageProcessor:
    def __init__(self, limits: SendLimits, topic_config_manager: TopicConfigManager,
                 static_topics: StaticTopicService, store: MessageStore,
                 on_topics_changed: Callable[[], None], *, delay_router: DelayRouter = DEFAULT_DELAY_ROUTER,
                 slave: bool = False, waits_for_flush: bool = True) -> None:
        self.limits = limits
        self.topic_config_manager = topic_config_manager
        self.static_topics = static_topics
        self.store = store  # the local store: sends write there, whatever serves reads
        self.on_topics_changed = on_topics_changed
        self.delay_router = delay_router  # the levels and longest delay of this broker (messageDelayLevel, ...)
        self.slave = slave  # brokerRole=SLAVE: writes go to the master
        # False: a SYNC_FLUSH put returns once appended; the caller waits for the fsync (broker/flush_waiters.py)
        self.waits_for_flush = waits_for_flush

    def send(self, request: broker_pb2.SendMessageRequest) -> broker_pb2.SendMessageResponse:
        """A batch as commitlog records (``records``, what the SDK sends) or as bodies and properties."""
        if self.slave:
            raise Refusal(ResponseCode.NO_PERMISSION, f"broker {self.store.config.store_host} is a slave "
                          "(brokerRole=SLAVE): send to its group's master")
        if request.records:  # checked record by record once the topic is known
            require(not request.bodies, "a send carries records or bodies, not both")
        else:
            self._check_bodies(request)
        require(request.topic != KV_TOPIC, f"topic {KV_TOPIC} holds the KV store's operations: write it with a KV "
                "client")
        topic = checked_send_topic(request.topic)
        # A static topic is answered by its mapping, even on a broker that holds none of its queues.
        ctx = self.static_topics.context(topic, request.queue_id, request.addressing)
        config = self.topic_config_manager.select(topic) or (None if ctx else self._auto_create(topic))
        if config is None:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {request.topic} does not exist on this broker")
        if not is_writeable(config.perm):
            raise Refusal(ResponseCode.NO_PERMISSION, f"topic {config.topic_name} is not writeable here")
        queue_id = ctx.leader.queue_id if ctx is not None else request.queue_id
        checked_queue_id(config, queue_id, writing=True)
        # A static topic's delayed message keeps the physical queue here and its logic queue: it is delivered
        # here, or to the logic queue's leader should the queue have moved meanwhile.
        result, timer_props = self._put(request, config.topic_name, queue_id, static=ctx is not None)
        if result.status is PutMessageStatus.NOT_ADMITTED:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {config.topic_name} was deleted while the send was "
                          "checked; nothing stored")
        if result.status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
            raise RequestError(result.error)
        if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
            raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, result.error)
        code = ResponseCode.SUCCESS if result.ok else ResponseCode.FLUSH_DISK_TIMEOUT
        assert result.append is not None
        # A static topic answers in logic terms (-1 while the new leader's logic offset is undecided). A delayed
        # message has no offset in its queue until it is delivered: -1.
        if timer_props is not None:
            return broker_pb2.SendMessageResponse(
                code=code, queue_id=request.queue_id, queue_offset=-1, store_host=result.store_host,
                physical_offsets=result.append.physical_offsets,
                recall_handles=recall_handles(self.static_topics.broker_name, timer_props, result.store_host,
                                              result.append.physical_offsets))
        queue_offset = ctx.leader.logic_loosely(result.queue_offset) if ctx is not None else result.queue_offset
        return broker_pb2.SendMessageResponse(code=code, queue_id=request.queue_id, queue_offset=queue_offset,
                                              store_host=result.store_host,
                                              physical_offsets=result.append.physical_offsets)

    def _check_bodies(self, request: broker_pb2.SendMessageRequest) -> None:
        count = len(request.bodies)
        require(count > 0, "batch is empty: no message bodies")
        require(count <= MAX_BATCH_MESSAGES, f"batch of {count} messages exceeds {MAX_BATCH_MESSAGES}")
        require(len(request.properties) in (0, count), f"{count} bodies but {len(request.properties)} property "
                "blocks")
        self._check_total(sum(map(len, request.bodies)), sum(map(len, request.properties)), count)
        _check_properties_size(max(map(len, request.properties), default=0))
        _check_properties_text(request.properties)

    def _check_total(self, body_bytes: int, properties_bytes: int, count: int) -> None:
        """A message's body is at most maxMessageSize; a batch's bodies too, and with their properties at most
        maxMessageSize and one message's largest properties (as one message may be)."""
        limit = self.limits.max_message_size
        what = "message body" if count == 1 else f"batch of {count} messages with bodies"
        require(body_bytes <= limit, f"{what} of {body_bytes} bytes exceeds maxMessageSize {limit}")
        require(body_bytes + properties_bytes <= limit + MAX_USER_PROPERTIES_SIZE,
                f"{what} of {body_bytes} bytes and properties of {properties_bytes} bytes exceed maxMessageSize "
                f"{limit} and {MAX_USER_PROPERTIES_SIZE} bytes of properties")

    def _put(self, request: broker_pb2.SendMessageRequest, topic: str, queue_id: int,
             static: bool = False) -> tuple[PutMessageResult, list[bytes] | None]:
        """The put's result, and for a delayed batch (stored in the timer topic) its records' properties there. A
        half message answers its offset in the half queue (a transaction id names it). A batch for the topic
        itself, or its delayed or half messages for it, is appended only if the topic still exists under the
        commitlog's lock: deleteTopic's deletion record appends under it too, so a send checked just before a delete
        cannot land after its record (in the queue a topic made again under the name starts from offset 0; a timer
        recorded after the deletion would be delivered into it)."""
        def admit() -> bool:
            return self.topic_config_manager.select(topic) is not None
        if request.records:
            try:
                batch = WireBatch.parse(request.records, topic.encode(), queue_id, self.store.store_host,
                                        MAX_BATCH_MESSAGES)
            except CorruptRecordError as exc:
                raise RequestError(f"records of the batch: {exc}") from None
            joined = b"".join(batch.properties)
            self._check_total(batch.body_bytes, len(joined), len(batch.sizes))
            _check_properties_size(batch.max_properties)
            _check_properties_text(batch.properties)
            if is_half_needle_in(joined):
                half_batch = half_wire_batch(batch, topic, queue_id, static)
                if half_batch is not None:
                    return self.store.put_wire_batch(half_batch, wait_flushed=self.waits_for_flush, admit=admit), None
            if is_delayed_needle_in(joined):
                timer = timer_wire_batch(self.delay_router, batch, topic, queue_id, _now_ms(),
                                         request.queue_id if static else None)
                if timer is not None:
                    return self.store.put_wire_batch(timer[0], wait_flushed=self.waits_for_flush, admit=admit), timer[1]
            return self.store.put_wire_batch(batch, wait_flushed=self.waits_for_flush, admit=admit), None
        born_host = checked_born_host(request.born_host) if request.born_host else "127.0.0.1:0"
        properties: Sequence[bytes] = request.properties or [b""] * len(request.bodies)
        put_topic, put_queue_id, sys_flag = topic, queue_id, request.sys_flag
        timer_props: list[bytes] | None = None
        half_props = (half_properties(properties, topic, queue_id, static)
                      if request.properties and is_half_needle_in(b"".join(request.properties)) else None)
        if half_props is not None:
            put_topic, put_queue_id, properties = HALF_TOPIC, HALF_QUEUE_ID, half_props
            sys_flag = with_transaction_type(sys_flag, TRANSACTION_PREPARED_TYPE)
        elif request.properties and is_delayed_needle_in(b"".join(request.properties)):
            timer_props = timer_properties(self.delay_router, properties, topic, queue_id, _now_ms(),
                                           request.queue_id if static else None)
            if timer_props is not None:
                put_topic, put_queue_id, properties = TIMER_TOPIC, TIMER_QUEUE_ID, timer_props
        return self.store.put_messages(put_topic, put_queue_id, request.bodies, properties,
                                       born_timestamp=request.born_timestamp or None, born_host=born_host,
                                       flag=request.flag, sys_flag=sys_flag, wait_flushed=self.waits_for_flush,
                                       admit=admit), timer_props

    def _auto_create(self, topic: str) -> TopicConfig | None:
        if not self.limits.auto_create_topic_enable:
            return None
        n = self.limits.default_topic_queue_nums
        config = TopicConfig(topic, read_queue_nums=n, write_queue_nums=n)
        self.topic_config_manager.update(config)
        self.on_topics_changed()
        log.info("topic_auto_created topic=%s queues=%d", topic, n)
        return config


def _check_properties_text(blocks: Sequence[bytes]) -> None:
    """Properties are UTF-8 text: a block that is not was stored, and every reader of the message failed on it (a
    consumer's queue stuck, a v2 receive failing, a key query failing for its hash bucket). Joined with an ASCII
    byte between them, so that no character is made of two blocks' bytes."""
    try:
        b"\x00".join(blocks).decode()
    except UnicodeDecodeError as exc:
        raise RequestError(f"a message's properties are not UTF-8 text ({exc.reason})") from None


def _check_properties_size(largest: int) -> None:
    """A producer's property block leaves room for what the broker adds when it delays, retries, dead-letters or
    discards the message (``common/message_properties.py``): refused here, in the limit the producer hits, rather
    than by one of those writes later (a delay's refusal named the size with the timer's properties added)."""
    refusal = user_properties_refusal(largest)
    if refusal is not None:
        raise RequestError(refusal)


def _now_ms() -> int:
    """The broker's wall clock: a delay level counts from here, and the timer delivers by the same clock."""
    return int(time.time() * 1000)

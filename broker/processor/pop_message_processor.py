"""POP requests (proto/pop.proto): checks, the group's settings, and the answers; ``broker/pop/pop_service.py``
decides what is handed out. A message that exhausted its retries goes to %DLQ%<group> by the consumer groups'
own dead-letter path (``SendMsgBackProcessor``), so POP and push consumers dead-letter alike."""

import itertools
import logging
from collections.abc import Callable

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.subscription_group_config import SubscriptionGroupConfig
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.out.peer_brokers import PeerBrokerError
from broker.pop.logic_queue_reader import LogicQueueReader
from broker.pop.pop_service import HandleRefused, PopOutcome, PopQuery, PopService, QueueReader, QueueUnavailable
from broker.processor.request_checks import checked_group, checked_queue_id, checked_topic
from broker.processor.send_msg_back_processor import SendMsgBackProcessor
from broker.processor.subscription_filter import tags_codes_of
from broker.statictopic.static_topic_service import StaticTopicService
from broker.store.message_store_reader import MessageStoreReader
from common.group_topics import dlq_topic
from common.message_codec import decode_record
from common.message_properties import (
    PROPERTY_UNIQUE_KEY,
    decode_properties,
    encode_properties,
    repaired_properties,
)
from common.perm import is_readable
from common.receipt_handle import MAX_ACK_HANDLES, InvalidReceiptHandle, ReceiptHandle
from common.refusal import Refusal
from common.request_error import RequestError, require
from common.response_code import ResponseCode
from common.topic_config import TopicConfig
from common.wait_limits import MAX_INVISIBLE_MS
from proto import consumer_pb2, pop_pb2
from proto.broker_pb2 import LOGIC

log = logging.getLogger(__name__)

MAX_POP_NUMS = 32  # upstream's limit on one receive


class PopMessageProcessor:
    def __init__(self, *, topic_config_manager: TopicConfigManager,
                 subscription_group_manager: SubscriptionGroupManager, consumer_offset_manager: ConsumerOffsetManager,
                 static_topics: StaticTopicService, store: MessageStoreReader, pop: PopService,
                 send_back: SendMsgBackProcessor, refusal: Callable[[], str | None],
                 replicated: Callable[[], None] = lambda: None, never_waits: bool = False) -> None:
        self.topics = topic_config_manager
        self.groups = subscription_group_manager
        self.offsets = consumer_offset_manager
        self.static_topics = static_topics
        self.store = store
        self.service = pop
        self.send_back = send_back
        self.refusal = refusal  # why this broker takes no POP now (a slave: in-flight state lives on the master)
        self.replicated = replicated  # blocks until what was written is on the slaves (SYNC_MASTER), or raises
        # No fsync per write (not SYNC_FLUSH) and no wait for slaves: a normal topic's calls never block.
        self.never_waits = never_waits
        self._turn = itertools.count()

    def pop(self, request: pop_pb2.PopMessageRequest) -> PopOutcome:
        self._check_serving()
        group = checked_group(request.group)
        require(1 <= request.max_msg_nums <= MAX_POP_NUMS, f"max_msg_nums {request.max_msg_nums} is outside "
                f"1..{MAX_POP_NUMS}")
        require(0 < request.invisible_time_ms <= MAX_INVISIBLE_MS, f"invisible_time_ms {request.invisible_time_ms} "
                f"is outside 1..{MAX_INVISIBLE_MS}")
        require(request.poll_time_ms >= 0, f"poll_time_ms {request.poll_time_ms} is negative")
        require(request.queue_id >= -1, f"queue id {request.queue_id}: a queue id, or -1 for any queue")
        group_config = self._group_config(group)
        reader, queue_ids, committed_offset = self._queues(group, request)
        start = next(self._turn)  # each pop of "any queue" starts at the next one: no queue starves
        queue_ids = [queue_ids[(start + i) % len(queue_ids)] for i in range(len(queue_ids))]
        query = PopQuery(reader, group, request.topic, queue_ids, request.max_msg_nums, request.invisible_time_ms,
                         _tags_codes(request.expression), group_config.consume_message_orderly,
                         group_config.retry_max_times)
        try:
            outcome = self.service.pop(query, lambda queue_id: _or_first(committed_offset(queue_id), reader,
                                                                        request.topic, queue_id), committed_offset)
        except QueueUnavailable as exc:  # every queue asked for: retried (another broker's may answer meanwhile)
            raise Refusal(ResponseCode.SYSTEM_BUSY, f"{exc}: it resumes once that broker is back") from None
        if isinstance(reader, LogicQueueReader):  # long polling waits on the leaders' physical queues
            outcome.scan_offsets = {reader.contexts[q].leader.queue_id: max(
                reader.contexts[q].leader.physical_of(o), reader.contexts[q].leader.start_offset)
                for q, o in outcome.scan_offsets.items()}
        return outcome

    def _queues(self, group: str, request: pop_pb2.PopMessageRequest,
                ) -> tuple[MessageStoreReader | LogicQueueReader, list[int], Callable[[int], int]]:
        """How to read the topic, which of its queues to try, and the group's committed offset on a queue (-1:
        none): a normal topic's queues (one, or all readable ones), or the logic queues of a static topic this
        broker leads (one addressed LOGIC, or all it leads)."""
        topic = checked_topic(request.topic)
        detail = self.static_topics.mapping_manager.get(topic)
        if detail is None:
            require(request.addressing != LOGIC, f"topic {topic} is not a static topic: do not address it by "
                    "logic queue")
            config = self._readable_topic(topic)
            queue_ids = ([checked_queue_id(config, request.queue_id, writing=False)] if request.queue_id >= 0
                         else list(range(config.read_queue_nums)))
            return self.store, queue_ids, lambda queue_id: self.offsets.query_offset(group, topic, queue_id)
        require(request.addressing == LOGIC, f"topic {topic} is a static topic: pop its logic queues (LOGIC)")
        if request.queue_id >= 0:
            ctx = self.static_topics.context(topic, request.queue_id, LOGIC)
            assert ctx is not None  # LOGIC on a static topic: a context or a refusal
            contexts = {request.queue_id: ctx}
        else:  # every logic queue led here
            contexts = {q: c for q in range(detail.total_queues) if detail.leads(q)
                        and (c := self.static_topics.context(topic, q, LOGIC)) is not None}
            if not contexts:
                raise Refusal(ResponseCode.NOT_LEADER_FOR_QUEUE, f"broker {detail.bname} leads no logic queue of "
                              f"static topic {topic}")
        reader = LogicQueueReader(self.static_topics, contexts, group)

        def committed(queue_id: int) -> int:
            try:
                return self.static_topics.query_offset(contexts[queue_id], group)
            except PeerBrokerError as exc:  # kept on an older link's broker that is down: that queue waits
                raise QueueUnavailable(f"logic queue {queue_id} of {topic}: {exc.remark}") from None

        return reader, list(contexts), committed

    def ack(self, request: pop_pb2.AckMessageRequest) -> pop_pb2.AckMessageResponse:
        self._check_serving()
        group, topic = checked_group(request.group), checked_topic(request.topic)
        require(0 < len(request.receipt_handles) <= MAX_ACK_HANDLES,
                f"{len(request.receipt_handles)} receipt handles: an ack takes 1..{MAX_ACK_HANDLES}")
        # A handle given twice gets its first copy's outcome (answers name handles by their text).
        texts = list(dict.fromkeys(request.receipt_handles))
        decoded: list[tuple[int, ReceiptHandle]] = []
        whys: dict[int, str] = {}  # position in texts -> why that handle is refused
        for i, text in enumerate(texts):
            try:
                decoded.append((i, ReceiptHandle.decode(text)))
            except InvalidReceiptHandle as exc:  # refused alone: the request may carry other consumers' acks
                whys[i] = str(exc)
        answers = self.service.ack(group, topic, [handle for _, handle in decoded])
        whys.update((i, why) for (i, _), why in zip(decoded, answers, strict=True) if why is not None)
        if not whys:  # every handle acked: no result each (a pop's acks are most of POP's calls)
            return pop_pb2.AckMessageResponse(code=ResponseCode.SUCCESS)
        refused = [pop_pb2.AckResult(receipt_handle=texts[i], code=ResponseCode.INVALID_RECEIPT_HANDLE, remark=why)
                   for i, why in sorted(whys.items())]
        return pop_pb2.AckMessageResponse(
            code=ResponseCode.INVALID_RECEIPT_HANDLE, results=refused,
            remark=f"{len(refused)} of {len(texts)} handles refused: {refused[0].remark}")

    def change_invisible_time(self, request: pop_pb2.ChangeInvisibleTimeRequest,
                              ) -> pop_pb2.ChangeInvisibleTimeResponse:
        self._check_serving()
        group, topic = checked_group(request.group), checked_topic(request.topic)
        require(0 <= request.invisible_time_ms <= MAX_INVISIBLE_MS, f"invisible_time_ms "
                f"{request.invisible_time_ms} is outside 0..{MAX_INVISIBLE_MS}")
        try:
            handle = self.service.change_invisible_time(group, topic, _handle(request.receipt_handle),
                                                        request.invisible_time_ms, request.undelivered)
        except HandleRefused as exc:
            raise Refusal(ResponseCode.INVALID_RECEIPT_HANDLE, str(exc)) from None
        return pop_pb2.ChangeInvisibleTimeResponse(code=ResponseCode.SUCCESS, receipt_handle=handle.encode(),
                                                   invisible_until_ms=handle.invisible_until_ms)

    def forward_to_dead_letter_queue(self, request: pop_pb2.ForwardToDeadLetterQueueRequest,
                                     ) -> pop_pb2.ForwardToDeadLetterQueueResponse:
        self._check_serving()
        group, topic = checked_group(request.group), checked_topic(request.topic)
        self._group_config(group)
        try:
            handle = _handle(request.receipt_handle)
            self.service.forward_to_dead_letter(group, topic, handle, self._reader_of(group, topic, handle.queue_id))
        except HandleRefused as exc:
            raise Refusal(ResponseCode.INVALID_RECEIPT_HANDLE, str(exc)) from None
        return pop_pb2.ForwardToDeadLetterQueueResponse(code=ResponseCode.SUCCESS, dlq_topic=dlq_topic(group))

    def pop_state(self, request: pop_pb2.PopStateRequest) -> pop_pb2.PopStateSnapshot:
        """The whole in-flight state, for a slave's copy (answered by a slave too: its own copy), unless the copy
        the caller holds is still of the current version."""
        version, records = self.service.snapshot_since(request.known_version)
        if records is None:
            return pop_pb2.PopStateSnapshot(version=version, unchanged=True)
        return pop_pb2.PopStateSnapshot(records=records, version=version)

    def dead_letter(self, group: str, topic: str, record: bytes, reconsume_times: int) -> None:
        """``PopService``'s dead-letter step: the message, with its reconsume count, into %DLQ%<group>. Raises
        RequestError when the write refuses it for good (``PopService`` then drops it, logged)."""
        msg = decode_record(record)
        try:
            props = decode_properties(msg.raw_properties)
            encode_properties(props)
        except (UnicodeDecodeError, ValueError) as exc:  # stored so by its producer: it must not stop the group
            log.warning("pop_dead_letter_properties_repaired group=%s topic=%s offset_msg_id=%s error=%r", group,
                        topic, msg.offset_msg_id, exc)
            props = repaired_properties(msg.raw_properties)
        response = self.send_back.send_back(consumer_pb2.SendMsgBackRequest(
            group=group, topic=topic, body=msg.body, properties=encode_properties(props),
            born_timestamp=msg.born_timestamp, born_host=msg.born_host, flag=msg.flag,
            msg_id=props.get(PROPERTY_UNIQUE_KEY) or msg.offset_msg_id, delay_level=-1, max_reconsume_times=-1),
            reconsume_times)  # its count is POP's; the properties stay as stored, room or not for the broker's
        if response.code != ResponseCode.SUCCESS:  # the in-flight entry stays: dead-lettering is tried again
            raise Refusal(ResponseCode(response.code), f"dead-lettering a message of {topic} failed: {response.remark}")
        self.replicated()  # a SYNC_MASTER deletes the in-flight entry only once its slaves have the dead letter

    def runs_inline(self, topic: str) -> bool:
        """Whether a call on ``topic`` may run on the event loop: it waits for no fsync, slave or other broker (it
        reads the store as a pull on the loop does, and may dead-letter, a local append)."""
        return self.never_waits and self.static_topics.mapping_manager.get(topic) is None

    def pop_runs_inline(self, request: pop_pb2.PopMessageRequest) -> bool:
        """As :meth:`runs_inline`, and no queue the pop may read owes the group a message a second tier serves
        (its backend may stall). Called under POP's lock."""
        if not self.runs_inline(request.topic):
            return False
        config = self.topics.select(request.topic)
        if config is None:  # refused by the pop itself
            return True
        queue_ids = [request.queue_id] if request.queue_id >= 0 else range(config.read_queue_nums)
        # At 0 first: False at once for the local store and for a queue the tier serves nothing of, sparing the
        # owed offset (a walk over the queue's in-flight messages).
        return not any(self.store.may_wait_on_tier(request.topic, q, 0) and self.store.may_wait_on_tier(
            request.topic, q, self.service.owed_from(request.group, request.topic, q)) for q in queue_ids)

    def _reader_of(self, group: str, topic: str, queue_id: int) -> QueueReader:
        """What reads a handle's message back: a static topic's logic queue as this broker holds it, led here or
        not (a handle names the broker that popped it, which a remap may have moved the queue from since)."""
        if self.static_topics.mapping_manager.get(topic) is None:
            return self.store
        return LogicQueueReader(self.static_topics, {queue_id: self.static_topics.held_context(topic, queue_id)},
                                group)

    def _check_serving(self) -> None:
        refusal = self.refusal()
        if refusal is not None:
            raise Refusal(ResponseCode.NO_PERMISSION, refusal)

    def _readable_topic(self, topic: str) -> TopicConfig:
        config = self.topics.select(topic)
        if config is None:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist on this broker")
        if not is_readable(config.perm):
            raise Refusal(ResponseCode.NO_PERMISSION, f"topic {topic} is not readable here")
        return config

    def holds_message_groups(self, group: str) -> bool:
        """Whether ``group`` consumes FIFO (a message group's next waits for the one in flight): only then may an
        ack, a change of invisible time or a dead-lettering free a message a parked receive waits for."""
        config = self.groups.find(group)
        return config is not None and config.consume_message_orderly

    def _group_config(self, group: str) -> SubscriptionGroupConfig:
        config = self.groups.find(group)
        if config is None:
            raise Refusal(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {group} does not exist on this broker")
        if not config.consume_enable:
            raise Refusal(ResponseCode.NO_PERMISSION, f"consumer group {group} is disabled")
        return config



def _or_first(committed: int, reader: MessageStoreReader | LogicQueueReader, topic: str, queue_id: int) -> int:
    """Where a group's first pop of a queue starts: its committed offset (it consumed by pull before, or an
    operator reset it), else the queue's oldest message (QueueUnavailable while an older link's broker that holds it
    is down: the start must not be guessed, the group's state keeps it)."""
    if committed >= 0:
        return committed
    try:
        return reader.min_offset(topic, queue_id)
    except PeerBrokerError as exc:
        raise QueueUnavailable(f"queue {queue_id} of {topic}: {exc.remark}") from None


def _tags_codes(expression: str) -> set[int] | None:
    codes = tags_codes_of(expression or "*")
    return set(codes) if codes is not None else None


def _handle(text: str) -> ReceiptHandle:
    try:
        return ReceiptHandle.decode(text)
    except InvalidReceiptHandle as exc:
        raise RequestError(str(exc)) from None

"""A message its consumer failed (upstream's consumerSendMsgBack): retried later through the group's retry topic,
or dead-lettered.

Rules (upstream's): a message retried ``reconsume_times`` times so far goes to ``%DLQ%<group>`` once that count
reaches the limit (the consumer's ``max_reconsume_times``, else the group's retryMaxTimes; 16 by default), or at
once when the consumer asks (delay level < 0). Otherwise it is stored for ``%RETRY%<group>`` with delay level
3 + reconsume times (10 s, 30 s, 1 m, ...) and its count raised by one. The message keeps its original topic
(RETRY_TOPIC), its first id (ORIGIN_MESSAGE_ID), keys, tags and unique key; the count travels as RECONSUME_TIME.

The consumer sends the message itself rather than its commitlog offset: the send-back then works for messages
read from the tier, from an older broker of a static topic, or from a broker that is down.

A block with no room for those properties (stored before sends kept room for them: ``MAX_USER_PROPERTIES_SIZE``)
is not refused, which would have its consumer send it back forever: a retry that cannot be stored is dead-lettered
at once, and a dead letter leaves out what does not fit (``TRIM_ORDER``), logged.
"""

import logging
import random
import time
from collections.abc import Callable

from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.consumer_group_processor import ensure_group_topic
from broker.processor.request_checks import checked_born_host, checked_group, checked_topic
from broker.store.message_store import MessageStore
from broker.store.put_message_result import PutMessageResult, PutMessageStatus
from broker.timer.delay_router import DelayRouter
from common.group_topics import dlq_topic, is_retry_topic, retry_topic
from common.message_codec import record_size
from common.message_properties import (
    MAX_PROPERTIES_SIZE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEPARATOR,
    decode_properties,
    encode_properties,
)
from common.refusal import Refusal
from common.request_error import RequestError, require
from common.response_code import ResponseCode
from common.timer_topic import TIMER_TOPIC
from proto import consumer_pb2

log = logging.getLogger(__name__)

RETRY_BASE_LEVEL = 3  # the first retry waits level 3 (10 s), as upstream
# What a dead letter whose block is full leaves out first: the unique key names the message as well as its first id.
TRIM_ORDER = (PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC, PROPERTY_RECONSUME_TIME)


class SendMsgBackProcessor:
    def __init__(self, topic_config_manager: TopicConfigManager, subscription_group_manager: SubscriptionGroupManager,
                 store: MessageStore, delay_router: DelayRouter, on_topics_changed: Callable[[], None]) -> None:
        self.topics = topic_config_manager
        self.groups = subscription_group_manager
        self.store = store
        self.delay_router = delay_router
        self.on_topics_changed = on_topics_changed

    def send_back(self, request: consumer_pb2.SendMsgBackRequest,
                  reconsume_times: int | None = None) -> consumer_pb2.SendMsgBackResponse:
        """Blocks until the message is stored (a SYNC_FLUSH fsync): call it off the event loop. ``reconsume_times``:
        the count when the caller keeps it (POP: its in-flight state), else the properties' RECONSUME_TIME. Given,
        the properties stay as stored, so a full block can still be dead-lettered as it was."""
        group = checked_group(request.group)
        checked_topic(request.topic)
        require(len(request.body) > 0, "the message to send back has an empty body")
        born_host = checked_born_host(request.born_host) if request.born_host else "127.0.0.1:0"
        config = self.groups.find(group)
        if config is None:
            raise Refusal(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {group} does not exist on this broker")
        props = _decoded(request.properties)
        times = _reconsume_times(props) if reconsume_times is None else reconsume_times
        limit = request.max_reconsume_times if request.max_reconsume_times >= 0 else config.retry_max_times
        grown = dict(props)  # with what the broker adds; ``props`` stays as the consumer sent it
        if not is_retry_topic(request.topic):
            grown.setdefault(PROPERTY_RETRY_TOPIC, request.topic)
        if request.msg_id:
            require(not any(sep in request.msg_id for sep in (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)),
                    f"msg_id {request.msg_id[:80]!r} holds a property separator character")
            grown.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, request.msg_id)
        if request.delay_level < 0 or times >= limit:
            return self._dead_letter(request, group, props, grown, times, born_host)
        grown[PROPERTY_RECONSUME_TIME] = str(times + 1)
        target = ensure_group_topic(self.topics, checked_topic(retry_topic(group)), self.on_topics_changed)
        level = request.delay_level or RETRY_BASE_LEVEL + times
        due = int(time.time() * 1000) + self.delay_router.delay_of_level(level)
        queue_id = random.randrange(target.write_queue_nums)
        # With its level, which the timer reads the delay from should the clock step back (where it fits: the
        # broker's headroom in the properties does not count it).
        timer_props = self.delay_router.timer_properties(encode_properties({**grown, PROPERTY_DELAY: str(level)}),
                                                         target.topic_name, queue_id, due)
        if len(timer_props) > MAX_PROPERTIES_SIZE:
            timer_props = self.delay_router.timer_properties(encode_properties(grown), target.topic_name, queue_id,
                                                             due)
        if len(timer_props) > MAX_PROPERTIES_SIZE:
            # Stored before sends left room for the broker's properties (or sent past that rule): a retry could
            # never be stored, and refusing it would have the consumer send it back forever. A dead letter fits.
            log.warning("send_back_dead_lettered_early group=%s msg_id=%s reconsume_times=%d properties=%d "
                        "reason='no room in the properties for the retry'", group, request.msg_id, times,
                        len(timer_props))
            return self._dead_letter(request, group, props, grown, times, born_host)
        retry_size = record_size(len(TIMER_TOPIC.encode()), len(timer_props), len(request.body))
        if retry_size > self.store.commit_log.max_record_size():
            # A message that just fit a commitlog segment (small segments) with its own properties: the retry's
            # record, with the broker's, does not, and the consumer skipped the message on that refusal.
            log.warning("send_back_dead_lettered_early group=%s msg_id=%s reconsume_times=%d record=%d "
                        "reason='the retry record exceeds the commitlog segment size'", group, request.msg_id, times,
                        retry_size)
            return self._dead_letter(request, group, props, grown, times, born_host)
        result = self._put(TIMER_TOPIC, 0, request, timer_props, born_host)
        return self._answer(result, target.topic_name, times + 1)

    def _dead_letter(self, request: consumer_pb2.SendMsgBackRequest, group: str, props: dict[str, str],
                     grown: dict[str, str], times: int, born_host: str) -> consumer_pb2.SendMsgBackResponse:
        """Into %DLQ%<group>, with what the broker adds that fits the block (see :func:`_fitted`)."""
        grown[PROPERTY_RECONSUME_TIME] = str(times)
        dlq = checked_topic(dlq_topic(group))  # a group name refused nowhere else yet: INVALID_ARGUMENT, not a crash
        room = self.store.commit_log.max_record_size() - record_size(len(dlq.encode()), 0, len(request.body))
        fitted, trimmed = _fitted(props, grown, min(MAX_PROPERTIES_SIZE, room))
        if trimmed:
            log.warning("dead_letter_properties_trimmed group=%s msg_id=%s left_out=%s reason='no room in the "
                        "properties'", group, request.msg_id, ",".join(trimmed))
        target = ensure_group_topic(self.topics, dlq, self.on_topics_changed)
        result = self._put(target.topic_name, 0, request, encode_properties(fitted), born_host)
        response = self._answer(result, target.topic_name, times)  # raises when refused: logged as stored only
        log.info("message_dead_lettered group=%s topic=%s msg_id=%s reconsume_times=%d", group,
                 grown.get(PROPERTY_RETRY_TOPIC, request.topic), request.msg_id, times)
        return response

    def _put(self, topic: str, queue_id: int, request: consumer_pb2.SendMsgBackRequest, props: bytes,
             born_host: str) -> PutMessageResult:
        return self.store.put_messages(topic, queue_id, [request.body], [props],
                                       born_timestamp=request.born_timestamp or None, born_host=born_host,
                                       flag=request.flag)

    @staticmethod
    def _answer(result: PutMessageResult, topic: str, times: int) -> consumer_pb2.SendMsgBackResponse:
        if result.status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
            raise RequestError(result.error)
        if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
            raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, result.error)
        code = ResponseCode.SUCCESS if result.ok else ResponseCode.FLUSH_DISK_TIMEOUT
        return consumer_pb2.SendMsgBackResponse(code=code, topic=topic, reconsume_times=times)


def _decoded(raw: bytes) -> dict[str, str]:
    """The message's properties, checked to encode again as they were (names non-empty, no separators)."""
    try:
        props = decode_properties(raw)
        encode_properties(props)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(f"the message's properties are not in wire form: {exc}") from None
    return props


def _fitted(props: dict[str, str], grown: dict[str, str], limit: int = MAX_PROPERTIES_SIZE,
            ) -> tuple[dict[str, str], list[str]]:
    """``grown`` when its block fits ``limit``, else with the broker's additions taken back (each to its value in
    ``props``, or left out), least useful first, until it does; and the names taken back. Sends leave room for them
    all (MAX_USER_PROPERTIES_SIZE): only a block stored before that rule, or a record that nearly fills a commitlog
    segment (its block's limit is then what the segment has room for), needs this."""
    fitted, trimmed = dict(grown), []
    for name in TRIM_ORDER:
        if len(encode_properties(fitted)) <= limit:
            break
        if name in props:
            fitted[name] = props[name]
        else:
            fitted.pop(name, None)
        if fitted.get(name) != grown.get(name):
            trimmed.append(name)
    return fitted, trimmed


def _reconsume_times(props: dict[str, str]) -> int:
    raw = props.get(PROPERTY_RECONSUME_TIME, "0")
    if not raw.isascii() or not raw.isdigit():
        raise RequestError(f"property {PROPERTY_RECONSUME_TIME}={raw[:32]!r} is not a count")
    return int(raw)

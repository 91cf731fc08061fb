"""Pull: read a queue from an offset; the servicer parks a pull that finds nothing (long polling)."""

import logging
from collections.abc import Callable

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.out.peer_brokers import PeerBrokerError
from broker.processor.pull_outcome import DEFAULT_MAX_BYTES, PullOutcome, to_response
from broker.processor.request_checks import checked_group, checked_queue_id, topic_config
from broker.processor.subscription_filter import tags_codes_of
from broker.statictopic.static_topic_service import StaticTopicService
from broker.store.message_store_reader import MessageStoreReader
from common.perm import is_readable
from common.refusal import Refusal
from common.request_error import require
from common.response_code import ResponseCode
from proto import broker_pb2
from proto.broker_pb2 import LOGIC

log = logging.getLogger(__name__)

MAX_PULL_NUMS = 1024
# A replica asked for an offset it does not hold asks itself again after this long (within the pull's suspend time)
# before it answers: the consumer's next pull then comes about this often while its master is away.
REPLICA_OFFSET_RETRY_S = 1.0


class PullMessageProcessor:
    def __init__(self, topic_config_manager: TopicConfigManager, subscription_group_manager: SubscriptionGroupManager,
                 consumer_offset_manager: ConsumerOffsetManager, static_topics: StaticTopicService,
                 store: MessageStoreReader, *, refusal: Callable[[], str | None] = lambda: None,
                 is_replica: Callable[[], bool] = lambda: False) -> None:
        self.topic_config_manager = topic_config_manager
        self.subscription_group_manager = subscription_group_manager
        self.consumer_offset_manager = consumer_offset_manager
        self.static_topics = static_topics
        self.store = store
        self.refusal = refusal  # why this broker serves no pulls now (a slave without slaveReadEnable)
        self.is_replica = is_replica  # not its group's master now: it serves reads, it does not move offsets

    def blocks(self, request: broker_pb2.PullMessageRequest) -> bool:
        """Whether the pull may wait on something other than this broker's own memory and disks: a logic queue's
        older items on other brokers, or a second tier's backend."""
        return request.addressing == LOGIC or self.store.may_wait_on_tier(request.topic, request.queue_id,
                                                                          request.queue_offset)

    def pull(self, request: broker_pb2.PullMessageRequest) -> PullOutcome:
        """Raises RequestError for a malformed pull, Refusal for one that cannot be served here."""
        refusal = self.refusal()
        if refusal is not None:
            raise Refusal(ResponseCode.NO_PERMISSION, refusal)
        group = checked_group(request.consumer_group)
        require(request.queue_offset >= 0, f"queue offset {request.queue_offset} is negative")
        require(1 <= request.max_msg_nums <= MAX_PULL_NUMS,
                f"max_msg_nums {request.max_msg_nums} is outside 1..{MAX_PULL_NUMS}")
        require(request.max_bytes >= 0, f"max_bytes {request.max_bytes} is negative")
        # At most the default, whatever the client asks: an answer travels whole in a frame with others (a 300 MB
        # one ended its stream with RESOURCE_EXHAUSTED, failing every request on it, and held 600 MB meanwhile).
        request.max_bytes = min(request.max_bytes or DEFAULT_MAX_BYTES, DEFAULT_MAX_BYTES)
        config = topic_config(self.topic_config_manager, request.topic)
        # A static topic is answered by its mapping, even on a broker that holds none of its queues.
        ctx = self.static_topics.context(request.topic, request.queue_id, request.addressing)
        if config is None:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {request.topic} does not exist on this broker")
        if not is_readable(config.perm):
            raise Refusal(ResponseCode.NO_PERMISSION, f"topic {config.topic_name} is not readable here")
        subscription = self.subscription_group_manager.find(group)
        if subscription is not None and not subscription.consume_enable:
            raise Refusal(ResponseCode.NO_PERMISSION, f"consumer group {group} is disabled")
        codes = tags_codes_of(request.sub_expression)
        if ctx is not None:
            if request.commit_offset >= 0:
                _commit_on_pull(lambda: self.static_topics.commit_offset(ctx, group, request.commit_offset),
                                group, request)
            outcome = self.static_topics.pull(ctx, request, codes)
            if outcome.response.code == ResponseCode.PULL_OFFSET_MOVED and self.is_replica():
                return _offset_left_to_the_master(outcome.response, request.queue_offset)  # (logic offsets)
            return outcome
        checked_queue_id(config, request.queue_id, writing=False)
        if request.commit_offset >= 0:
            _commit_on_pull(lambda: self.consumer_offset_manager.commit_offset(
                group, config.topic_name, request.queue_id, request.commit_offset), group, request)
        result = self.store.get_message(config.topic_name, request.queue_id, request.queue_offset,
                                        request.max_msg_nums, request.max_bytes,
                                        set(codes) if codes is not None else None, runs=True)
        response = to_response(result, request.queue_offset, with_records=False)
        if response.code == ResponseCode.PULL_OFFSET_MOVED and self.is_replica():
            return _offset_left_to_the_master(response, request.queue_offset)
        caught_up = response.code == ResponseCode.PULL_NOT_FOUND
        return PullOutcome(response, (config.topic_name, request.queue_id, request.queue_offset) if caught_up else None,
                           b"".join(result.messages))


def _offset_left_to_the_master(response: broker_pb2.PullMessageResponse, offset: int) -> PullOutcome:
    """A replica outside what it holds answers "nothing yet" at the same offset, as upstream's slaves do
    (offsetCheckInSlave=false): its master may hold the offset (in its tier, or not yet copied here), and a consumer
    told its offset moved skips to the replica's bounds and commits that for good."""
    response.code = ResponseCode.PULL_NOT_FOUND
    response.remark = (f"{response.remark}: this replica does not hold offset {offset} (it holds "
                       f"{response.min_offset}..{response.max_offset}); its master may: pull again")
    response.next_begin_offset = offset
    return PullOutcome(response, retry_after_s=REPLICA_OFFSET_RETRY_S)


def _commit_on_pull(commit: Callable[[], None], group: str, request: broker_pb2.PullMessageRequest) -> None:
    """The offset a pull carries is stored on a best-effort basis, as upstream does: a commit that cannot be
    written (a full disk) is logged and the pull is still served; the consumer commits again later."""
    try:
        commit()
    except Exception as exc:  # OSError from a file, a plain Exception from RocksDB, a static topic's older link
        if isinstance(exc, Refusal) and not isinstance(exc, PeerBrokerError):  # on a broker that is down: served
            raise
        log.warning("pull_commit_offset_failed group=%s topic=%s queue=%d offset=%d error=%r", group, request.topic,
                    request.queue_id, request.commit_offset, exc)

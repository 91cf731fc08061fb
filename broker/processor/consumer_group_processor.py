"""Consumer groups: members' sessions and heartbeats, member lists, orderly queue leases, the group's
connection view, and offsets reset by time."""

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable

from broker.client.consumer_manager import ConsumerManager, QueueRef
from broker.client.consumer_sessions import CLOSED, ConsumerSessions, Session
from broker.client.rebalance_lock_manager import RebalanceLockManager
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.request_checks import checked_group, checked_topic
from broker.statictopic.moved_queue_leases import MovedQueueLeases
from broker.statictopic.static_topic_service import StaticTopicService
from broker.store.consume_queue.consume_queue_store import BoundaryType
from broker.store.message_store_reader import MessageStoreReader
from common.group_topics import retry_topic
from common.perm import PERM_READ_WRITE
from common.refusal import Refusal
from common.request_error import RequestError, require
from common.response_code import ResponseCode
from common.rpc_boundary import UndecodableRequest
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from common.topic_config import TopicConfig
from proto import common_pb2, consumer_pb2
from proto.broker_pb2 import LOGIC

log = logging.getLogger(__name__)

MAX_GROUPS = 1024  # groups one heartbeat may name (as a producer's)


def group_topic_config(name: str) -> TopicConfig:
    """A group's retry or dead-letter topic as the broker makes it: one queue, read-write."""
    return TopicConfig(name, read_queue_nums=1, write_queue_nums=1, perm=PERM_READ_WRITE)


def ensure_group_topic(topics: TopicConfigManager, name: str, on_changed: Callable[[], None]) -> TopicConfig:
    """A group's retry or dead-letter topic on this broker, created on first use."""
    config = topics.select(name)
    if config is None:
        config = group_topic_config(name)
        topics.update(config)
        on_changed()
        log.info("group_topic_created topic=%s", name)
    return config


def queue_refs(queues: list[consumer_pb2.QueueRef]) -> list[QueueRef]:
    return [(q.topic, q.broker_name, q.queue_id) for q in queues]


def to_queue_ref(queue: QueueRef) -> consumer_pb2.QueueRef:
    return consumer_pb2.QueueRef(topic=queue[0], broker_name=queue[1], queue_id=queue[2])


class ConsumerGroupProcessor:
    def __init__(self, *, broker_name: str, manager: ConsumerManager, locks: RebalanceLockManager,
                 topic_config_manager: TopicConfigManager, subscription_group_manager: SubscriptionGroupManager,
                 consumer_offset_manager: ConsumerOffsetManager, static_topics: StaticTopicService,
                 store: MessageStoreReader, on_topics_changed: Callable[[], None],
                 takes_writes: Callable[[], bool] = lambda: True,
                 on_offsets_reset: Callable[[str, str, dict[int, int]], None] = lambda *_: None) -> None:
        self.broker_name = broker_name
        self.manager = manager
        self.locks = locks
        self.sessions = ConsumerSessions(manager, locks)
        self.topics = topic_config_manager
        self.groups = subscription_group_manager
        self.offsets = consumer_offset_manager
        self.static_topics = static_topics
        self.moved_leases = MovedQueueLeases(broker_name, static_topics, locks)
        self.store = store
        self.on_topics_changed = on_topics_changed
        self.takes_writes = takes_writes  # a slave creates no topics: it copies its master's
        self.on_offsets_reset = on_offsets_reset  # POP restarts the group's queues at the reset offsets

    # -- sessions ----------------------------------------------------------------------------------
    async def session(self, frames: AsyncIterator[consumer_pb2.HeartbeatFrame],
                      peer: str) -> AsyncIterator[consumer_pb2.GroupNotice]:
        """Heartbeats in, notices out; the stream's end (either side) ends the client's membership."""
        session = self.sessions.open(peer)
        reader = asyncio.create_task(self._read_heartbeats(frames, session))
        try:
            while (notices := await session.next()) is not CLOSED:
                for notice in notices:
                    yield notice
            await reader  # a frame that did not parse: its RequestError ends the stream INVALID_ARGUMENT
        finally:
            reader.cancel()
            self.sessions.close(session)

    async def _read_heartbeats(self, frames: AsyncIterator[consumer_pb2.HeartbeatFrame], session: Session) -> None:
        try:
            async for frame in frames:
                if isinstance(frame, UndecodableRequest):
                    raise RequestError(f"a heartbeat frame does not parse: {frame.reason}")
                self._check_heartbeat(frame)
                await self._prepare_groups(frame)
                self.sessions.heartbeat(session, frame)
        finally:
            session.end()

    @staticmethod
    def _check_heartbeat(frame: consumer_pb2.HeartbeatFrame) -> None:
        require(bool(frame.client_id), "a heartbeat names no client id")
        require(len(frame.consumers) <= MAX_GROUPS, f"a consumer heartbeat names more than {MAX_GROUPS} groups")
        for consumer in frame.consumers:
            checked_group(consumer.group)
            for sub in consumer.subscriptions:
                checked_topic(sub.topic)

    async def _prepare_groups(self, frame: consumer_pb2.HeartbeatFrame) -> None:
        """As upstream: the group exists and, in clustering mode, so does its retry topic, which the members
        subscribe to at once. A slave (members heartbeat to it too) leaves that to its master. Creating writes
        whole metadata files (JSON store): in a thread, and only for a frame that names something new."""
        if not self.takes_writes():
            return
        known, creates = self.groups.subscription_group_table, self.groups.auto_create
        missing = [c for c in frame.consumers if (creates and c.group not in known) or (
            c.message_model == consumer_pb2.CLUSTERING and c.group in known
            and self.topics.select(retry_topic(c.group)) is None)]
        if missing:
            await asyncio.to_thread(self._create_groups, missing)

    def _create_groups(self, consumers: list[consumer_pb2.ConsumerData]) -> None:
        """The groups (auto-created by ``find``), then their missing retry topics in one write."""
        retry: dict[str, TopicConfig] = {}
        for consumer in consumers:
            config = self.groups.find(consumer.group)
            name = retry_topic(consumer.group)
            if config is not None and consumer.message_model == consumer_pb2.CLUSTERING and \
                    self.topics.select(name) is None:
                retry[name] = group_topic_config(name)
        if retry:
            self.topics.update_many(list(retry.values()))
            self.on_topics_changed()
            log.info("group_topics_created topics=%d first=%s", len(retry), next(iter(retry)))

    def expire_members(self) -> None:
        self.sessions.expire()

    # -- queries -----------------------------------------------------------------------------------
    def consumer_list(self, request: consumer_pb2.ConsumerListRequest) -> consumer_pb2.ConsumerList:
        return consumer_pb2.ConsumerList(client_ids=self.manager.client_ids(checked_group(request.group)))

    def connection(self, request: consumer_pb2.ConsumerListRequest) -> consumer_pb2.ConsumerConnection:
        group = checked_group(request.group)
        members = [consumer_pb2.MemberInfo(
            client_id=m.client_id, addr=m.addr, consume_type=m.info.consume_type,  # type: ignore[arg-type]
            message_model=m.info.message_model,  # type: ignore[arg-type]
            subscriptions=[consumer_pb2.Subscription(topic=t, expression=e) for t, e in m.info.subscriptions],
            queues=[to_queue_ref(q) for q in m.info.queues], last_heartbeat_ms=m.wall_heartbeat_ms,
            orderly=m.info.orderly) for m in self.manager.members(group)]
        return consumer_pb2.ConsumerConnection(members=members)

    # -- orderly leases ----------------------------------------------------------------------------
    def lock_batch(self, request: consumer_pb2.LockBatchRequest) -> consumer_pb2.LockBatchResponse:
        """Called off the event loop: a logic queue that just moved here asks its previous leader first."""
        group = checked_group(request.group)
        if request.holders_only:  # (a static topic's new leader asking: see moved_queue_leases.py)
            return consumer_pb2.LockBatchResponse(held=[
                consumer_pb2.QueueLease(queue=to_queue_ref(q), client_id=holder)
                for q in queue_refs(list(request.queues)) if (holder := self.locks.holder(group, q))])
        require(bool(request.client_id), "a lock request names no client id")
        refs = [q for q in queue_refs(list(request.queues))
                if self._may_lock(q) and self.moved_leases.allows(group, request.client_id, q)]
        granted = self.locks.try_lock(group, request.client_id, refs)
        return consumer_pb2.LockBatchResponse(locked=[to_queue_ref(q) for q in granted])

    def _may_lock(self, queue: QueueRef) -> bool:
        """A static topic's logic queue is leased by its leader only: a client still renewing at the old leader
        after a remap (a stale route) must lose the lease, not hold it beside one taken at the new leader."""
        if queue[1] != LOGICAL_QUEUE_MOCK_BROKER_NAME:
            return True
        detail = self.static_topics.mapping_manager.get(queue[0])
        return detail is not None and queue[2] in detail.led_queues()

    def unlock_batch(self, request: consumer_pb2.LockBatchRequest) -> common_pb2.CommandResponse:
        group = checked_group(request.group)
        self.locks.unlock(group, request.client_id, queue_refs(list(request.queues)))
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    # -- reset -------------------------------------------------------------------------------------
    def reset_offset_by_time(self, request: consumer_pb2.ResetOffsetRequest) -> consumer_pb2.ResetOffsetResponse:
        """Commit, for every queue of the topic this broker serves (a static topic: the logic queues it leads),
        the offset of the first message stored at or after the time. Called off the event loop (a static topic
        may ask other brokers); the members are told by :meth:`announce_reset`."""
        group, topic = checked_group(request.group), checked_topic(request.topic)
        require(request.timestamp >= 0, f"timestamp {request.timestamp} is negative")
        offsets: list[consumer_pb2.QueueOffset] = []
        detail = self.static_topics.mapping_manager.get(topic)
        if detail is not None:
            for logic_id in detail.led_queues():
                ctx = self.static_topics.context(topic, logic_id, LOGIC)
                assert ctx is not None
                offset = self.static_topics.search_offset(ctx, request.timestamp, False)
                self.static_topics.commit_offset(ctx, group, offset)
                offsets.append(self._queue_offset(topic, LOGICAL_QUEUE_MOCK_BROKER_NAME, logic_id, offset))
        else:
            config = self.topics.select(topic)
            if config is None:
                raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist on this broker")
            for queue_id in range(config.read_queue_nums):
                offset = self.store.offset_by_time(topic, queue_id, request.timestamp, BoundaryType.LOWER)
                self.offsets.commit_offset(group, topic, queue_id, offset)
                offsets.append(self._queue_offset(topic, self.broker_name, queue_id, offset))
        self.on_offsets_reset(group, topic, {q.queue.queue_id: q.offset for q in offsets})
        log.info("offsets_reset group=%s topic=%s timestamp=%d queues=%d", group, topic, request.timestamp,
                 len(offsets))
        return consumer_pb2.ResetOffsetResponse(code=ResponseCode.SUCCESS, offsets=offsets)

    def announce_reset(self, request: consumer_pb2.ResetOffsetRequest,
                       offsets: Iterable[consumer_pb2.QueueOffset]) -> None:
        """Tell the group's members which queues to restart, and where: this broker's (each broker announces its own,
        so a member restarts each queue once, after its offset changed)."""
        static = self.static_topics.mapping_manager.get(request.topic) is not None
        self.sessions.notify(consumer_pb2.GroupNotice(
            kind=consumer_pb2.GroupNotice.OFFSETS_RESET, group=request.group, topic=request.topic,
            broker_name=LOGICAL_QUEUE_MOCK_BROKER_NAME if static else self.broker_name,
            queue_offsets={q.queue.queue_id: q.offset for q in offsets}))

    @staticmethod
    def _queue_offset(topic: str, broker_name: str, queue_id: int, offset: int) -> consumer_pb2.QueueOffset:
        return consumer_pb2.QueueOffset(queue=consumer_pb2.QueueRef(topic=topic, broker_name=broker_name,
                                                                    queue_id=queue_id), offset=offset)

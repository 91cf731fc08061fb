"""Requests on logic queues of static topics: offsets rewritten between logic and physical terms.

Only a logic queue's leader answers logic requests (it holds the whole chain). Older items may live on
other brokers: the leader reads them there with PHYSICAL addressing. Rules: ../shared/STATIC_TOPIC.md.
"""

import logging
import time

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.out.peer_brokers import PeerBrokerError, PeerBrokers
from broker.processor.pull_outcome import DEFAULT_MAX_BYTES, PullOutcome, to_response
from broker.statictopic.logic_queue_context import LogicQueueContext, NotLeaderError
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.consume_queue.consume_queue_store import BoundaryType
from broker.store.message_store_reader import MessageStoreReader
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from proto import broker_pb2

log = logging.getLogger(__name__)

LOGIC, PHYSICAL, UNSPECIFIED = broker_pb2.LOGIC, broker_pb2.PHYSICAL, broker_pb2.ADDRESSING_UNSPECIFIED
PEER_RETRY_S = 0.2  # a pull waiting on another broker's link (or a remap's next step) asks again this often
OLDER_LINKS_RETRY_S = 30.0  # an older link's broker that could not be told: asked again at a commit after this


class StaticTopicService:
    """Raises RequestError for requests in the wrong terms, Refusal (NotLeaderError, PeerBrokerError) for
    ones it cannot answer: the RPC boundary answers them."""

    def __init__(self, broker_name: str, mapping_manager: TopicQueueMappingManager,
                 consumer_offset_manager: ConsumerOffsetManager, store: MessageStoreReader,
                 peer_brokers: PeerBrokers) -> None:
        self.broker_name = broker_name
        self.mapping_manager = mapping_manager
        self.consumer_offset_manager = consumer_offset_manager
        self.store = store
        self.peer_brokers = peer_brokers
        # (topic, logic queue, group) -> (gen of the link the group's offset was on when the older links were
        # marked consumed, monotonic time until which that stands): one look at the older links per move, not per
        # commit. A failed look stands for OLDER_LINKS_RETRY_S only.
        self._older_links_marked: dict[tuple[str, int, str], tuple[int, float]] = {}

    # -- routing a request ------------------------------------------------------------------------
    def context(self, topic: str, queue_id: int, addressing: int) -> LogicQueueContext | None:
        """None for a request to serve as is (a normal topic, or a peer's PHYSICAL read); else the logic
        queue's context. Raises RequestError for a request in the wrong terms, NotLeaderError off the leader."""
        detail = self.mapping_manager.get(topic)
        if addressing == PHYSICAL:
            return None
        if detail is None:
            if addressing == LOGIC:
                raise RequestError(f"topic {topic} is not a static topic: do not address it by logic queue")
            return None
        if addressing != LOGIC:
            raise RequestError(f"topic {topic} is a static topic: requests must address its logic queues "
                               "(use a client that supports static topics)")
        if not 0 <= queue_id < detail.total_queues:
            raise RequestError(f"logic queue {queue_id} does not exist: topic {topic} has logic queues "
                               f"0..{detail.total_queues - 1}")
        if not detail.leads(queue_id):
            raise NotLeaderError(f"broker {detail.bname} does not lead logic queue {queue_id} of topic {topic}")
        return LogicQueueContext(detail, queue_id, detail.hosted_queues[queue_id])

    def held_context(self, topic: str, queue_id: int) -> LogicQueueContext:
        """The logic queue's context as this broker holds it, led here or not: to read again what it handed out
        while it led the queue (a POP message dead-lettered through the broker that popped it, after a remap moved
        the queue). NotLeaderError when it holds no link of it."""
        detail = self.mapping_manager.get(topic)
        chain = detail.hosted_queues.get(queue_id) if detail is not None else None
        if detail is None or not chain:
            raise NotLeaderError(f"broker {self.broker_name} holds no link of logic queue {queue_id} of topic {topic}")
        return LogicQueueContext(detail, queue_id, chain)

    def is_local(self, item: LogicQueueMappingItem) -> bool:
        return item.bname == self.broker_name

    # -- physical operations, here or on the item's broker ----------------------------------------
    def _physical_pull(self, item: LogicQueueMappingItem, request: broker_pb2.PullMessageRequest, physical: int,
                       tags_codes: frozenset[int] | None) -> broker_pb2.PullMessageResponse:
        """The item's physical queue from ``physical``: read from the store here (the logic request was checked
        already), or pulled from the item's broker."""
        if self.is_local(item):
            result = self.store.get_message(request.topic, item.queue_id, physical, request.max_msg_nums,
                                            request.max_bytes or DEFAULT_MAX_BYTES,
                                            set(tags_codes) if tags_codes is not None else None, runs=True)
            return to_response(result, physical)
        sub = broker_pb2.PullMessageRequest()
        sub.CopyFrom(request)
        sub.queue_id, sub.queue_offset, sub.addressing = item.queue_id, physical, PHYSICAL
        sub.suspend_timeout_ms, sub.commit_offset, sub.peer_read = 0, -1, True
        return self.peer_brokers.call(item.bname, "PullMessage", sub)

    def physical_offset(self, item: LogicQueueMappingItem, method: str, topic: str) -> int:
        if self.is_local(item):
            store = self.store
            return (store.min_offset if method == "GetMinOffset" else store.max_offset)(topic, item.queue_id)
        return self._peer_offset(item, method, broker_pb2.QueueRequest(
            topic=topic, queue_id=item.queue_id, addressing=PHYSICAL))

    def _peer_offset(self, item: LogicQueueMappingItem, method: str, request) -> int:
        response = self.peer_brokers.call(item.bname, method, request)
        if response.code != ResponseCode.SUCCESS:  # its offset field means nothing then
            raise PeerBrokerError(f"{method} of {request.topic}/{item.queue_id} on broker {item.bname}: "
                                  f"{response.remark}")
        return response.offset

    # -- pull ---------------------------------------------------------------------------------------
    def pull(self, ctx: LogicQueueContext, request: broker_pb2.PullMessageRequest,
             tags_codes: frozenset[int] | None) -> PullOutcome:
        logic = request.queue_offset
        decided = ctx.decided
        item = ctx.item_for(logic)
        if item is None:  # before every item: the consumer belongs at the earliest one's start
            return self._answer(ctx, ResponseCode.PULL_OFFSET_MOVED, decided[0].logic_offset, "before the first item")
        physical = item.physical_of(logic)
        response = self._physical_pull(item, request, physical, tags_codes)
        latest = item is decided[-1]
        code = response.code
        if code == ResponseCode.SUCCESS or code == ResponseCode.PULL_RETRY_IMMEDIATELY:
            out = self._answer(ctx, code, item.logic_strictly(response.next_begin_offset), response.remark,
                               response.records)
            out.response.offset_delta = item.offset_delta()
            return out
        past_max = code == ResponseCode.PULL_OFFSET_MOVED and physical > response.max_offset
        if past_max and latest:
            # as for a normal topic: the queue lost its tail (a failover to a master that was behind, an unflushed
            # crash), so the consumer goes back to the max and reads what is written there from now on
            return self._answer(ctx, ResponseCode.PULL_OFFSET_MOVED, item.logic_strictly(response.max_offset),
                                "offset past the queue's max")
        caught_up = code == ResponseCode.PULL_NOT_FOUND or (
            code == ResponseCode.PULL_OFFSET_MOVED and physical >= response.max_offset)
        if caught_up and latest:
            hold = (ctx.topic, item.queue_id, physical) if self.is_local(item) else None
            return PullOutcome(self._answer(ctx, ResponseCode.PULL_NOT_FOUND, logic, "").response, hold)
        if caught_up:  # an older item: drained, or its broker has not dispatched up to the item's end yet
            if (item.end_offset_decided() and physical < item.end_offset
                    and self._appended_end(item, ctx.topic) > physical):
                return self._wait(ctx, item, logic, physical, "older item not dispatched to its end yet")
            return self._hop(ctx, item, logic)
        if code == ResponseCode.PULL_OFFSET_MOVED:  # before this item's min: its head expired
            target = item.logic_strictly(response.min_offset)
            moved = ResponseCode.PULL_OFFSET_MOVED if item is decided[0] else ResponseCode.PULL_RETRY_IMMEDIATELY
            return self._answer(ctx, moved, target, "offset before the queue's min")
        return self._answer(ctx, code, logic, response.remark)

    def _appended_end(self, item: LogicQueueMappingItem, topic: str) -> int:
        """The item's physical queue's next offset counting what is appended but not dispatched (what its end was
        decided from). Below the decided end only when the broker lost its tail (a crash before a flush): what is
        not there will not come, and readers hop on."""
        if self.is_local(item):
            return self.store.next_queue_offset(topic, item.queue_id)
        return self._peer_offset(item, "GetMaxOffset", broker_pb2.QueueRequest(
            topic=topic, queue_id=item.queue_id, addressing=PHYSICAL))

    def _wait(self, ctx: LogicQueueContext, item: LogicQueueMappingItem, logic: int, physical: int,
              remark: str) -> PullOutcome:
        """Nothing to read at ``logic`` yet, though more will come: parked on the item's queue when it is here,
        else asked again a moment later (not answered at once: a consumer re-pulls a NOT_FOUND straight away)."""
        out = self._answer(ctx, ResponseCode.PULL_NOT_FOUND, logic, remark)
        if self.is_local(item):
            out.hold = (ctx.topic, item.queue_id, physical)
        else:
            out.retry_after_s = PEER_RETRY_S
        return out

    def _hop(self, ctx: LogicQueueContext, item: LogicQueueMappingItem, logic: int) -> PullOutcome:
        nxt = ctx.after(item)
        if nxt is None or not nxt.logic_offset_decided():  # the new leader's start is not decided yet: wait
            out = self._answer(ctx, ResponseCode.PULL_NOT_FOUND, logic, "next item not decided yet")
            out.retry_after_s = PEER_RETRY_S
            return out
        return self._answer(ctx, ResponseCode.PULL_RETRY_IMMEDIATELY, nxt.logic_offset, "item drained: pull again now")

    def _answer(self, ctx: LogicQueueContext, code: int, next_begin: int, remark: str,
                records: bytes = b"") -> PullOutcome:
        decided = ctx.decided
        return PullOutcome(broker_pb2.PullMessageResponse(
            code=code, remark=remark, next_begin_offset=next_begin, min_offset=decided[0].logic_offset,
            max_offset=self._max_logic_cheap(ctx), records=records), None)

    def _max_logic_cheap(self, ctx: LogicQueueContext) -> int:
        latest = ctx.decided[-1]
        if latest.end_offset_decided() or not self.is_local(latest):
            return latest.max_logic_offset()
        return latest.logic_strictly(self.store.max_offset(ctx.topic, latest.queue_id))

    # -- queue offsets ------------------------------------------------------------------------------
    def min_offset(self, ctx: LogicQueueContext) -> int:
        earliest = ctx.decided[0]
        return earliest.logic_strictly(self.physical_offset(earliest, "GetMinOffset", ctx.topic))

    def max_offset(self, ctx: LogicQueueContext) -> int:
        """The latest decided item's max, read from that item's own physical queue."""
        latest = ctx.decided[-1]
        return latest.logic_strictly(self.physical_offset(latest, "GetMaxOffset", ctx.topic))

    def search_offset(self, ctx: LogicQueueContext, timestamp: int, upper: bool) -> int:
        """The logic offset of the first message stored at or after the time (LOWER: oldest decided item to
        newest), or of the last one at or before it (UPPER: newest to oldest), as a queue's store answers."""
        if upper:
            return self._search_upper(ctx, timestamp)
        for item in ctx.decided:
            physical = self._physical_search(ctx.topic, item, timestamp)
            if physical < self._item_end(ctx.topic, item):
                return item.logic_strictly(physical)
        return self.max_offset(ctx)

    def _search_upper(self, ctx: LogicQueueContext, timestamp: int) -> int:
        """The last message at or before the time is the one before the first stored after it (store times never
        go back within a queue); an item none of whose messages is that old has no answer (its store would give
        its min, the next item's start, in another item's place). None has one: the earliest's min, as a store."""
        for item in reversed(ctx.decided):
            first_after = min(self._physical_search(ctx.topic, item, timestamp + 1), self._item_end(ctx.topic, item))
            if first_after > max(item.start_offset, self.physical_offset(item, "GetMinOffset", ctx.topic)):
                return item.logic_strictly(first_after - 1)
        return self.min_offset(ctx)

    def _item_end(self, topic: str, item: LogicQueueMappingItem) -> int:
        """Where the item's messages end in its physical queue: its decided end (a queue its broker took again for
        a later item goes on past it), or the queue's max while it is open."""
        if item.end_offset_decided():
            return item.end_offset
        return self.physical_offset(item, "GetMaxOffset", topic)

    def _physical_search(self, topic: str, item: LogicQueueMappingItem, timestamp: int) -> int:
        """LOWER: the first message stored at or after ``timestamp`` in the item's physical queue."""
        if self.is_local(item):
            return self.store.offset_by_time(topic, item.queue_id, timestamp, BoundaryType.LOWER)
        return self._peer_offset(item, "SearchOffset", broker_pb2.SearchOffsetRequest(
            topic=topic, queue_id=item.queue_id, timestamp=timestamp, upper=False, addressing=PHYSICAL))

    # -- consumer offsets (double-read-check: nothing migrates on remap) ----------------------------
    def commit_offset(self, ctx: LogicQueueContext, group: str, logic: int) -> None:
        """Stored, in physical terms, on the broker of the item the offset falls in. Reads take the newest item's
        offset, so one a newer item holds is forgotten once this is stored: the latest commit wins, as on a plain
        queue (a reset or a rewind to an older item was read as the newer offset, and never took effect)."""
        item = ctx.item_for(logic) or ctx.decided[0]
        self.commit_physical(ctx.topic, item, group, max(item.physical_of(logic), item.start_offset))
        # After the commit: one refused (its broker down) leaves the group where it was, not without an offset.
        for newer in ctx.decided[ctx.decided.index(item) + 1:]:
            self._clear_offset(ctx.topic, newer, group)
        self._mark_older_links_consumed(ctx, item, group)

    def _mark_older_links_consumed(self, ctx: LogicQueueContext, item: LogicQueueMappingItem, group: str) -> None:
        """A group whose offset is on ``item`` has read every older link to its end (upstream reads a logic queue's
        progress that way, MQAdminUtils.convertPhysicalConsumeStatsToLogic). Each older link's broker reports its
        physical queue on its own (consumerProgress, the lag metric, statsAll), and the offset the group left there
        would show as lag until the link is cleaned (fileReservedTime): so it is moved to the link's end. Best
        effort: a broker that is down keeps the old offset until a later commit reaches it."""
        key = (ctx.topic, ctx.global_id, group)
        marked = self._older_links_marked.get(key)
        if marked is not None and marked[0] == item.gen and time.monotonic() < marked[1]:
            return
        done = True
        older = ctx.decided[:ctx.decided.index(item)]
        for i, link in enumerate(older):
            if not link.end_offset_decided() or _reused_later(link, ctx.decided[i + 1:]):
                continue  # (a physical queue a later link took again holds that link's offset)
            try:
                offset = self._item_offset(ctx.topic, link, group)
                if link.start_offset <= offset < link.end_offset:
                    self.commit_physical(ctx.topic, link, group, link.end_offset)
            except PeerBrokerError as exc:
                done = False
                log.warning("static_older_link_not_marked topic=%s queue=%d group=%s broker=%s reason=%s "
                            "action='its lag shows until a later commit reaches it'", ctx.topic, ctx.global_id,
                            group, link.bname, exc.remark)
        self._older_links_marked[key] = (item.gen, float("inf") if done else time.monotonic() + OLDER_LINKS_RETRY_S)

    def _clear_offset(self, topic: str, item: LogicQueueMappingItem, group: str) -> None:
        """Forget ``group``'s offset on ``item`` if it holds one reads would take (the common case, a group still
        draining an older item, looks and writes nothing)."""
        if self._item_offset(topic, item, group) < item.start_offset:
            return
        if self.is_local(item):
            self.consumer_offset_manager.delete_offsets([(group, topic, item.queue_id)])
            return
        response = self.peer_brokers.call(item.bname, "UpdateConsumerOffset", broker_pb2.UpdateConsumerOffsetRequest(
            # commit_offset -1: a broker of an older release, which knows no clear, refuses it rather than commit 0
            consumer_group=group, topic=topic, queue_id=item.queue_id, commit_offset=-1, addressing=PHYSICAL,
            clear=True))
        if response.code != ResponseCode.SUCCESS:
            raise PeerBrokerError(f"clearing {group}'s offset on broker {item.bname}: {response.remark}")

    def commit_physical(self, topic: str, item: LogicQueueMappingItem, group: str, physical: int) -> None:
        """Store ``group``'s offset ``physical`` on ``item``'s physical queue, here or on its broker."""
        if self.is_local(item):
            self.consumer_offset_manager.commit_offset(group, topic, item.queue_id, physical)
            return
        response = self.peer_brokers.call(item.bname, "UpdateConsumerOffset", broker_pb2.UpdateConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=item.queue_id, commit_offset=physical, addressing=PHYSICAL))
        if response.code != ResponseCode.SUCCESS:
            raise PeerBrokerError(f"commit on broker {item.bname}: {response.remark}")

    def query_offset(self, ctx: LogicQueueContext, group: str) -> int:
        """Newest item to oldest: the first broker holding an offset answers; -1 when none does. An offset below
        an item's start is not the item's (commits are clamped to it): one its physical queue's expired link left
        behind, had it survived the reuse (the broker forgets those when it reuses the queue)."""
        for item in reversed(ctx.decided):
            physical = self._item_offset(ctx.topic, item, group)
            if physical >= item.start_offset:  # (-1: none here)
                return item.logic_strictly(physical)
        return -1

    def _item_offset(self, topic: str, item: LogicQueueMappingItem, group: str) -> int:
        """``group``'s physical offset on ``item``'s queue, here or on its broker; -1 for none."""
        if self.is_local(item):
            return self.consumer_offset_manager.query_offset(group, topic, item.queue_id)
        response = self.peer_brokers.call(item.bname, "QueryConsumerOffset", broker_pb2.QueryConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=item.queue_id, addressing=PHYSICAL))
        return response.offset if response.code == ResponseCode.SUCCESS else -1


def _reused_later(link: LogicQueueMappingItem, later: list[LogicQueueMappingItem]) -> bool:
    return any((i.bname, i.queue_id) == (link.bname, link.queue_id) for i in later)

"""The broker's gRPC face: decode, call a processor, encode. What a processor raises is answered by the RPC
boundary (``common/rpc_boundary.py``): refusals as response codes, bad input as INVALID_ARGUMENT."""

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from broker.broker_metrics import BrokerMetrics
from broker.broker_stats import BrokerStats
from broker.flush_waiters import FlushWaiters
from broker.ha.ha_service import HAService
from broker.longpolling.pull_request_hold_service import PullRequestHoldService
from broker.processor.admin_broker_processor import AdminBrokerProcessor
from broker.processor.consumer_manage_processor import ConsumerManageProcessor
from broker.processor.pull_message_processor import PullMessageProcessor
from broker.processor.pull_outcome import DEFAULT_MAX_BYTES, PullOutcome
from broker.processor.query_message_processor import QueryMessageProcessor
from broker.processor.recall_message_processor import RecallMessageProcessor
from broker.processor.send_message_processor import SendMessageProcessor
from broker.remote_waits import REMOTE_WAITS
from broker.send_admission import SendAdmission
from common.acl import acl_refusals
from common.response_code import ResponseCode
from common.rpc_boundary import rpc_boundary
from common.stream_answers import Answer, answer_frames, release_answer_bytes, reserve_answer_bytes
from proto import broker_pb2, broker_pb2_grpc
from proto.broker_pb2 import LOGIC


async def run(call: Callable[..., Any], *args: Any, in_thread: bool = False, remote: bool = False) -> Any:
    """A processor call: a coroutine function is awaited; ``in_thread`` for calls that block on this machine (a
    SYNC_FLUSH put waits for its fsync); ``remote`` for calls that may wait on another system (a logic-queue
    request calls other brokers, a read may be served by a tier's backend): on the remote-wait threads."""
    if inspect.iscoroutinefunction(call):
        return await call(*args)
    if remote:
        return await REMOTE_WAITS.run(call, *args)
    return await asyncio.to_thread(call, *args) if in_thread else call(*args)


MAX_TIMED_SENDS = 1 << 16  # stream sends waiting to settle whose start is kept for the latency histogram


@rpc_boundary(broker_pb2.DESCRIPTOR.services_by_name["BrokerService"])
class BrokerServicer(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self, *, send: SendMessageProcessor, pull: PullMessageProcessor,
                 consumer_manage: ConsumerManageProcessor, query: QueryMessageProcessor, admin: AdminBrokerProcessor,
                 hold_service: PullRequestHoldService, stats: BrokerStats, long_polling_max_suspend_ms: int,
                 sync_flush: bool, recall: RecallMessageProcessor | None = None, ha: HAService | None = None,
                 metrics: BrokerMetrics | None = None, flush_waiters: FlushWaiters | None = None) -> None:
        """``flush_waiters`` (SYNC_FLUSH, with a send processor that does not wait for flushes): a send is appended
        on the event loop and answered once flushed (FLUSH_DISK_TIMEOUT after syncFlushTimeout, or
        SERVICE_NOT_AVAILABLE once a failed fsync stopped the store)."""
        self.send = send
        self.pull = pull
        self.consumer_manage = consumer_manage
        self.query = query
        self.admin = admin
        self.hold_service = hold_service
        self.stats = stats
        self.max_suspend_ms = long_polling_max_suspend_ms
        self.recall = recall  # None: the broker has no timer (tests of other parts)
        self.ha = ha  # a master's replication: a SYNC_MASTER acknowledges a send once its slaves have it
        self.metrics = metrics  # metricsExporterType=PROM: moved once per batch
        self.flush_waiters = flush_waiters
        self.admission = SendAdmission()  # unary sends: held at once, in bytes
        self._sends_block = sync_flush and flush_waiters is None  # a put that waits for its fsync: in a thread
        self._settles_send = flush_waiters is not None or ha is not None
        self._send_started: dict[int, float] = {}  # a stream's send waiting to settle -> when it came (latency)

    async def SendMessage(self, request, context):
        with self.admission.admitted(request.ByteSize(), context.time_remaining()) as refusal:
            if refusal is not None:
                return broker_pb2.SendMessageResponse(code=ResponseCode.SYSTEM_BUSY, remark=refusal,
                                                      queue_id=request.queue_id)
            started = time.perf_counter()
            response = await self._send(request)
            pending = self._settle_send(response)
            if pending is not None:
                await pending
            if self.metrics is not None:
                self.metrics.send_answered(started)
            return response

    async def SendMessageStream(self, request_iterator, context):
        # Appends run on the event loop, in the order the batches came; a SYNC_FLUSH send's wait for its fsync
        # and a SYNC_MASTER's wait for its slaves run beside the next appends. (A put that waits for its fsync
        # itself runs in a thread, and batches in flight together may then be appended in either order.)
        async for frame in answer_frames(request_iterator, self._timed_send, broker_pb2.SendMessageResponse,
                                         in_order=not self._sends_block, rpc="SendMessageStream",
                                         settle=self._timed_settle if self._settles_send else None):
            yield frame

    async def _timed_send(self, request: broker_pb2.SendMessageRequest) -> broker_pb2.SendMessageResponse:
        """A stream's send; its latency is recorded here when nothing is waited for after the append, else when
        what its answer waits for is done (``_timed_settle``)."""
        started = time.perf_counter()
        response = await self._send(request)
        if self.metrics is not None:
            if self._settles_send:
                if len(self._send_started) > MAX_TIMED_SENDS:  # (answers a broken stream never settled)
                    self._send_started.clear()
                self._send_started[id(response)] = started
            else:
                self.metrics.send_answered(started)
        return response

    def _timed_settle(self, response: broker_pb2.SendMessageResponse) -> Awaitable[None] | None:
        started = self._send_started.pop(id(response), None)
        pending = self._settle_send(response)
        if self.metrics is None or started is None:
            return pending
        if pending is None:
            self.metrics.send_answered(started)
            return None
        return self._answered_after(pending, started)

    async def _answered_after(self, pending: Awaitable[None], started: float) -> None:
        try:
            await pending
        finally:
            assert self.metrics is not None
            self.metrics.send_answered(started)

    def _settle_send(self, response: broker_pb2.SendMessageResponse) -> Awaitable[None] | None:
        """What a stored send's answer waits for, called right after it was appended: its fsync (SYNC_FLUSH),
        then its slaves (SYNC_MASTER); None: it goes at once."""
        replicated = self._replicated(response)
        if self.flush_waiters is None or response.code != ResponseCode.SUCCESS:
            return replicated
        store = self.send.store
        flushed = self.flush_waiters.wait(store.commit_log.max_offset(), store.config.sync_flush_timeout_ms / 1000)
        return self._after_flush(response, flushed, replicated)

    async def _after_flush(self, response: broker_pb2.SendMessageResponse, flushed: Awaitable[bool],
                           replicated: Awaitable[None] | None) -> None:
        if not await flushed:
            # Never acknowledge what may not be on disk: a failed fsync is a refusal; a slow one, a stored result.
            refusal = self.send.store.unflushed_refusal()
            if refusal is not None:
                response.code, response.remark = ResponseCode.SERVICE_NOT_AVAILABLE, refusal
            else:
                response.code = ResponseCode.FLUSH_DISK_TIMEOUT
        if replicated is not None:
            await replicated  # (a send no longer SUCCESS is not waited for)

    async def _send(self, request: broker_pb2.SendMessageRequest) -> broker_pb2.SendMessageResponse:
        response = await run(self.send.send, request, in_thread=self._sends_block)
        if self.metrics is not None:  # metricsExporterType=PROM: once per batch
            stored = len(response.physical_offsets)
            size = (len(request.records) if request.records else sum(map(len, request.bodies))) if stored else 0
            self.metrics.sent(request.topic, stored, size)
        self.stats.count((request.topic, ""), len(response.physical_offsets))
        return response

    def _replicated(self, response: broker_pb2.SendMessageResponse | broker_pb2.RecallMessageResponse,
                    ) -> Awaitable[None] | None:
        """A SYNC_MASTER answers a stored send once its slaves have it (``HAService.acknowledged``); None: at once."""
        return self.ha.acknowledged(response) if self.ha is not None and self.ha.must_wait(response) else None

    async def RecallMessage(self, request, context):
        if self.recall is None:
            return broker_pb2.RecallMessageResponse(code=ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                                    remark="this broker has no timer store")
        response = await asyncio.to_thread(self.recall.recall, request)  # may wait for the timer store, a flush
        pending = self._replicated(response)
        if pending is not None:
            await pending
        return response

    async def PullMessage(self, request, context):
        return (await self._pull(request)).full_response()

    async def PullMessageStream(self, request_iterator, context):
        async for frame in answer_frames(request_iterator, self._pull_answer, broker_pb2.PullMessageResponse,
                                         in_order=False, rpc="PullMessageStream"):
            yield frame

    async def _pull_answer(self, request: broker_pb2.PullMessageRequest) -> Answer:
        outcome = await self._pull(request)
        return outcome.response, outcome.encoded_records()

    async def _pull(self, request: broker_pb2.PullMessageRequest) -> PullOutcome:
        pull = self.pull.pull
        blocks = self.pull.blocks(request)  # reads older items on other brokers, or a tier: off the event loop
        started = time.perf_counter()
        # A group's first pull creates it, writing a whole metadata file (JSON store): in a thread
        outcome: PullOutcome = await run(pull, request, remote=blocks, in_thread=self._creates_group(request))
        elapsed_s = time.perf_counter() - started
        timeout_s = min(request.suspend_timeout_ms, self.max_suspend_ms) / 1000
        if outcome.hold is None and outcome.retry_after_s > 0 and timeout_s > 0:
            await asyncio.sleep(min(outcome.retry_after_s, timeout_s))
            outcome = await run(pull, request, remote=blocks)
        if outcome.hold is not None and timeout_s > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while (hold := outcome.hold) is not None and (left := deadline - loop.time()) > 0:
                release_answer_bytes()  # parked, it holds no room on its stream
                if not await self.hold_service.wait_for_arrival(*hold, left):
                    break
                # Woken with the others parked on the queue: room on the stream for its answer before reading it
                size = min(request.max_bytes or DEFAULT_MAX_BYTES, DEFAULT_MAX_BYTES)
                if not await reserve_answer_bytes(size, deadline - loop.time()):
                    break
                started = time.perf_counter()
                outcome = await run(pull, request, remote=blocks)
                elapsed_s = time.perf_counter() - started
        if request.peer_read:  # counted by the logic queue's leader that asked
            return outcome
        if self.metrics is not None:  # messages: the queue offsets this answer moves the consumer past
            response = outcome.response
            found = response.code == ResponseCode.SUCCESS
            size = len(outcome.records or response.records) if found else 0  # static topics answer in response
            moved = response.next_begin_offset - request.queue_offset if size else 0
            self.metrics.pulled(request.topic, request.consumer_group, moved, size, elapsed_s)
        if outcome.response.code == ResponseCode.SUCCESS:
            self.stats.count((request.topic, request.consumer_group),
                             outcome.response.next_begin_offset - request.queue_offset)
        return outcome

    def _creates_group(self, request: broker_pb2.PullMessageRequest) -> bool:
        groups = self.pull.subscription_group_manager
        return groups.auto_create and request.consumer_group not in groups.subscription_group_table

    # Logic-queue requests may call the brokers of older items: they run off the event loop.
    async def UpdateConsumerOffset(self, request, context):
        return await run(self.consumer_manage.update_offset, request, remote=request.addressing == LOGIC)

    async def QueryConsumerOffset(self, request, context):
        return await run(self.consumer_manage.query_offset, request, remote=request.addressing == LOGIC)

    async def GetMinOffset(self, request, context):
        return await run(self.consumer_manage.min_offset, request, remote=request.addressing == LOGIC)

    async def GetMaxOffset(self, request, context):
        return await run(self.consumer_manage.max_offset, request, remote=request.addressing == LOGIC)

    async def SearchOffset(self, request, context):  # may search a second tier's index too
        return await run(self.consumer_manage.search_offset, request, remote=True)

    async def QueryMessage(self, request, context):
        return await run(self.query.query_by_key, request)

    async def ViewMessageById(self, request, context):  # checks the record's topic once read (ACL on)
        return await acl_refusals(context, run(self.query.view_by_offset, request))

    async def UpdateAndCreateTopic(self, request, context):
        return await run(self.admin.update_topic, request)

    async def UpdateAndCreateTopicList(self, request, context):  # thousands of topics: off the event loop
        return await run(self.admin.update_topics, request, in_thread=True)

    async def DeleteTopic(self, request, context):
        return await run(self.admin.delete_topic, request, in_thread=True)  # waits for dispatch

    # A million topics take seconds to encode: off the event loop.
    async def GetAllTopicConfig(self, request, context):
        return await run(self.admin.all_topic_configs, in_thread=True)

    async def GetTopicConfigChanges(self, request, context):
        return await run(self.admin.topic_config_changes, request, in_thread=True)

    async def UpdateAndCreateSubscriptionGroup(self, request, context):
        return await run(self.admin.update_group, request)

    async def DeleteSubscriptionGroup(self, request, context):
        return await run(self.admin.delete_group, request)

    async def GetAllSubscriptionGroup(self, request, context):
        return await run(self.admin.all_groups)

    async def GetAllConsumerOffsets(self, request, context):
        return await run(self.admin.all_consumer_offsets)

    async def GetTopicStatsInfo(self, request, context):
        return await run(self.admin.topic_stats, request)

    async def GetConsumeStats(self, request, context):
        return await run(self.admin.consume_stats, request)

    async def GetBrokerRuntimeInfo(self, request, context):
        return await run(self.admin.runtime_info)

    async def GetBrokerConfig(self, request, context):
        return await run(self.admin.broker_config)

    async def UpdateBrokerConfig(self, request, context):
        return await run(self.admin.update_broker_config, request)

    async def GetProducerConnectionList(self, request, context):
        return await run(self.admin.producer_connections, request)

    async def GetBrokerStats(self, request, context):
        return await run(self.admin.broker_stats, in_thread=True)  # every topic: not on the loop

    async def UpdateTopicQueueMapping(self, request, context):
        return await run(self.admin.update_mapping, request)

    async def GetTopicQueueMapping(self, request, context):
        return await run(self.admin.get_mapping, request)

    async def GetAllTopicQueueMapping(self, request, context):
        return await run(self.admin.all_mappings)

    async def WaitMetadataChange(self, request, context):
        return await run(self.admin.wait_metadata_change, request)


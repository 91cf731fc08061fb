"""The broker's POP face (proto/pop.proto): decode, call the processor, encode. A pop that finds nothing waits
(long polling) for a message to arrive on its queues or an in-flight one to come due, then tries once more.

Every POP call runs off the event loop: POP's one lock may be held by a call that waits on another broker (a
static topic's older item), an fsync (SYNC_FLUSH) or a dead letter's replication, and the loop must never wait
for it."""

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from broker.broker_metrics import BrokerMetrics
from broker.longpolling.pull_request_hold_service import PullRequestHoldService
from broker.pop.pop_service import PopOutcome
from broker.processor.pop_message_processor import PopMessageProcessor
from common.response_code import ResponseCode
from common.rpc_boundary import rpc_boundary
from common.stream_answers import answer_frames
from proto import pop_pb2, pop_pb2_grpc

T = TypeVar("T")
R = TypeVar("R")


@rpc_boundary(pop_pb2.DESCRIPTOR.services_by_name["PopService"])
class PopServicer(pop_pb2_grpc.PopServiceServicer):
    def __init__(self, processor: PopMessageProcessor, hold_service: PullRequestHoldService,
                 max_suspend_ms: int, metrics: BrokerMetrics | None = None) -> None:
        self.processor = processor
        self.metrics = metrics
        self.hold_service = hold_service
        self.max_suspend_ms = max_suspend_ms
        # One worker: POP's calls take one lock anyway, and one thread hands it on without waking others.
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="pop")

    def _off_loop(self, call: Callable[[T], R], request: T) -> "asyncio.Future[R]":
        return asyncio.get_running_loop().run_in_executor(self._worker, call, request)

    async def PopMessage(self, request, context):
        return await self._pop(request)

    async def PopMessageStream(self, request_iterator, context):
        async for frame in answer_frames(request_iterator, self._pop, pop_pb2.PopMessageResponse, in_order=False,
                                         rpc="PopMessageStream"):
            yield frame

    async def AckMessageStream(self, request_iterator, context):
        async for frame in answer_frames(request_iterator, self._ack, pop_pb2.AckMessageResponse,
                                         in_order=False, rpc="AckMessageStream"):
            yield frame

    async def _pop(self, request: pop_pb2.PopMessageRequest) -> pop_pb2.PopMessageResponse:
        deadline = time.monotonic() + min(request.poll_time_ms, self.max_suspend_ms) / 1000
        while True:
            started = time.perf_counter()
            outcome: PopOutcome = await self._off_loop(self.processor.pop, request)
            left = deadline - time.monotonic()
            if outcome.popped or left <= 0:
                response = _response(outcome)
                if self.metrics is not None:  # long-polling waits are not handling time
                    self.metrics.popped(request.topic, request.group, len(outcome.popped),
                                        len(response.records), time.perf_counter() - started)
                return response
            if outcome.next_expiry_ms is not None:  # an in-flight message comes due before then: try again
                left = min(left, max(0.0, outcome.next_expiry_ms / 1000 - time.time()) + 0.001)
            await self.hold_service.wait_for_any(request.topic, outcome.scan_offsets, left)

    async def AckMessage(self, request, context):
        return await self._ack(request)

    async def _ack(self, request: pop_pb2.AckMessageRequest) -> pop_pb2.AckMessageResponse:
        return await self._off_loop(self.processor.ack, request)

    async def ChangeInvisibleTime(self, request, context):
        return await self._off_loop(self.processor.change_invisible_time, request)

    async def ForwardToDeadLetterQueue(self, request, context):
        return await asyncio.to_thread(self.processor.forward_to_dead_letter_queue, request)


def _response(outcome: PopOutcome) -> pop_pb2.PopMessageResponse:
    if not outcome.popped:
        return pop_pb2.PopMessageResponse(code=ResponseCode.PULL_NOT_FOUND, remark="no message to hand out now")
    return pop_pb2.PopMessageResponse(
        code=ResponseCode.SUCCESS, records=b"".join(p.record for p in outcome.popped),
        popped=[pop_pb2.PoppedMessage(receipt_handle=p.handle.encode(), reconsume_times=p.handle.reconsume_times,
                                      invisible_until_ms=p.handle.invisible_until_ms) for p in outcome.popped])

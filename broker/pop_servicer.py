"""The broker's POP face (proto/pop.proto): decode, call the processor, encode. A pop that finds nothing waits
(long polling) for a message to arrive on its queues or an in-flight one to come due, then tries once more.

A POP call may wait on another broker (a static topic's older item), an fsync (SYNC_FLUSH), a dead letter's
replication (a SYNC_MASTER) or a second tier's backend (a pop owed messages only the tier serves), and the loop
must never wait for those: such calls run on POP's worker thread. The others (``PopMessageProcessor.runs_inline``
and ``pop_runs_inline``: the common case) run on the loop when POP's lock is free and no call waits for the
worker, sparing the two thread hand-offs that cost more than the pop itself; otherwise they queue behind the
worker's calls."""

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from broker.broker_metrics import BrokerMetrics
from broker.broker_stats import BrokerStats
from broker.longpolling.pull_request_hold_service import PullRequestHoldService
from broker.pop.pop_service import PopOutcome
from broker.processor.pop_message_processor import PopMessageProcessor
from broker.remote_waits import REMOTE_WAITS
from common.encoded_fields import bytes_field_pieces
from common.response_code import ResponseCode
from common.rpc_boundary import rpc_boundary
from common.stream_answers import Encoded, answer_frames
from proto import pop_pb2, pop_pb2_grpc

RECORDS_FIELD = pop_pb2.PopMessageResponse.DESCRIPTOR.fields_by_name["records"].number
T = TypeVar("T")
R = TypeVar("R")


@rpc_boundary(pop_pb2.DESCRIPTOR.services_by_name["PopService"])
class PopServicer(pop_pb2_grpc.PopServiceServicer):
    def __init__(self, processor: PopMessageProcessor, hold_service: PullRequestHoldService,
                 max_suspend_ms: int, metrics: BrokerMetrics | None = None, stats: BrokerStats | None = None) -> None:
        self.processor = processor
        self.metrics = metrics
        self.stats = stats  # statsAll and getTps count POP deliveries as they count pulled messages
        self.hold_service = hold_service
        self.max_suspend_ms = max_suspend_ms
        # One worker: POP's calls take one lock anyway, and one thread hands it on without waking others.
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="pop")
        self._queued = 0  # calls handed to the worker and not done: inline calls never jump ahead of them

    async def _run(self, call: Callable[[T], R], request: T, inline: Callable[[], bool]) -> R:
        """``inline()``: whether the call may run on the loop (asked under POP's lock, when it is free)."""
        if self._queued == 0:
            with self.processor.service.held_if_free() as free:
                if free and inline():
                    return call(request)
        loop = asyncio.get_running_loop()
        done = self._worker.submit(call, request)
        self._queued += 1  # down when the worker is done with it (a cancelled wait does not stop the call)
        done.add_done_callback(lambda _: self._one_done(loop))
        return await asyncio.wrap_future(done)

    def _one_done(self, loop: asyncio.AbstractEventLoop) -> None:
        def down() -> None:
            self._queued -= 1

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the broker stopped)
            loop.call_soon_threadsafe(down)

    async def PopMessage(self, request, context):
        response, tail = await self._pop(request)
        if tail:
            response.records = b"".join(tail[1:])  # (tail[0]: the field's header)
        return response

    async def PopMessageStream(self, request_iterator, context):
        async for frame in answer_frames(request_iterator, self._pop, pop_pb2.PopMessageResponse, in_order=False,
                                         rpc="PopMessageStream"):
            yield frame

    async def AckMessageStream(self, request_iterator, context):
        # In order, without a task each (which would cost more than most acks): an ack itself waits for no other
        # broker and no message, only for its turn at POP's lock (or worker), which every call takes in turn.
        async for frame in answer_frames(request_iterator, self._ack, pop_pb2.AckMessageResponse,
                                         in_order=True, rpc="AckMessageStream"):
            yield frame

    async def _pop(self, request: pop_pb2.PopMessageRequest) -> tuple[pop_pb2.PopMessageResponse, Encoded]:
        """The answer, its records as an encoded field beside it (copied once, into the answer frame)."""
        deadline = time.monotonic() + min(request.poll_time_ms, self.max_suspend_ms) / 1000
        while True:
            started = time.perf_counter()
            outcome: PopOutcome = await self._run(self.processor.pop, request,
                                                  lambda: self.processor.pop_runs_inline(request))
            left = deadline - time.monotonic()
            if outcome.popped or left <= 0 or self.hold_service.stopping:  # stopping: it would not wait again
                answer = _answer(outcome)
                if self.stats is not None:
                    self.stats.count((request.topic, request.group), len(outcome.popped))
                if self.metrics is not None:  # long-polling waits are not handling time
                    self.metrics.popped(request.topic, request.group, len(outcome.popped),
                                        sum(len(p.record) for p in outcome.popped), time.perf_counter() - started)
                return answer
            if outcome.next_expiry_ms is not None:  # an in-flight message comes due before then: try again
                left = min(left, max(0.0, outcome.next_expiry_ms / 1000 - time.time()) + 0.001)
            await self.hold_service.wait_for_any(request.topic, outcome.scan_offsets, left)

    async def AckMessage(self, request, context):
        return await self._ack(request)

    # An ack, a change of invisible time or a dead-lettering of a FIFO group may free a message group whose next
    # message a parked receive waits for: it looks again now (it waited for its long poll's end: a FIFO PushConsumer
    # with a backlog got one message per group every 20 s, the proxy review). Only then: a wake runs every parked pull
    # and pop of the topic again, and at every ack of any group it took POP from 991 to 67 acks/s with 50 idle push
    # groups parked on the topic (the scale review).
    async def _ack(self, request: pop_pb2.AckMessageRequest) -> pop_pb2.AckMessageResponse:
        answer = await self._run(self.processor.ack, request, lambda: self.processor.runs_inline(request.topic))
        self._wake_fifo(request.group, request.topic)
        return answer

    async def ChangeInvisibleTime(self, request, context):
        answer = await self._run(self.processor.change_invisible_time, request,
                                 lambda: self.processor.runs_inline(request.topic))
        self._wake_fifo(request.group, request.topic)
        return answer

    async def ForwardToDeadLetterQueue(self, request, context):
        answer = await REMOTE_WAITS.run(self.processor.forward_to_dead_letter_queue, request)  # reads: peers, a tier
        self._wake_fifo(request.group, request.topic)
        return answer

    def _wake_fifo(self, group: str, topic: str) -> None:
        if self.processor.holds_message_groups(group):
            self.hold_service.wake_topic(topic)

    async def GetPopState(self, request, context):
        return await asyncio.to_thread(self.processor.pop_state, request)


def _answer(outcome: PopOutcome) -> tuple[pop_pb2.PopMessageResponse, Encoded]:
    if not outcome.popped:
        return pop_pb2.PopMessageResponse(code=ResponseCode.PULL_NOT_FOUND, remark="no message to hand out now"), ()
    response = pop_pb2.PopMessageResponse(code=ResponseCode.SUCCESS)
    add = response.popped.add  # built in place: a PoppedMessage made apart would be copied in
    for p in outcome.popped:
        add(receipt_handle=p.handle.encode(), reconsume_times=p.handle.reconsume_times,
            invisible_until_ms=p.handle.invisible_until_ms)
    return response, bytes_field_pieces(RECORDS_FIELD, [p.record for p in outcome.popped])

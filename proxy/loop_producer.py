"""The SDK's producer with its calls to the brokers made on the proxy's event loop.

The plain SDK producer sends on its own gRPC threads: a v2 send went from the loop to a worker thread, to the
send stream's writer thread, back through its reader thread and to the loop again, and those hand-offs cost the
proxy more than the rest of the send (issue 17's bench). Here an attempt goes on the broker's send stream from the
loop (``proxy/broker_send_streams.py``), and a send whose queue and broker the producer picks from its route cache
never leaves the loop. The producer's own rules (queue choice, retries on another broker, static topics) are the
SDK's, unchanged: every attempt settles on the loop, since the SDK makes its retries (and their route look-ups on the
name server, blocking calls) on threads of its own."""

import asyncio
import contextlib
import threading
from concurrent.futures import Future
from typing import Any, TypeVar

import grpc

from client.callback_future import on_done
from client.errors import MQClientError
from client.grpc_errors import StatusError
from client.producer import Producer, _Send
from client.results import SendResult
from client.retry_threads import RetryThreads
from client.static_route import is_logic_queue
from common.message import Message
from common.response_code import ResponseCode
from common.transaction_topic import TRANSACTION_PREPARED_TYPE
from proto import broker_pb2
from proxy.broker_send_streams import BrokerSendStreams

RETRY_THREADS = 16
T = TypeVar("T")


class LoopProducer(Producer):
    def __init__(self, loop: asyncio.AbstractEventLoop, streams: BrokerSendStreams, namesrv_addr: str,
                 **kwargs: Any) -> None:
        # No send waits for room here: sends start on the loop. A v2 client's are bounded by its calls' deadlines.
        super().__init__(namesrv_addr, max_in_flight_messages=0, **kwargs)
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop's thread, as the proxy's collaborators are
        self._streams = streams
        # Every v2 client's sends retry here: more threads than an SDK producer has, so retries whose route look-ups
        # wait for a stalled name server do not hold up all the others.
        self.client.retry_threads = RetryThreads(RETRY_THREADS)
        # Each broker is tried for send_timeout_ms, its retries on others after it (a silent broker's sends go
        # elsewhere): a v2 client's call carries its own deadline, which bounds the whole send.
        self.send_deadline_s = self.send_timeout_s * (1 + self.retry_times)

    def sends_from_loop(self, topic: str) -> bool:
        """Whether a send to ``topic`` is likely to start on the loop without a name server call; the send
        processor makes sure with ``client.cache_only()`` (a miss raises RouteNotCached before anything is sent)."""
        return self.client.sends_from_cache(topic)

    def send_born_async(self, msg: Message, sharding_key: str | None, born_timestamp: int) -> Future[SendResult]:
        """``send_async`` of a v2 client's message, made at ``born_timestamp`` (epoch ms; 0: now)."""
        return self._send_batch_async([msg], sharding_key, None, born_timestamp)

    def send_half_async(self, msg: Message, born_timestamp: int = 0) -> Future[SendResult]:
        """The SDK's ``Producer._send_half`` without its wait: the half message's first attempt starts here (within
        ``client.cache_only()``, on the loop: a miss raises RouteNotCached, or sets it on the future, before anything
        is sent) and the future settles when a broker stored it. Sessions for its checks are the proxy's own."""
        send = self._request([msg], sys_flag=TRANSACTION_PREPARED_TYPE, born_timestamp=born_timestamp)
        mq = self._next_queue(send.topic, None, refresh=False)
        if is_logic_queue(mq):
            raise MQClientError(f"topic {send.topic} is a static topic: transactional messages on static topics are "
                                "not supported", ResponseCode.INVALID_PARAMETER)
        future: Future[SendResult] = Future()
        self._attempt(send, mq, True, 1 + self.retry_times, future)
        return future

    def _call(self, addr: str, send: _Send, queue_id: int, addressing: broker_pb2.QueueAddressing,
              timeout_s: float | None = None) -> Future:
        request = broker_pb2.SendMessageRequest(producer_group=send.group, topic=send.topic, queue_id=queue_id,
                                                addressing=addressing)
        outcome: Future = Future()

        def start() -> None:
            try:
                answer = self._streams.send(addr, request, send.records_field, timeout_s or self.send_timeout_s)
            except BaseException as exc:  # the outcome must settle, whatever failed
                outcome.set_exception(exc)
                raise
            answer.add_done_callback(lambda done: self._settle(addr, done, outcome))

        if threading.get_ident() == self._loop_thread:
            start()
        else:  # a send started off the loop (its route looked up first) or a retry (on the client's retry threads)
            self._loop.call_soon_threadsafe(start)
        return outcome

    def _settle(self, addr: str, answer: "asyncio.Future[broker_pb2.SendMessageResponse]", outcome: Future) -> None:
        """On the loop: the producer's callbacks that follow (a retry's scheduling included) never block."""
        if answer.cancelled():
            outcome.set_exception(StatusError(grpc.StatusCode.CANCELLED, "send cancelled"))
            return
        error = answer.exception()
        if error is not None:
            if isinstance(error, StatusError) and error.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                error.connected = self._streams.brokers.ready(addr)  # a slow broker, or a gone one
            outcome.set_exception(error)
        else:
            outcome.set_result(answer.result())


async def settled(future: Future[T]) -> T:
    """The outcome of the SDK's future, awaited without tying the two together: a client that gives up on its call
    cancels this wait, never the SDK's future (which the producer settles itself when the broker answers)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[T] = loop.create_future()

    def copy(done: Future[T]) -> None:
        if _running_loop() is loop:  # settled on the loop itself (see LoopProducer)
            _copy_outcome(done, waiter)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the proxy stopped): nobody waits
            loop.call_soon_threadsafe(_copy_outcome, done, waiter)

    on_done(future, copy)  # inline (our own callback): the SDK's callback pool is for its users' callbacks
    return await waiter


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _copy_outcome(done: Future[T], waiter: asyncio.Future[T]) -> None:
    if waiter.done():  # the wait was cancelled
        return
    exc = done.exception()
    if exc is not None:
        waiter.set_exception(exc)
    else:
        waiter.set_result(done.result())

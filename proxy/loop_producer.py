"""The SDK's producer with its calls to the brokers made on the proxy's event loop.

The plain SDK producer sends on its own gRPC threads: a v2 send went from the loop to a worker thread, to the
send stream's writer thread, back through its reader thread and to the loop again, and those hand-offs cost the
proxy more than the rest of the send (issue 17's bench). Here an attempt goes on the broker's send stream from the
loop (``proxy/broker_send_streams.py``), and
:meth:`LoopProducer.sends_from_loop` tells the send processor when the producer's queue choice is answered from
its caches, so such a send never leaves the loop. The producer's own rules (queue choice, retries on another
broker, static topics) are the SDK's, unchanged: an attempt that failed or was refused is settled on a worker
thread, since its retry may look a route up on the name server (a blocking call)."""

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

import grpc

from client.grpc_errors import StatusError
from client.producer import Producer, _Send
from common.response_code import ResponseCode
from proto import broker_pb2
from proxy.broker_send_streams import BrokerSendStreams

SETTLED_ON_LOOP = frozenset({ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT})  # no retry can follow
READY_ASK_TIMEOUT_S = 1.0


class LoopProducer(Producer):
    def __init__(self, loop: asyncio.AbstractEventLoop, streams: BrokerSendStreams, namesrv_addr: str,
                 **kwargs: Any) -> None:
        super().__init__(namesrv_addr, **kwargs)
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop's thread, as the proxy's collaborators are
        self._streams = streams

    def sends_from_loop(self, topic: str) -> bool:
        """Whether a send to ``topic`` can start on the loop: nothing before its first attempt blocks."""
        return self.client.sends_from_cache(topic)

    def _call(self, addr: str, send: _Send, queue_id: int, addressing: broker_pb2.QueueAddressing,
              timeout_s: float | None = None) -> Future:
        request = broker_pb2.SendMessageRequest(producer_group=send.group, topic=send.topic, queue_id=queue_id,
                                                addressing=addressing)
        outcome: Future = Future()

        def start() -> None:
            answer = self._streams.send(addr, request, send.records_field, timeout_s or self.send_timeout_s)
            answer.add_done_callback(lambda done: self._settle(done, outcome))

        if threading.get_ident() == self._loop_thread:
            start()
        else:  # a retry, made on a worker thread
            self._loop.call_soon_threadsafe(start)
        return outcome

    def _channel_ready(self, addr: str) -> bool:
        """Asked on a worker thread after a send timed out: the loop reads its channel's state."""

        async def ready() -> bool:
            return self._streams.brokers.ready(addr)

        return asyncio.run_coroutine_threadsafe(ready(), self._loop).result(READY_ASK_TIMEOUT_S)

    def _settle(self, answer: "asyncio.Future[broker_pb2.SendMessageResponse]", outcome: Future) -> None:
        if answer.cancelled():
            outcome.set_exception(StatusError(grpc.StatusCode.CANCELLED, "the proxy is closing"))
        elif answer.exception() is not None:
            self._loop.run_in_executor(None, outcome.set_exception, answer.exception())
        elif answer.result().code in SETTLED_ON_LOOP:
            outcome.set_result(answer.result())
        else:
            self._loop.run_in_executor(None, outcome.set_result, answer.result())

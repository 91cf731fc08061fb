"""``BrokerSendStreams`` (the proxy's send streams on its event loop) against a real in-process gRPC server speaking
the broker's send-stream frames: answers matched by request id, sends ready together written as one frame, the
window, deadlines, a broken stream failing what it held and a new one opened, closing."""

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from client.grpc_errors import StatusError
from common.encoded_fields import bytes_field
from proxy.broker_channels import BrokerChannels
from proxy.broker_send_streams import BrokerSendStreams
from tests.client.test_rpc_stream import RECORDS_FIELD, Answers, Behaviour, Frame, Request, Response


class FakeBroker:
    """A gRPC server whose ``rmq.BrokerService/SendMessageStream`` runs ``behaviour`` per stream, recording the
    frames it read."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.frames: list[Any] = []
        self.streams_opened = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.stream_stream_rpc_method_handler(self._stream, request_deserializer=Frame.FromString,
                                                        response_serializer=Answers.SerializeToString)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("rmq.BrokerService", {"SendMessageStream": handler}),))
        self.addr = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def _stream(self, frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        self.streams_opened += 1
        yield from self.behaviour(self._recorded(frames), context)

    def _recorded(self, frames: Iterator[Any]) -> Iterator[Any]:
        for frame in frames:
            self.frames.append(frame)
            yield frame

    def stop(self) -> None:
        self.server.stop(None)


def answer_each(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    for frame in frames:
        yield Answers(responses=[Response(request_id=r.request_id, queue_offset=len(r.records), remark=r.topic)
                                 for r in reversed(frame.requests)])  # out of order: matched by id


def silent_until(stop: threading.Event) -> Behaviour:
    """Reads the frames and answers none, until ``stop`` is set (10 s at most a frame)."""

    def silent(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for _ in frames:
            stop.wait(10)
        return iter(())

    return silent


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> Iterator[FakeBroker]:
    fake = FakeBroker(getattr(request, "param", answer_each))
    yield fake
    fake.stop()


def run(scenario: Callable[[BrokerSendStreams], Any], window: int = 64) -> Any:
    async def main() -> Any:
        channels = BrokerChannels()
        streams = BrokerSendStreams(channels, window)
        try:
            return await scenario(streams)
        finally:
            await streams.close()
            await channels.close()

    return asyncio.run(main())


def send(streams: BrokerSendStreams, addr: str, topic: str, records: bytes = b"r", timeout_s: float = 10.0
         ) -> "asyncio.Future[Response]":
    return streams.send(addr, Request(topic=topic), bytes_field(RECORDS_FIELD, records), timeout_s)


def test_answers_find_their_sends_and_sends_ready_together_share_a_frame(broker: FakeBroker):
    async def scenario(streams: BrokerSendStreams) -> list[Response]:
        return await asyncio.gather(*(send(streams, broker.addr, f"t{i}", b"x" * i) for i in range(10)))

    answers = run(scenario)
    assert [(a.remark, a.queue_offset) for a in answers] == [(f"t{i}", i) for i in range(10)]
    assert len(broker.frames) == 1 and len(broker.frames[0].requests) == 10
    assert broker.streams_opened == 1


def test_no_more_than_the_window_is_written_unanswered(broker: FakeBroker):
    most = [0]
    gate = threading.Semaphore(0)

    def slow(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for frame in frames:
            most[0] = max(most[0], len(frame.requests))
            gate.acquire()  # answered only once the test lets it
            yield Answers(responses=[Response(request_id=r.request_id) for r in frame.requests])

    broker.behaviour = slow

    async def scenario(streams: BrokerSendStreams) -> int:
        sent = [send(streams, broker.addr, "t") for _ in range(7)]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while sum(len(f.requests) for f in broker.frames) < 3 and loop.time() < deadline:  # the window's worth
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # a send written past the window would have arrived by now too
        written = sum(len(f.requests) for f in broker.frames)
        for _ in range(7):
            gate.release()
        await asyncio.gather(*sent)
        return written

    assert run(scenario, window=3) == 3  # the rest waited for answers
    assert most[0] <= 3


def test_a_send_not_answered_in_time_fails_with_deadline_exceeded(broker: FakeBroker):
    stop = threading.Event()

    broker.behaviour = silent_until(stop)

    async def scenario(streams: BrokerSendStreams) -> BaseException | None:
        try:
            await send(streams, broker.addr, "t", timeout_s=0.3)
        except StatusError as exc:
            return exc
        finally:
            stop.set()
        return None

    error = run(scenario)
    assert isinstance(error, StatusError) and error.code() is grpc.StatusCode.DEADLINE_EXCEEDED


def test_a_broken_stream_fails_what_it_held_and_the_next_send_opens_another(broker: FakeBroker):
    def break_first(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        if broker.streams_opened == 1:
            next(frames)
            context.abort(grpc.StatusCode.UNAVAILABLE, "going away")
        yield from answer_each(frames, context)

    broker.behaviour = break_first

    async def scenario(streams: BrokerSendStreams) -> tuple[BaseException | None, Response]:
        try:
            await send(streams, broker.addr, "first")
            error = None
        except StatusError as exc:
            error = exc
        return error, await send(streams, broker.addr, "second")

    error, answer = run(scenario)
    assert isinstance(error, StatusError) and error.code() is grpc.StatusCode.UNAVAILABLE
    assert answer.remark == "second" and broker.streams_opened == 2


def test_closing_fails_the_sends_still_unanswered(broker: FakeBroker):
    stop = threading.Event()

    broker.behaviour = silent_until(stop)

    async def scenario(streams: BrokerSendStreams) -> BaseException | None:
        pending = send(streams, broker.addr, "t")
        await asyncio.sleep(0.1)
        await streams.close()
        stop.set()
        try:
            await pending
        except StatusError as exc:
            return exc
        return None

    error = run(scenario)
    assert isinstance(error, StatusError) and error.code() is grpc.StatusCode.CANCELLED


def test_sends_not_written_before_their_deadline_are_dropped_with_it(broker: FakeBroker):
    stop = threading.Event()

    broker.behaviour = silent_until(stop)

    async def scenario(streams: BrokerSendStreams) -> list[BaseException | Response]:
        try:
            return await asyncio.gather(*(send(streams, broker.addr, "t", timeout_s=0.3) for _ in range(3)),
                                        return_exceptions=True)
        finally:
            stop.set()

    outcomes = run(scenario, window=1)  # one written; two wait for its answer, which never comes
    assert all(isinstance(o, StatusError) and o.code() is grpc.StatusCode.DEADLINE_EXCEEDED for o in outcomes)
    assert sum(len(f.requests) for f in broker.frames) == 1


def test_a_send_after_closing_fails_at_once_and_opens_nothing(broker: FakeBroker):
    async def scenario(streams: BrokerSendStreams) -> BaseException | None:
        await send(streams, broker.addr, "before")
        await streams.close()
        try:
            await send(streams, broker.addr, "after")
        except StatusError as exc:
            return exc
        return None

    error = run(scenario)
    assert isinstance(error, StatusError) and error.code() is grpc.StatusCode.FAILED_PRECONDITION  # not retried
    assert broker.streams_opened == 1

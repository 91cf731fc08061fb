"""``RpcStream`` against a real in-process gRPC server speaking the send stream's frames: answers matched by
request id, the window, deadlines, broken streams and reopening, closing."""

import contextlib
import gc
import queue
import random
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent import futures
from concurrent.futures import Future
from typing import Any

import grpc
import grpc._channel
import pytest

from client.grpc_errors import StatusError
from client.rpc_stream import RpcStream
from common.encoded_fields import bytes_field
from proto import broker_pb2
from tests.cluster import wait_until

SERVICE = "test.FramedStream"
METHOD = f"/{SERVICE}/Stream"
Frame = broker_pb2.SendStreamFrame
Answers = broker_pb2.SendStreamAnswers
Request = broker_pb2.SendMessageRequest
Response = broker_pb2.SendMessageResponse
RECORDS_FIELD = Request.DESCRIPTOR.fields_by_name["records"].number
Behaviour = Callable[[Iterator[Any], grpc.ServicerContext], Iterator[Any]]


def echo(request: Request) -> Response:
    """The answer a test can check: the request's id, and its queue id and topic echoed."""
    return Response(request_id=request.request_id, queue_offset=request.queue_id * 10, remark=request.topic)


class FakeServer:
    """A gRPC server whose one stream-stream method runs ``behaviour`` (set by each test) per stream."""

    def __init__(self) -> None:
        self.behaviour: Behaviour = self._unset
        self.streams_opened = 0
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handler = grpc.stream_stream_rpc_method_handler(self._stream, request_deserializer=Frame.FromString,
                                                        response_serializer=Answers.SerializeToString)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Stream": handler}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _stream(self, frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        with self._lock:
            self.streams_opened += 1
        yield from self.behaviour(frames, context)

    @staticmethod
    def _unset(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        raise AssertionError("the test set no behaviour")

    def stop(self) -> None:
        self.server.stop(grace=None)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.stop()


@pytest.fixture
def channel(server: FakeServer) -> Iterator[grpc.Channel]:
    ch = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    yield ch
    ch.close()


@pytest.fixture
def open_stream(channel: grpc.Channel) -> Iterator[Callable[..., RpcStream]]:
    """Makes ``RpcStream``s on the fake server's method (closed at the end)."""
    made: list[RpcStream] = []

    def make(window: int = 64) -> RpcStream:
        # Frames go as the bytes RpcStream encodes; answers are decoded.
        open_call = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=Answers.FromString)
        stream = RpcStream(open_call, "test-stream", window=window)
        made.append(stream)
        return stream

    yield make
    for stream in made:
        stream.close()


def requests_of(frames: Iterator[Any]) -> Iterator[Request]:
    for frame in frames:
        yield from frame.requests


def read_in_background(frames: Iterator[Any], on_request: Callable[[Request], None],
                       on_end: Callable[[], None] = lambda: None) -> threading.Thread:
    """Reads the client's frames in a thread of its own, so the handler can answer while requests arrive;
    ``on_end`` once the client's side ends (or the stream is cancelled)."""

    def run() -> None:
        with contextlib.suppress(Exception):  # a stream cancelled under the reader ends it too
            for request in requests_of(frames):
                on_request(request)
        on_end()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def failure(future: "Future[Any]", timeout_s: float = 10.0) -> StatusError:
    error = future.exception(timeout=timeout_s)
    assert isinstance(error, StatusError), f"expected a StatusError, got {error!r}"
    return error


# -- answers matched by id ------------------------------------------------------------------------------------


def shuffled_echo(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    """Answers whatever has arrived, in a random order, one or two answers a frame."""
    arrived: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
    read_in_background(frames, arrived.put, lambda: arrived.put(None))
    rng = random.Random(7)
    while True:
        batch: list[Request] = []
        item = arrived.get()
        while item is not None:
            batch.append(item)
            try:
                item = arrived.get_nowait()
            except queue.Empty:
                break
        rng.shuffle(batch)
        for i in range(0, len(batch), 2):
            yield Answers(responses=[echo(r) for r in batch[i : i + 2]])
        if item is None:
            return


def test_many_concurrent_calls_each_get_their_own_answer(server: FakeServer, open_stream):
    server.behaviour = shuffled_echo
    stream = open_stream(window=16)
    calls: list[tuple[int, Future[Any]]] = []
    lock = threading.Lock()

    def caller(thread: int) -> None:
        for i in range(60):
            queue_id = thread * 1000 + i
            future = stream.call(Request(topic=f"T{thread}", queue_id=queue_id), 10.0)
            with lock:
                calls.append((queue_id, future))

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(calls) == 360
    ids = set()
    for queue_id, future in calls:
        response = future.result(timeout=10)
        assert (response.queue_offset, response.remark) == (queue_id * 10, f"T{queue_id // 1000}")
        ids.add(response.request_id)
    assert len(ids) == 360  # every request had an id of its own
    assert server.streams_opened == 1


def test_encoded_tail_fields_arrive_as_fields_of_their_request(server: FakeServer, open_stream):
    received: list[Request] = []

    def record_and_echo(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for request in requests_of(frames):
            received.append(request)
            yield Answers(responses=[echo(request)])

    server.behaviour = record_and_echo
    stream = open_stream()
    calls = [stream.call(Request(topic="T", queue_id=i), 10.0, bytes_field(RECORDS_FIELD, b"r" * (i * 300 + 1)))
             for i in range(5)]
    calls.append(stream.call(Request(topic="T", queue_id=5), 10.0))
    assert [f.result(timeout=10).queue_offset for f in calls] == [i * 10 for i in range(6)]
    assert [(r.topic, r.queue_id, r.records) for r in received] == [
        ("T", i, b"r" * (i * 300 + 1)) for i in range(5)] + [("T", 5, b"")]


def test_requests_queued_together_travel_in_shared_frames(server: FakeServer, open_stream):
    frame_sizes: list[int] = []
    release = threading.Event()

    def first_holds_then_echoes(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for frame in frames:
            frame_sizes.append(len(frame.requests))
            release.wait(10)  # the first frame is held while the caller queues the rest
            yield Answers(responses=[echo(r) for r in frame.requests])

    server.behaviour = first_holds_then_echoes
    stream = open_stream(window=64)
    first = stream.call(Request(queue_id=0), 10.0)
    wait_until(lambda: frame_sizes, what="the first frame")
    rest = [stream.call(Request(queue_id=i), 10.0) for i in range(1, 21)]
    release.set()
    assert [f.result(timeout=10).queue_offset for f in [first, *rest]] == [i * 10 for i in range(21)]
    assert sum(frame_sizes) == 21 and len(frame_sizes) < 21, frame_sizes


def test_a_frame_carries_at_most_half_the_requests_outstanding(server: FakeServer, open_stream):
    """Queued together, 16 requests (17 outstanding) go in frames of at most 8: two frames in flight, so the
    broker works on one while the client handles the answers of the other."""
    frame_sizes: list[int] = []
    release = threading.Event()

    def hold_everything_then_echo(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        held: list[Request] = []
        for frame in frames:
            frame_sizes.append(len(frame.requests))
            held.extend(frame.requests)
            if len(held) == 17:
                break
        release.wait(10)
        yield Answers(responses=[echo(r) for r in held])

    server.behaviour = hold_everything_then_echo
    stream = open_stream(window=64)
    first = stream.call(Request(queue_id=0), 10.0)
    wait_until(lambda: frame_sizes, what="the first frame")
    rest = [stream.call(Request(queue_id=i), 10.0) for i in range(1, 17)]
    wait_until(lambda: sum(frame_sizes) == 17, what="every request sent")
    release.set()
    assert [f.result(timeout=10).queue_offset for f in [first, *rest]] == [i * 10 for i in range(17)]
    assert frame_sizes[0] == 1 and max(frame_sizes[1:]) <= 8 and len(frame_sizes) >= 3, frame_sizes


# -- the window -----------------------------------------------------------------------------------------------


def test_no_more_than_window_requests_are_outstanding(server: FakeServer, open_stream):
    """The server answers only when the window is full (or everything was sent): a client that sent beyond its
    window would be seen with more outstanding; one that did not fill it would never be answered."""
    window, total = 4, 30
    cond = threading.Condition()
    arrived: list[Request] = []
    answered = 0
    most_outstanding = 0

    def on_request(request: Request) -> None:
        nonlocal most_outstanding
        with cond:
            arrived.append(request)
            most_outstanding = max(most_outstanding, len(arrived) - answered)
            cond.notify_all()

    def answer_when_full(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        nonlocal answered
        def full_or_all_sent() -> bool:
            return len(arrived) - answered >= window or len(arrived) == total

        read_in_background(frames, on_request)
        while answered < total:
            with cond:
                if not cond.wait_for(full_or_all_sent, 10):
                    return
                oldest = arrived[answered]
                answered += 1
            yield Answers(responses=[echo(oldest)])

    server.behaviour = answer_when_full
    stream = open_stream(window=window)
    calls = [stream.call(Request(queue_id=i), 20.0) for i in range(total)]
    assert [f.result(timeout=20).queue_offset for f in calls] == [i * 10 for i in range(total)]
    assert most_outstanding == window


def test_a_late_answer_to_a_timed_out_request_frees_its_slot(server: FakeServer, open_stream):
    may_answer = threading.Event()

    def answer_late(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for request in requests_of(frames):
            if request.queue_id == 1:
                may_answer.wait(10)
            yield Answers(responses=[echo(request)])

    server.behaviour = answer_late
    stream = open_stream(window=1)
    late = stream.call(Request(queue_id=1), 0.2)
    assert failure(late).code() is grpc.StatusCode.DEADLINE_EXCEEDED
    may_answer.set()  # its answer now arrives (and is dropped), which lets the next request go
    assert stream.call(Request(queue_id=2), 10.0).result(timeout=10).queue_offset == 20
    assert late.exception() is not None  # the late answer did not overwrite the failure



def test_a_request_whose_time_ran_out_while_it_waited_for_the_window_is_never_sent(server: FakeServer,
                                                                                    open_stream):
    """Window 1: the first request is held unanswered while the ones behind it time out waiting. They fail as not
    sent, the server never sees them (a retry of one stores no second copy), and the window is still one wide:
    once the first is answered, later requests go one at a time."""
    release = threading.Event()
    seen: list[int] = []
    lock = threading.Lock()
    most_outstanding = [0]
    answered = [0]

    def hold_the_first(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for request in requests_of(frames):
            with lock:
                seen.append(request.queue_id)
                most_outstanding[0] = max(most_outstanding[0], len(seen) - answered[0])
            if request.queue_id == 0:
                release.wait(10)
            with lock:
                answered[0] += 1
            yield Answers(responses=[echo(request)])

    server.behaviour = hold_the_first
    stream = open_stream(window=1)
    first = stream.call(Request(queue_id=0), 10.0)
    waiting = [stream.call(Request(queue_id=i), 0.2) for i in range(1, 6)]
    for call in waiting:
        error = failure(call)
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED and "dropped unsent" in error.details()
    release.set()
    assert first.result(timeout=10).queue_offset == 0
    later = [stream.call(Request(queue_id=i), 10.0) for i in range(10, 14)]
    assert [f.result(timeout=10).queue_offset for f in later] == [100, 110, 120, 130]
    assert seen == [0, 10, 11, 12, 13]
    assert most_outstanding[0] == 1


# -- deadlines ------------------------------------------------------------------------------------------------


def silent(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    for _ in frames:
        pass
    yield from ()


def test_a_request_not_answered_in_time_fails_with_deadline_exceeded(server: FakeServer, open_stream):
    server.behaviour = silent
    stream = open_stream()
    start = time.monotonic()
    calls = [stream.call(Request(queue_id=i), 0.3) for i in range(3)]
    for call in calls:
        assert failure(call).code() is grpc.StatusCode.DEADLINE_EXCEEDED
    waited = time.monotonic() - start
    assert 0.3 <= waited < 3.0, waited
    assert server.streams_opened == 1  # a deadline fails the request, not the stream


def test_each_request_has_its_own_deadline(server: FakeServer, open_stream):
    server.behaviour = silent
    stream = open_stream()
    short, long_ = stream.call(Request(), 0.2), stream.call(Request(), 30.0)
    assert failure(short).code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert not long_.done()


# -- broken streams -------------------------------------------------------------------------------------------


def abort_first_stream_after(n: int, gate: threading.Event | None = None) -> Behaviour:
    """The first stream aborts RESOURCE_EXHAUSTED once ``n`` requests arrived (and ``gate`` is set, when given);
    later streams echo."""
    streams = 0

    def behaviour(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        nonlocal streams
        streams += 1
        if streams > 1:
            for frame in frames:
                yield Answers(responses=[echo(r) for r in frame.requests])
            return
        for seen, _ in enumerate(requests_of(frames), 1):
            if seen == n:
                if gate is not None:
                    assert gate.wait(10), "the test never opened the gate"
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "go away")

    return behaviour


def test_an_aborted_stream_fails_every_pending_request_with_its_status(server: FakeServer, open_stream):
    # The abort waits for all five calls: on a busy machine it could come first, and the last calls would open a
    # second stream, which answers them.
    all_sent = threading.Event()
    server.behaviour = abort_first_stream_after(2, all_sent)
    stream = open_stream(window=2)
    calls = [stream.call(Request(queue_id=i), 10.0) for i in range(5)]  # 3 of them still wait for the window
    all_sent.set()
    for call in calls:
        error = failure(call)
        assert (error.code(), error.details()) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "go away")


def test_the_call_after_a_broken_stream_opens_a_new_one(server: FakeServer, open_stream):
    server.behaviour = abort_first_stream_after(1)
    stream = open_stream()
    assert failure(stream.call(Request(queue_id=1), 10.0)).code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    answers = [stream.call(Request(queue_id=i), 10.0) for i in range(2, 6)]
    assert [f.result(timeout=10).queue_offset for f in answers] == [20, 30, 40, 50]
    assert server.streams_opened == 2


def test_a_stream_the_server_ends_fails_pending_requests_as_unavailable(server: FakeServer, open_stream):
    both_pending = threading.Event()

    def end_after_one(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for request in requests_of(frames):
            both_pending.wait(10)  # else, on a busy machine, the stream may end before the second call is made,
            yield Answers(responses=[echo(request)])  # which then opens a new stream and is answered there
            return

    server.behaviour = end_after_one
    stream = open_stream(window=1)
    first, second = stream.call(Request(queue_id=1), 10.0), stream.call(Request(queue_id=2), 10.0)
    both_pending.set()
    assert first.result(timeout=10).queue_offset == 10
    assert failure(second).code() is grpc.StatusCode.UNAVAILABLE
    assert stream.call(Request(queue_id=3), 10.0).result(timeout=10).queue_offset == 30


def test_a_server_that_went_away_fails_requests_as_unavailable(server: FakeServer, open_stream):
    server.behaviour = silent
    stream = open_stream()
    pending = stream.call(Request(), 30.0)
    wait_until(lambda: server.streams_opened == 1, what="the stream to open")
    server.stop()
    assert failure(pending).code() is grpc.StatusCode.UNAVAILABLE
    assert failure(stream.call(Request(), 5.0)).code() is grpc.StatusCode.UNAVAILABLE


# -- closing --------------------------------------------------------------------------------------------------


def test_close_cancels_pending_requests(server: FakeServer, open_stream):
    server.behaviour = silent
    stream = open_stream()
    pending = [stream.call(Request(), 30.0) for _ in range(3)]
    wait_until(lambda: server.streams_opened == 1, what="the stream to open")
    stream.close()
    for call in pending:
        assert failure(call, timeout_s=5).code() is grpc.StatusCode.CANCELLED


def test_close_ends_the_reader_and_finalizes_the_call_without_the_garbage_collector(server: FakeServer, open_stream):
    """Left to the collector, the call could be finalized as the process exits, with a frozen daemon thread holding
    its lock: mqadmin printed its answer and hung (3 runs in 150)."""
    server.behaviour = shuffled_echo
    stream = open_stream()
    assert stream.call(Request(queue_id=1), 10.0).result(timeout=10).queue_offset == 10
    reader = stream._stream.reader
    gc.collect()  # garbage of earlier tests in this process (a stream broken and replaced) is not this one's
    gc.disable()  # what is still alive after close() then is what only the collector would free
    try:
        stream.close()
        assert not reader.is_alive()
        calls = [o for o in gc.get_objects() if isinstance(o, grpc._channel._MultiThreadedRendezvous)]
        assert not calls, f"{len(calls)} stream call(s) outlived close()"
    finally:
        gc.enable()


def test_calls_after_close_fail_at_once_with_cancelled(server: FakeServer, open_stream):
    server.behaviour = shuffled_echo
    stream = open_stream()
    assert stream.call(Request(queue_id=1), 10.0).result(timeout=10).queue_offset == 10
    stream.close()
    later = stream.call(Request(queue_id=2), 10.0)
    assert later.done() and failure(later).code() is grpc.StatusCode.CANCELLED
    assert server.streams_opened == 1


def test_close_of_a_stream_never_used_opens_nothing(server: FakeServer, open_stream):
    stream = open_stream()
    stream.close()
    assert failure(stream.call(Request(), 1.0)).code() is grpc.StatusCode.CANCELLED
    assert server.streams_opened == 0


def test_requests_that_expire_unsent_leave_nothing_behind(server: FakeServer, open_stream):
    """A broker that stopped reading (a hung process: the connection stays up, its stream's window stays full):
    the requests behind it expire unsent, and their records are freed. They stayed in the outgoing queue, which
    nobody takes from then: a producer grew at its send rate for as long as the broker hung."""
    release = threading.Event()

    def hold_the_first(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for request in requests_of(frames):
            release.wait(10)
            yield Answers(responses=[echo(request)])

    server.behaviour = hold_the_first
    stream = open_stream(window=1)
    first = stream.call(Request(queue_id=0), 10.0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        waiting = [stream.call(Request(queue_id=i), 0.2, bytes_field(RECORDS_FIELD, bytes(1 << 20)))
                   for i in range(1, 21)]
        for call in waiting:
            assert "dropped unsent" in failure(call).details()
        del waiting
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        release.set()
    assert kept < 4 << 20, f"{kept >> 20} MiB of 20 MiB of expired records kept"
    assert first.result(timeout=10).queue_offset == 0


def test_the_deadline_thread_runs_only_while_requests_are_pending(server: FakeServer, open_stream):
    """A client kept a thread per broker address it ever used (brokers restarted on new addresses), each waking ten
    times a second for ever. It ends once nothing is pending, and the next call starts one again."""
    def reapers() -> int:
        return sum(t.name == "test-stream-reaper" and t.is_alive() for t in threading.enumerate())

    def answers_when_told(frames: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for request in requests_of(frames):
            if request.queue_id == 1:
                yield Answers(responses=[echo(request)])
            # queue id 2: never answered

    server.behaviour = answers_when_told
    stream = open_stream()
    assert stream.call(Request(queue_id=1), 10.0).result(timeout=10).queue_offset == 10
    wait_until(lambda: reapers() == 0, timeout=5, what="the deadline thread to end with nothing pending")
    unanswered = stream.call(Request(queue_id=2), 0.3)
    assert reapers() == 1
    assert failure(unanswered).code() is grpc.StatusCode.DEADLINE_EXCEEDED  # its deadline still holds
    wait_until(lambda: reapers() == 0, timeout=5, what="the deadline thread to end again")

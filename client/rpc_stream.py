"""Many requests in flight on one long-lived bidirectional gRPC stream, answers matched by ``request_id``.

A per-call gRPC round costs the broker more than the work of a batch; a stream pays it once, and a frame
carries the requests that were ready to go, up to half of those outstanding so that two frames are in flight
(the broker answers in frames the same way), so the busier the stream, the less each request pays. Flow control:
at most ``window`` requests are outstanding on a stream (the request generator, run by gRPC's own thread,
waits for answers before it hands over more; callers never block, so a callback may send again). A request
not answered within its timeout fails with DEADLINE_EXCEEDED; one whose timeout passed while it waited for the
window is dropped unsent (a retry of it then stores no second copy). When the stream breaks, every outstanding request
fails with the stream's status (UNAVAILABLE when the broker went away) and the next call opens a new stream:
callers retry as they would a failed unary call.
"""

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import grpc

from client.grpc_errors import StatusError
from common.encoded_fields import repeated_message_field

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 64
UNLIMITED = 1 << 30
WRITE_STREAMS = ("SendMessageStream", "WriteStream")  # streams whose requests store something
FRAME_REQUESTS_FIELD = 1
MAX_FRAME_REQUESTS = 64
MAX_FRAME_RECORD_BYTES = 4 * 1024 * 1024
REAP_INTERVAL_S = 0.1
# How long close() waits for the reader thread to end after cancelling the call. The call must not outlive
# close(): left to the garbage collector (the cancelled call is raised as the reader's exception, whose traceback
# refers back to it), it may be finalized while the process exits, when daemon threads are frozen where they
# stood; one frozen holding the call's lock makes the finalizer wait for ever (mqadmin printed its answer and hung,
# 3 runs in 150 on a loaded machine).
CLOSE_JOIN_S = 5.0
_CLOSE = object()


@dataclass(slots=True)
class _Pending:
    """A request waiting for its answer. Its encoded pieces are kept here, not in the outgoing queue, so that one
    expired before it was sent frees them at once: behind a broker that stopped reading (a hung process), the queue
    is not taken from, and a producer's records piled up there at its send rate."""

    future: "Future[Any]"
    deadline: float  # time.monotonic()
    encoded: Sequence[bytes]  # () once sent
    size: int
    sent: bool = False  # taken into a frame (it holds a slot of the window)


class _Stream:
    """One open stream: its outgoing queue, the requests waiting for answers, the thread that reads answers."""

    def __init__(self, open_call: Callable[..., Any], window: int | None, name: str) -> None:
        self.outgoing: queue.SimpleQueue[Any] = queue.SimpleQueue()  # request ids, or _CLOSE
        self.pending: dict[int, _Pending] = {}
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(window or UNLIMITED)
        self.broken: StatusError | None = None
        # What a request that expired unanswered may still have done: a send's or a KV write's, stored.
        self.late_effect = ("the broker may still carry the request out: a send may be stored"
                            if name.startswith(WRITE_STREAMS) else "the broker may still carry the request out")
        self.responses = open_call(self._requests())
        self.reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self.reader.start()

    def _requests(self) -> Iterator[bytes]:
        """Encoded frames: the first request waits for a slot and for a request; those queued behind it (with
        slots free) go along in the same frame."""
        while True:
            self.slots.acquire()
            first = self.outgoing.get()
            if first is _CLOSE:
                return
            taken, closing = self._take_queued(first)
            frame = self._still_wanted(taken)
            if frame:
                yield repeated_message_field(FRAME_REQUESTS_FIELD, frame)
            if closing:
                return

    def _take_queued(self, first: int) -> tuple[list[int], bool]:
        """``first`` and the requests queued behind it that get a slot, up to a frame's worth; whether the stream
        is closing."""
        taken = [first]
        size = self._size_of(first)
        limit = self._frame_limit()
        while len(taken) < limit and size < MAX_FRAME_RECORD_BYTES and self.slots.acquire(False):
            try:
                item = self.outgoing.get_nowait()
            except queue.Empty:
                self.slots.release()
                return taken, False
            if item is _CLOSE:
                return taken, True
            taken.append(item)
            size += self._size_of(item)
        return taken, False

    def _size_of(self, request_id: int) -> int:
        entry = self.pending.get(request_id)  # (one dict read: no lock needed; a size only bounds a frame)
        return entry.size if entry is not None else 0

    def _frame_limit(self) -> int:
        """At most half the requests outstanding (sent or queued), so a busy stream has two frames in flight. The
        broker answers a frame's requests together and the client handles the answers together: with every
        request in one frame, each side waits while the other works (8 pulls in flight, one frame: broker 65% and
        client 46% busy, 290k msgs/s; two frames: 360k msgs/s). ``len`` of the dict needs no lock: a count a
        moment old only sizes a frame."""
        return max(1, min(MAX_FRAME_REQUESTS, len(self.pending) // 2))

    def _still_wanted(self, taken: list[int]) -> list[Sequence[bytes]]:
        """The encoded requests still pending, marked sent (each holds its slot until answered or expired); those
        that expired or failed while they waited are dropped unsent and give their slot back."""
        wanted: list[Sequence[bytes]] = []
        with self.lock:  # once a frame
            for request_id in taken:
                entry = self.pending.get(request_id)
                if entry is not None:
                    entry.sent = True
                    wanted.append(entry.encoded)
                    entry.encoded = ()  # in the frame now
        if len(wanted) < len(taken):
            self.slots.release(len(taken) - len(wanted))
        return wanted

    def _read(self) -> None:
        try:
            for answers in self.responses:
                for response in answers.responses:
                    with self.lock:
                        entry = self.pending.pop(response.request_id, None)
                    if entry is not None:  # None: it timed out, was failed and freed its slot already
                        self.slots.release()
                        _settle(entry.future, response)
            error = StatusError(grpc.StatusCode.UNAVAILABLE, "the broker closed the stream")
        except grpc.RpcError as exc:
            error = StatusError(exc.code(), exc.details() or str(exc))
            # The exception is the call itself, and its traceback's frames refer back to it: a cycle only the
            # garbage collector would free, maybe while the process exits (see CLOSE_JOIN_S).
            exc.__traceback__ = None
        self.fail_all(error)

    def fail_all(self, error: StatusError) -> None:
        with self.lock:
            self.broken = error
            failed = list(self.pending.values())
            self.pending.clear()
        self.slots.release(len(failed) + 1)  # a generator waiting for a slot gets to see the close
        self.outgoing.put(_CLOSE)
        for entry in failed:
            _fail(entry.future, error)

    def expire(self, now: float) -> None:
        with self.lock:
            late = [rid for rid, entry in self.pending.items() if entry.deadline <= now]
            expired = [self.pending.pop(rid) for rid in late]
        sent = sum(entry.sent for entry in expired)
        if sent:
            self.slots.release(sent)  # a late answer frees nothing: the window does not shrink for good
        for entry in expired:
            why = (f"no answer on the stream in time ({self.late_effect})" if entry.sent
                   else "not sent in time: the stream's window stayed full (dropped unsent)")
            _fail(entry.future, StatusError(grpc.StatusCode.DEADLINE_EXCEEDED, why))


class RpcStream:
    """``call(request, timeout_s, tail)`` sends ``request`` on the stream (setting its ``request_id``) and returns
    a future of its answer. ``open_call`` opens the stream: a stream-stream method that takes encoded frames
    (bytes; field 1: the requests) and yields decoded answer frames (``responses``)."""

    def __init__(self, open_call: Callable[..., Any], name: str, window: int | None = DEFAULT_WINDOW) -> None:
        """``window=None``: no limit (pulls: a parked long-polling pull holds its place, and a push consumer parks
        one a queue)."""
        self._open_call = open_call
        self._name = name
        self._window = window
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stream: _Stream | None = None
        self._closed = False
        self._reaping = False  # a thread expires requests while any is pending (and ends when none is)

    def call(self, request: Any, timeout_s: float, tail: Sequence[bytes] = ()) -> "Future[Any]":
        """``tail``: fields of the request already encoded (``common/encoded_fields.py``), e.g. a send's
        records, so they are copied once, into the frame."""
        future: Future[Any] = Future()
        request_id = next(self._ids)
        request.request_id = request_id
        encoded = (request.SerializeToString(), *tail)
        with self._lock:
            if self._closed:
                _fail(future, StatusError(grpc.StatusCode.CANCELLED, "the client is closed"))
                return future
            stream = self._stream
            if stream is None or stream.broken is not None:
                stream = self._stream = _Stream(self._open_call, self._window, self._name)
        with stream.lock:
            if stream.broken is not None:
                error = stream.broken
            else:
                error = None
                stream.pending[request_id] = _Pending(future, time.monotonic() + timeout_s, encoded, _size(encoded))
        if error is not None:
            _fail(future, error)
            return future
        self._ensure_reaper()  # after the request is pending: a reaper ending now sees it, or a new one starts
        stream.outgoing.put(request_id)
        return future

    def _ensure_reaper(self) -> None:
        with self._lock:
            if self._reaping or self._closed:
                return
            self._reaping = True
        threading.Thread(target=self._reap, name=f"{self._name}-reaper", daemon=True).start()

    def _reap(self) -> None:
        """While requests are pending. A client that talked to many brokers over its life (brokers restarted on
        new addresses) kept a thread per address waking ten times a second for nothing."""
        while True:
            time.sleep(REAP_INTERVAL_S)
            with self._lock:
                stream = self._stream
                if self._closed or stream is None or not stream.pending:
                    self._reaping = False
                    return
            stream.expire(time.monotonic())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.outgoing.put(_CLOSE)
            stream.slots.release()
            cancel = getattr(stream.responses, "cancel", None)
            if cancel is not None:
                cancel()
            if stream.reader is not threading.current_thread():  # (closed from an answer's callback: it ends next)
                stream.reader.join(CLOSE_JOIN_S)
            stream.responses = None  # the call is finalized now, while every thread that may hold its lock runs


def _size(encoded: Sequence[bytes]) -> int:
    return sum(map(len, encoded))


def _settle(future: "Future[Any]", response: Any) -> None:
    if not future.done():
        future.set_result(response)


def _fail(future: "Future[Any]", error: StatusError) -> None:
    if not future.done():
        future.set_exception(error)

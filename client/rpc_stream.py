"""Many requests in flight on one long-lived bidirectional gRPC stream, answers matched by ``request_id``.

A per-call gRPC round costs the broker more than the work of a batch; a stream pays it once, and a frame
carries every request that was ready to go (the broker answers in frames the same way), so the busier the
stream, the less each request pays. The stream lives on the client's I/O loop (``client/io_loop.py``): callers
hand requests over and get futures back, never blocking, so a callback may send again. Flow control: at most
``window`` requests are outstanding on a stream; more wait in the client, in order, until answers free room.
A request not answered within its timeout fails with DEADLINE_EXCEEDED. When the stream breaks, every
outstanding request fails with the stream's status (UNAVAILABLE when the broker went away) and the next call
opens a new stream: callers retry as they would a failed unary call.
"""

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import grpc

from client.grpc_errors import StatusError
from client.io_loop import IoLoop
from common.encoded_fields import repeated_message_field

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 64
UNLIMITED = 1 << 30
FRAME_REQUESTS_FIELD = 1
MAX_FRAME_REQUESTS = 64
MAX_FRAME_RECORD_BYTES = 4 * 1024 * 1024
REAP_INTERVAL_S = 0.1

Encoded = tuple[bytes, ...]


class _Pending:
    """A request waiting for its answer; ``sent``: it left in a frame, so it holds a place in the window."""

    __slots__ = ("deadline", "future", "sent")

    def __init__(self, future: "Future[Any]", deadline: float) -> None:
        self.future = future
        self.deadline = deadline
        self.sent = False


class _Stream:
    """One open stream, used only on the I/O loop: requests not yet sent, requests waiting for answers, the task
    that writes frames and the one that reads answers."""

    def __init__(self, call: Any, window: int | None) -> None:
        self.call = call  # a grpc.aio StreamStreamCall
        self.window = window or UNLIMITED
        self.pending: dict[int, _Pending] = {}
        self.unsent: deque[tuple[int, Encoded]] = deque()
        self.in_flight = 0  # sent and neither answered nor expired
        self.broken: StatusError | None = None
        self.wake = asyncio.Event()
        self.writer = asyncio.ensure_future(self._write())
        self.reader = asyncio.ensure_future(self._read())

    def submit(self, request_id: int, encoded: Encoded, future: "Future[Any]", deadline: float) -> None:
        if self.broken is not None:
            _fail(future, self.broken)
            return
        self.pending[request_id] = _Pending(future, deadline)
        self.unsent.append((request_id, encoded))
        self.wake.set()

    def _next_frame(self) -> list[Encoded]:
        """Requests that go together: in order, while the window has room and the frame is not full."""
        frame: list[Encoded] = []
        size = 0
        while self.unsent and self.in_flight < self.window and len(frame) < MAX_FRAME_REQUESTS \
                and size < MAX_FRAME_RECORD_BYTES:
            request_id, encoded = self.unsent.popleft()
            entry = self.pending.get(request_id)
            if entry is None:  # it expired while waiting: it is not sent
                continue
            entry.sent = True
            self.in_flight += 1
            frame.append(encoded)
            size += _size(encoded)
        return frame

    async def _write(self) -> None:
        try:
            while True:
                await self.wake.wait()
                self.wake.clear()
                while frame := self._next_frame():
                    await self.call.write(repeated_message_field(FRAME_REQUESTS_FIELD, frame))
        except asyncio.CancelledError:
            pass
        except grpc.RpcError as exc:  # the reader sees the stream's end and says why
            log.debug("stream_write_failed code=%s", exc.code())
        except Exception as exc:  # e.g. writing after the call ended: fail what waits
            self.fail_all(StatusError(grpc.StatusCode.UNAVAILABLE, f"the stream failed: {exc!r}"))

    async def _read(self) -> None:
        try:
            async for answers in self.call:
                for response in answers.responses:
                    entry = self.pending.pop(response.request_id, None)
                    if entry is not None:  # None: it timed out, was failed and freed its place already
                        self.in_flight -= 1
                        _settle(entry.future, response)
                if self.unsent:
                    self.wake.set()
            error = StatusError(grpc.StatusCode.UNAVAILABLE, "the broker closed the stream")
        except asyncio.CancelledError:
            error = StatusError(grpc.StatusCode.CANCELLED, "the client is closed")
        except grpc.RpcError as exc:
            error = StatusError(exc.code(), exc.details() or str(exc))
        self.fail_all(error)

    def fail_all(self, error: StatusError) -> None:
        if self.broken is None:
            self.broken = error
        failed = list(self.pending.values())
        self.pending.clear()
        self.unsent.clear()
        self.writer.cancel()
        for entry in failed:
            _fail(entry.future, error)

    def expire(self, now: float) -> None:
        late = [rid for rid, entry in self.pending.items() if entry.deadline <= now]
        for rid in late:  # a late answer frees nothing: the window does not shrink for good
            entry = self.pending.pop(rid)
            self.in_flight -= entry.sent
            _fail(entry.future, StatusError(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer on the stream in time"))
        if late and self.unsent:
            self.wake.set()

    def close(self) -> None:
        self.call.cancel()
        self.reader.cancel()
        self.fail_all(StatusError(grpc.StatusCode.CANCELLED, "the client is closed"))


class RpcStream:
    """``call(request, timeout_s, tail)`` sends ``request`` on the stream (setting its ``request_id``) and returns
    a future of its answer. ``open_call`` (run on ``io``) opens the stream: a ``grpc.aio`` stream-stream call that
    takes encoded frames (bytes; field 1: the requests) and yields decoded answer frames (``responses``)."""

    def __init__(self, io: IoLoop, open_call: Callable[[], Any], name: str,
                 window: int | None = DEFAULT_WINDOW) -> None:
        """``window=None``: no limit (pulls: a parked long-polling pull holds its place, and a push consumer parks
        one a queue)."""
        self._io = io
        self._open_call = open_call
        self._name = name
        self._window = window
        self._ids = itertools.count(1)
        self._stream: _Stream | None = None  # used on the I/O loop only
        self._closed = False
        self._reaping = False

    def call(self, request: Any, timeout_s: float, tail: Sequence[bytes] = ()) -> "Future[Any]":
        """``tail``: fields of the request already encoded (``common/encoded_fields.py``), e.g. a send's
        records, so they are copied once, into the frame."""
        future: Future[Any] = Future()
        request_id = next(self._ids)
        request.request_id = request_id
        encoded = (request.SerializeToString(), *tail)
        if not self._closed:
            try:
                self._io.call_soon(self._submit, request_id, encoded, future, time.monotonic() + timeout_s)
                return future
            except RuntimeError:  # the I/O loop stopped: the client is closed
                pass
        _fail(future, StatusError(grpc.StatusCode.CANCELLED, "the client is closed"))
        return future

    def _submit(self, request_id: int, encoded: Encoded, future: "Future[Any]", deadline: float) -> None:
        if self._closed:
            _fail(future, StatusError(grpc.StatusCode.CANCELLED, "the client is closed"))
            return
        stream = self._stream
        if stream is None or stream.broken is not None:
            try:
                stream = self._stream = _Stream(self._open_call(), self._window)
            except Exception as exc:  # e.g. a bad address: this request fails, the next tries again
                _fail(future, StatusError(grpc.StatusCode.UNAVAILABLE, f"{self._name}: cannot open: {exc!r}"))
                return
            if not self._reaping:
                self._reaping = True
                self._io.loop.call_later(REAP_INTERVAL_S, self._reap)
        stream.submit(request_id, encoded, future, deadline)

    def _reap(self) -> None:
        if self._closed:
            return
        if self._stream is not None:
            self._stream.expire(time.monotonic())
        self._io.loop.call_later(REAP_INTERVAL_S, self._reap)

    def close(self) -> None:
        self._closed = True
        if self._io.in_loop():
            self._close_stream()
            return
        with contextlib.suppress(RuntimeError):  # the I/O loop stopped already
            self._io.call_soon(self._close_stream)

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()


def _size(encoded: Sequence[bytes]) -> int:
    return sum(map(len, encoded))


def _settle(future: "Future[Any]", response: Any) -> None:
    if not future.done():
        future.set_result(response)


def _fail(future: "Future[Any]", error: StatusError) -> None:
    if not future.done():
        future.set_exception(error)

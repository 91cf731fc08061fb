"""Answering many requests on one bidirectional stream. Requests come in frames (those the client had ready
together) and answers leave in frames (those ready together): per-message gRPC work is paid per frame, and the
busier the stream, the fuller the frames. Each request gets one answer carrying its ``request_id``; what a
request's handler raises becomes that request's answer, never the stream's end (other requests are in flight on
it):

- ``Refusal``: its code and remark;
- ``RequestError`` (a malformed request): INVALID_PARAMETER with what was wrong;
- anything else: logged with its traceback, SYSTEM_ERROR naming the exception.

A message that does not parse at all has no request id to answer: it ends the stream with INVALID_ARGUMENT
(through the RPC boundary, ``common/rpc_boundary.py``). Answer frames leave encoded (``RequestDecoding`` lets
bytes through a stream's response serializer), so big fields are copied once.

A stream takes no more requests while it owes its client too much (:class:`_Backlog`): then HTTP/2's flow control
holds back a client that sends without reading its answers, instead of the broker buffering them without end.
A request taken long ago that is about to build a big answer (a long-polling pull woken by an arrival) first
reserves room for it (:func:`reserve_answer_bytes`): hundreds of pulls parked on one queue, woken together,
would otherwise each build a full answer at once.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any

from google.protobuf.message import Message

from common.encoded_fields import repeated_message_field
from common.refusal import Refusal
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.rpc_boundary import CodedResponseClass, UndecodableRequest
from common.storage_refusal import disk_full_refusal, is_disk_full

log = logging.getLogger(__name__)

# An answer: the response, or the response and more of its fields already encoded (common/encoded_fields.py:
# a pull's records, copied once, into the frame).
Answer = Message | tuple[Message, Sequence[bytes]]
Handler = Callable[[Any], Awaitable[Answer]]
Settle = Callable[[Any], Awaitable[None] | None]  # None: nothing to wait for, the answer goes at once
Encoded = tuple[bytes, ...]
Queued = tuple[Encoded, int]  # an answer and its bytes, waiting to leave
ANSWERS_FIELD = 1  # responses, in every answer frame


MAX_ANSWERS_PER_FRAME = 256
MAX_FRAME_BYTES = 16 * 1024 * 1024  # what one answer frame carries (each answer is below 4 MiB)
# What one stream may owe its client before it takes no more requests: requests taken and not yet answered on the
# wire (long-polling pulls included: a push consumer parks one a queue), and bytes of answers ready and not yet
# written. A client that sent pulls and never read the answers grew a broker by 100 MB/s without them.
MAX_PENDING_ANSWERS = 4096
MAX_BUFFERED_BYTES = 64 * 1024 * 1024
SPAWNS_BEFORE_YIELD = 32  # the reader lets the requests it spawned run (and count their answers) this often


class _Backlog:
    def __init__(self) -> None:
        self.pending = 0
        self.buffered = 0
        self.reserved = 0  # bytes of answers being built by requests that reserved room (reserve_answer_bytes)
        self._room = asyncio.Event()

    def full(self) -> bool:
        return self.pending >= MAX_PENDING_ANSWERS or self.buffered + self.reserved >= MAX_BUFFERED_BYTES

    def fits(self, size: int) -> bool:
        owed = self.buffered + self.reserved
        return owed == 0 or owed + size <= MAX_BUFFERED_BYTES  # (owing nothing, any one answer fits)

    async def reserve(self, size: int, timeout_s: float) -> bool:
        """Until ``size`` more bytes fit, then counted as reserved; False if they did not within the timeout."""
        if not self.fits(size):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while not self.fits(size):
                left = deadline - loop.time()
                if left <= 0:
                    return False
                self._room.clear()
                try:
                    await asyncio.wait_for(self._room.wait(), left)
                except TimeoutError:
                    return False
        self.reserved += size
        return True

    def release(self, size: int) -> None:
        self.reserved -= size
        self._room.set()

    async def room(self) -> None:
        """Until the stream owes little enough to take a request."""
        while self.full():
            self._room.clear()
            await self._room.wait()

    def written(self, answers: int, size: int) -> None:
        self.pending -= answers
        self.buffered -= size
        self._room.set()


# The stream a request's handler runs for (its reader sets it; the tasks it spawns inherit it), and what the
# request reserved on it (set in the request's own task).
_STREAM_BACKLOG: ContextVar[_Backlog | None] = ContextVar("stream_backlog", default=None)
_RESERVED: ContextVar[int] = ContextVar("stream_answer_reserved", default=0)


async def reserve_answer_bytes(size: int, timeout_s: float) -> bool:
    """For a handler about to build an answer of up to ``size`` bytes long after its request was taken (a woken
    long-polling pull): until its stream has room for it (the bytes it owes its client, answers built and being
    built, stay under ``MAX_BUFFERED_BYTES``). False if no room came within the timeout. Held until the answer is
    given or :func:`release_answer_bytes`; one reservation a request. Outside a stream: True at once."""
    backlog = _STREAM_BACKLOG.get()
    if backlog is None:
        return True
    release_answer_bytes()
    if not await backlog.reserve(size, timeout_s):
        return False
    _RESERVED.set(size)
    return True


def release_answer_bytes() -> None:
    """Give back what this request reserved (it found nothing and parks again)."""
    size = _RESERVED.get()
    if size:
        _RESERVED.set(0)
        backlog = _STREAM_BACKLOG.get()
        if backlog is not None:
            backlog.release(size)


async def answer_frames(frames: AsyncIterator[Any], handle: Handler, response_class: CodedResponseClass, *,
                        in_order: bool, rpc: str, settle: Settle | None = None) -> AsyncIterator[bytes]:
    """Encoded answer frames (field 1: the responses) for request ``frames`` (messages with ``requests``).
    ``in_order``: each request is handled to its end before the next one (sends: a stream's batches are appended
    in the order they were sent); otherwise each is handled in its own task (pulls: one that long-polls holds up
    no other). ``settle(response)``: called as soon as a request is handled, and what it returns (unless None)
    awaited before the answer leaves (a SYNC_MASTER's send: its replication); it may change the response's code.
    In order, that wait runs in a task of its own, so the next request goes on."""
    answers: asyncio.Queue[Queued | BaseException | None] = asyncio.Queue()
    tasks: set[asyncio.Task[None]] = set()
    backlog = _Backlog()

    def give(answer: Encoded) -> None:
        size = sum(map(len, answer))  # once: the backlog and the frame's bound both count it
        backlog.buffered += size
        answers.put_nowait((answer, size))

    def spawn(work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def answer(request: Any) -> None:
        try:
            response, tail = await _respond(request, handle, response_class, rpc)
            pending = settle(response) if settle is not None else None
            if pending is None:
                give(_encode(request, response, tail))
            else:
                await settled(request, response, tail, pending)
        finally:
            release_answer_bytes()  # (given: its bytes count as buffered now)

    async def settled(request: Any, response: Message, tail: Sequence[bytes], pending: Awaitable[None]) -> None:
        try:
            await pending
        except Exception as exc:  # the request was handled: say what failed after
            log.error("rpc_failed rpc=%s request_id=%d error=%s", rpc, request.request_id, type(exc).__name__,
                      exc_info=exc)
            response = response_class(code=ResponseCode.SYSTEM_ERROR, remark=f"{rpc} failed: {exc!r}")
        give(_encode(request, response, tail))

    async def read() -> None:
        _STREAM_BACKLOG.set(backlog)  # this task's context, copied into each task it spawns
        spawned = 0
        try:
            async for frame in frames:
                if isinstance(frame, UndecodableRequest):
                    raise RequestError(f"a frame does not parse: {frame.reason}")
                for request in frame.requests:
                    if backlog.full():  # (checked first: most requests do not wait, and an await costs)
                        await backlog.room()
                    backlog.pending += 1
                    if not in_order:
                        spawn(answer(request))  # settled in the same task
                        spawned += 1
                        if spawned % SPAWNS_BEFORE_YIELD == 0:  # their answers count before more are taken
                            await asyncio.sleep(0)
                    elif settle is None:
                        await answer(request)
                    else:
                        response, tail = await _respond(request, handle, response_class, rpc)
                        pending = settle(response)  # settle sees it now
                        if pending is None:
                            give(_encode(request, response, tail))
                        else:
                            spawn(settled(request, response, tail, pending))
            if tasks:
                await asyncio.gather(*tasks)
            answers.put_nowait(None)
        except BaseException as exc:  # the stream itself failed (or was cancelled): end the answers with it
            answers.put_nowait(exc)

    reader = asyncio.ensure_future(read())
    try:
        ended = False
        while not ended:
            ready, size, ended, failure = _take_ready(await answers.get(), answers)
            if ready:  # answers given before the stream failed still go out
                yield repeated_message_field(ANSWERS_FIELD, ready)
                backlog.written(len(ready), size)
            if failure is not None:
                raise failure
    finally:
        reader.cancel()
        for task in list(tasks):
            task.cancel()


def _take_ready(first: Queued | BaseException | None, answers: "asyncio.Queue[Queued | BaseException | None]",
                ) -> tuple[list[Encoded], int, bool, BaseException | None]:
    """``first`` and the answers queued behind it, up to a frame's worth, and their bytes; whether the last answer
    was given (None is queued once every request was answered); and the stream's failure if it came next."""
    ready: list[Encoded] = []
    size = 0
    item = first
    while True:
        if isinstance(item, BaseException):
            return ready, size, True, item
        if item is None:
            return ready, size, True, None
        ready.append(item[0])
        size += item[1]
        if answers.empty() or len(ready) >= MAX_ANSWERS_PER_FRAME or size >= MAX_FRAME_BYTES:
            return ready, size, False, None
        item = answers.get_nowait()


async def _respond(request: Any, handle: Handler, response_class: CodedResponseClass,
                   rpc: str) -> tuple[Message, Sequence[bytes]]:
    """The response to ``request`` (what its handler raised, answered), and any fields already encoded."""
    tail: Sequence[bytes] = ()
    try:
        answer = await handle(request)
        response, tail = answer if isinstance(answer, tuple) else (answer, ())
    except Refusal as exc:
        response = response_class(code=exc.code, remark=exc.remark)
    except RequestError as exc:
        response = response_class(code=ResponseCode.INVALID_PARAMETER, remark=str(exc))
    except Exception as exc:
        if is_disk_full(exc):  # not a bug: one line, as at the RPC boundary
            log.error("rpc_refused_disk_full rpc=%s request_id=%d error=%r", rpc, request.request_id, exc)
            refusal = disk_full_refusal(exc)
            response = response_class(code=refusal.code, remark=refusal.remark)
        else:
            log.error("rpc_failed rpc=%s request_id=%d error=%s", rpc, request.request_id, type(exc).__name__,
                      exc_info=exc)
            response = response_class(code=ResponseCode.SYSTEM_ERROR,
                                      remark=f"{rpc} failed: {type(exc).__name__}: {exc}")
    return response, tail


def _encode(request: Any, response: Message, tail: Sequence[bytes]) -> Encoded:
    """The encoded answer: the response with the request's id, then any encoded fields."""
    response.request_id = request.request_id  # type: ignore[attr-defined]
    return (response.SerializeToString(), *tail)

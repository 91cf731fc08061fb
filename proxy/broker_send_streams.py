"""The brokers' send streams, driven from the proxy's event loop: the ``grpc.aio`` twin of the SDK's
``client/rpc_stream.py``, with the same frames and rules.

One long-lived ``SendMessageStream`` per broker address, opened on first use and again after it breaks. A send
is queued and the writer puts every send that is ready into one frame (at most :data:`MAX_FRAME_REQUESTS`, and
at most ``window`` sends unanswered); answers are matched by ``request_id``. A send not answered within its
timeout fails with DEADLINE_EXCEEDED; when the stream breaks, every unanswered send fails with the stream's
status (UNAVAILABLE when the broker went away), as a failed unary call would, and the producer retries it.
A broken stream, and one to an address no route names any more that has been idle a while, is closed by a periodic
sweep (``sweep_periodically``), which closes such addresses' channels too. Everything here runs on the loop's
thread."""

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence

import grpc

from client.grpc_errors import StatusError
from client.rpc_stream import DEFAULT_WINDOW, FRAME_REQUESTS_FIELD, MAX_FRAME_RECORD_BYTES, MAX_FRAME_REQUESTS
from common.acl import inner_metadata
from common.encoded_fields import repeated_message_field
from proto import broker_pb2
from proxy.broker_channels import CHANNEL_IDLE_S, BrokerChannels

log = logging.getLogger(__name__)

SEND_STREAM_METHOD = "/rmq.BrokerService/SendMessageStream"
REAP_INTERVAL_S = 0.1
SWEEP_INTERVAL_S = 60.0  # how often streams and channels to addresses no route names are looked for

Answer = asyncio.Future[broker_pb2.SendMessageResponse]


class _SendStream:
    """One open stream: the sends waiting to be written, those waiting for answers, its writer and reader."""

    def __init__(self, channel: grpc.aio.Channel, addr: str, window: int) -> None:
        self.addr = addr
        self.window = window
        self.outgoing: deque[tuple[int, tuple[bytes, ...]]] = deque()  # (request id, the request's pieces)
        self.pending: dict[int, tuple[Answer, float]] = {}
        self.ready = asyncio.Event()  # outgoing has sends, or the stream is closing
        self.broken: StatusError | None = None
        self.last_sent = time.monotonic()
        self.call = channel.stream_stream(SEND_STREAM_METHOD, request_serializer=None,
                                          response_deserializer=broker_pb2.SendStreamAnswers.FromString)(
            None, metadata=inner_metadata())  # no request iterator: frames are written as they are ready
        self.writer = asyncio.create_task(self._write(), name=f"send-stream-writer-{addr}")
        self.reader = asyncio.create_task(self._read(), name=f"send-stream-reader-{addr}")

    def send(self, request_id: int, encoded: tuple[bytes, ...], answer: Answer, deadline: float) -> None:
        self.last_sent = time.monotonic()
        self.pending[request_id] = (answer, deadline)
        self.outgoing.append((request_id, encoded))
        self.ready.set()

    async def _write(self) -> None:
        """Frames of what is ready; ends when the stream breaks (whatever ended it fails what is pending)."""
        ended = StatusError(grpc.StatusCode.UNAVAILABLE, "the send stream's writer ended")
        try:
            while self.broken is None:
                await self.ready.wait()
                self.ready.clear()
                while self.outgoing and self.broken is None:
                    room = min(MAX_FRAME_REQUESTS, self.window - self._written_unanswered())
                    if room <= 0:
                        break  # the reader sets ready when answers free room
                    frame: list[tuple[bytes, ...]] = []
                    size = 0
                    while self.outgoing and len(frame) < room and size < MAX_FRAME_RECORD_BYTES:
                        request_id, encoded = self.outgoing.popleft()
                        if request_id in self.pending:  # not failed by its deadline while it waited
                            frame.append(encoded)
                            size += sum(map(len, encoded))
                    if frame:
                        await self.call.write(repeated_message_field(FRAME_REQUESTS_FIELD, frame))
        except grpc.RpcError as exc:
            log.debug("send_stream_write_failed addr=%s code=%s", self.addr, exc.code())
        except asyncio.InvalidStateError:  # the call ended under us (closed, or the broker hung up)
            pass
        except asyncio.CancelledError:
            raise
        except Exception:  # the proxy's fault, not the broker's: not reported as a broker gone
            log.exception("send_stream_writer_failed addr=%s", self.addr)
            ended = StatusError(grpc.StatusCode.INTERNAL, "the proxy's send stream failed")
        finally:  # a writer that ended leaves the stream unusable: the next send opens another
            self.fail_all(ended)
            self.call.cancel()

    def _written_unanswered(self) -> int:
        """Sends written and not answered yet, which the window counts (a send that timed out before it was
        written is counted out early: the window may be passed by those few)."""
        return len(self.pending) - len(self.outgoing)

    async def _read(self) -> None:
        try:
            async for answers in self.call:
                for response in answers.responses:
                    entry = self.pending.pop(response.request_id, None)
                    if entry is not None and not entry[0].done():  # None: it timed out meanwhile
                        entry[0].set_result(response)
                if self.outgoing:
                    self.ready.set()  # room freed for sends that waited on the window
            error = StatusError(grpc.StatusCode.UNAVAILABLE, "the broker closed the stream")
        except grpc.RpcError as exc:
            error = StatusError(exc.code(), exc.details() or str(exc))
        except asyncio.CancelledError:
            error = StatusError(grpc.StatusCode.CANCELLED, "the proxy is closing")
        self.fail_all(error)

    def fail_all(self, error: StatusError) -> None:
        if self.broken is None:
            self.broken = error
        pending, self.pending = self.pending, {}
        self.outgoing.clear()
        self.ready.set()  # the writer sees the break and ends
        for answer, _ in pending.values():
            if not answer.done():
                answer.set_exception(error)

    def expire(self, now: float) -> None:
        late = [rid for rid, (_, deadline) in self.pending.items() if deadline <= now]
        for rid in late:
            answer, _ = self.pending.pop(rid)
            if not answer.done():
                answer.set_exception(StatusError(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer on the stream in time"))
        if late and self.outgoing:
            # not written yet (the broker stopped reading): not kept; and a late answer frees its place in the window
            self.outgoing = deque(item for item in self.outgoing if item[0] in self.pending)
            self.ready.set()

    async def close(self) -> None:
        self.fail_all(StatusError(grpc.StatusCode.CANCELLED, "the proxy is closing"))
        self.call.cancel()
        for task in (self.writer, self.reader):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class BrokerSendStreams:
    """``send(addr, request, tail, timeout_s)``: an asyncio future of the broker's answer. ``tail``: fields of the
    request already encoded (a send's records), copied once, into the frame."""

    def __init__(self, brokers: BrokerChannels, window: int = DEFAULT_WINDOW) -> None:
        self.brokers = brokers
        self._window = window
        self._ids = itertools.count(1)
        self._streams: dict[str, _SendStream] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False

    def send(self, addr: str, request: broker_pb2.SendMessageRequest, tail: Sequence[bytes],
             timeout_s: float) -> Answer:
        answer: Answer = asyncio.get_running_loop().create_future()
        if self._closed:  # not retryable: a producer's retry of a send failed by the close ends here
            answer.set_exception(StatusError(grpc.StatusCode.FAILED_PRECONDITION, "the proxy is closing"))
            return answer
        stream = self._streams.get(addr)
        if stream is None or stream.broken is not None:
            stream = self._streams[addr] = _SendStream(self.brokers.channel(addr), addr, self._window)
            if self._reaper is None:
                self._reaper = asyncio.create_task(self._reap(), name="send-stream-reaper")
        request.request_id = request_id = next(self._ids)
        stream.send(request_id, (request.SerializeToString(), *tail), answer, time.monotonic() + timeout_s)
        return answer

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            now = time.monotonic()
            for stream in list(self._streams.values()):
                stream.expire(now)

    async def drop_unused(self, keep: Collection[str], idle_s: float = CHANNEL_IDLE_S) -> list[str]:
        """Close the streams that broke (the next send opens another), and those to addresses not in ``keep`` that
        wait for no answer and took no send for ``idle_s``; then the channels to addresses not in ``keep`` that have
        no stream left (``BrokerChannels.drop_unused``). The addresses whose channel was closed."""
        now = time.monotonic()
        dropped = [addr for addr, stream in self._streams.items() if stream.broken is not None or (
            addr not in keep and not stream.pending and now - stream.last_sent >= idle_s)]
        streams = [self._streams.pop(addr) for addr in dropped]  # before any await: a send meanwhile opens another
        for stream in streams:
            await stream.close()
        return await self.brokers.drop_unused({*keep, *self._streams}, idle_s)

    async def sweep_periodically(self, live: Callable[[], Collection[str]], interval_s: float = SWEEP_INTERVAL_S,
                                 idle_s: float = CHANNEL_IDLE_S, also: Callable[[], object] = lambda: None) -> None:
        """Every ``interval_s``, :meth:`drop_unused` keeping the addresses ``live`` names (the routes' brokers):
        a broker restarted on another port, or gone, leaves no stream nor channel behind. ``also`` (blocking: run
        in a thread) sweeps the SDK's channels the same way. Runs until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                gone = await self.drop_unused(live(), idle_s)
                await asyncio.to_thread(also)
            except Exception:  # the next sweep tries again
                log.exception("broker_channels_sweep_failed")
                continue
            if gone:
                log.info("broker_channels_closed addrs=%s: no route names them, no call for %g s", ",".join(gone),
                         idle_s)

    async def close(self) -> None:
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            await stream.close()

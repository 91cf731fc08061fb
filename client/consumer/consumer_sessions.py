"""A consumer's sessions with the brokers of its topics (the client side of ``ConsumerSession``).

One stream per broker: the client sends a heartbeat at once and every ``heartbeat_interval_s`` (or when asked),
and receives the group's notices. A broken stream is reopened after a pause (the broker may be restarting); a
closed session half-closes its stream, which the broker takes as the client leaving its groups at once.
"""

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from client.client_instance import ClientInstance
from proto import consumer_pb2, consumer_pb2_grpc

log = logging.getLogger(__name__)

REOPEN_PAUSE_S = 1.0
REFUSED_LOG_S = 30.0  # reopens refused in a row are logged this often
_CLOSE = object()
_BEAT = object()

FrameSource = Callable[[], consumer_pb2.HeartbeatFrame]
NoticeHandler = Callable[[consumer_pb2.GroupNotice], None]
BrokenHandler = Callable[[str], None]  # told the broker's address when its session broke (not when closed)


def _ignore_broken(addr: str) -> None:
    pass


class BrokerSession:
    def __init__(self, client: ClientInstance, addr: str, frame: FrameSource, on_notice: NoticeHandler,
                 heartbeat_interval_s: float, on_broken: BrokenHandler = _ignore_broken) -> None:
        self.addr = addr
        self._on_broken = on_broken
        self._stub = client.stub(consumer_pb2_grpc.ConsumerServiceStub, addr)
        self._frame = frame
        self._on_notice = on_notice
        self._interval_s = heartbeat_interval_s
        self._signals: queue.Queue[object] = queue.Queue()
        self._closed = threading.Event()
        self._call: grpc.Future | None = None
        self._thread = threading.Thread(target=self._run, name=f"consumer-session-{addr}", daemon=True)
        self._thread.start()

    def beat_now(self) -> None:
        self._signals.put(_BEAT)

    def _frames(self, signals: "queue.Queue[object]") -> Iterator[consumer_pb2.HeartbeatFrame]:
        yield self._frame()
        while True:
            try:
                signal = signals.get(timeout=self._interval_s)
            except queue.Empty:
                signal = _BEAT
            if signal is _CLOSE:
                return
            yield self._frame()

    def _run(self) -> None:
        refused, logged_at = 0, 0.0  # reopens refused in a row; when the last of them was logged
        while not self._closed.is_set():
            call = self._stub.ConsumerSession(self._frames(self._signals))
            self._call = call
            opened_at = time.monotonic()
            try:
                for notice in call:
                    self._on_notice(notice)
            except grpc.RpcError as exc:
                if self._closed.is_set():
                    return
                now = time.monotonic()
                if now - opened_at >= REOPEN_PAUSE_S:  # a stream that lived: a session the broker held ended
                    refused = 0
                    log.warning("consumer_session_broken broker=%s status=%s detail=%s", self.addr, exc.code().name,
                                exc.details())
                    self._on_broken(self.addr)
                else:  # a reopen refused by a broker still down (routed until the name server drops it, minutes):
                    refused += 1  # tried every second still, logged every REFUSED_LOG_S (a line a second before)
                    if refused == 1 or now - logged_at >= REFUSED_LOG_S:
                        logged_at = now
                        log.warning("consumer_session_refused broker=%s status=%s detail=%s tries=%d", self.addr,
                                    exc.code().name, exc.details(), refused)
            if self._closed.wait(REOPEN_PAUSE_S):
                return
            self._signals.put(_CLOSE)  # ends the old stream's frames; the next stream reads a queue of its own
            self._signals = queue.Queue()

    def close(self) -> None:
        """Leave: half-close the stream (the broker unregisters the client) and stop."""
        self._closed.set()
        self._signals.put(_CLOSE)
        self._thread.join(timeout=2)
        call = self._call
        if call is not None and self._thread.is_alive():
            call.cancel()


class ConsumerSessions:
    """The sessions of one consumer, kept to the set of brokers its topics are on."""

    def __init__(self, client: ClientInstance, frame: FrameSource, on_notice: NoticeHandler,
                 heartbeat_interval_s: float, on_broken: BrokenHandler = _ignore_broken) -> None:
        self._client = client
        self._frame = frame
        self._on_notice = on_notice
        self._on_broken = on_broken
        self._interval_s = heartbeat_interval_s
        self._sessions: dict[str, BrokerSession] = {}
        self._lock = threading.Lock()
        self._closed = False

    def keep(self, addrs: set[str]) -> bool:
        """Open sessions to new brokers, close those to brokers no longer serving the topics; True if any
        opened (the new broker has not heard of this client before)."""
        with self._lock:
            if self._closed:
                return False
            gone = [s for a, s in self._sessions.items() if a not in addrs]
            for session in gone:
                del self._sessions[session.addr]
            new = [a for a in addrs if a not in self._sessions]
            for addr in new:
                self._sessions[addr] = BrokerSession(self._client, addr, self._frame, self._on_notice,
                                                     self._interval_s, self._on_broken)
        for session in gone:
            session.close()
        return bool(new)

    def beat_now(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.beat_now()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()

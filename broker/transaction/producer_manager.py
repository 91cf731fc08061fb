"""Producers' sessions with this broker (the broker side of ``ProducerSession``): who can be asked about a group's
transactions. Memory only, rebuilt from the producers' heartbeats, as upstream's ProducerManager.

A session is one client's stream (a RocketMQ 5 proxy opens one per client it serves). A check goes to one live
session of the half message's group, round robin, so a group's producers share the checks. A session whose stream
ended is gone at once; one silent for ``channelExpiredTimeout`` is ended at the next scan (its client reconnects).
The check service queues checks from its own thread onto the session's stream, on the broker's event loop.
"""

import asyncio
import itertools
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from broker.client.consumer_manager import monotonic_ms
from broker.processor.request_checks import checked_group
from common.acl import PUB, Caller, current_caller
from common.message_codec import CorruptRecordError, decode_record
from common.request_error import RequestError, require
from common.rpc_boundary import UndecodableRequest
from common.transaction_topic import HALF_TOPIC
from proto import transaction_pb2

log = logging.getLogger(__name__)

CLOSED = None  # queued when the session ends
MAX_GROUPS = 1024  # groups one heartbeat may name
CHECK_METHOD = "/rmq.TransactionService/ProducerSession"


def _check_topic(check: transaction_pb2.TransactionCheckRequest) -> str:
    """The topic of the message a check carries (its real topic); the half topic (Super only) if unreadable."""
    try:
        return decode_record(check.record, verify_crc=False).topic
    except CorruptRecordError:
        return HALF_TOPIC


@dataclass(eq=False, slots=True)
class ProducerSession:
    session_id: int
    addr: str
    loop: asyncio.AbstractEventLoop
    checks: "asyncio.Queue[transaction_pb2.TransactionCheckRequest | None]" = field(default_factory=asyncio.Queue)
    client_id: str = ""
    groups: frozenset[str] = frozenset()
    last_heartbeat_ms: int = 0
    caller: Caller | None = None  # who opened it (ACL on): checks go only to sessions whose user may Pub the topic

    def may_check(self, topic: str) -> bool:
        return self.caller is None or self.caller.may(topic, PUB, CHECK_METHOD)


class ProducerManager:
    def __init__(self, expiry_ms: int, clock: Callable[[], int] = monotonic_ms) -> None:
        self.expiry_ms = expiry_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[int, ProducerSession] = {}
        self._ids = itertools.count(1)
        self._turn = itertools.count()

    async def session(self, frames: AsyncIterator[transaction_pb2.ProducerHeartbeat],
                      peer: str) -> AsyncIterator[transaction_pb2.TransactionCheckRequest]:
        """Heartbeats in, checks out; the stream's end (either side) ends the producer's membership."""
        session = ProducerSession(next(self._ids), peer, asyncio.get_running_loop(), last_heartbeat_ms=self._clock(),
                                  caller=current_caller())
        with self._lock:
            self._sessions[session.session_id] = session
        reader = asyncio.create_task(self._read_heartbeats(frames, session))
        try:
            while (check := await session.checks.get()) is not CLOSED:
                yield check
            await reader  # a frame that did not parse: its RequestError ends the stream INVALID_ARGUMENT
        finally:
            reader.cancel()
            with self._lock:
                self._sessions.pop(session.session_id, None)
            if session.client_id:
                log.info("producer_left client=%s groups=%s addr=%s", session.client_id, ",".join(sorted(
                    session.groups)), session.addr)

    async def _read_heartbeats(self, frames: AsyncIterator[transaction_pb2.ProducerHeartbeat],
                               session: ProducerSession) -> None:
        try:
            async for frame in frames:
                if isinstance(frame, UndecodableRequest):
                    raise RequestError(f"a producer heartbeat does not parse: {frame.reason}")
                self.heartbeat(session, frame)
        finally:
            session.checks.put_nowait(CLOSED)

    def heartbeat(self, session: ProducerSession, frame: transaction_pb2.ProducerHeartbeat) -> None:
        require(bool(frame.client_id), "a producer heartbeat names no client id")
        require(len(frame.producer_groups) <= MAX_GROUPS, f"a producer heartbeat names more than {MAX_GROUPS} groups")
        groups = frozenset(checked_group(g, "producer") for g in frame.producer_groups)
        with self._lock:
            joined = groups - session.groups
            session.client_id = frame.client_id
            session.groups = groups
            session.last_heartbeat_ms = self._clock()
        if joined:
            log.info("producer_joined client=%s groups=%s addr=%s", frame.client_id, ",".join(sorted(joined)),
                     session.addr)

    def expire(self) -> None:
        """End the sessions silent for longer than the expiry (a client whose connection hangs half-open). Runs
        on the event loop."""
        now = self._clock()
        with self._lock:
            silent = [s for s in self._sessions.values() if now - s.last_heartbeat_ms > self.expiry_ms]
        for session in silent:
            log.warning("producer_expired client=%s idle_ms=%d", session.client_id, now - session.last_heartbeat_ms)
            session.checks.put_nowait(CLOSED)

    def client_ids(self, group: str) -> list[str]:
        with self._lock:
            return sorted({s.client_id for s in self._sessions.values() if group in s.groups})

    def sessions_of(self, group: str) -> list[tuple[str, str, int]]:
        """(client id, address, ms since its last heartbeat) of each live session of ``group``."""
        now = self._clock()
        with self._lock:
            return sorted((s.client_id, s.addr, now - s.last_heartbeat_ms) for s in self._sessions.values()
                          if group in s.groups)

    def send_check(self, group: str, check: transaction_pb2.TransactionCheckRequest) -> str | None:
        """Queue ``check`` for one live producer of ``group`` (any thread); its client id, or None when the group
        has no producer here. A check carries the whole message: with ACL on, only a session whose user may Pub
        its topic gets it (as upstream, a producer group is no resource: anyone may name any group)."""
        now = self._clock()
        with self._lock:
            live = [s for s in self._sessions.values()
                    if group in s.groups and now - s.last_heartbeat_ms <= self.expiry_ms]
        if any(s.caller is not None for s in live):  # outside the lock: decodes the message
            topic = _check_topic(check)
            live = [s for s in live if s.may_check(topic)]
        if not live:
            return None
        live.sort(key=lambda s: s.session_id)
        session = live[next(self._turn) % len(live)]
        try:
            session.loop.call_soon_threadsafe(session.checks.put_nowait, check)
        except RuntimeError:  # the loop closed: the broker is stopping
            return None
        return session.client_id

"""Clients' sessions with this broker and the notices they receive (the broker side of ``ConsumerSession``).

A session is one client's stream. Its heartbeats update the :class:`ConsumerManager`; when a group's members
change, every session with a member in that group gets an IDS_CHANGED notice, so members rebalance within a
round trip instead of at their next periodic pass. Runs on the broker's event loop: notices are queued with
``put_nowait`` from the loop's thread only. IDS_CHANGED says only "look again", so a session holds at most one per
group not yet sent, however often the group changes while its client does not read.
"""

import asyncio
import itertools
import logging
from collections.abc import Iterable

from broker.client.consumer_manager import ConsumerInfo, ConsumerManager
from broker.client.rebalance_lock_manager import RebalanceLockManager
from proto import consumer_pb2

log = logging.getLogger(__name__)

CLOSED = None  # queued when the session's request side ended
_IDS_CHANGED = object()  # queued when the first group of a batch of IDS_CHANGED notices became due


class Session:
    def __init__(self, session_id: int, addr: str) -> None:
        self.session_id = session_id
        self.addr = addr
        self.client_id = ""
        self._queue: asyncio.Queue[consumer_pb2.GroupNotice | object | None] = asyncio.Queue()
        self._ids_changed: dict[str, None] = {}  # groups owed an IDS_CHANGED notice, in order

    def put(self, notice: consumer_pb2.GroupNotice) -> None:
        if notice.kind != consumer_pb2.GroupNotice.IDS_CHANGED:
            self._queue.put_nowait(notice)
            return
        if not self._ids_changed:
            self._queue.put_nowait(_IDS_CHANGED)  # one wake-up for every group until they are taken
        self._ids_changed[notice.group] = None

    def end(self) -> None:
        """The request side ended: :meth:`next` returns CLOSED once what was queued before is taken."""
        self._queue.put_nowait(CLOSED)

    async def next(self) -> list[consumer_pb2.GroupNotice] | None:
        """The next notices to send; CLOSED (None) once the session ended."""
        item = await self._queue.get()
        if item is CLOSED:
            return CLOSED
        if item is _IDS_CHANGED:
            groups, self._ids_changed = self._ids_changed, {}
            return [consumer_pb2.GroupNotice(kind=consumer_pb2.GroupNotice.IDS_CHANGED, group=g) for g in groups]
        assert isinstance(item, consumer_pb2.GroupNotice)
        return [item]


def consumer_infos(frame: consumer_pb2.HeartbeatFrame) -> list[ConsumerInfo]:
    return [ConsumerInfo(group=c.group, consume_type=c.consume_type, message_model=c.message_model,
                         subscriptions=tuple((s.topic, s.expression) for s in c.subscriptions),
                         queues=tuple((q.topic, q.broker_name, q.queue_id) for q in c.queues), orderly=c.orderly)
            for c in frame.consumers]


class ConsumerSessions:
    def __init__(self, manager: ConsumerManager, locks: RebalanceLockManager) -> None:
        self.manager = manager
        self.locks = locks
        self._sessions: dict[int, Session] = {}
        self._ids = itertools.count(1)

    def open(self, addr: str) -> Session:
        session = Session(next(self._ids), addr)
        self._sessions[session.session_id] = session
        return session

    def heartbeat(self, session: Session, frame: consumer_pb2.HeartbeatFrame) -> None:
        session.client_id = frame.client_id
        before = self.manager.clients_of_session(session.session_id)
        changed = self.manager.heartbeat(session.session_id, frame.client_id, session.addr, consumer_infos(frame))
        for group, client_id in before - self.manager.clients_of_session(session.session_id):
            self.locks.release_client(group, client_id)
        self.notify_ids_changed(changed)

    def close(self, session: Session) -> None:
        self._sessions.pop(session.session_id, None)
        held = self.manager.clients_of_session(session.session_id)
        changed = self.manager.close_session(session.session_id)
        # Only a client that actually left frees its leases: one already re-registered on a newer session (its old
        # stream's end noticed late) still consumes its queues as locked; lease expiry remains the backstop.
        for group, client_id in held:
            if group not in changed:
                continue
            released = self.locks.release_client(group, client_id)
            if released:
                log.info("queue_locks_released group=%s client=%s queues=%d", group, client_id, released)
        self.notify_ids_changed(changed)

    def expire(self) -> None:
        changed = self.manager.scan_expired()
        self.notify_ids_changed(changed)

    def notify_ids_changed(self, groups: Iterable[str]) -> None:
        for group in groups:
            self.notify(consumer_pb2.GroupNotice(kind=consumer_pb2.GroupNotice.IDS_CHANGED, group=group))

    def notify(self, notice: consumer_pb2.GroupNotice) -> None:
        for session_id in self.manager.sessions_of(notice.group):
            session = self._sessions.get(session_id)
            if session is not None:
                session.put(notice)

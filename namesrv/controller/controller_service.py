"""The controller's asyncio side: broker sessions, pushes, and the liveness scan around a ReplicasInfoManager.

A session is one ControllerSession stream. Each heartbeat is answered with the group's assignment, and every
change of a group's assignment is pushed to each open session of that group the moment it is decided (the
manager's listener). Manager calls run in worker threads: a decision fsyncs the store, which must not stall
the name server's event loop.

Ordering: a heartbeat's answer is computed in a thread and queued when the thread returns, so a push decided
meanwhile may be queued before it. A session therefore never sends an assignment older (by version) than the
one it sent last; it sends that newer one again instead.

A stream that ends is the replica gone (its process died, or it hung up), except while the service stops: a
name server that restarts must not elect a new master because its own streams closed.
"""

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from common.request_error import RequestError
from namesrv.controller.replica_models import Assignment, Heartbeat, SyncStateData
from namesrv.controller.replicas_info_manager import ReplicasInfoManager, check_heartbeat

log = logging.getLogger(__name__)

SCAN_INTERVAL_S = 0.5
CLOSED: Final = None  # the end of a session's outgoing queue


@dataclass(eq=False, slots=True)
class _Session:
    id: int
    # (assignment, the heartbeat seq it answers or 0 for a push); CLOSED ends the session
    queue: asyncio.Queue[tuple[Assignment, int] | None] = field(default_factory=asyncio.Queue)
    key: tuple[str, int] | None = None  # (broker name, broker id), from its first heartbeat
    closed: bool = False


class ControllerService:
    def __init__(self, manager: ReplicasInfoManager, scan_interval_s: float = SCAN_INTERVAL_S) -> None:
        self.manager = manager
        self.scan_interval_s = scan_interval_s
        self._sessions: dict[str, set[_Session]] = {}  # broker name -> open sessions (touched on the loop only)
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._stopping = False

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.manager.add_listener(self._on_change)
        self._scan_task = asyncio.create_task(self._scan_loop(), name="controller-scan")

    async def stop(self) -> None:
        """Stop scanning and end every session (their replicas are not counted as gone); call before the gRPC
        server stops, so that it need not wait out its grace period for streams that never end by themselves."""
        self._stopping = True
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
        for sessions in list(self._sessions.values()):
            for session in list(sessions):
                session.queue.put_nowait(CLOSED)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # ---- sessions ---------------------------------------------------------------------------------------------

    async def session(self, heartbeats: AsyncIterator[Heartbeat]) -> AsyncIterator[tuple[Assignment, int]]:
        """Heartbeats in, (assignment, the heartbeat's seq or 0 for a push) out, until either side ends the
        stream."""
        if self._stopping:  # a broker reconnecting while the name server stops: end at once, it will try again
            return
        session = _Session(next(self._ids))
        reader = asyncio.create_task(self._read(heartbeats, session), name=f"controller-session-{session.id}")
        try:
            last: Assignment | None = None
            while (item := await session.queue.get()) is not CLOSED:
                assignment, heartbeat_seq = item
                if last is not None and assignment.version < last.version:
                    assignment = last  # an answer computed before a push that overtook it
                last = assignment
                yield assignment, heartbeat_seq
            error = reader.exception() if reader.done() and not reader.cancelled() else None
            if error is not None:
                raise error  # a bad heartbeat ends the stream with its error (INVALID_ARGUMENT, ...)
        finally:
            reader.cancel()
            self._close(session)

    async def _read(self, heartbeats: AsyncIterator[Heartbeat], session: _Session) -> None:
        try:
            async for hb in heartbeats:
                check_heartbeat(hb)
                key = (hb.broker_name, hb.broker_id)
                if session.key is None:
                    # Registered before the first decision, so no push made meanwhile can miss this session.
                    session.key = key
                    self._sessions.setdefault(hb.broker_name, set()).add(session)
                    log.info("controller_session_opened broker=%s id=%d addr=%s session=%d", hb.broker_name,
                             hb.broker_id, hb.broker_addr, session.id)
                elif key != session.key:
                    raise RequestError(f"a session speaks for one replica: {session.key[0]}/{session.key[1]}, "
                                       f"not {hb.broker_name}/{hb.broker_id}")
                answer = await asyncio.to_thread(self.manager.heartbeat, hb, session.id)
                session.queue.put_nowait((answer, hb.seq))
        finally:
            session.queue.put_nowait(CLOSED)
            self._close(session)

    def _close(self, session: _Session) -> None:
        """Idempotent: both the reader and the writer of a session end it, whichever notices first."""
        if session.closed:
            return
        session.closed = True
        if session.key is None:
            return
        name, broker_id = session.key
        group = self._sessions.get(name)
        if group is not None:
            group.discard(session)
            if not group:
                del self._sessions[name]
        log.info("controller_session_closed broker=%s id=%d session=%d stopping=%s", name, broker_id, session.id,
                 self._stopping)
        if not self._stopping:
            self._spawn(asyncio.to_thread(self.manager.session_ended, name, broker_id, session.id),
                        f"session-ended-{name}-{broker_id}")

    def _on_change(self, assignment: Assignment) -> None:
        """The manager's listener: runs in whichever thread decided, under the manager's lock."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
            loop.call_soon_threadsafe(self._push, assignment)

    def _push(self, assignment: Assignment) -> None:
        for session in self._sessions.get(assignment.broker_name, ()):
            session.queue.put_nowait((assignment, 0))

    def open_sessions(self) -> dict[str, list[int]]:
        """Broker name -> the broker ids with an open session (for tests and runtime info)."""
        return {name: sorted(s.key[1] for s in sessions if s.key) for name, sessions in self._sessions.items()}

    # ---- requests ---------------------------------------------------------------------------------------------

    async def alter_sync_state_set(self, broker_name: str, master_id: int, master_epoch: int,
                                   sync_state_set_epoch: int, new_sync_state_set: Iterable[int]) -> Assignment:
        return await asyncio.to_thread(self.manager.alter_sync_state_set, broker_name, master_id, master_epoch,
                                       sync_state_set_epoch, list(new_sync_state_set))

    async def elect_master(self, broker_name: str, broker_id: int) -> Assignment:
        return await asyncio.to_thread(self.manager.elect_master, broker_name, broker_id)

    async def get_sync_state_data(self, broker_name: str) -> SyncStateData:
        return await asyncio.to_thread(self.manager.get_sync_state_data, broker_name)

    # ---- background -------------------------------------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``work`` to the end even if the stream that asked for it is cancelled."""
        task = asyncio.create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # The scan retries the election of a master whose session end could not be persisted.
            log.error("controller_task_failed task=%s", task.get_name(), exc_info=task.exception())

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            try:
                await asyncio.to_thread(self.manager.scan)
            except Exception:  # one failed scan must not end failover for the life of the process
                log.exception("controller_scan_failed")

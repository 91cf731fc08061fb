"""Controller mode: this broker's session with the controller (``controllerAddr``), and its lease.

A heartbeat goes out at once and every ``HEARTBEAT_INTERVAL_S``; the controller answers each with the group's
assignment and pushes changes as they happen. The lease: an answer to heartbeat n proves the controller heard from
this broker no earlier than when n was sent, so the controller will not elect another master before that moment
plus the heartbeat timeout. The lease ends a margin before that (clocks run at slightly different rates), and a
master whose lease ended acknowledges nothing (``HAService.lease_valid``) and takes no writes.

One controller: the session reconnects to it, never to another. Controllers are not replicated: another one
has decisions of its own (or none), and a replica that moved to it would let it elect a second master while the
first one's lease still holds (``controllerAddr`` with several addresses is refused at start).
"""

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from common import tls
from common.acl import inner_metadata
from proto import controller_pb2, controller_pb2_grpc

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 1.0
RECONNECT_PAUSE_S = 0.5
BROKEN_REMINDER_S = 30.0  # how often a session broken for a while is said again (one line, not one per attempt)
RPC_TIMEOUT_S = 5.0


def lease_margin_ms(timeout_ms: int) -> int:
    return max(timeout_ms // 10, 200)


class ControllerLink:
    def __init__(self, controller_addrs: list[str], heartbeat: Callable[[], controller_pb2.BrokerHeartbeat],
                 on_assignment: Callable[[controller_pb2.ReplicaAssignment], Awaitable[None]],
                 timeout_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        if len(controller_addrs) != 1:
            raise ValueError(f"controllerAddr: one controller, got {len(controller_addrs)} addresses (controllers "
                             "are not replicated)")
        self.controller_addr = controller_addrs[0]
        self.heartbeat = heartbeat
        self.on_assignment = on_assignment
        self.timeout_ms = timeout_ms
        self.clock = clock
        self._lease_until = 0.0
        self._sent: dict[int, float] = {}  # heartbeat seq -> when it was sent (until answered)
        self._seq = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None
        self._call: grpc.aio.StreamStreamCall | None = None
        self._ended = False  # hung up for good (a replica restarting itself)
        self._broken_since: float | None = None  # monotonic: when the session broke (None: it is up)
        self._reminded = 0.0
        self._attempts = 0  # sessions tried since it broke
        self._kick = asyncio.Event()

    # -- the lease ---------------------------------------------------------------------------------
    def lease_valid(self) -> bool:
        return self.clock() < self._lease_until

    def lease_remaining_s(self) -> float:
        return self._lease_until - self.clock()

    def _renew(self, seq: int) -> None:
        sent = self._sent.pop(seq, None)
        if sent is None:
            return
        for older in [s for s in self._sent if s < seq]:
            del self._sent[older]  # answered out of order or lost with a stream: never renew from them
        self._lease_until = max(self._lease_until, sent + (self.timeout_ms - lease_margin_ms(self.timeout_ms)) / 1000)

    # -- the session -------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="controller-link")

    def heartbeat_now(self) -> None:
        """Send a heartbeat without waiting for the interval (the broker's state changed)."""
        self._kick.set()

    def end_session(self) -> None:
        """Hang up now and never call again (a deposed master restarting itself): the stream's end tells the
        controller at once that this replica is gone, so it is not elected while it cannot serve. Heartbeats kept
        up until the process exits would let it be, and shrink the in-sync set to a replica on its way down."""
        self._ended = True
        self._lease_until = 0.0
        if self._call is not None:
            self._call.cancel()

    async def _run(self) -> None:
        while not self._ended:
            try:
                await self._session()
            except grpc.aio.AioRpcError as exc:
                if not self._ended:
                    self._broken(exc)
            except asyncio.CancelledError:
                if self._ended:
                    return  # our own hang-up
                raise
            self._sent.clear()
            await asyncio.sleep(RECONNECT_PAUSE_S)

    def _broken(self, exc: grpc.aio.AioRpcError) -> None:
        """Said once when the session breaks, then every BROKEN_REMINDER_S while it stays broken (it is tried
        again every RECONNECT_PAUSE_S: a line each filled the log while the controller was down)."""
        now = time.monotonic()
        self._attempts += 1
        if self._broken_since is None:
            self._broken_since = self._reminded = now
            log.warning("controller_session_broken controller=%s status=%s detail=%s", self.controller_addr,
                        exc.code().name, exc.details())
        elif now - self._reminded >= BROKEN_REMINDER_S:
            self._reminded = now
            log.warning("controller_session_still_broken controller=%s for_s=%.0f attempts=%d status=%s detail=%s",
                        self.controller_addr, now - self._broken_since, self._attempts, exc.code().name,
                        exc.details())

    def _stub(self) -> controller_pb2_grpc.ControllerServiceStub:
        if self._channel is None:
            self._channel = tls.aio_channel(self.controller_addr)
        return controller_pb2_grpc.ControllerServiceStub(self._channel)

    async def _heartbeats(self) -> AsyncIterator[controller_pb2.BrokerHeartbeat]:
        while True:
            beat = self.heartbeat()
            beat.seq = next(self._seq)
            beat.heartbeat_timeout_ms = self.timeout_ms
            self._sent[beat.seq] = self.clock()
            yield beat
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), HEARTBEAT_INTERVAL_S)

    async def _session(self) -> None:
        call = self._call = self._stub().ControllerSession(self._heartbeats(), metadata=inner_metadata())
        async for assignment in call:
            if self._ended:
                return  # an answer that was on its way: a replica restarting itself takes no lease nor role
            if self._broken_since is not None:
                log.warning("controller_session_restored controller=%s after_s=%.1f attempts=%d",
                            self.controller_addr, time.monotonic() - self._broken_since, self._attempts)
                self._broken_since, self._attempts = None, 0
            if assignment.heartbeat_seq:
                self._renew(assignment.heartbeat_seq)
            try:
                await self.on_assignment(assignment)
            except Exception:  # a failed role change (a full disk, a broken invariant) must not end the session
                log.exception("assignment_failed broker=%s master_id=%d epoch=%d", assignment.broker_name,
                              assignment.master_id, assignment.master_epoch)

    async def alter_sync_state_set(self, request: controller_pb2.AlterSyncStateSetRequest
                                   ) -> controller_pb2.ReplicaAssignment:
        return await self._stub().AlterSyncStateSet(request, timeout=RPC_TIMEOUT_S, metadata=inner_metadata())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # closing: how it ended does not matter
                await self._task
        if self._channel is not None:
            await self._channel.close(None)

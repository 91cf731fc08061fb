"""Controller mode: this broker's session with the controller (``controllerAddr``), and its lease.

A heartbeat goes out at once and every ``HEARTBEAT_INTERVAL_S``; the controller answers each with the group's
assignment and pushes changes as they happen. The lease: an answer to heartbeat n proves the controller heard from
this broker no earlier than when n was sent, so the controller will not elect another master before that moment
plus the heartbeat timeout. The lease ends a margin before that (clocks run at slightly different rates), and a
master whose lease ended acknowledges nothing (``HAService.lease_valid``) and takes no writes.

Several controller addresses may be given: the session moves to the next one when one is unreachable.
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
RPC_TIMEOUT_S = 5.0


def lease_margin_ms(timeout_ms: int) -> int:
    return max(timeout_ms // 10, 200)


class ControllerLink:
    def __init__(self, controller_addrs: list[str], heartbeat: Callable[[], controller_pb2.BrokerHeartbeat],
                 on_assignment: Callable[[controller_pb2.ReplicaAssignment], Awaitable[None]],
                 timeout_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        assert controller_addrs, "controller mode needs controllerAddr"
        self.controller_addrs = controller_addrs
        self.heartbeat = heartbeat
        self.on_assignment = on_assignment
        self.timeout_ms = timeout_ms
        self.clock = clock
        self._lease_until = 0.0
        self._sent: dict[int, float] = {}  # heartbeat seq -> when it was sent (until answered)
        self._seq = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._current = 0
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

    async def _run(self) -> None:
        while True:
            addr = self.controller_addrs[self._current % len(self.controller_addrs)]
            try:
                await self._session(addr)
            except grpc.aio.AioRpcError as exc:
                log.warning("controller_session_broken controller=%s status=%s detail=%s", addr, exc.code().name,
                            exc.details())
                self._current += 1
            except asyncio.CancelledError:
                raise
            self._sent.clear()
            await asyncio.sleep(RECONNECT_PAUSE_S)

    def _channel(self, addr: str) -> grpc.aio.Channel:
        channel = self._channels.get(addr)
        if channel is None:
            channel = self._channels[addr] = tls.aio_channel(addr)
        return channel

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

    async def _session(self, addr: str) -> None:
        stub = controller_pb2_grpc.ControllerServiceStub(self._channel(addr))
        call = stub.ControllerSession(self._heartbeats(), metadata=inner_metadata())
        async for assignment in call:
            if assignment.heartbeat_seq:
                self._renew(assignment.heartbeat_seq)
            try:
                await self.on_assignment(assignment)
            except Exception:  # a failed role change (a full disk, a broken invariant) must not end the session
                log.exception("assignment_failed broker=%s master_id=%d epoch=%d", assignment.broker_name,
                              assignment.master_id, assignment.master_epoch)

    async def alter_sync_state_set(self, request: controller_pb2.AlterSyncStateSetRequest
                                   ) -> controller_pb2.ReplicaAssignment:
        addr = self.controller_addrs[self._current % len(self.controller_addrs)]
        stub = controller_pb2_grpc.ControllerServiceStub(self._channel(addr))
        return await stub.AlterSyncStateSet(request, timeout=RPC_TIMEOUT_S, metadata=inner_metadata())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # closing: how it ended does not matter
                await self._task
        for channel in self._channels.values():
            await channel.close(None)

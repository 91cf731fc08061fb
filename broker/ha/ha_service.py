"""The master's side of replication: one stream per slave carries the commitlog's bytes from where the slave's
commitlog ends; the slaves' acks (what they made durable) move the replicated offset.

SYNC_MASTER: the commitlog's confirm offset never passes the replicated offset (reput, hence pulls, KV applies and
tiered uploads see only replicated data), and a send is acknowledged once its bytes are replicated. No thread waits
for an ack: a send awaits a future that the ack resolves. With no slave connected a send fails at once
(SLAVE_NOT_AVAILABLE); a slave too slow for ``syncFlushTimeout`` fails it with FLUSH_SLAVE_TIMEOUT (the message is
stored and is delivered once the slave has it). Runs on the broker's event loop.
"""

import asyncio
import heapq
import itertools
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

from broker.ha.broker_role import BrokerRole
from broker.store.commit_log import CommitLog
from common.refusal import Refusal
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.rpc_boundary import UndecodableRequest
from proto import ha_pb2

log = logging.getLogger(__name__)

FRAME_BYTES = 1024 * 1024  # large frames: catch-up speed is bytes per round of the event loop
HEARTBEAT_S = 5.0  # an empty frame when nothing was appended, so a silent link is noticed
EXPIRY_CHECK_S = 0.1  # how often sends waiting for their slaves are checked for their timeout


@dataclass(frozen=True, slots=True)
class GroupIdentity:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    mapped_file_size: int


class HAService:
    def __init__(self, role: BrokerRole, identity: GroupIdentity, commit_log: CommitLog,
                 loop: asyncio.AbstractEventLoop, slave_timeout_s: float = 3.0) -> None:
        self.role = role
        self.slave_timeout_s = slave_timeout_s  # syncFlushTimeout: how long a send waits for its slaves
        self.identity = identity
        self.commit_log = commit_log
        self._loop = loop
        self._acks: dict[int, int] = {}  # connected slave id -> offset it acknowledged
        self._waiters: list[tuple[int, int, asyncio.Future[int]]] = []  # (offset, seq, future), a heap
        self._deadlines: deque[tuple[float, asyncio.Future[int]]] = deque()  # in the order the waits began
        self._expiry: asyncio.TimerHandle | None = None
        self._loop_thread = threading.get_ident()
        self._seq = itertools.count()
        self._appended: set[asyncio.Event] = set()  # one per slave stream, set by every append
        commit_log.replication_gated = role is BrokerRole.SYNC_MASTER
        commit_log.add_append_listener(self._on_append)
        commit_log.add_confirm_listener(self._on_append)  # slaves learn a new confirm offset at once

    # -- the send path ----------------------------------------------------------------------------
    def acknowledged(self, response: Any) -> Awaitable[None]:
        """Call right after a write was stored (``response`` has ``code`` and ``remark``): what it returns
        completes once the slaves have the commitlog up to its end now (at or past the write's own end), and turns
        a SUCCESS into SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT when they do not. At once for an ASYNC_MASTER."""
        return self._acknowledged(response, self.commit_log.max_offset())

    async def _acknowledged(self, response: Any, end: int) -> None:
        if response.code != ResponseCode.SUCCESS:
            return
        code = await self.wait_replicated(end, self.slave_timeout_s)
        if code != ResponseCode.SUCCESS:
            response.code = code
            response.remark = ("no slave is connected: stored on the master only" if code ==
                               ResponseCode.SLAVE_NOT_AVAILABLE else "the slave did not confirm in time: stored on "
                               "the master")

    async def wait_replicated(self, offset: int, timeout_s: float) -> int:
        """A response code for a send whose bytes end at ``offset``: SUCCESS once replicated (at once for an
        ASYNC_MASTER)."""
        if self.role is not BrokerRole.SYNC_MASTER or self.replicated_offset() >= offset:
            return ResponseCode.SUCCESS
        if not self._acks:
            return ResponseCode.SLAVE_NOT_AVAILABLE
        future: asyncio.Future[int] = self._loop.create_future()
        heapq.heappush(self._waiters, (offset, next(self._seq), future))
        self._deadlines.append((self._loop.time() + timeout_s, future))
        if self._expiry is None:
            self._expiry = self._loop.call_later(EXPIRY_CHECK_S, self._expire)
        return await future

    def _expire(self) -> None:
        """Fail the waits older than their timeout (one timer for all of them, not one per send)."""
        now, deadlines = self._loop.time(), self._deadlines
        while deadlines and (deadlines[0][0] <= now or deadlines[0][1].done()):
            future = deadlines.popleft()[1]
            if not future.done():
                future.set_result(ResponseCode.FLUSH_SLAVE_TIMEOUT)
        self._expiry = self._loop.call_later(EXPIRY_CHECK_S, self._expire) if deadlines else None

    def slave_acks(self) -> dict[int, int]:
        return dict(self._acks)

    def replicated_offset(self) -> int:
        """What every connected slave has (the in-sync set is the connected slaves)."""
        return min(self._acks.values()) if self._acks else 0

    def _on_ack(self, slave_id: int, offset: int) -> None:
        if offset <= self._acks.get(slave_id, -1):
            return
        self._acks[slave_id] = offset
        self._settle()

    def _settle(self) -> None:
        """Move the replicated offset to what every connected slave has, and answer the sends below it."""
        if not self._acks:
            return
        replicated = self.replicated_offset()
        self.commit_log.set_replicated_offset(replicated)
        while self._waiters and self._waiters[0][0] <= replicated:
            future = heapq.heappop(self._waiters)[2]
            if not future.done():
                future.set_result(ResponseCode.SUCCESS)

    def _on_append(self, _end: int) -> None:
        """From whichever thread appended (ASYNC_FLUSH: the loop's own; a SYNC_FLUSH put: a worker thread)."""
        if threading.get_ident() == self._loop_thread:
            self._wake_streams()
        else:
            self._loop.call_soon_threadsafe(self._wake_streams)

    def _wake_streams(self) -> None:
        for event in self._appended:
            event.set()

    # -- a slave's stream -------------------------------------------------------------------------
    async def replicate(self, frames: AsyncIterator[ha_pb2.ReplicaFrame]) -> AsyncIterator[ha_pb2.ReplicationFrame]:
        first = await anext(frames, None)
        if isinstance(first, UndecodableRequest):
            raise RequestError(f"a replica's frame does not parse: {first.reason}")
        if first is None or not first.HasField("handshake"):
            raise RequestError("a replica's first frame is its handshake")
        hello = first.handshake
        self._check(hello)
        slave_id = hello.broker_id
        acks = asyncio.create_task(self._read_acks(frames, slave_id))
        appended = asyncio.Event()
        self._appended.add(appended)
        self._acks[slave_id] = hello.commit_log_end
        log.info("slave_connected broker=%s slave_id=%d from_offset=%d", hello.broker_name, slave_id,
                 hello.commit_log_end)
        try:
            yield ha_pb2.ReplicationFrame(offset=hello.commit_log_end, confirm_offset=self.commit_log.confirm_offset,
                                          master_addr=self.identity.broker_addr)
            position, told = hello.commit_log_end, -1
            while not acks.done():
                data = self.commit_log.read_replica(position, FRAME_BYTES)
                confirm = self.commit_log.confirm_offset
                if data or confirm != told:  # new bytes, or only a new confirm offset (the slave shows up to it)
                    yield ha_pb2.ReplicationFrame(offset=position, data=bytes(data), confirm_offset=confirm)
                    position, told = position + len(data), confirm
                    continue
                appended.clear()
                if self.commit_log.read_replica(position, 1) or self.commit_log.confirm_offset != told:
                    continue  # changed between the read and the clear
                try:
                    await asyncio.wait_for(appended.wait(), HEARTBEAT_S)
                except TimeoutError:
                    yield ha_pb2.ReplicationFrame(offset=position, confirm_offset=told)
        finally:
            acks.cancel()
            self._appended.discard(appended)
            self._acks.pop(slave_id, None)
            self._settle()  # the slaves left may have everything a send waits for
            log.warning("slave_disconnected broker=%s slave_id=%d", hello.broker_name, slave_id)

    def _check(self, hello: ha_pb2.ReplicaHandshake) -> None:
        """A replica of this group, with segments like ours, whose commitlog ends within ours (FAILED_PRECONDITION
        naming what is wrong otherwise: a stranger never reads the log)."""
        me = self.identity
        if (hello.cluster_name, hello.broker_name) != (me.cluster_name, me.broker_name):
            _refuse(f"replica {hello.cluster_name}/{hello.broker_name} is not of group "
                    f"{me.cluster_name}/{me.broker_name}")
        if hello.broker_id <= 0 or hello.broker_id == me.broker_id:
            _refuse(f"replica id {hello.broker_id} is not a slave's (1 or more, not the master's)")
        if hello.mapped_file_size != me.mapped_file_size:
            _refuse(f"replica segments of {hello.mapped_file_size} bytes, the master's are {me.mapped_file_size} "
                    "(mappedFileSizeCommitLog must match)")
        if hello.broker_id in self._acks:
            _refuse(f"replica {hello.broker_id} is already connected")
        low, end = self.commit_log.min_offset(), self.commit_log.max_offset()
        if not low <= hello.commit_log_end <= end:
            _refuse(f"replica commitlog ends at {hello.commit_log_end}, outside the master's {low}..{end}")

    async def _read_acks(self, frames: AsyncIterator[ha_pb2.ReplicaFrame], slave_id: int) -> None:
        async for frame in frames:
            if isinstance(frame, UndecodableRequest):
                return
            self._on_ack(slave_id, frame.ack_offset)


def _refuse(why: str) -> None:
    raise Refusal(ResponseCode.NO_PERMISSION, why)

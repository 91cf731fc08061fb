"""The master's side of replication: one stream per slave carries the commitlog's bytes from where the slave's
commitlog ends; the slaves' acks (what they made durable) move the replicated offset.

SYNC_MASTER: the commitlog's confirm offset never passes the replicated offset (reput, hence pulls, KV applies and
tiered uploads see only replicated data), and a send is acknowledged once its bytes are replicated. No thread waits
for an ack: a send awaits a future that the ack resolves. With no slave connected a send fails at once
(SLAVE_NOT_AVAILABLE); a slave too slow for ``syncFlushTimeout`` fails it with FLUSH_SLAVE_TIMEOUT (the message is
stored and is delivered once the slave has it). Runs on the broker's event loop.

Controller mode (``epochs`` given): the slaves that count are the in-sync set's (``SyncStateSet``), whether
connected or not: a member away freezes the replicated offset until the controller accepts its removal. A set of
the master alone commits at once. Nothing is acknowledged while the controller's lease is not valid
(``lease_valid``), so a master cut off from the controller never acknowledges what a new master may lack. Frames
carry their epoch and never cross an epoch's start; a replica's handshake names its newest epoch and is told
where its log stops agreeing with the master's (the leader-epoch rule): it cuts its tail there.

An empty replica of a master whose older segments expired copies the log from the oldest segment left, after the
stores that only the expired records made (``broker/ha/state_copy.py``).
"""

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from broker.ha.broker_role import BrokerRole
from broker.ha.epoch_file import EpochEntry, EpochFile
from broker.ha.state_copy import CopiedStore, state_chunks
from broker.ha.sync_state_set import SetProposal, SyncStateSet
from broker.offset_waiters import OffsetWaiters
from broker.store.commit_log import CommitLog
from common.refusal import LEASE_ENDED_UNACKNOWLEDGED, Refusal
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.rpc_boundary import UndecodableRequest
from proto import ha_pb2

log = logging.getLogger(__name__)

FRAME_BYTES = 1024 * 1024  # large frames: catch-up speed is bytes per round of the event loop
HEARTBEAT_S = 5.0  # an empty frame when nothing was appended, so a silent link is noticed
NOT_JOINING_WARN_S = 10.0  # a replica still without the metadata copy this long is said once (replica_not_joining)


@dataclass(frozen=True, slots=True)
class GroupIdentity:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    mapped_file_size: int


class HAService:
    def __init__(self, role: BrokerRole, identity: GroupIdentity, commit_log: CommitLog,
                 loop: asyncio.AbstractEventLoop, slave_timeout_s: float = 3.0, epochs: EpochFile | None = None,
                 max_not_catchup_ms: int = 15000, in_sync_replicas: int = 0) -> None:
        self.role = role
        self.epochs = epochs  # controller mode
        # Static SYNC_MASTER: replicas (the master included) a send needs; 0: every connected one; 1: none waits.
        self.in_sync_replicas = in_sync_replicas
        self.master_epoch = 0  # controller mode: the epoch this broker is master at; 0 while it is not master
        self.sync_state_set = SyncStateSet(identity.broker_id, max_not_catchup_ms)
        self.lease_valid: Callable[[], bool] = lambda: True
        # The stores an empty replica copies when this broker's older segments expired (set by the broker).
        self.copied_stores: dict[str, CopiedStore] = {}
        self._member_acks: dict[int, int] = {}  # controller mode: the last ack of every slave, kept when it leaves
        self.slave_timeout_s = slave_timeout_s  # syncFlushTimeout: how long a send waits for its slaves
        self.identity = identity
        self.commit_log = commit_log
        self._loop = loop
        self._acks: dict[int, int] = {}  # connected slave id -> offset it acknowledged
        # connected slaves not yet holding a copy of this master's metadata -> when they connected (monotonic s)
        self._copying: dict[int, float] = {}
        self._not_joining_said: set[int] = set()
        self._waiters: OffsetWaiters[int] = OffsetWaiters(ResponseCode.FLUSH_SLAVE_TIMEOUT)  # sends, by their end
        self._loop_thread = threading.get_ident()
        self._appended: set[asyncio.Event] = set()  # one per slave stream, set by every append
        commit_log.replication_gated = self.waits_for_slaves() or epochs is not None
        commit_log.add_append_listener(self._on_append)
        commit_log.add_confirm_listener(self._on_append)  # slaves learn a new confirm offset at once

    # -- the send path ----------------------------------------------------------------------------
    def acknowledged(self, response: Any) -> Awaitable[None]:
        """Call right after a write was stored (``response`` has ``code`` and ``remark``): what it returns
        completes once the slaves have the commitlog up to its end now (at or past the write's own end), and turns
        a SUCCESS into SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT when they do not. At once for an ASYNC_MASTER."""
        return self._acknowledged(response, self.commit_log.max_offset())

    def must_wait(self, response: Any) -> bool:
        """Whether a write's answer waits in :meth:`acknowledged`; False: it goes as it is (an ASYNC_MASTER's, or a
        write that was not stored)."""
        return response.code == ResponseCode.SUCCESS and (self.waits_for_slaves() or not self.lease_valid())

    async def _acknowledged(self, response: Any, end: int) -> None:
        if response.code != ResponseCode.SUCCESS:
            return
        code = await self.wait_replicated(end, self.slave_timeout_s)
        if code != ResponseCode.SUCCESS:
            response.code = code
            response.remark = _NOT_REPLICATED[code]

    async def wait_replicated(self, offset: int, timeout_s: float) -> int:
        """A response code for a send whose bytes end at ``offset``: SUCCESS once replicated (at once for an
        ASYNC_MASTER)."""
        if not self.lease_valid():
            return ResponseCode.SERVICE_NOT_AVAILABLE
        if not self.waits_for_slaves() or self.replicated_offset() >= offset:
            return ResponseCode.SUCCESS
        if self.epochs is None and len(self._acks) < max(1, self.in_sync_replicas - 1):
            return ResponseCode.SLAVE_NOT_AVAILABLE
        return await self._waiters.add(offset, timeout_s)

    def slave_acks(self) -> dict[int, int]:
        return dict(self._acks)

    def waits_for_slaves(self) -> bool:
        """Whether a write is answered only once slaves have it (a SYNC_MASTER; controller mode: an in-sync set)."""
        if self.epochs is None:
            return self.role is BrokerRole.SYNC_MASTER and self.in_sync_replicas != 1
        return bool(self.sync_state_set.counted())

    def replicated_offset(self) -> int:
        """What every counted slave has: static mode, every connected one or, with ``inSyncReplicas`` = N, the N-1
        slaves furthest ahead; controller mode, the in-sync set's members."""
        if self.epochs is None:
            acks = sorted(self._acks.values(), reverse=True)
            needed = self.in_sync_replicas - 1 if self.in_sync_replicas > 0 else len(acks)
            return acks[needed - 1] if acks and 0 < needed <= len(acks) else 0
        counted = self.sync_state_set.counted()
        if not counted:
            return self.commit_log.max_offset()
        return min(self._member_acks.get(m, 0) for m in counted)

    def _on_ack(self, slave_id: int, offset: int) -> None:
        if offset <= self._acks.get(slave_id, -1):
            return
        self._acks[slave_id] = offset
        self._member_acks[slave_id] = offset
        self._settle()

    # -- controller mode ---------------------------------------------------------------------------
    def become_master(self, epoch: int, sync_state_set: list[int], set_epoch: int) -> None:
        """Serve slaves as the master of ``epoch`` (its entry is in the epoch file already)."""
        assert self.epochs is not None and epoch >= self.master_epoch, "master epochs never decrease"
        self.master_epoch = epoch
        self._member_acks.clear()
        self.accept_sync_state_set(sync_state_set, set_epoch)

    def accept_sync_state_set(self, ids: list[int], set_epoch: int) -> None:
        """The controller's set for this master: gate on it, and answer what it no longer waits for."""
        self.sync_state_set.accept(ids, set_epoch)
        self._on_set_changed()

    def _on_set_changed(self) -> None:
        self.commit_log.replication_gated = bool(self.sync_state_set.counted())
        self.commit_log.republish_confirm()  # an ungated confirm may move now
        self._settle()

    def check_sync_state_set(self, now_ms: int) -> SetProposal | None:
        """A change the controller should be asked for (the in-sync set's rules), or None."""
        start = self.epochs.epoch_at(self.commit_log.max_offset()) if self.epochs is not None else None
        proposal = self.sync_state_set.check(now_ms, dict(self._acks), self.commit_log.max_offset(),
                                             start.start_offset if start is not None else 0,
                                             self.commit_log.confirm_offset, frozenset(self._copying))
        self._say_not_joining()
        self._on_set_changed()  # a slave counted from now on, or one no longer
        return proposal

    def _say_not_joining(self) -> None:
        """Once per stream: a replica still without a copy of this master's metadata cannot join the in-sync set
        (so it cannot be elected); its own log says why its copies fail (slave_sync_failed)."""
        now = time.monotonic()
        for slave_id, since in self._copying.items():
            if now - since >= NOT_JOINING_WARN_S and slave_id not in self._not_joining_said:
                self._not_joining_said.add(slave_id)
                log.warning("replica_not_joining broker=%s slave_id=%d waited_s=%.0f reason=metadata_not_copied: "
                            "it has not copied this master's topics, mappings, groups and ACLs (see its "
                            "slave_sync_failed lines)", self.identity.broker_name, slave_id, now - since)

    def proposal_failed(self, now_ms: int, refused: bool) -> None:
        self.sync_state_set.proposal_failed(now_ms, refused)
        self._on_set_changed()

    def resettle(self) -> None:
        """The lease is valid again: answer what the acks that came meanwhile cover."""
        self._settle()

    def _settle(self) -> None:
        """Move the replicated offset to what every counted slave has, and answer the sends below it."""
        if self.epochs is not None:
            if not self.lease_valid():
                return  # fenced: acknowledge nothing
        elif not self._acks:
            return
        replicated = self.replicated_offset()
        self.commit_log.set_replicated_offset(replicated)
        self._waiters.settle(replicated, ResponseCode.SUCCESS)

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
        start, copy_state = self._start_of(hello)
        slave_id = hello.broker_id
        sent = [start]  # the end of what this stream carried: an ack past it is not about this stream's bytes
        acks = asyncio.create_task(self._read_acks(frames, slave_id, sent))
        appended = asyncio.Event()
        self._appended.add(appended)
        # Controller mode counts only what the replica said is durable (its flusher acks within a second); static
        # mode takes its end as acknowledged, as upstream does.
        initial = start if self.epochs is None else min(start, self._member_acks.get(slave_id, 0))
        self._acks[slave_id] = self._member_acks[slave_id] = initial
        if hello.reports_metadata_copy:
            self._copying[slave_id] = time.monotonic()
        log.info("slave_connected broker=%s slave_id=%d from_offset=%d slave_end=%d epoch=%d", hello.broker_name,
                 slave_id, start, hello.commit_log_end, self.master_epoch)
        try:
            yield self._welcome(start, copy_state)
            position, told = start, -1
            while not acks.done():
                if position < self.commit_log.min_offset():  # expired under a replica catching up: it never can
                    _refuse(f"replica {slave_id} needs the log from {position}, which expired here (the master's "
                            f"oldest record is at {self.commit_log.min_offset()}): an empty replica starts again at "
                            "it by itself; one holding records must be emptied")
                frame = self._frame_at(position)
                confirm = frame.confirm_offset
                if frame.data or confirm != told:  # new bytes, or only a new confirm offset (the slave shows up to it)
                    position, told = position + len(frame.data), confirm
                    sent[0] = position  # before the frame leaves: the slave's ack of it may be read before we resume
                    yield frame
                    continue
                appended.clear()
                if (self.commit_log.read_replica(position, 1, self._epoch_end(position))
                        or self.commit_log.confirm_offset != told):
                    continue  # changed between the read and the clear
                try:
                    await asyncio.wait_for(appended.wait(), HEARTBEAT_S)
                except TimeoutError:
                    yield ha_pb2.ReplicationFrame(offset=position, confirm_offset=told)
        finally:
            acks.cancel()
            self._appended.discard(appended)
            self._acks.pop(slave_id, None)
            self._copying.pop(slave_id, None)
            self._not_joining_said.discard(slave_id)
            self._settle()  # the slaves left may have everything a send waits for
            log.warning("slave_disconnected broker=%s slave_id=%d", hello.broker_name, slave_id)

    def _welcome(self, start: int, copy_state: bool) -> ha_pb2.ReplicationFrame:
        welcome = ha_pb2.ReplicationFrame(offset=start, confirm_offset=self.commit_log.confirm_offset,
                                          master_addr=self.identity.broker_addr, truncate_to=start,
                                          epoch=self.master_epoch, copy_state=copy_state,
                                          segment_size=self.commit_log.segment_size_at(start))
        if self.epochs is not None:
            welcome.epochs.extend(ha_pb2.EpochEntry(epoch=e.epoch, start_offset=e.start_offset)
                                  for e in self.epochs.entries())
        return welcome

    def _frame_at(self, position: int) -> ha_pb2.ReplicationFrame:
        """The bytes from ``position``: at most a frame's worth, within one segment and one epoch."""
        frame = ha_pb2.ReplicationFrame(offset=position)
        if self.epochs is not None:
            entry = self.epochs.epoch_at(position)
            if entry is not None:
                frame.epoch, frame.epoch_start_offset = entry.epoch, entry.start_offset
        # Read the confirm offset before the bytes: a frame never says more is confirmed than it carries.
        frame.confirm_offset = self.commit_log.confirm_offset
        frame.data = bytes(self.commit_log.read_replica(position, FRAME_BYTES, self._epoch_end(position)))
        if frame.data:
            frame.segment_size = self.commit_log.segment_size_at(position)
        return frame

    def _epoch_end(self, position: int) -> int | None:
        """Where the epoch holding ``position`` ends (a frame never crosses it); None for the current one."""
        if self.epochs is None:
            return None
        entry = self.epochs.epoch_at(position)
        return self.epochs.next_start_after(entry.epoch) if entry is not None else None

    def _start_of(self, hello: ha_pb2.ReplicaHandshake) -> tuple[int, bool]:
        """Where the replica's copy starts (see :meth:`_agreed_end`), and whether it copies this broker's state
        first: an empty replica of a master whose older segments expired starts at the oldest segment left, after
        a copy of the stores those segments' records made (``broker/ha/state_copy.py``)."""
        low = self.commit_log.min_offset()
        if hello.commit_log_end > 0 or low == 0:
            return self._agreed_end(hello), False
        if not hello.starts_anywhere:
            _refuse(f"replica {hello.broker_id} is empty and this master's log begins at {low} (its older segments "
                    "expired): a replica of an older release cannot start its log there; upgrade it")
        log.info("replica_copies_from_oldest_segment broker=%s slave_id=%d from_offset=%d stores=%s",
                 hello.broker_name, hello.broker_id, low, ",".join(self.copied_stores) or "none")
        return low, bool(self.copied_stores)

    async def copy_state(self, hello: ha_pb2.ReplicaHandshake) -> AsyncIterator[ha_pb2.StateChunk]:
        """The stores an empty replica copies (``CopyState``), each as of one moment, read on one thread of its
        own (a RocksDB iterator stays on the thread that made it)."""
        self._check_member(hello)
        log.info("state_copy_started broker=%s slave_id=%d stores=%s", hello.broker_name, hello.broker_id,
                 ",".join(self.copied_stores) or "none")
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(1, thread_name_prefix="state-copy") as reader:
            for name, store in self.copied_stores.items():
                chunks = await loop.run_in_executor(reader, state_chunks, name, store)
                while (chunk := await loop.run_in_executor(reader, next, chunks, None)) is not None:
                    yield chunk

    def _agreed_end(self, hello: ha_pb2.ReplicaHandshake) -> int:
        """Where the replica's log stops being this master's: its end (static mode), or by the leader-epoch rule
        the end of our newest epoch not newer than its newest (controller mode)."""
        if self.epochs is None:
            return hello.commit_log_end
        replica = [EpochEntry(e.epoch, e.start_offset) for e in hello.epochs]
        end = self.epochs.agreed_end(self.commit_log.max_offset(), replica, hello.commit_log_end)
        if end < self.commit_log.min_offset():
            _refuse(f"replica {hello.broker_id} agrees with this master only below {end}, before the master's "
                    f"oldest record at {self.commit_log.min_offset()}: empty its store to copy the log afresh")
        return end

    def _check(self, hello: ha_pb2.ReplicaHandshake) -> None:
        """A replica of this group (:meth:`_check_member`), not connected yet, whose commitlog ends within ours
        (static mode; in controller mode the replica's end may pass ours: a tail to cut)."""
        self._check_member(hello)
        if hello.broker_id in self._acks:
            _refuse(f"replica {hello.broker_id} is already connected")
        if self.epochs is not None:
            return
        low, end = self.commit_log.min_offset(), self.commit_log.max_offset()
        if 0 < hello.commit_log_end < low:
            _refuse(f"replica commitlog ends at {hello.commit_log_end}, before the master's oldest record at {low}: "
                    "empty its store to copy the log from there")
        if hello.commit_log_end > end:
            _refuse(f"replica commitlog ends at {hello.commit_log_end}, outside the master's {low}..{end}")

    def _check_member(self, hello: ha_pb2.ReplicaHandshake) -> None:
        """A replica of this group, with segments like ours (FAILED_PRECONDITION naming what is wrong otherwise: a
        stranger never reads the log or the state). Controller mode: this broker is the master of the epoch the
        replica was told."""
        me = self.identity
        if (hello.cluster_name, hello.broker_name) != (me.cluster_name, me.broker_name):
            _refuse(f"replica {hello.cluster_name}/{hello.broker_name} is not of group "
                    f"{me.cluster_name}/{me.broker_name}")
        if hello.broker_id <= 0 or hello.broker_id == me.broker_id:
            _refuse(f"replica id {hello.broker_id} is not a slave's (1 or more, not the master's)")
        if hello.mapped_file_size != me.mapped_file_size:
            _refuse(f"replica segments of {hello.mapped_file_size} bytes, the master's are {me.mapped_file_size} "
                    "(mappedFileSizeCommitLog must match)")
        if self.epochs is not None and (self.master_epoch == 0 or hello.master_epoch != self.master_epoch):
            _refuse(f"replica {hello.broker_id} follows master epoch {hello.master_epoch}; this broker is "
                    + (f"master at epoch {self.master_epoch}" if self.master_epoch else "not a master"))

    async def _read_acks(self, frames: AsyncIterator[ha_pb2.ReplicaFrame], slave_id: int, sent: list[int]) -> None:
        async for frame in frames:
            if isinstance(frame, UndecodableRequest):
                return
            if frame.metadata_copied:
                self._copying.pop(slave_id, None)
            if frame.ack_offset > sent[0]:
                log.warning("ack_ignored slave_id=%d ack=%d sent_to=%d reason=past_what_this_stream_sent", slave_id,
                            frame.ack_offset, sent[0])
                continue
            self._on_ack(slave_id, frame.ack_offset)


_NOT_REPLICATED: dict[int, str] = {
    ResponseCode.SLAVE_NOT_AVAILABLE: "no slave is connected: stored on the master only",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "the slave did not confirm in time: stored on the master",
    ResponseCode.SERVICE_NOT_AVAILABLE: f"this master's {LEASE_ENDED_UNACKNOWLEDGED}; send again",
}


def _refuse(why: str) -> None:
    raise Refusal(ResponseCode.NO_PERMISSION, why)

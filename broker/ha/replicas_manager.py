"""Controller mode: this replica does what the controller's assignment says (upstream's ReplicasManager).

A replica starts fenced (no writes) and stays so until the controller names a master:
- itself: it records the new epoch at its commitlog's end (epoch file, fsynced), lets dispatch reach that end,
  rebuilds the next queue offsets from the consume queues (the tail a slave copied was never appended here), starts
  what only a master runs (timer delivery, tiered upload), registers as broker id 0 and takes writes while its lease
  holds;
- another replica: it follows that master (cutting a divergent tail first) and registers under its own id;
- none: it waits, fenced.
A master told that another replica is master now restarts into a replica (``rejoin``): demotion is rare, and a
fresh start is the one path that is surely clean. It hangs up on the controller first, so that it is not elected
while it restarts. A master told that the group has no master (the controller took it for gone) is DEPOSED: fenced,
it keeps its session and waits, since it is likely the replica the controller elects next (then it goes on at the
new epoch in place); if another is elected, it restarts to follow it.
An assignment older than this replica's epoch file is ignored: that controller's record is behind what this replica
saw, so it is not the controller that decided for the group.
The master also keeps the in-sync set: it proposes changes to the controller and counts them as
``SyncStateSet`` says.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import grpc

from broker.ha.controller_link import ControllerLink
from broker.ha.epoch_file import EpochFile
from broker.ha.ha_service import HAService
from broker.store.message_store import MessageStore
from common.refusal import DEPOSED_MASTER, LEASE_LOST
from proto import controller_pb2

log = logging.getLogger(__name__)

SET_CHECK_INTERVAL_S = 1.0
PROMOTION_DISPATCH_TIMEOUT_S = 60.0


class RoleHooks(Protocol):
    """What the broker does when its role changes (implemented by the BrokerController)."""

    def fence(self, reason: str | None) -> None: ...  # None: take writes

    def follow(self, master_ha_addr: str, master_epoch: int) -> None: ...  # (re)start replicating from a master

    def stop_following(self) -> None: ...

    def start_master_services(self) -> None: ...

    def promoted(self) -> None: ...  # dispatch reached the copied log's end; nothing served as master yet

    def register_as(self, broker_id: int, master_epoch: int) -> None: ...

    def rejoin(self, why: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    election_priority: int


class ReplicasManager:
    def __init__(self, identity: ReplicaIdentity, store: MessageStore, ha: HAService, epochs: EpochFile,
                 controller_addrs: list[str], timeout_ms: int, hooks: RoleHooks,
                 ha_addr: Callable[[], str]) -> None:
        self.identity = identity
        self.store = store
        self.ha = ha
        self.epochs = epochs
        self.hooks = hooks
        self.ha_addr = ha_addr
        # FENCED | PROMOTING | MASTER | SLAVE | DEPOSED (a master told the group has none, waiting) | REJOINING (a
        # master told another is master, restarting)
        self.role = "FENCED"
        self.master_id = 0
        self.master_epoch = 0
        self.master_ha_addr = ""
        self.sync_state_set: list[int] = []  # as the controller last said
        self.link = ControllerLink(controller_addrs, self._heartbeat, self._on_assignment, timeout_ms)
        self._lease = ""  # a master's lease: "held", "lost" (said once in the log, as is its return), or not yet
        # A deposed master's renewed lease (its controller answered: someone else is master) must not count.
        ha.lease_valid = lambda: self.role == "MASTER" and self.link.lease_valid()
        self._changing = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._master_services_started = False
        self._ignored_epoch = 0  # the last assignment epoch logged as older than the epoch file

    def start(self) -> None:
        self.hooks.fence(f"replica {self.identity.broker_id} of {self.identity.broker_name} waits for the "
                         "controller to name the group's master")
        self.link.start()
        self._tasks.append(asyncio.create_task(self._keep_master(), name="replicas-manager"))

    def info(self) -> dict[str, str]:
        return {"replicaRole": self.role, "masterEpoch": str(self.master_epoch), "masterId": str(self.master_id),
                "syncStateSet": ",".join(str(i) for i in self.sync_state_set),
                "leaseRemainingMs": str(max(0, int(self.link.lease_remaining_s() * 1000)))}

    def _heartbeat(self) -> controller_pb2.BrokerHeartbeat:
        me, log_ = self.identity, self.store.commit_log
        return controller_pb2.BrokerHeartbeat(
            cluster_name=me.cluster_name, broker_name=me.broker_name, broker_id=me.broker_id,
            broker_addr=me.broker_addr, ha_addr=self.ha_addr(), master_epoch=self.epochs.last_epoch(),
            max_offset=log_.max_offset(), confirm_offset=log_.confirm_offset,
            election_priority=me.election_priority)

    # -- assignments -------------------------------------------------------------------------------
    async def _on_assignment(self, a: controller_pb2.ReplicaAssignment) -> None:
        async with self._changing:
            if self.role == "REJOINING" or self._is_old_news(a):
                return  # restarting anyway, or older news
            self.sync_state_set = sorted(a.sync_state_set)
            me = self.identity.broker_id
            if a.master_id == me:
                if self.role != "MASTER" or a.master_epoch != self.master_epoch:
                    await self._become_master(a)
                else:
                    self.ha.accept_sync_state_set(list(a.sync_state_set), a.sync_state_set_epoch)
                self._refresh_fence()
                return
            if self.role in ("MASTER", "DEPOSED"):
                if a.master_epoch > self.master_epoch:
                    self._step_down(a)
                return
            if a.master_id == 0:
                if (self.master_id, self.master_epoch) != (0, a.master_epoch):
                    self._log_no_master(a)
                self.master_id, self.master_epoch = 0, a.master_epoch
                return
            if (a.master_id, a.master_epoch, a.master_ha_addr) != (self.master_id, self.master_epoch,
                                                                  self.master_ha_addr):
                self._become_slave(a)

    def _is_old_news(self, a: controller_pb2.ReplicaAssignment) -> bool:
        """Older than an assignment acted on, or than this replica's epoch file: a controller whose record is behind
        (an old copy of its store) would have it follow a deposed master, or take an epoch it already holds."""
        if a.master_epoch < self.master_epoch:
            return True
        own = self.epochs.last_epoch()
        if a.master_epoch >= own:
            return False
        if self._ignored_epoch != a.master_epoch:  # the answer to every heartbeat: said once
            self._ignored_epoch = a.master_epoch
            log.warning("assignment_ignored broker=%s id=%d master_id=%d epoch=%d epoch_file_epoch=%d reason=%r",
                        self.identity.broker_name, self.identity.broker_id, a.master_id, a.master_epoch, own,
                        "the controller's record is older than this replica's epoch file: it did not decide the "
                        "group's last epochs")
        return True

    def _step_down(self, a: controller_pb2.ReplicaAssignment) -> None:
        """A master (or a deposed one) told of a newer epoch that does not name it."""
        if a.master_id != 0:
            self._rejoin(f"the controller moved the master to {a.master_id} at epoch {a.master_epoch}")
            return
        was = self.role
        self.role, self.master_id, self.master_epoch = "DEPOSED", 0, a.master_epoch
        # Fenced but still in the election: it holds everything it acknowledged and is most likely the best member
        # of the set. A restart now would leave the group to members that may be behind, or to nobody.
        self.hooks.fence(f"the controller says broker {self.identity.broker_name} has no master (epoch "
                         f"{a.master_epoch}): this replica waits to be elected again or to follow the new master")
        log.warning("role_changed role=DEPOSED broker=%s id=%d epoch=%d was=%s sync_state_set=%s",
                    self.identity.broker_name, self.identity.broker_id, a.master_epoch, was, sorted(a.sync_state_set))
        self.link.heartbeat_now()  # the controller elects on a heartbeat: tell it at once that this one is here

    def _rejoin(self, why: str) -> None:
        self.role = "REJOINING"
        self.hooks.fence(f"{DEPOSED_MASTER}: restarting as its replica")
        self.link.end_session()  # gone for the controller at once: not elected while it restarts
        self.hooks.rejoin(why)

    async def _become_master(self, a: controller_pb2.ReplicaAssignment) -> None:
        started = time.monotonic()
        was = self.role
        self.hooks.fence(f"becoming master at epoch {a.master_epoch}")
        if was == "SLAVE":
            await asyncio.to_thread(self.hooks.stop_following)
        commit_log = self.store.commit_log
        # Frames end anywhere: a log that ends inside a record would keep dispatch from its end for ever (and appends
        # would follow the torn bytes), and one inside an append would serve part of a batch nobody was told stored.
        end = await asyncio.to_thread(self.store.cut_partial_record)
        await asyncio.to_thread(self.epochs.assign, a.master_epoch, end)
        # PROMOTING, not MASTER yet: the fence stays up (and nothing is acknowledged) until appends can take
        # their queue offsets from complete consume queues.
        self.role, self.master_id, self.master_epoch = "PROMOTING", a.master_id, a.master_epoch
        self.ha.become_master(a.master_epoch, list(a.sync_state_set), a.sync_state_set_epoch)
        # Everything copied so far is this master's now: let dispatch reach it, then appends continue each
        # queue where its consume queue ends (a replica's own table never saw the copied records).
        while not await asyncio.to_thread(self.store.wait_dispatched, end, PROMOTION_DISPATCH_TIMEOUT_S):
            failed = self.store.running_flags.fail_stop_reason
            log.error("promotion_waits_for_dispatch end=%d dispatched=%d store_stopped=%s", end,
                      self.store.reput.reput_from_offset, failed)
            if failed is not None:  # a failed dispatch answers at once: wait as a slow one would, not in a loop
                await asyncio.sleep(PROMOTION_DISPATCH_TIMEOUT_S)
        commit_log.topic_queue_table = self.store.consume_queue_store.queue_max_offsets()
        await asyncio.to_thread(self.hooks.promoted)
        self.role = "MASTER"
        if not self._master_services_started:
            self._master_services_started = True
            self.hooks.start_master_services()
        self.hooks.register_as(0, a.master_epoch)
        log.warning("role_changed role=MASTER broker=%s id=%d epoch=%d epoch_start=%d was=%s took_ms=%d",
                    self.identity.broker_name, self.identity.broker_id, a.master_epoch, end, was,
                    (time.monotonic() - started) * 1000)

    def _become_slave(self, a: controller_pb2.ReplicaAssignment) -> None:
        self.role, self.master_id, self.master_epoch = "SLAVE", a.master_id, a.master_epoch
        self.master_ha_addr = a.master_ha_addr
        self.hooks.fence(f"broker {self.identity.broker_addr} is a slave of {a.master_addr} (master epoch "
                         f"{a.master_epoch}): write to the master")
        self.hooks.follow(a.master_ha_addr, a.master_epoch)
        self.hooks.register_as(self.identity.broker_id, a.master_epoch)
        log.warning("role_changed role=SLAVE broker=%s id=%d master_id=%d master=%s epoch=%d",
                    self.identity.broker_name, self.identity.broker_id, a.master_id, a.master_addr, a.master_epoch)

    def _log_no_master(self, a: controller_pb2.ReplicaAssignment) -> None:
        # A live replica that takes no writes says why: the controller elects only a member of the set.
        in_set = self.identity.broker_id in a.sync_state_set
        log.warning("group_has_no_master broker=%s id=%d epoch=%d sync_state_set=%s in_set=%s fenced_until=%r",
                    self.identity.broker_name, self.identity.broker_id, a.master_epoch, sorted(a.sync_state_set),
                    in_set, "this replica is elected" if in_set else "a member of the sync state set is back")

    def _refresh_fence(self) -> None:
        """A master takes writes exactly while its lease holds."""
        if self.role != "MASTER":
            self._lease = ""
            return
        if self.link.lease_valid():
            if self._lease == "lost":
                log.warning("lease_regained broker=%s id=%d epoch=%d writes=taken", self.identity.broker_name,
                            self.identity.broker_id, self.master_epoch)
            self._lease = "held"
            self.hooks.fence(None)
            self.ha.resettle()  # acks that came while the lease was out
        else:
            if self._lease == "held":  # once per loss (the fence is refreshed every second), not before the first
                self._lease = "lost"
                log.warning("lease_lost broker=%s id=%d epoch=%d writes=refused reason='the controller has not "
                            "answered in time (it may elect another master)'", self.identity.broker_name,
                            self.identity.broker_id, self.master_epoch)
            self.hooks.fence(f"master {self.identity.broker_addr} {LEASE_LOST}: the controller has not answered "
                             "in time (it may be electing another master)")

    # -- while master ------------------------------------------------------------------------------
    async def _keep_master(self) -> None:
        """Every second (and at once when the lease ends): the fence follows the lease, and the in-sync set
        follows the slaves."""
        while True:
            remaining = self.link.lease_remaining_s()
            await asyncio.sleep(min(SET_CHECK_INTERVAL_S, remaining) if remaining > 0 else SET_CHECK_INTERVAL_S)
            if self.role != "MASTER":
                continue
            self._refresh_fence()
            if not self.link.lease_valid():
                continue
            proposal = self.ha.check_sync_state_set(int(time.monotonic() * 1000))
            if proposal is not None:
                await self._propose(sorted(proposal.members | {self.identity.broker_id}), proposal.based_on_epoch)

    async def _propose(self, members: list[int], based_on: int) -> None:
        request = controller_pb2.AlterSyncStateSetRequest(
            broker_name=self.identity.broker_name, master_id=self.identity.broker_id, master_epoch=self.master_epoch,
            sync_state_set_epoch=based_on, new_sync_state_set=members)
        try:
            a = await self.link.alter_sync_state_set(request)
        except grpc.aio.AioRpcError as exc:
            refused = exc.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND,
                                     grpc.StatusCode.INVALID_ARGUMENT)
            log.warning("sync_state_set_not_changed proposed=%s refused=%s status=%s detail=%s", members, refused,
                        exc.code().name, exc.details())
            self.ha.proposal_failed(int(time.monotonic() * 1000), refused)
            return
        async with self._changing:
            if a.master_id == self.identity.broker_id and a.master_epoch == self.master_epoch:
                self.ha.accept_sync_state_set(list(a.sync_state_set), a.sync_state_set_epoch)
                self.sync_state_set = sorted(a.sync_state_set)
                log.info("sync_state_set_changed broker=%s set=%s set_epoch=%d", self.identity.broker_name,
                         sorted(a.sync_state_set), a.sync_state_set_epoch)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.link.close()

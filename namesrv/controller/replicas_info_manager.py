"""The controller's decisions (RocketMQ's ReplicasInfoManager): who is master of each broker group, at which
epoch, and which replicas are in sync.

Pure state behind one lock, no gRPC, no asyncio; ``clock`` is a monotonic millisecond clock (tests inject a fake
one). Every change of a group's ``GroupState`` is persisted through the store before the call returns, and a
change of what the replicas are told (the ``Assignment``) is then handed to every listener, still under the
lock, so listeners see the changes of a group in order. Listeners must not block or call back into the manager.

Rules (docs/en/controller/design.md, section 2 of the replication notes):
- a group's first heartbeating replica becomes its master at epoch 1 with the set {itself};
- a replica is alive while its session is open and it heartbeated within its own heartbeat_timeout_ms;
- a master that is gone (session ended, silent) is replaced by the best alive set member (any alive replica if
  unclean elections are on); with none, the group has no master, the epoch moves on and the set is kept, so the
  first set member back wins;
- an election bumps the master epoch and the set epoch and shrinks the set to the new master;
- a group one of whose replicas reported a master epoch newer than the group's here is decided elsewhere (another
  controller, or a newer copy of this store): this controller decides nothing more for it (no election, no set
  change), so that it never names a second master nor hands out an epoch a replica already holds;
- a scan that finds the previous one more than ``PAUSE_GAP_MS`` ago (this process stood still: SIGSTOP, a paused
  VM) gives every replica one timeout from then: the heartbeats sent meanwhile are queued, not missing. At most once
  a default heartbeat timeout: scans merely slow (a busy controller) must not keep a silent master alive for ever.
"""

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from common.request_error import require
from namesrv.controller.controller_store import ControllerStore
from namesrv.controller.elect_policy import elect
from namesrv.controller.replica_models import (
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    NO_MASTER,
    Assignment,
    GroupState,
    Heartbeat,
    ReplicaAddress,
    ReplicaLiveness,
    ReplicaView,
    SyncStateData,
)
from namesrv.route_info_manager import monotonic_ms

log = logging.getLogger(__name__)

Listener = Callable[[Assignment], None]

SESSION_ENDED = "session_ended"
SILENT = "silent"

# The service scans every half second: a gap three times that long means the controller did not run in between
# (shorter stalls leave every replica's last heartbeat well within its timeout).
PAUSE_GAP_MS = 1500


class ControllerRefusal(Exception):
    """The controller will not do what was asked in the group's current state (gRPC FAILED_PRECONDITION)."""


class ControllerNotFound(LookupError):
    """No such broker group, or no such replica in it (gRPC NOT_FOUND)."""

    def __str__(self) -> str:  # LookupError's str() would quote the message
        return str(self.args[0]) if self.args else ""


def check_heartbeat(hb: Heartbeat) -> None:
    """RequestError (INVALID_ARGUMENT) for a heartbeat no replica could have sent."""
    require(bool(hb.broker_name), "a heartbeat names no broker_name")
    require(hb.broker_id >= 1, f"a heartbeat's broker_id must be 1 or more, got {hb.broker_id}")
    require(bool(hb.broker_addr), "a heartbeat names no broker_addr")
    require(hb.heartbeat_timeout_ms >= 0, f"heartbeat_timeout_ms {hb.heartbeat_timeout_ms} is negative")


def _ids(ids: Iterable[int]) -> str:
    return "[" + ",".join(str(i) for i in sorted(ids)) + "]"


class ReplicasInfoManager:
    def __init__(self, store: ControllerStore, enable_elect_unclean_master: bool = False,
                 clock: Callable[[], int] = monotonic_ms) -> None:
        self.enable_elect_unclean_master = enable_elect_unclean_master
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._groups: dict[str, GroupState] = store.open()
        self._live: dict[str, dict[int, ReplicaLiveness]] = {}  # broker name -> broker id -> liveness
        self._versions: dict[str, int] = {}
        self._listeners: list[Listener] = []
        # Log lines of the decision being made, written once it is persisted (a failed write decided nothing).
        self._notes: list[tuple[int, str, tuple[object, ...]]] = []
        # Silence counts from here at the earliest: a master persisted by an earlier run gets one default timeout to
        # heartbeat before it counts as gone, and after this process stood still every replica gets one timeout.
        self._resumed_ms = clock()
        self._last_scan_ms: int | None = None
        self._pause_grace_ms: int | None = None  # when a pause's grace was last given
        self._stale_logged: dict[str, int] = {}  # broker name -> the newer epoch last logged for it

    def close(self) -> None:
        self._store.close()

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    @property
    def group_count(self) -> int:
        with self._lock:
            return len(self._groups)

    # ---- heartbeats and liveness ----------------------------------------------------------------------------

    def heartbeat(self, hb: Heartbeat, session_id: int = 0) -> Assignment:
        """Register or refresh the replica; returns the group's assignment (which may have just changed: a new
        group's first master, or a master elected for a group that had none)."""
        check_heartbeat(hb)
        now = self._clock()
        with self._lock:
            group = self._groups.get(hb.broker_name)
            if group is not None and hb.cluster_name and group.cluster_name and hb.cluster_name != group.cluster_name:
                raise ControllerRefusal(f"broker {hb.broker_name} belongs to cluster {group.cluster_name}, "
                                        f"not {hb.cluster_name}")
            old = self._live.get(hb.broker_name, {}).get(hb.broker_id)
            returning = not self._is_alive(old, now)
            if (session_id and old is not None and old.session_id == session_id and not old.session_open
                    and old.gone_reason == SESSION_ENDED and group is not None):
                return self._assignment(group)  # decided in a worker thread after its stream had already ended
            self._live.setdefault(hb.broker_name, {})[hb.broker_id] = ReplicaLiveness(
                session_open=True, last_heartbeat_ms=now,
                heartbeat_timeout_ms=hb.heartbeat_timeout_ms or DEFAULT_HEARTBEAT_TIMEOUT_MS,
                master_epoch=hb.master_epoch, max_offset=hb.max_offset, confirm_offset=hb.confirm_offset,
                election_priority=hb.election_priority, session_id=session_id)
            address = ReplicaAddress(hb.broker_addr, hb.ha_addr)
            if group is None or not group.replicas:
                # Past any epoch the broker has seen: a controller whose store was lost must not hand out an
                # epoch the replica's epoch file already holds (its data would look like the new master's).
                epoch = max(1, hb.master_epoch + 1)
                new = GroupState(hb.cluster_name, hb.broker_name, {hb.broker_id: address}, hb.broker_id, epoch,
                                 frozenset({hb.broker_id}), 1)
                self._log_elected(new, "new_group", [hb.broker_id])
                return self._commit(group, new)
            new = group
            if group.replicas.get(hb.broker_id) != address:
                new = replace(group, replicas={**group.replicas, hb.broker_id: address},
                              cluster_name=group.cluster_name or hb.cluster_name)
                self._note(logging.INFO, "controller_replica_registered broker=%s id=%d addr=%s ha_addr=%s new=%s",
                           hb.broker_name, hb.broker_id, hb.broker_addr, hb.ha_addr, hb.broker_id not in group.replicas)
            if new.master_id == NO_MASTER and not self._newer_epoch_reported(new):
                elected = self._elect(new, now, "no_master")
                if elected is None and returning:
                    self._log_not_electable(new, hb.broker_id)
                new = elected or new
            return self._commit(group, new)

    def session_ended(self, broker_name: str, broker_id: int, session_id: int = 0) -> None:
        """The replica's stream ended: it is gone at once. ``session_id`` (0: any) ignores the end of a stream
        that a newer one of the same replica already replaced."""
        now = self._clock()
        with self._lock:
            live = self._live.get(broker_name, {}).get(broker_id)
            if live is None or not live.session_open or (session_id and live.session_id != session_id):
                return
            self._mark_gone(broker_name, broker_id, live, SESSION_ENDED, now)
            group = self._groups.get(broker_name)
            # Unclean elections wait out the master's lease (the scan elects then): the in-sync set, which fences
            # a deposed master otherwise, does not bound who may be elected.
            if (group is not None and group.master_id == broker_id and not self.enable_elect_unclean_master
                    and not self._newer_epoch_reported(group)):
                self._commit(group, self._master_gone(group, now, "master_session_ended"))

    def scan(self, now: int | None = None) -> None:
        """Find replicas silent past their timeout, replace gone masters, and elect where a group has none."""
        now = self._clock() if now is None else now
        with self._lock:
            self._note_scan_gap(now)
            for name, group in list(self._groups.items()):
                lives = self._live.get(name, {})
                for broker_id, live in lives.items():
                    if live.session_open and not self._is_alive(live, now):
                        self._mark_gone(name, broker_id, live, SILENT, now)
                if self._newer_epoch_reported(group):
                    continue
                try:
                    if group.master_id == NO_MASTER:
                        elected = self._elect(group, now, "no_master")
                        if elected is not None:
                            self._commit(group, elected)
                        continue
                    reason = self._master_gone_reason(lives.get(group.master_id), now, _group_timeout_ms(lives))
                    if reason is not None:
                        self._commit(group, self._master_gone(group, now, reason))
                except OSError:  # the next scan tries again; other groups must not wait for this one
                    log.exception("controller_persist_failed broker=%s", name)

    def _note_scan_gap(self, now: int) -> None:
        """A scan long after the last one: this process stood still, and the heartbeats sent meanwhile wait unread
        in its sockets. Counting that time as the replicas' silence would depose a healthy master."""
        last, self._last_scan_ms = self._last_scan_ms, now
        granted = self._pause_grace_ms
        if last is not None and now - last > PAUSE_GAP_MS and (
                granted is None or now - granted > DEFAULT_HEARTBEAT_TIMEOUT_MS):
            self._resumed_ms = self._pause_grace_ms = now
            log.warning("controller_resumed gap_ms=%d grace=%r", now - last,
                        "every replica gets one heartbeat timeout from now before it counts as silent")

    def _master_gone_reason(self, live: ReplicaLiveness | None, now: int, group_timeout_ms: int) -> str | None:
        if live is None:  # not heard of since this controller started (or resumed): the group's own timeout
            return "master_silent" if now - self._resumed_ms > group_timeout_ms else None
        if live.session_open:
            return None
        if self.enable_elect_unclean_master and now - live.last_heartbeat_ms <= live.heartbeat_timeout_ms:
            return None  # its lease may still run
        # A session end whose election could not be persisted is retried here, under its own reason.
        return f"master_{live.gone_reason}"

    @staticmethod
    def _mark_gone(broker_name: str, broker_id: int, live: ReplicaLiveness, why: str, now: int) -> None:
        live.session_open = False
        live.gone_reason = why
        log.info("controller_replica_gone broker=%s id=%d reason=%s silent_ms=%d", broker_name, broker_id, why,
                 now - live.last_heartbeat_ms)

    # ---- operator and master requests --------------------------------------------------------------------------

    def alter_sync_state_set(self, broker_name: str, master_id: int, master_epoch: int, sync_state_set_epoch: int,
                             new_sync_state_set: Iterable[int]) -> Assignment:
        """The master's proposal of a new in-sync set, based on set epoch ``sync_state_set_epoch``."""
        proposed = frozenset(new_sync_state_set)
        now = self._clock()
        with self._lock:
            group = self._group(broker_name)
            self._refuse_if_decided_elsewhere(group)
            if group.master_id == NO_MASTER:
                raise ControllerRefusal(f"broker {broker_name} has no master now (epoch {group.master_epoch})")
            if master_id != group.master_id or master_epoch != group.master_epoch:
                raise ControllerRefusal(f"broker {broker_name}: {master_id} at epoch {master_epoch} is not the "
                                        f"master, {group.master_id} at epoch {group.master_epoch} is")
            if sync_state_set_epoch != group.sync_state_set_epoch:
                raise ControllerRefusal(f"broker {broker_name}: sync state set epoch {sync_state_set_epoch} is "
                                        f"stale, the set is {_ids(group.sync_state_set)} at epoch "
                                        f"{group.sync_state_set_epoch}")
            if group.master_id not in proposed:
                raise ControllerRefusal(f"broker {broker_name}: the new sync state set {_ids(proposed)} lacks the "
                                        f"master {group.master_id}")
            unknown = proposed - group.replicas.keys()
            if unknown:
                raise ControllerRefusal(f"broker {broker_name}: the new sync state set names unknown replicas "
                                        f"{_ids(unknown)}")
            # Only joining members must be alive: shrinking away one dead member must not wait for another.
            dead = {i for i in proposed - group.sync_state_set if not self._alive(broker_name, i, now)}
            if dead:
                raise ControllerRefusal(f"broker {broker_name}: replicas {_ids(dead)} are not alive and cannot join "
                                        f"the sync state set")
            if proposed == group.sync_state_set:
                return self._assignment(group)
            new = replace(group, sync_state_set=proposed, sync_state_set_epoch=group.sync_state_set_epoch + 1)
            self._note(logging.INFO, "controller_sync_state_set_altered broker=%s master_id=%d epoch=%d "
                       "sync_state_set=%s set_epoch=%d", broker_name, new.master_id, new.master_epoch, _ids(proposed),
                       new.sync_state_set_epoch)
            return self._commit(group, new)

    def elect_master(self, broker_name: str, broker_id: int) -> Assignment:
        """An operator's switch to ``broker_id`` (alive, and in the set unless elections may be unclean); 0: the
        controller chooses, keeping an alive master."""
        require(broker_id >= 0, f"broker id {broker_id} is negative (0 lets the controller choose)")
        now = self._clock()
        with self._lock:
            group = self._group(broker_name)
            self._refuse_if_decided_elsewhere(group)
            if broker_id == NO_MASTER:
                if group.master_id != NO_MASTER and self._alive(broker_name, group.master_id, now):
                    return self._assignment(group)
                elected = self._elect(group, now, "admin")
                if elected is None:
                    raise ControllerRefusal(f"broker {broker_name}: no alive replica {self._eligible_text(group)} "
                                            f"to elect")
                return self._commit(group, elected)
            if broker_id not in group.replicas:
                raise ControllerNotFound(f"broker {broker_name} has no replica {broker_id} (replicas "
                                         f"{_ids(group.replicas)})")
            if broker_id == group.master_id:
                return self._assignment(group)
            if not self._alive(broker_name, broker_id, now):
                raise ControllerRefusal(f"broker {broker_name}: replica {broker_id} is not alive")
            if not self.enable_elect_unclean_master and broker_id not in group.sync_state_set:
                raise ControllerRefusal(f"broker {broker_name}: replica {broker_id} is not in the sync state set "
                                        f"{_ids(group.sync_state_set)} (unclean elections are off)")
            self._log_elected(group, "admin", [broker_id], broker_id)
            return self._commit(group, self._elected(group, broker_id))

    def get_sync_state_data(self, broker_name: str) -> SyncStateData:
        now = self._clock()
        with self._lock:
            group = self._group(broker_name)
            lives = self._live.get(broker_name, {})
            views = []
            for broker_id, address in sorted(group.replicas.items()):
                live = lives.get(broker_id)
                views.append(ReplicaView(
                    broker_id, address.broker_addr, self._is_alive(live, now),
                    live.master_epoch if live else 0, live.max_offset if live else 0,
                    live.confirm_offset if live else 0, now - live.last_heartbeat_ms if live else -1))
            return SyncStateData(group.cluster_name, self._assignment(group), tuple(views))

    def assignment(self, broker_name: str) -> Assignment:
        with self._lock:
            return self._assignment(self._group(broker_name))

    # ---- internals (called with the lock held) -------------------------------------------------------------

    def _group(self, broker_name: str) -> GroupState:
        require(bool(broker_name), "no broker_name given")
        group = self._groups.get(broker_name)
        if group is None:
            raise ControllerNotFound(f"the controller knows no broker group {broker_name}")
        return group

    def _alive(self, broker_name: str, broker_id: int, now: int) -> bool:
        return self._is_alive(self._live.get(broker_name, {}).get(broker_id), now)

    def _is_alive(self, live: ReplicaLiveness | None, now: int) -> bool:
        return live is not None and live.alive(now, self._resumed_ms)

    def _newer_epoch_reported(self, group: GroupState) -> int:
        """The newest master epoch a replica of ``group`` reported, if it is past the group's epoch here (else 0).
        Only another controller, or a newer copy of this store, can have handed it out: deciding on this state
        could name a second master, or hand out an epoch a replica already holds. Logged once per epoch."""
        name = group.broker_name
        reports = [(live.master_epoch, broker_id) for broker_id, live in self._live.get(name, {}).items()]
        epoch, reporter = max(reports, default=(0, NO_MASTER))
        if epoch <= group.master_epoch:
            self._stale_logged.pop(name, None)
            return 0
        if self._stale_logged.get(name) != epoch:
            self._stale_logged[name] = epoch
            log.warning("controller_group_decided_elsewhere broker=%s epoch=%d reported_epoch=%d reported_by=%d "
                        "action=%r", name, group.master_epoch, epoch, reporter,
                        "no election and no sync state set change here: run one controller, on its current store")
        return epoch

    def _refuse_if_decided_elsewhere(self, group: GroupState) -> None:
        epoch = self._newer_epoch_reported(group)
        if epoch:
            raise ControllerRefusal(f"broker {group.broker_name}: a replica reported master epoch {epoch}, past "
                                    f"this controller's {group.master_epoch}: the group is decided elsewhere (another "
                                    f"controller, or a newer copy of this store), so this controller decides nothing "
                                    f"for it")

    def _eligible_text(self, group: GroupState) -> str:
        return "at all" if self.enable_elect_unclean_master else f"in the sync state set {_ids(group.sync_state_set)}"

    def _elect(self, group: GroupState, now: int, reason: str, exclude: int = NO_MASTER) -> GroupState | None:
        """The group with a new master chosen by the policy, or None when no replica is eligible."""
        lives = self._live.get(group.broker_name, {})
        eligible = group.replicas.keys() if self.enable_elect_unclean_master else group.sync_state_set
        candidates = {i: lives[i] for i in eligible
                      if i != exclude and i in group.replicas and i in lives and self._is_alive(lives[i], now)}
        chosen = elect(candidates)
        if chosen is None:
            return None
        self._log_elected(group, reason, candidates, chosen)
        return self._elected(group, chosen)

    @staticmethod
    def _elected(group: GroupState, chosen: int) -> GroupState:
        return replace(group, master_id=chosen, master_epoch=group.master_epoch + 1,
                       sync_state_set=frozenset({chosen}), sync_state_set_epoch=group.sync_state_set_epoch + 1)

    def _master_gone(self, group: GroupState, now: int, reason: str) -> GroupState:
        elected = self._elect(group, now, reason, exclude=group.master_id)
        if elected is not None:
            return elected
        self._note(logging.WARNING, "controller_no_master broker=%s old_master_id=%d epoch=%d reason=%s "
                   "sync_state_set=%s", group.broker_name, group.master_id, group.master_epoch + 1, reason,
                   _ids(group.sync_state_set))
        # The set is kept: whichever of its members comes back first is elected (it holds everything committed).
        return replace(group, master_id=NO_MASTER, master_epoch=group.master_epoch + 1)

    @staticmethod
    def _log_not_electable(group: GroupState, broker_id: int) -> None:
        # Once per return: an operator sees why a live replica stays fenced, and what would end the wait.
        log.warning("controller_replica_not_electable broker=%s id=%d epoch=%d sync_state_set=%s reason=%r",
                    group.broker_name, broker_id, group.master_epoch, _ids(group.sync_state_set),
                    "the group has no master and only a member of the sync state set may be elected (one may hold "
                    "acknowledged messages this replica lacks): start one, or restart the controller with "
                    "--enable-elect-unclean-master to accept that loss")

    def _log_elected(self, group: GroupState, reason: str, candidates: Iterable[int],
                     chosen: int | None = None) -> None:
        self._note(logging.INFO, "controller_elected broker=%s master_id=%d epoch=%d reason=%s candidates=%s",
                   group.broker_name, group.master_id if chosen is None else chosen,
                   group.master_epoch if chosen is None else group.master_epoch + 1, reason, _ids(candidates))

    def _note(self, level: int, message: str, *args: object) -> None:
        self._notes.append((level, message, args))

    def _assignment(self, group: GroupState) -> Assignment:
        return Assignment.of(group, self._versions.get(group.broker_name, 0))

    def _commit(self, old: GroupState | None, new: GroupState) -> Assignment:
        """Persist ``new`` (unless unchanged), then adopt it, then tell the listeners if the assignment changed.
        A failed write raises and changes nothing."""
        notes, self._notes = self._notes, []
        if new == old:
            return self._assignment(new)
        self._store.save({**self._groups, new.broker_name: new})
        self._groups[new.broker_name] = new
        for level, message, args in notes:
            log.log(level, message, *args)
        name = new.broker_name
        if old is None or Assignment.of(old, 0) != Assignment.of(new, 0):
            self._versions[name] = self._versions.get(name, 0) + 1
            assignment = self._assignment(new)
            for listener in self._listeners:
                try:
                    listener(assignment)
                except Exception:  # a broken listener must not undo a persisted decision
                    log.exception("controller_listener_failed broker=%s", name)
            return assignment
        return self._assignment(new)


def _group_timeout_ms(lives: Mapping[int, ReplicaLiveness]) -> int:
    """How long a master not heard from since this controller started gets: the longest heartbeat timeout its
    group's replicas report (the default when none spoke yet). Replicas share their group's config: the fixed
    default (10 s) replaced a master of a group with 3 s only after 10, and one with 60 s while its lease ran."""
    return max((live.heartbeat_timeout_ms for live in lives.values()), default=DEFAULT_HEARTBEAT_TIMEOUT_MS)

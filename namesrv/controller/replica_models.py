"""The controller's records (RocketMQ's replicaInfoTable and syncStateSetInfoTable, plus the heartbeat table).

``GroupState`` is what the controller persists and decides about; it is immutable so that a decision is built
aside, persisted, and only then swapped in (a failed write leaves the old state untouched). ``ReplicaLiveness``
is what heartbeats tell, kept in memory only: after a restart every replica is unheard of until it speaks again.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000  # controllerHeartBeatTimeoutMills, for a heartbeat that names none
NO_MASTER = 0


@dataclass(frozen=True, slots=True)
class ReplicaAddress:
    broker_addr: str
    ha_addr: str


@dataclass(frozen=True, slots=True)
class GroupState:
    """One broker group (all replicas of one broker name): its members and the current decision."""

    cluster_name: str
    broker_name: str
    replicas: Mapping[int, ReplicaAddress] = field(default_factory=dict)  # broker id -> addresses
    master_id: int = NO_MASTER
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster_name": self.cluster_name,
            "broker_name": self.broker_name,
            "replicas": {str(i): {"broker_addr": a.broker_addr, "ha_addr": a.ha_addr}
                         for i, a in sorted(self.replicas.items())},
            "master_id": self.master_id,
            "master_epoch": self.master_epoch,
            "sync_state_set": sorted(self.sync_state_set),
            "sync_state_set_epoch": self.sync_state_set_epoch,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GroupState":
        """Raises KeyError, TypeError or ValueError for a record that is not one."""
        replicas = {int(i): ReplicaAddress(str(a["broker_addr"]), str(a["ha_addr"]))
                    for i, a in dict(data["replicas"]).items()}
        return cls(cluster_name=str(data["cluster_name"]), broker_name=str(data["broker_name"]), replicas=replicas,
                   master_id=int(data["master_id"]), master_epoch=int(data["master_epoch"]),
                   sync_state_set=frozenset(int(i) for i in data["sync_state_set"]),
                   sync_state_set_epoch=int(data["sync_state_set_epoch"]))


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One BrokerHeartbeat, decoded (proto/controller.proto says what each field means)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_addr: str = ""
    master_epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    heartbeat_timeout_ms: int = 0  # 0: DEFAULT_HEARTBEAT_TIMEOUT_MS
    seq: int = 0  # the session's heartbeat number: its answer names it (the broker's lease runs from it)


@dataclass(slots=True)
class ReplicaLiveness:
    """What the newest heartbeat of one replica said, and whether it still counts as alive."""

    session_open: bool
    last_heartbeat_ms: int  # the manager's monotonic clock
    heartbeat_timeout_ms: int
    master_epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    session_id: int = 0  # the stream that spoke last: only its end ends the replica (a reconnect races the old one)
    gone_reason: str = ""  # why it stopped counting as alive: "session_ended" or "silent"

    def alive(self, now_ms: int, resumed_ms: int = 0) -> bool:
        """Open, and heard within its timeout; silence counts from ``resumed_ms`` at the earliest (when the
        controller itself last stood still, the heartbeats of that time may still be unread)."""
        return self.session_open and now_ms - max(self.last_heartbeat_ms, resumed_ms) <= self.heartbeat_timeout_ms


@dataclass(frozen=True, slots=True)
class Assignment:
    """What every replica of a group is told (ReplicaAssignment). ``version`` counts the group's changes in this
    process only: a session never sends an older one after a newer one (not on the wire, not persisted)."""

    broker_name: str
    master_id: int
    master_addr: str
    master_ha_addr: str
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    version: int = 0

    @classmethod
    def of(cls, group: GroupState, version: int) -> "Assignment":
        master = group.replicas.get(group.master_id) if group.master_id != NO_MASTER else None
        return cls(group.broker_name, group.master_id, master.broker_addr if master else "",
                   master.ha_addr if master else "", group.master_epoch, tuple(sorted(group.sync_state_set)),
                   group.sync_state_set_epoch, version)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as GetSyncStateData reports it."""

    broker_id: int
    broker_addr: str
    alive: bool
    master_epoch: int
    max_offset: int
    confirm_offset: int
    last_heartbeat_age_ms: int  # -1: never heard from since the controller started


@dataclass(frozen=True, slots=True)
class SyncStateData:
    cluster_name: str
    assignment: Assignment
    replicas: tuple[ReplicaView, ...]

"""Controller mode, on the master: the in-sync set (upstream's SyncStateSet, Kafka's ISR) as this master knows it,
and when to propose changing it.

A send is acknowledged once every member has it, so the set decides what an election may lose: the controller
elects only members. Hence the asymmetry while a proposal is pending: a replica being added counts at once (the
controller may already have accepted it and could elect it), a replica being removed keeps counting until the
controller has accepted its removal.

A slave is caught up at a check when its ack reached the master's end as of the previous check (a steady stream
of sends never lets an ack equal the current end). One left behind for ``haMaxTimeSlaveNotCatchup``, or whose
stream closed, is proposed for removal; one caught up again (and past the current epoch's start) for addition.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SetProposal:
    members: frozenset[int]  # slave ids: the master itself is always a member and not listed
    based_on_epoch: int  # the set epoch the proposal changes


@dataclass
class SyncStateSet:
    master_id: int
    max_not_catchup_ms: int
    members: frozenset[int] = frozenset()  # the set the controller accepted, less the master
    epoch: int = 0  # the controller's sync_state_set_epoch of ``members``
    pending: SetProposal | None = None
    _caught_up_ms: dict[int, int] = field(default_factory=dict)  # slave id -> when it was last caught up
    _end_at_last_check: int | None = None  # None before the first check: nobody has caught up to anything yet

    def accept(self, ids: list[int] | frozenset[int], epoch: int) -> None:
        """The controller's set (it includes the master)."""
        if epoch < self.epoch:
            return  # an older assignment arriving late
        self.members = frozenset(ids) - {self.master_id}
        self.epoch = epoch
        self.pending = None

    def counted(self) -> frozenset[int]:
        """The slaves whose acks a send waits for."""
        if self.pending is None:
            return self.members
        return self.members | self.pending.members

    def check(self, now_ms: int, acks: dict[int, int], end: int, epoch_start: int) -> SetProposal | None:
        """A proposal when the set should change (none while one is pending). ``acks``: connected slaves."""
        caught_up_to = self._end_at_last_check
        self._end_at_last_check = end
        for slave_id, acked in acks.items():
            if caught_up_to is not None and acked >= caught_up_to and acked >= epoch_start:
                self._caught_up_ms[slave_id] = now_ms
        for slave_id in list(self._caught_up_ms):
            if slave_id not in acks:
                del self._caught_up_ms[slave_id]  # a closed stream is behind from now on
        for member in self.members & acks.keys():
            self._caught_up_ms.setdefault(member, now_ms)  # a member first seen now gets its full grace
        if self.pending is not None:
            return None
        keep = {m for m in self.members
                if now_ms - self._caught_up_ms.get(m, -(1 << 62)) <= self.max_not_catchup_ms and m in acks}
        joining = {s for s in acks if s not in self.members and self._caught_up_ms.get(s) == now_ms}
        wanted = frozenset(keep | joining)
        if wanted == self.members:
            return None
        self.pending = SetProposal(wanted, self.epoch)
        return self.pending

    def proposal_failed(self) -> None:
        self.pending = None

"""Controller mode, on the master: the in-sync set (upstream's SyncStateSet, Kafka's ISR) as this master knows it,
and when to propose changing it.

A send is acknowledged once every member has it, so the set decides what an election may lose: the controller
elects only members. Every slave the controller may hold as a member must therefore be counted here, whatever this
master has heard back:
- only a slave holding a copy of this master's metadata (topics, mappings, groups, ACLs) joins: elected without
  them, it served none of the topics whose messages it held;
- joining is two-step: a slave that caught up with the master's end as of the previous check (a steady stream of
  sends never lets an ack equal the current end) is first counted locally, which stops the confirm offset from
  running ahead of it; only once its ack reaches the confirm offset (it holds everything acknowledged) is it
  proposed to the controller;
- a proposal's joiners count until the controller's answer settles it: accepted (a newer set epoch), refused, or,
  when the call's outcome is unknown, until the set epoch has stayed unchanged for ``UNKNOWN_OUTCOME_MS``;
- a leaving member counts until the controller accepted its removal.
One whose stream closed, or that has not caught up for ``haMaxTimeSlaveNotCatchup``, is proposed for removal.
"""

from dataclasses import dataclass, field

UNKNOWN_OUTCOME_MS = 3000  # three heartbeat answers: the controller would have shown a change it made


@dataclass(slots=True)
class SetProposal:
    members: frozenset[int]  # slave ids: the master itself is always a member and not listed
    based_on_epoch: int  # the set epoch the proposal changes
    unknown_since_ms: int | None = None  # the call failed without an answer: it may or may not have been applied


@dataclass
class SyncStateSet:
    master_id: int
    max_not_catchup_ms: int
    members: frozenset[int] = frozenset()  # the set the controller accepted, less the master
    epoch: int = 0  # the controller's sync_state_set_epoch of ``members``
    pending: SetProposal | None = None
    joining: set[int] = field(default_factory=set)  # counted here, not proposed yet
    _caught_up_ms: dict[int, int] = field(default_factory=dict)  # slave id -> when it was last caught up
    _end_at_last_check: int | None = None  # None before the first check: nobody has caught up to anything yet

    def accept(self, ids: list[int] | frozenset[int], epoch: int) -> None:
        """The controller's set (it includes the master)."""
        if epoch < self.epoch:
            return  # an older assignment arriving late
        self.members = frozenset(ids) - {self.master_id}
        self.epoch = epoch
        self.joining -= self.members
        if self.pending is not None and epoch > self.pending.based_on_epoch:
            self.pending = None  # settled: whatever it became is ``members`` now

    def counted(self) -> frozenset[int]:
        """The slaves whose acks a send waits for."""
        counted = self.members | self.joining
        return counted | self.pending.members if self.pending is not None else frozenset(counted)

    def check(self, now_ms: int, acks: dict[int, int], end: int, epoch_start: int,
              confirm: int, copying: frozenset[int] = frozenset()) -> SetProposal | None:
        """A proposal when the set should change (none while one is pending). ``acks``: connected slaves;
        ``confirm``: the master's confirm offset; ``copying``: connected slaves still copying the metadata."""
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
        # Never proposed: the controller cannot elect them, so they may stop counting at once.
        self.joining = {s for s in self.joining if s in acks}
        self.joining |= {s for s in acks if s not in self.members and s not in copying
                         and self._caught_up_ms.get(s) == now_ms}
        if self.pending is not None:
            unknown = self.pending.unknown_since_ms
            if unknown is None or now_ms - unknown < UNKNOWN_OUTCOME_MS:
                return None
            self.pending = None  # the controller kept its set: the call was not applied
        keep = {m for m in self.members
                if now_ms - self._caught_up_ms.get(m, -(1 << 62)) <= self.max_not_catchup_ms and m in acks}
        ready = {s for s in self.joining if acks[s] >= confirm and s not in copying}
        wanted = frozenset(keep | ready)
        if wanted == self.members:
            return None
        self.pending = SetProposal(wanted, self.epoch)
        self.joining -= ready
        return self.pending

    def proposal_failed(self, now_ms: int, refused: bool) -> None:
        """``refused``: the controller answered no (its set stands); else the outcome is unknown."""
        if self.pending is None:
            return
        if refused:
            self.pending = None
        else:
            self.pending.unknown_since_ms = now_ms

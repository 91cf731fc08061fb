"""What POP keeps per (group, topic, queue): where the next fresh message is read, the messages handed out and
not yet acked (in flight), and, in a FIFO group, the messages read but held back because an earlier message of
their message group is in flight.

Every offset below ``scan_offset`` that is neither in flight nor held is done (acked, dead-lettered or filtered
out), so the group's progress is the lowest offset still owed: :meth:`QueuePopState.consumed_offset`."""

from dataclasses import dataclass, field

PopKey = tuple[str, str, int]  # group, topic, queue id


@dataclass(slots=True)
class InFlight:
    invisible_until_ms: int
    reconsume_times: int  # deliveries before the current one
    delivery: int  # this delivery's number: a receipt handle of another delivery is void
    message_group: str  # FIFO: the message group ("" when none: the queue is one group)


@dataclass(slots=True)
class QueuePopState:
    scan_offset: int
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    held: dict[int, str] = field(default_factory=dict)  # FIFO: offset -> message group

    def consumed_offset(self) -> int:
        """Every message below it is done: what the group commits (its lag, a failover's restart point)."""
        return min(min(self.in_flight, default=self.scan_offset), min(self.held, default=self.scan_offset),
                   self.scan_offset)

    def busy_groups(self, now_ms: int) -> set[str]:
        """FIFO: message groups with a message in flight and still invisible."""
        return {f.message_group for f in self.in_flight.values() if f.invisible_until_ms > now_ms}

    def expired(self, now_ms: int) -> list[int]:
        """Offsets in flight whose invisible time has passed, lowest first: due to be handed out again."""
        return sorted(o for o, f in self.in_flight.items() if f.invisible_until_ms <= now_ms)

    def next_expiry_ms(self) -> int | None:
        return min((f.invisible_until_ms for f in self.in_flight.values()), default=None)

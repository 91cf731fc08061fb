"""What POP keeps per (group, topic, queue): where the next fresh message is read, the messages handed out and
not yet acked (in flight), and, in a FIFO group, the messages read but held back because an earlier message of
their message group is in flight.

Every offset below ``scan_offset`` that is neither in flight nor held is done (acked, dead-lettered or filtered
out), so the group's progress is the lowest offset still owed: :meth:`QueuePopState.consumed_offset`.

In-flight messages come in deliveries: what one pop handed out of one queue shares a delivery number and an
invisible time (a change of invisible time gives the message a delivery of its own). A delivery is the unit POP
writes (one record, not one per message) and checks for expiry (one look per delivery, not per message)."""

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
    deliveries: dict[int, set[int]] = field(default_factory=dict)  # delivery -> its offsets still in flight

    def __post_init__(self) -> None:
        if self.in_flight and not self.deliveries:  # built from in-flight entries alone (tests, tools)
            entries, self.in_flight = self.in_flight, {}
            for offset, entry in entries.items():
                self.put_in_flight(offset, entry)

    def put_in_flight(self, offset: int, entry: InFlight) -> None:
        if offset in self.in_flight:
            self.remove_in_flight(offset)
        members = self.deliveries.setdefault(entry.delivery, set())
        if members:
            first = self.in_flight[next(iter(members))]
            assert first.invisible_until_ms == entry.invisible_until_ms, "one delivery, one invisible time"
        members.add(offset)
        self.in_flight[offset] = entry

    def remove_in_flight(self, offset: int) -> InFlight:
        entry = self.in_flight.pop(offset)
        members = self.deliveries[entry.delivery]
        members.discard(offset)
        if not members:
            del self.deliveries[entry.delivery]
        return entry

    def delivery_entries(self, delivery: int) -> dict[int, InFlight]:
        """A delivery's messages still in flight (empty once all are settled)."""
        return {o: self.in_flight[o] for o in self.deliveries.get(delivery, ())}

    def consumed_offset(self) -> int:
        """Every message below it is done: what the group commits (its lag, a failover's restart point)."""
        return min(min(self.in_flight, default=self.scan_offset), min(self.held, default=self.scan_offset),
                   self.scan_offset)

    def busy_groups(self, now_ms: int) -> set[str]:
        """FIFO: message groups with a message in flight and still invisible."""
        return {f.message_group for f in self.in_flight.values() if f.invisible_until_ms > now_ms}

    def expired(self, now_ms: int) -> list[int]:
        """Offsets in flight whose invisible time has passed, lowest first: due to be handed out again."""
        due: list[int] = []
        for members in self.deliveries.values():
            if self.in_flight[next(iter(members))].invisible_until_ms <= now_ms:
                due += members
        due.sort()
        return due

    def next_expiry_ms(self) -> int | None:
        return min((self.in_flight[next(iter(m))].invisible_until_ms for m in self.deliveries.values()),
                   default=None)

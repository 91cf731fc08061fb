"""Where the timer puts a due message: the queue it was sent to here, unless that queue's owner says otherwise.

A static topic's logic queue may have moved to another broker while its delayed messages waited here; its route
(``broker/statictopic/timer_delivery_route.py``) then names the broker that leads the logic queue now, and the
delivery forwards the messages there instead of putting them where no consumer of the logic queue reads."""

from dataclasses import dataclass
from typing import Protocol

LEADER_BY_ROUTE = ""  # DeliveryTarget.broker: the logic queue's leader, as the name servers' route says


@dataclass(frozen=True, slots=True)
class DeliveryTarget:
    queue_id: int  # a queue of this broker (``broker`` None), or the logic queue that ``broker`` leads
    broker: str | None = None


@dataclass(frozen=True, slots=True)
class Forwarded:
    taken: int  # how many of the first records the leader took: stored, or refused for good (``dropped``)
    broker: str  # the leader they went to ("" when it could not be named)
    error: str | None = None  # why it did not take the rest (None: it took all)
    dropped: int = 0  # of the ``taken``, those it refused for good (its limits): never taken, dropped
    dropped_why: str = ""


class DeliveryRoute(Protocol):
    def target(self, topic: str, queue_id: int, logic_queue_id: int | None) -> DeliveryTarget:
        """Where messages due for ``queue_id`` of ``topic`` (a queue of this broker; ``logic_queue_id``: the
        logic queue it was of, for a static topic's message) go now."""
        ...

    def forward(self, target: DeliveryTarget, topic: str, records: list[bytes]) -> Forwarded:
        """Send the records (commitlog records, in order) to the leader of ``target``."""
        ...


class LocalDelivery:
    """Every message goes back to the queue it was sent to, here (a broker without static topics)."""

    def target(self, topic: str, queue_id: int, logic_queue_id: int | None) -> DeliveryTarget:
        return DeliveryTarget(queue_id)

    def forward(self, target: DeliveryTarget, topic: str, records: list[bytes]) -> Forwarded:
        raise AssertionError(f"local delivery never forwards (target {target})")

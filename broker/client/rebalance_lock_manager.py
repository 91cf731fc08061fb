"""Queue leases for orderly consumption (RocketMQ's RebalanceLockManager): one member of a group holds a queue at
a time. A lease lasts ``lease_ms`` from its last renewal; a holder renews by locking again. Unlike upstream, a
client's leases also end the moment it leaves (the session it is a member on closes, not an older one it already
replaced), so a killed member's queues are free at once instead of after the lease. Pure state with an injected
clock; memory only (a restarted broker grants afresh, and members re-lock within their renewal period)."""

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from broker.client.consumer_manager import QueueRef, monotonic_ms


@dataclass(slots=True)
class Lease:
    client_id: str
    renewed_ms: int


class RebalanceLockManager:
    def __init__(self, lease_ms: int, clock: Callable[[], int] = monotonic_ms) -> None:
        self.lease_ms = lease_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._leases: dict[str, dict[QueueRef, Lease]] = {}  # group -> queue -> lease

    def try_lock(self, group: str, client_id: str, queues: Iterable[QueueRef]) -> list[QueueRef]:
        """Lock or renew each queue free or already ``client_id``'s; returns those it now holds."""
        now = self._clock()
        granted: list[QueueRef] = []
        with self._lock:
            leases = self._leases.setdefault(group, {})
            for queue in queues:
                lease = leases.get(queue)
                if lease is None or lease.client_id == client_id or now - lease.renewed_ms > self.lease_ms:
                    leases[queue] = Lease(client_id, now)
                    granted.append(queue)
        return granted

    def seed(self, group: str, queue: QueueRef, client_id: str) -> None:
        """``client_id`` holds ``queue`` (a lease taken elsewhere: a static topic's previous leader), unless a live
        lease here says otherwise."""
        now = self._clock()
        with self._lock:
            leases = self._leases.setdefault(group, {})
            lease = leases.get(queue)
            if lease is None or now - lease.renewed_ms > self.lease_ms:
                leases[queue] = Lease(client_id, now)

    def unlock(self, group: str, client_id: str, queues: Iterable[QueueRef]) -> None:
        with self._lock:
            leases = self._leases.get(group, {})
            for queue in queues:
                lease = leases.get(queue)
                if lease is not None and lease.client_id == client_id:
                    del leases[queue]

    def release_client(self, group: str, client_id: str) -> int:
        """The client left the group: free everything it held; returns how many leases ended."""
        with self._lock:
            leases = self._leases.get(group, {})
            held = [q for q, lease in leases.items() if lease.client_id == client_id]
            for queue in held:
                del leases[queue]
        return len(held)

    def holder(self, group: str, queue: QueueRef) -> str | None:
        """The client holding a live lease on ``queue``, or None."""
        with self._lock:
            lease = self._leases.get(group, {}).get(queue)
            if lease is None or self._clock() - lease.renewed_ms > self.lease_ms:
                return None
            return lease.client_id

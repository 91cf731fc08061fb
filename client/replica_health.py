"""Which broker addresses the SDK treats as down for a while, and which replica of a group it reads from.

A SIGKILLed master stays in the name server's route until the name server expires it (brokerNotActiveTimeoutMillis,
up to minutes), and a controller may only later promote a slave. Meanwhile every call to the dead address fails the
same way, so the first failure is remembered for :data:`DOWN_HOLD_S`: reads go to the group's next replica and
sends to another group without paying for the dead address again. The mark is a preference, not a ban: it expires
by itself (the master may be back), an answer from the address clears it, and a caller with no other choice (a
static topic's leader group, a KV shard's) still tries the marked address.
"""

import threading
import time
from collections.abc import Callable, Mapping

import grpc

DOWN_HOLD_S = 3.0


class DownAddresses:
    """Addresses that failed as a dead process does, each remembered for ``hold_s`` (clock injected for tests)."""

    def __init__(self, hold_s: float = DOWN_HOLD_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._hold_s = hold_s
        self._clock = clock
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def mark(self, addr: str) -> None:
        with self._lock:
            self._until[addr] = self._clock() + self._hold_s

    def clear(self, addr: str) -> None:
        """``addr`` answered: it is up (cheap when it was not marked, as it is on every successful call)."""
        if addr in self._until:
            with self._lock:
                self._until.pop(addr, None)

    def is_down(self, addr: str) -> bool:
        until = self._until.get(addr)
        if until is None:
            return False
        if self._clock() < until:
            return True
        with self._lock:  # expired: the next call finds out whether it is back
            if self._until.get(addr) == until:
                del self._until[addr]
        return False


def unreachable(status: grpc.StatusCode | None, connected: Callable[[], bool]) -> bool:
    """Whether a failed call says its broker is gone: UNAVAILABLE (nothing listens, or the connection broke), or
    DEADLINE_EXCEEDED while the channel never got connected (a dead host). A deadline on a connected channel is a
    slow broker, not a dead one: ``connected`` is asked only then, as it may take a moment."""
    if status is grpc.StatusCode.UNAVAILABLE:
        return True
    return status is grpc.StatusCode.DEADLINE_EXCEEDED and not connected()


def read_replica(broker_addrs: Mapping[int, str], is_down: Callable[[str], bool]) -> str | None:
    """The replica to read a group from: its master (id 0) unless marked down, else the lowest-id replica not
    marked down, else (every one marked) the lowest id all the same: a mark is a guess, the call finds out.
    None for a group with no replica at all."""
    if not broker_addrs:
        return None
    ids = sorted(broker_addrs)
    for broker_id in ids:
        if not is_down(broker_addrs[broker_id]):
            return broker_addrs[broker_id]
    return broker_addrs[ids[0]]


def live_master(broker_addrs: Mapping[int, str], is_down: Callable[[str], bool]) -> str | None:
    """The group's master address when the route names one that is not marked down."""
    addr = broker_addrs.get(0)
    return addr if addr is not None and not is_down(addr) else None


def channel_connected(channel: grpc.Channel, wait_s: float = 0.2) -> bool:
    """Whether ``channel`` is connected (READY) right now. gRPC tells a channel's state only to a subscriber, on a
    thread of its own: subscribe, take the first state it reports, unsubscribe. A channel that reports nothing in
    ``wait_s`` counts as not connected (asked only after a call timed out on it)."""
    states: list[grpc.ChannelConnectivity] = []
    reported = threading.Event()

    def on_state(state: grpc.ChannelConnectivity) -> None:
        states.append(state)
        reported.set()

    channel.subscribe(on_state, try_to_connect=False)
    try:
        reported.wait(wait_s)
    finally:
        channel.unsubscribe(on_state)
    return bool(states) and states[0] is grpc.ChannelConnectivity.READY

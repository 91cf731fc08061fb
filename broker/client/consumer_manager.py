"""Consumer groups' members on this broker (RocketMQ's ConsumerManager): who is in which group, rebuilt from the
clients' heartbeats, never persisted.

Pure state with an injected clock, no gRPC. A member belongs to a *session* (one client's stream to this broker):
the session's end removes the member at once, and a member whose last heartbeat is older than the expiry is
removed by :meth:`scan_expired`. Every call that changes a group's membership returns the groups whose member
list changed, so the caller can tell their members to rebalance.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

QueueRef = tuple[str, str, int]  # topic, broker name, queue id


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(slots=True)
class ConsumerInfo:
    """What one heartbeat says about one group (see ``ConsumerData`` in proto/consumer.proto)."""

    group: str
    consume_type: int = 0
    message_model: int = 0
    subscriptions: tuple[tuple[str, str], ...] = ()  # (topic, expression)
    queues: tuple[QueueRef, ...] = ()
    orderly: bool = False


@dataclass(slots=True)
class Member:
    client_id: str
    session_id: int
    addr: str
    info: ConsumerInfo
    last_heartbeat_ms: int
    wall_heartbeat_ms: int = field(default=0)


class ConsumerManager:
    def __init__(self, expiry_ms: int, clock: Callable[[], int] = monotonic_ms,
                 wall_clock: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.expiry_ms = expiry_ms
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._groups: dict[str, dict[str, Member]] = {}  # group -> client id -> member
        self._session_groups: dict[int, set[tuple[str, str]]] = {}  # session -> (group, client id)

    def heartbeat(self, session_id: int, client_id: str, addr: str, infos: Iterable[ConsumerInfo]) -> set[str]:
        """Register or refresh ``client_id`` in each group of ``infos``; the session stops being a member of the
        groups it no longer names. Returns the groups whose member list changed."""
        now, wall = self._clock(), self._wall_clock()
        changed: set[str] = set()
        with self._lock:
            held = self._session_groups.setdefault(session_id, set())
            named = set()
            for info in infos:
                named.add((info.group, client_id))
                members = self._groups.setdefault(info.group, {})
                member = members.get(client_id)
                if member is None:
                    changed.add(info.group)
                    log.info("consumer_joined group=%s client=%s addr=%s model=%d", info.group, client_id, addr,
                             info.message_model)
                members[client_id] = Member(client_id, session_id, addr, info, now, wall)
            for group, cid in held - named:
                if self._remove(group, cid, session_id):
                    changed.add(group)
            self._session_groups[session_id] = named
        return changed

    def close_session(self, session_id: int) -> set[str]:
        """The session's stream ended: its client leaves every group it was in."""
        with self._lock:
            held = self._session_groups.pop(session_id, set())
            changed = {group for group, cid in held if self._remove(group, cid, session_id)}
        for group in changed:
            log.info("consumer_left group=%s session=%d", group, session_id)
        return changed

    def scan_expired(self) -> set[str]:
        """Drop members silent for longer than the expiry (a client whose connection hangs half-open)."""
        now = self._clock()
        changed: set[str] = set()
        with self._lock:
            for group, members in list(self._groups.items()):
                for cid, member in list(members.items()):
                    if now - member.last_heartbeat_ms > self.expiry_ms:
                        self._remove(group, cid, member.session_id)
                        self._session_groups.get(member.session_id, set()).discard((group, cid))
                        changed.add(group)
                        log.warning("consumer_expired group=%s client=%s idle_ms=%d", group, cid,
                                    now - member.last_heartbeat_ms)
        return changed

    def _remove(self, group: str, client_id: str, session_id: int) -> bool:
        """Remove the member if it still belongs to ``session_id`` (a client that reconnected on a new session
        stays); lock held."""
        members = self._groups.get(group)
        if members is None or members.get(client_id) is None or members[client_id].session_id != session_id:
            return False
        del members[client_id]
        if not members:
            del self._groups[group]
        return True

    def client_ids(self, group: str) -> list[str]:
        with self._lock:
            return sorted(self._groups.get(group, ()))

    def members(self, group: str) -> list[Member]:
        with self._lock:
            return sorted(self._groups.get(group, {}).values(), key=lambda m: m.client_id)

    def sessions_of(self, group: str) -> set[int]:
        with self._lock:
            return {m.session_id for m in self._groups.get(group, {}).values()}

    def clients_of_session(self, session_id: int) -> set[tuple[str, str]]:
        with self._lock:
            return set(self._session_groups.get(session_id, ()))

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

"""Consumer groups' members on this broker (RocketMQ's ConsumerManager): who is in which group, rebuilt from the
clients' heartbeats, never persisted.

Pure state with an injected clock, no gRPC. A member belongs to a *session* (one client's stream to this broker):
the session's end removes the member at once, and a member whose last heartbeat is older than the expiry is
removed by :meth:`scan_expired`. Every call that changes a group's membership returns the groups whose member
list changed, so the caller can tell their members to rebalance.

Clustering members of one group must subscribe alike: each allocates every subscribed topic's queues over all the
group's members, so a member handed queues of a topic it does not subscribe, or filtering out tags another member
wanted, silently leaves messages unconsumed. A heartbeat that registers or changes a member's subscriptions is
compared with the group's other clustering members, and a difference is logged once per change of the group's
subscription state.
"""

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from common.subscription import expression_selects
from proto import consumer_pb2

log = logging.getLogger(__name__)

QueueRef = tuple[str, str, int]  # topic, broker name, queue id
Subscriptions = tuple[tuple[str, str], ...]  # (topic, expression)
TopicFilter = frozenset[str] | str | None  # the tags selected, None for everything, the raw text if unparsable
NOT_SUBSCRIBED = "-"  # a topic one member subscribes and the other does not


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def topic_filters(subscriptions: Subscriptions) -> dict[str, TopicFilter]:
    return {topic: expression_selects(expression) for topic, expression in subscriptions}


def subscription_differences(ours: Subscriptions, theirs: Subscriptions) -> list[tuple[str, str, str]]:
    """``(topic, their expression, our expression)`` per topic the two subscribe differently, by topic name;
    :data:`NOT_SUBSCRIBED` for a side without the topic."""
    our_filters, their_filters = topic_filters(ours), topic_filters(theirs)
    our_text, their_text = dict(ours), dict(theirs)
    return [(topic, their_text.get(topic, NOT_SUBSCRIBED), our_text.get(topic, NOT_SUBSCRIBED))
            for topic in sorted(our_filters.keys() | their_filters.keys())
            if topic not in our_filters or topic not in their_filters or our_filters[topic] != their_filters[topic]]


@functools.lru_cache(maxsize=1024)  # a group's members mostly send the same subscriptions: parse them once
def _subscription_state(subscriptions: Subscriptions) -> frozenset[tuple[str, TopicFilter]]:
    return frozenset(topic_filters(subscriptions).items())


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
        # group -> the distinct subscriptions of its clustering members when a difference was last logged
        self._inconsistent: dict[str, frozenset[frozenset[tuple[str, TopicFilter]]]] = {}

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
                if member is None or (member.info.subscriptions, member.info.message_model) != (
                        info.subscriptions, info.message_model):
                    self._check_subscriptions(info.group, client_id)
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
        if group in self._inconsistent and len(self._subscription_states(group)) <= 1:
            del self._inconsistent[group]  # consistent again: a new difference is worth a warning
        return True

    def _clustering_members(self, group: str) -> list[Member]:
        """Lock held. Broadcasting members consume every queue themselves: what they subscribe harms nobody."""
        return [m for m in self._groups.get(group, {}).values()
                if m.info.message_model == consumer_pb2.CLUSTERING]

    def _subscription_states(self, group: str) -> frozenset[frozenset[tuple[str, TopicFilter]]]:
        return frozenset(_subscription_state(m.info.subscriptions) for m in self._clustering_members(group))

    def _check_subscriptions(self, group: str, client_id: str) -> None:
        """Lock held; ``client_id`` just registered or changed its subscriptions. Warns when they differ from
        another clustering member's, unless the group's subscriptions are in a state already warned about (a
        member rejoining, or a third member repeating one of the two variants, says nothing new)."""
        states = self._subscription_states(group)
        if len(states) <= 1:
            self._inconsistent.pop(group, None)
            return
        ours = self._groups[group][client_id]
        if ours.info.message_model != consumer_pb2.CLUSTERING or self._inconsistent.get(group) == states:
            return
        for other in sorted(self._clustering_members(group), key=lambda m: m.client_id):
            differences = subscription_differences(ours.info.subscriptions, other.info.subscriptions)
            if other.client_id != client_id and differences:
                topic, theirs, mine = differences[0]
                log.warning("subscription_inconsistent group=%s client=%s differs_from=%s topic=%s theirs=%s "
                            "ours=%s differing_topics=%d", group, client_id, other.client_id, topic, theirs, mine,
                            len(differences))
                self._inconsistent[group] = states
                return

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

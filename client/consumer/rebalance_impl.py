"""Which queues this member consumes (upstream's RebalanceImpl), recomputed when the group's members change, on a
period, and soon again while the picture is incomplete.

Clustering: every member sorts the topic's queues and the group's client ids and takes its share by the
strategy; all compute the same split with no coordination. A queue that leaves is dropped after the handler calls
running on it finish, and its offset is committed before it is forgotten; a queue that arrives starts at the
group's committed offset (else first or last, as configured; a retry topic from its start). Orderly consumers also
need the queue's lease before taking it. Broadcasting: every member takes every queue.

A pass decides from the member list it read when it began, and taking a queue costs round trips. A member that
joins meanwhile takes its share at once, so a pass still taking queues from the old list would consume them beside
it (duplicates). So a pass stops taking queues as soon as it is ``interrupted`` (a member joined or left: the caller
runs a new pass), and :meth:`held` shows the queues as the last finished pass left them, never half a pass.
"""

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from client.consumer.allocate_strategy import AllocateStrategy
from client.consumer.group_calls import GroupCalls
from client.consumer.offset_store import OffsetStore
from client.consumer.process_queue import ProcessQueue
from client.errors import MQClientError
from client.pull_consumer import PullConsumer
from client.static_route import is_logic_queue
from common.group_topics import is_retry_topic
from common.message_queue import MessageQueue

log = logging.getLogger(__name__)

DROP_WAIT_S = 10.0  # a dropped queue's running handler calls get this long to finish before its offset is kept


@dataclass(frozen=True, slots=True)
class RebalanceSettings:
    client_id: str
    broadcasting: bool
    orderly: bool
    consume_from_first: bool

    @property
    def leases(self) -> bool:
        """Whether queues are held by broker leases: orderly clustering. A broadcasting member consumes every queue
        itself (in order when orderly), with no lease: taken, the first member's shut every other one out."""
        return self.orderly and not self.broadcasting


class RebalanceImpl:
    def __init__(self, consumer: PullConsumer, calls: GroupCalls, offsets: OffsetStore, strategy: AllocateStrategy,
                 settings: RebalanceSettings, topics: Callable[[], list[str]],
                 on_added: Callable[[ProcessQueue], None], interrupted: Callable[[], bool] = lambda: False) -> None:
        self.consumer = consumer
        self.calls = calls
        self.offsets = offsets
        self.strategy = strategy
        self.settings = settings
        self.topics = topics
        self.on_added = on_added
        self.interrupted = interrupted
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        # Orderly: queues being restarted whose handler outlasted the wait: kept (lease and all) until it returns,
        # then taken again by a pass (a new process queue beside the running call consumed the queue twice at once)
        self._restarting: set[MessageQueue] = set()
        # Orderly: process queues leaving this member whose handler outlasted a pass's drop wait, kept until it returns
        # (the objects, not their queues: a queue taken again later is a new process queue, waited for as any)
        self._kept: set[ProcessQueue] = set()
        self._reset_starts: dict[MessageQueue, int] = {}  # where a reset said a queue restarts (taken once)
        # Reset notices not yet acted on: (topic, broker name) -> the new offsets by queue id, merged over notices
        # (every broker leading a static topic's logic queues announces its own under one name); None: all the
        # queues, at their committed offsets (a broker of an older release names none). Set on a session's thread.
        self._resets: dict[tuple[str, str], dict[int, int] | None] = {}
        self._resets_lock = threading.Lock()
        self._held: list[MessageQueue] = []  # as the last finished pass left them
        self._lock = threading.Lock()  # one rebalance at a time

    def rebalance(self) -> bool:
        """Bring the held queues in line with the split; False while something was missing (a route, this member
        not yet in the broker's list, a lease, or the members changed during the pass), so the caller tries again
        soon."""
        with self._lock:
            complete, restarted = self._finish_restarts()
            brokers: set[str] = set()  # those of the normal topics read so far (retry topics come last)
            for topic in sorted(self.topics(), key=is_retry_topic):
                if not complete and self.interrupted():  # the next pass reads the new member list
                    break
                try:
                    complete &= self._rebalance_topic(topic, brokers)
                except MQClientError as exc:
                    if not is_retry_topic(topic):  # a retry topic is created by the first heartbeat
                        log.warning("rebalance_failed topic=%s error=%s", topic, exc)
                    complete = False
            self._held = sorted(self.process_queues)
            # a reset's start is for the pass right after it (or the queue's deferred restart): one left (the queue
            # went to another member meanwhile) must not place the queue, were it ever this member's again
            self._reset_starts = {mq: o for mq, o in self._reset_starts.items() if mq in self._restarting}
            if self.settings.leases:  # a deferred restart this pass gave to another member: its lease is freed
                for mq in restarted:
                    if mq not in self.process_queues:
                        self.calls.unlock(mq)
            return complete

    def _rebalance_topic(self, topic: str, brokers: set[str]) -> bool:
        queues = sorted(self.consumer.queues(topic))
        route_whole = True
        if not is_retry_topic(topic):
            brokers.update(mq.broker_name for mq in queues if not is_logic_queue(mq))
        elif not self.settings.broadcasting:
            # Each broker creates the group's retry topic at this member's first heartbeat and registers it in its
            # own time: a route read in between misses the brokers still to register it, and the retried messages
            # stored there would wait for the next periodic pass (20 s). The next pass comes in a second instead.
            route_whole = brokers <= {mq.broker_name for mq in queues}
        if self.settings.broadcasting:
            mine, complete = queues, True
        else:
            members = self.calls.consumer_list(topic)
            mine = self.strategy(self.settings.client_id, queues, members)
            complete = self.settings.client_id in members
        # (a queue an earlier pass kept for its running handler is dropped once it returned, then taken afresh by
        # the next pass if it is this member's again)
        leaving = [mq for mq, pq in self.process_queues.items() if mq.topic == topic and (
            mq not in mine or pq.dropped) and mq not in self._restarting]
        for mq in leaving:  # stopped now; their running handler calls are waited for once the new queues are taken:
            self.process_queues[mq].drop_and_wait(0)  # a slow handler held up queues it had nothing to do with
        try:
            complete &= self._take(topic, [mq for mq in mine if mq not in self.process_queues])
        finally:
            route_whole &= self._drop(leaving)
        return complete and route_whole and not any(mq in mine for mq in leaving)

    def _take(self, topic: str, added: list[MessageQueue]) -> bool:
        """Start consuming ``added``; False when one could not be taken now, or the members changed meanwhile."""
        if added and self._interrupted(topic, len(added)):
            return False
        complete = True
        if self.settings.leases and added:
            granted = self.calls.lock(added)
            complete &= len(granted) == len(added)
            added = [mq for mq in added if mq in granted]
        for i, mq in enumerate(added):
            if self._interrupted(topic, len(added) - i):
                if self.settings.leases:
                    for left in added[i:]:
                        self.calls.unlock(left)
                return False
            complete &= self._add(mq)
        return complete

    def _interrupted(self, topic: str, pending: int) -> bool:
        """The members changed since this pass read their list: its remaining queues are left to the next pass."""
        if not self.interrupted():
            return False
        log.info("rebalance_interrupted topic=%s queues_not_taken=%d client=%s", topic, pending,
                 self.settings.client_id)
        return True

    def _add(self, mq: MessageQueue) -> bool:
        try:
            offset, committed = self._start_offset(mq)
        except MQClientError as exc:  # e.g. a logic queue without a leader right now: taken on a later pass
            log.warning("queue_start_deferred queue=%s error=%s", mq, exc)
            if self.settings.leases:
                self.calls.unlock(mq)
            return False
        pq = ProcessQueue(mq, offset)
        if self.settings.orderly:  # (broadcasting: its own without a lease, trusted for good)
            pq.locked, pq.last_lock_s = True, time.monotonic() if self.settings.leases else math.inf
        self.offsets.track(pq, offset)
        if not committed:
            self._commit_start(mq, offset)
        self.process_queues[mq] = pq
        log.info("queue_assigned queue=%s offset=%d client=%s", mq, offset, self.settings.client_id)
        self.on_added(pq)
        return True

    def _start_offset(self, mq: MessageQueue) -> tuple[int, bool]:
        """Where ``mq`` starts, and whether the group had committed it (a reset's offset is committed again: a
        commit of the old position may have landed after the broker's)."""
        reset = self._reset_starts.pop(mq, None)
        if reset is not None:
            return reset, False
        committed = self.offsets.read(mq)
        if committed >= 0:
            return committed, True
        if self.settings.consume_from_first or is_retry_topic(mq.topic):
            return self.consumer.min_offset(mq), False
        return self.consumer.max_offset(mq), False

    def _commit_start(self, mq: MessageQueue, offset: int) -> None:
        """A start the group had not committed is committed at once, before the first pull: a member taking the
        queue next (a rebalance a moment later) starts there, not at the queue's end by then, which skipped what
        this member had not committed yet (a new group whose members started together lost messages)."""
        try:
            self.offsets.persist(mq)
        except MQClientError as exc:  # the commit loop tries again
            log.warning("offset_persist_failed queue=%s offset=%d error=%s", mq, offset, exc)

    def _drop(self, mqs: list[MessageQueue], closing: bool = False) -> bool:
        """Stop the queues, let running calls finish, keep their offsets, forget them (and free their leases).
        Orderly: a queue whose handler outlasts the wait is kept, lease and all, and dropped by a later pass once it
        returned (as upstream's consume lock): freed now, another member consumed it beside the running call. A later
        pass only looks whether it returned: waiting again, every pass held up this member's other queues for as
        long. ``closing`` (the member leaves): every queue is waited for, kept or not, so that its offset is
        committed past what its handler finished. False when one was kept."""
        pqs = [self.process_queues[mq] for mq in mqs]
        deadline = time.monotonic() + DROP_WAIT_S
        kept = []
        for pq in pqs:
            looked_at = pq in self._kept and not closing
            if not pq.drop_and_wait(0.0 if looked_at else max(0.0, deadline - time.monotonic())):
                if pq not in self._kept:  # once: it is looked at again at every pass until its handler returns
                    log.warning("queue_drop_timed_out queue=%s in_flight=%d orderly=%s", pq.mq, pq.in_flight,
                                self.settings.orderly)
                if self.settings.orderly:
                    kept.append(pq)
                    self._kept.add(pq)
        resets = self._pending_resets()  # (after the wait: a notice may have come meanwhile)
        for pq in pqs:
            if pq in kept:
                continue
            if _named(resets, pq.mq):  # its offset was reset: the old position must not be written over it
                log.info("queue_release_uncommitted queue=%s: its offset was reset", pq.mq)
            else:
                self.offsets.update(pq, pq.commit_offset())
                try:
                    self.offsets.persist(pq.mq)
                except MQClientError as exc:
                    log.warning("offset_persist_failed queue=%s error=%s", pq.mq, exc)
            if not self.settings.broadcasting:  # a broadcasting member's progress is its own: kept for its return
                self.offsets.remove(pq.mq)
            if self.settings.leases:
                self.calls.unlock(pq.mq)
            del self.process_queues[pq.mq]
            self._kept.discard(pq)
            log.info("queue_released queue=%s offset=%d client=%s", pq.mq, pq.commit_offset(),
                     self.settings.client_id)
        return not kept

    def renew_leases(self) -> tuple[list[ProcessQueue], int]:
        """Orderly: renew every held lease; a queue whose lease was lost stops until it is regained. Returns the
        queues that hold their lease now, and how many do not."""
        with self._lock:
            pqs = dict(self.process_queues)
        held = self.calls.lock(list(pqs))
        with self._lock:  # dropped (and unlocked) by a rebalance while asked for: let the new owner have it
            for mq in [mq for mq in held if mq not in self.process_queues]:
                self.calls.unlock(mq)
        now = time.monotonic()
        for mq, pq in pqs.items():
            if pq.locked and mq not in held:  # once until regained: retries come every few seconds
                log.warning("queue_lease_lost queue=%s client=%s", mq, self.settings.client_id)
            pq.locked = mq in held
            if pq.locked:
                pq.last_lock_s = now
        locked = [pq for pq in pqs.values() if pq.locked]
        return locked, len(pqs) - len(locked)

    def drop_all(self) -> None:
        with self._lock:
            self._drop(list(self.process_queues), closing=True)
            self._held = []

    def note_reset(self, topic: str, broker_name: str, offsets: Mapping[int, int]) -> None:
        """A reset notice (``offsets`` empty: a broker of an older release, which names none): merged with those
        not yet acted on; :meth:`restart_reset_queues` acts on them."""
        with self._resets_lock:
            key = (topic, broker_name)
            noted = self._resets.get(key, {})
            self._resets[key] = None if not offsets or noted is None else {**noted, **offsets}

    def restart_reset_queues(self) -> None:
        """Restart the queues of every reset noted so far."""
        while True:
            with self._resets_lock:
                if not self._resets:
                    return
                (topic, broker_name), offsets = self._resets.popitem()
            self.restart_queues(topic, broker_name, offsets)

    def _pending_resets(self) -> dict[tuple[str, str], dict[int, int] | None]:
        with self._resets_lock:
            return {key: None if offsets is None else dict(offsets) for key, offsets in self._resets.items()}

    def restart_queues(self, topic: str, broker_name: str, offsets: Mapping[int, int] | None = None) -> None:
        """The group's offsets on the broker's queues of ``topic`` were reset (to ``offsets`` by queue id, when the
        broker said): drop them without keeping their offsets, then take them again from the new ones. Every queue's
        offset is forgotten before any running call is waited for: one finishing meanwhile would set the old
        position again, and the commit loop write it over the reset (it did, for the queues after one with a slow
        handler)."""
        with self._lock:
            pqs = [self.process_queues.pop(mq) for mq in list(self.process_queues)
                   if mq.topic == topic and mq.broker_name == broker_name and (not offsets or mq.queue_id in offsets)]
            self._kept.difference_update(pqs)  # the restart waits for them itself
            for pq in pqs:
                self.offsets.remove(pq.mq)  # (waits for a write of its old position in flight)
                if offsets and pq.mq.queue_id in offsets:
                    self._reset_starts[pq.mq] = offsets[pq.mq.queue_id]
            deadline = time.monotonic() + DROP_WAIT_S
            for pq in pqs:
                if not pq.drop_and_wait(max(0.0, deadline - time.monotonic())) and self.settings.orderly:
                    log.warning("queue_restart_deferred queue=%s in_flight=%d: restarted once its handler returns",
                                pq.mq, pq.in_flight)
                    self.process_queues[pq.mq] = pq  # its lease is kept meanwhile
                    self._restarting.add(pq.mq)
        self.rebalance()
        if self.settings.leases:  # one the pass did not take again (another member's now): its lease is freed
            with self._lock:
                for pq in pqs:
                    if pq.mq not in self.process_queues:
                        self.calls.unlock(pq.mq)

    def _finish_restarts(self) -> tuple[bool, list[MessageQueue]]:
        """Orderly: restart the queues whose handler held up a reset once it returned (taken again by this pass, at
        the reset's offset). Returns whether none still runs, and the queues let go."""
        restarted = []
        for mq in list(self._restarting):
            pq = self.process_queues.get(mq)
            if pq is None or pq.drop_and_wait(0):
                self._restarting.discard(mq)
                self.process_queues.pop(mq, None)
                restarted.append(mq)
        return not self._restarting, restarted

    def held(self) -> list[MessageQueue]:
        """The queues this member consumes, as of its last finished pass."""
        return list(self._held)


def _named(resets: Mapping[tuple[str, str], Mapping[int, int] | None], mq: MessageQueue) -> bool:
    """Whether a reset notice not yet acted on names ``mq``."""
    key = (mq.topic, mq.broker_name)
    if key not in resets:
        return False
    offsets = resets[key]
    return offsets is None or mq.queue_id in offsets

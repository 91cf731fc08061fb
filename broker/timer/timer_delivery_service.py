"""Puts due messages back into their real topic and queue: the timer's one thread.

It sleeps until the earliest pending due time (at most ``max_sleep_s``; a dispatch of an earlier timer wakes it),
takes up to ``batch_size`` due timers in due order, re-encodes each as the message it was (its real topic and
queue, its own properties without the delay and routing ones, the same body, flag, born time and host), appends
them grouped by queue with one put each, waits once for them to be flushed (SYNC_FLUSH: one group commit for the
whole batch, not one per queue), appends a marker naming them to the timer topic's queue 1 (so a slave takes
them out too), then deletes the delivered timers in one WriteBatch. A crash between the put and the delete
delivers those messages again after the restart: at-least-once, never lost.

Never early: a timer is taken only when its due time is at or before the broker's wall clock, and the store time
of the delivered message is taken after that. A timer whose real topic no longer exists here (or whose queue id
is beyond the topic's queues) is dropped with a warning: nobody could read it, and keeping it would retry
forever. So is one the store refuses as illegal (maxMessageSize lowered since the send), or whose topic is deleted
between that check and the put (asked again under the commitlog's lock, as the send path does). A store that
refuses writes (disk full, fail-stop), or an fsync that failed after the put, keeps the timers pending; delivery
retries every second (after a fail-stop, that is after the restart). A pass that raises part-way settles what it
did first: the timers put (or forwarded) are marked and removed, the rest handed back to be taken again.

A static topic's message whose logic queue moved to another broker while it waited is sent to that broker
(``DeliveryRoute``) from a small pool of threads, one forward at a time to each leader (topic and logic queue); a
pass waits for the forwards it started at most ``FORWARD_WAIT_S`` (not at all for a leader whose last forward took
longer), and settles the ones still under way in a later pass. The timers of a forward under way, or that the
leader refused (it is down, or the queue is moving again), are held: ``take_due`` passes over them, so the timers
due after them go out as usual. A refused leader is tried again every second with the first ``batch_size`` timers
it holds, earliest first; once it takes them, the rest are handed back to be taken in due order. Held timers stay
stored: a crash delivers them after the restart as any pending timer.
"""

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol

from broker.store.periodic_service import FailedPassLog
from broker.store.put_message_result import PutMessageResult, PutMessageStatus
from broker.timer.clock_step import ClockStepWatch
from broker.timer.delay_router import DelayRouter, delivered_properties, timer_target
from broker.timer.delivery_route import DeliveryRoute, DeliveryTarget, Forwarded, LocalDelivery
from broker.timer.timer_message_store import TIMER_KEY, Timer, TimerMessageStore, marker_body
from common.message import MessageExt
from common.message_codec import HEADER_SIZE, CorruptRecordError, decode_record, record_parts
from common.timer_topic import TIMER_DELETES_QUEUE_ID, TIMER_TOPIC
from common.wire_batch import WireBatch

log = logging.getLogger(__name__)


class StoreLimits(Protocol):
    max_message_size: int


class RecordLimit(Protocol):
    def max_record_size(self) -> int: ...


class DeliveryStore(Protocol):
    """What the delivery needs of the message store."""

    store_host: bytes

    @property
    def config(self) -> StoreLimits: ...

    @property
    def commit_log(self) -> RecordLimit: ...

    def put_wire_batch(self, batch: WireBatch, *, wait_flushed: bool = True,
                       admit: Callable[[], bool] | None = None) -> PutMessageResult: ...

    def wait_flushed(self, offset: int) -> PutMessageStatus: ...


QueueExists = Callable[[str, int], bool]
TopicConfigured = Callable[[str], bool]
Clock = Callable[[], int]
Group = tuple[str, int, int | None]  # real topic, queue id, logic queue id (a static topic's)
Leader = tuple[str, DeliveryTarget]  # where a static topic's messages are forwarded: topic, logic queue and leader
ILLEGAL = (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
_ONE_ILLEGAL = PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, "one of the batch")  # (see TimerDeliveryService._put)
RETRY_PAUSE_S = 1.0
# A pass takes timers up to this many bytes of records (and batch_size timers): it holds them about three times over
# (stored, decoded, re-encoded), and 400 delayed messages of 4 MiB due together took a broker to 5 GB.
PASS_MAX_BYTES = 32 << 20
FORWARD_WAIT_S = 0.5  # how long a pass waits for the forwards it started (a peer call may take 10 s)
FORWARD_THREADS = 4
SHUTDOWN_FORWARD_WAIT_S = 5.0  # forwards under way at shutdown: settled if they end by then, else sent again later
MAX_UNMARKED = 1 << 16  # keys of timers taken out whose marker the store refused, kept to go with the next one
MARKER_OVERHEAD = HEADER_SIZE + len(TIMER_TOPIC)  # a marker record's bytes besides its body (no properties)
_TIMER_TOPIC = TIMER_TOPIC.encode()
_NEVER = 1 << 62


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Outcome:
    """What a pass did with the timers it took; once settled each is in ``done`` (removed), ``kept`` (given back)
    or held for its logic queue's leader (``_Held``)."""

    done: list[bytes]  # delivered (put and flushed, or forwarded) or dropped
    put: list[bytes] = field(default_factory=list)  # in the commitlog, to be flushed
    kept: list[bytes] = field(default_factory=list)  # not delivered: taken again
    end_offset: int = 0  # of the puts
    failure: Exception | None = None  # what stopped the pass part-way: raised once settled
    started: list[Future[Forwarded]] = field(default_factory=list)  # forwards this pass started (and waits for)


@dataclass
class _Held:
    """The timers of one leader (``Leader``) held by the delivery: not taken again while its forward is under way,
    or, after it refused, until ``retry_at``."""

    sending: list[bytes] = field(default_factory=list)  # the forward under way, in order
    future: Future[Forwarded] | None = None
    parked: list[bytes] = field(default_factory=list)  # taken while it was under way, or refused
    retry_at: float = 0.0  # monotonic: no forward before it
    refused: bool = False  # the last forward was refused
    slow: bool = False  # the last forward outlasted the pass's wait: the next is not waited for


class TimerDeliveryService(threading.Thread):
    def __init__(self, timers: TimerMessageStore, store: DeliveryStore, queue_exists: QueueExists, *,
                 topic_configured: TopicConfigured | None = None, route: DeliveryRoute | None = None,
                 clock_ms: Clock = wall_clock_ms, batch_size: int = 1024, max_sleep_s: float = 0.1,
                 router: DelayRouter | None = None) -> None:
        super().__init__(name="timer-delivery", daemon=True)
        self.timers = timers
        self.store = store
        self.queue_exists = queue_exists
        # None: a topic without a config here is taken for a deleted one (its timers are dropped)
        self.topic_configured = topic_configured
        self._unconfigured_seen: set[str] = set()  # topics delivered to without a config here, each logged once
        self.route = route or LocalDelivery()
        self.store_host = store.store_host
        self.clock_ms = clock_ms
        # level timers a backward step of the clock left due too late (None: not watched)
        self.steps = ClockStepWatch(timers, router, clock_ms()) if router is not None else None
        self.batch_size = batch_size
        self.max_sleep_s = max_sleep_s
        self.delivered = 0
        self.dropped = 0
        self._wakeup = threading.Event()
        self._stopped = threading.Event()
        self._failures = FailedPassLog(log, "timer_delivery_failed")
        self._next_due = 0  # the due time this thread sleeps until (0 while it looks: any dispatch wakes it)
        self._refused_since: float | None = None
        self._unmarked: list[bytes] = []  # taken out, their marker refused: it goes with the next one
        self._forwards_refused: set[Leader] = set()  # each logged once while it lasts
        self._leaders: dict[Leader, _Held] = {}  # under delivery_lock
        self._held = timers.held  # every key in _leaders: take_due passes over them
        self._forwarder = ThreadPoolExecutor(FORWARD_THREADS, thread_name_prefix="timer-forward")
        timers.due_listeners.append(self.on_dispatched)

    def on_dispatched(self, first_due_ms: int) -> None:
        """A dispatch stored timers, the earliest due at ``first_due_ms`` (a reput pass, on either thread)."""
        if first_due_ms < self._next_due and not self._wakeup.is_set():
            self._wakeup.set()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                taken = self.deliver_due()
            except Exception as exc:
                self._failures.failed(exc)
                self._stopped.wait(RETRY_PAUSE_S)
                continue
            if taken:  # (a pass with nothing due proves nothing: the disk may refuse the next batch alike)
                self._failures.succeeded()
            if taken < self.batch_size:  # a full batch: more may be due at once
                self._sleep()

    def _sleep(self) -> None:
        self._wakeup.clear()
        self._next_due = 0
        first = self.timers.first_due()
        self._next_due = _NEVER if first is None else first
        wait_s = self.max_sleep_s if first is None else min(self.max_sleep_s, (first - self.clock_ms()) / 1000)
        if wait_s > 0:
            self._wakeup.wait(wait_s)

    def deliver_due(self) -> int:
        """Deliver the timers due now (up to ``batch_size``); returns how many were taken."""
        with self.timers.delivery_lock:  # a recall waits for this batch to be delivered, or delivers nothing
            taken, kept = self._deliver_due()
        if kept:
            self._stopped.wait(RETRY_PAUSE_S)
        return taken

    def _corrected_due(self, now: int, taken: list[Timer]) -> list[Timer]:
        """Level timers a backward clock step left late (``clock_step.py``) that are due now, within this pass's
        room (``batch_size``, ``PASS_MAX_BYTES``) beside ``taken``; those beyond it are given back for the next."""
        if self.steps is None:
            return []
        seen = {key for key, _ in taken}  # due by its stored time as well: delivered once
        keys = [key for key in self.steps.due(now) if key not in seen]
        room, size = self.batch_size - len(taken), sum(len(raw) for _, raw in taken)
        early: list[Timer] = []
        for i, key in enumerate(keys):
            if len(early) >= room or size >= PASS_MAX_BYTES:
                self.steps.give_back(keys[i:], now)
                break
            for item in self.timers.take_keys([key]):  # one at a time: they may be 4 MiB each
                early.append(item)
                size += len(item[1])
        return early

    def _deliver_due(self) -> tuple[int, int]:
        """(timers taken, timers kept pending because the store refused them; those a leader refused are held)."""
        outcome = _Outcome(done=[])
        self._collect(outcome)
        self._release()
        now = self.clock_ms()
        timers = self.timers.take_due(now, self.batch_size, PASS_MAX_BYTES)
        early = self._corrected_due(now, timers)
        timers += early
        if not timers and not outcome.done:
            return 0, 0
        groups, dropped = self._grouped(timers)
        outcome.done.extend(dropped)
        self._deliver_groups(groups, outcome)
        self._wait_forwards(outcome)
        try:
            self._settle(outcome)
        finally:  # take_due moved the scan floor past them all: what is not removed or held must be handed back
            if outcome.kept:
                self.timers.give_back(min(outcome.kept))
                if early and self.steps is not None:
                    kept = set(outcome.kept)
                    self.steps.give_back([key for key, _ in early if key in kept], now)
        settled = set(outcome.done).union(outcome.kept, self._held)
        assert all(key in settled for key, _ in timers), "a timer taken is neither removed, kept nor held"
        if outcome.failure is not None:
            raise outcome.failure
        by_leader = sum(len(h.parked) + len(h.sending) for h in self._leaders.values() if h.refused)
        if outcome.kept or by_leader:
            self._refused(len(outcome.kept), by_leader)
        elif self._refused_since is not None:
            log.info("timer_delivery_resumed after_s=%.1f", time.monotonic() - self._refused_since)
            self._refused_since = None
        return len(timers), len(outcome.kept)

    def _grouped(self, timers: list[Timer]) -> tuple[dict[Group, list[tuple[bytes, MessageExt]]], list[bytes]]:
        """The timers by the queue they go to, and the keys of those dropped (unreadable)."""
        groups: dict[Group, list[tuple[bytes, MessageExt]]] = defaultdict(list)
        dropped: list[bytes] = []
        for key, record in timers:
            try:
                msg = decode_record(record)
            except CorruptRecordError as exc:
                self._drop("?", -1, 1, f"stored record is corrupt: {exc}")
                dropped.append(key)
                continue
            target = timer_target(msg.raw_properties)
            if target is None:
                self._drop("?", -1, 1, f"timer record at commitlog offset {msg.physical_offset} lacks REAL_TOPIC, "
                           "REAL_QID or TIMER_OUT_MS")
                dropped.append(key)
                continue
            groups[target.topic, target.queue_id, target.logic_queue_id].append((key, msg))
        return groups, dropped

    def _deliver_groups(self, groups: dict[Group, list[tuple[bytes, MessageExt]]], outcome: _Outcome) -> None:
        """One put (or forward) a queue. An exception stops the pass there (kept in the outcome, raised once the
        outcome is settled): the queues not tried yet are kept, to be taken again, while what was put or forwarded
        before it is marked and removed as in a pass that went through."""
        in_order = list(groups.items())
        tried = 0
        try:
            for (topic, queue_id, logic_queue_id), items in in_order:
                self._deliver_group(outcome, topic, queue_id, logic_queue_id, items)
                tried += 1
        except Exception as exc:
            outcome.failure = exc
            outcome.kept.extend(key for _, items in in_order[tried:] for key, _ in items)

    def _deliver_group(self, outcome: _Outcome, topic: str, queue_id: int, logic_queue_id: int | None,
                       items: list[tuple[bytes, MessageExt]]) -> None:
        configured = self.topic_configured is None or self.topic_configured(topic)
        stale_before = self.timers.stale_before(topic, configured)
        if stale_before >= 0:  # recorded before the topic's deletion: for the topic that is gone, not one made again
            stale = [k for k, m in items if m.physical_offset < stale_before]
            if stale:
                self._drop(topic, queue_id, len(stale), "the topic was deleted after the message was sent" if
                           configured else "the topic has no config here and may have been deleted since the send")
                outcome.done.extend(stale)
                items = [(k, m) for k, m in items if m.physical_offset >= stale_before]
                if not items:
                    return
        keys = [k for k, _ in items]
        where = self.route.target(topic, queue_id, logic_queue_id)
        if where.broker is not None:  # stored by the leader once forwarded: nothing to flush here
            self._forward(outcome, (topic, where), items)
            return
        result = self._put(topic, where.queue_id, [m for _, m in items])
        if result is _ONE_ILLEGAL:  # the store refuses one of them for good: each alone, so only that one drops
            for key, msg in items:
                self._record_put(outcome, [key], self._put(topic, where.queue_id, [msg]))
            return
        self._record_put(outcome, keys, result)

    @staticmethod
    def _record_put(outcome: _Outcome, keys: list[bytes], result: PutMessageResult | None) -> None:
        if result is None:
            outcome.done.extend(keys)  # dropped
        elif result.append is not None:
            outcome.put.extend(keys)
            outcome.end_offset = max(outcome.end_offset, result.append.end_offset)
        else:
            outcome.kept.extend(keys)

    def _settle(self, outcome: _Outcome) -> None:
        """Wait for the puts' flush, then mark and remove the timers delivered or dropped."""
        put, outcome.put = outcome.put, []
        if put:
            flushed = self.store.wait_flushed(outcome.end_offset)
            if flushed is PutMessageStatus.SERVICE_NOT_AVAILABLE:
                outcome.kept.extend(put)  # the fsync failed: they may be lost; delivered again after the restart
            else:
                if flushed is PutMessageStatus.FLUSH_DISK_TIMEOUT:  # as a send answers: stored, not yet on disk
                    log.warning("timer_delivery_flush_timeout count=%d", len(put))
                self.delivered += len(put)
                outcome.done.extend(put)
        self._mark_taken_out(outcome.done)
        self.timers.remove(outcome.done)

    def _mark_taken_out(self, keys: list[bytes]) -> None:
        """The markers of the timers delivered or dropped (see broker/timer/timer_message_store.py), so that a
        slave, once promoted, does not deliver them again: records of at most maxMessageSize bytes. Not waited for:
        a crash before they are stored delivers those messages once more, as a crash before the delete does. Keys
        whose marker the store refused go with the next one."""
        keys = self._unmarked + keys
        if not keys:
            return
        body_bytes = min(self.store.config.max_message_size, self.store.commit_log.max_record_size() - MARKER_OVERHEAD)
        per_record = max(1, body_bytes // TIMER_KEY.size)
        bodies = [marker_body(keys[i:i + per_record]) for i in range(0, len(keys), per_record)]
        marker = WireBatch.of(_TIMER_TOPIC, TIMER_DELETES_QUEUE_ID, bodies, [b""] * len(bodies),
                              born_timestamp=self.clock_ms(), born_host=self.store_host, store_host=self.store_host)
        try:
            result = self.store.put_wire_batch(marker, wait_flushed=False)
            error, for_good = (None, False) if result.append is not None else (result.error, result.status in ILLEGAL)
        except Exception as exc:  # the messages are out already: their timers are deleted all the same
            error, for_good = repr(exc), False
        if error is None:
            if self._unmarked:
                log.info("timer_marker_resumed count=%d", len(keys))
            self._unmarked = []
            return
        if for_good:  # it would be refused again (the store's limits): retrying would block every later marker
            log.error("timer_marker_dropped count=%d error=%r: a slave promoted later delivers them again", len(keys),
                      error)
            self._unmarked = []
            return
        if not self._unmarked:  # once while it lasts
            log.warning("timer_marker_refused count=%d error=%r: kept for the next marker (a slave promoted "
                        "meanwhile delivers them again)", len(keys), error)
        self._unmarked = keys[-MAX_UNMARKED:]

    def _put(self, topic: str, queue_id: int, messages: list[MessageExt]) -> PutMessageResult | None:
        """Append the messages of one queue (not waiting for a flush); None when they are dropped (logged). A result
        without an append is a refusal: retry later. ``_ONE_ILLEGAL``: several, and the store refuses them for good
        (a body over a maxMessageSize lowered since they were sent): put each alone, as all went with it."""
        admit = self._admission(topic, queue_id)
        if admit is None:
            self._drop(topic, queue_id, len(messages), "the topic or queue no longer exists on this broker")
            return None
        raw_topic = topic.encode()
        records = self._records(raw_topic, queue_id, messages)
        # Asked again under the commitlog's lock, where deleteTopic's deletion record appends: a delete right after
        # the check above must not leave the message at the start of a topic made again under the name.
        result = self.store.put_wire_batch(WireBatch.of_records(raw_topic, queue_id, records), wait_flushed=False,
                                           admit=admit)
        if result.status is PutMessageStatus.NOT_ADMITTED:
            self._drop(topic, queue_id, len(messages), "the topic or queue was deleted while it was delivered")
            return None
        if result.status in ILLEGAL:
            if len(messages) > 1:
                return _ONE_ILLEGAL
            self._drop(topic, queue_id, 1, f"refused by the store: {result.error}")
            return None
        return result

    def _admission(self, topic: str, queue_id: int) -> Callable[[], bool] | None:
        """What the put asks under the commitlog's lock; None to drop: a queue of a configured topic that it no
        longer has. A topic with no config here that dispatch never saw deleted is delivered to all the same: a
        replica promoted before it copied a topic made in its master's last seconds holds its timers (replicated)
        but not its config, and the message is the sender's, acknowledged (the topic comes back with its next
        send or updateTopic)."""
        if self.queue_exists(topic, queue_id):
            return lambda: self.queue_exists(topic, queue_id)
        configured = self.topic_configured
        if configured is None or configured(topic):
            return None
        if topic not in self._unconfigured_seen:
            self._unconfigured_seen.add(topic)
            log.warning("timer_delivered_without_topic_config topic=%s queue_id=%d: no config for the topic here "
                        "and no deletion of it seen (a failover before its copy?); create it to consume them",
                        topic, queue_id)
        # still without a config (deleted now, it would have had one), or made meanwhile with the queue
        return lambda: not configured(topic) or self.queue_exists(topic, queue_id)

    def _forward(self, outcome: _Outcome, leader: Leader, items: list[tuple[bytes, MessageExt]]) -> None:
        """Start sending the messages to the broker that leads their logic queue now, unless a forward to it is
        under way or it refused within the last RETRY_PAUSE_S: then they are held until that ends."""
        keys = [k for k, _ in items]
        held = self._leaders.setdefault(leader, _Held())
        if held.future is None and held.retry_at <= time.monotonic():
            topic, target = leader
            records = self._records(topic.encode(), target.queue_id, [m for _, m in items])
            held.future = self._forwarder.submit(self.route.forward, target, topic, records)
            held.future.add_done_callback(lambda _: self._wakeup.set())
            held.sending = keys
            self.timers.forwarding.update(keys)
            if not held.slow:
                outcome.started.append(held.future)
        else:
            held.parked.extend(keys)
        self._held.update(keys)

    def _wait_forwards(self, outcome: _Outcome) -> None:
        """Wait a while for the forwards this pass started; settle those that ended (the others in a later pass)."""
        if not outcome.started:
            return
        wait(outcome.started, timeout=FORWARD_WAIT_S)
        for held in self._leaders.values():
            if held.future is not None:
                held.slow = not held.future.done()
        self._collect(outcome)

    def _collect(self, outcome: _Outcome) -> None:
        """The forwards that ended: what the leader stored is done, the rest held until RETRY_PAUSE_S from now.
        Once a leader takes a forward whole, the timers held meanwhile are handed back to be taken in due order."""
        for leader, held in list(self._leaders.items()):
            future = held.future
            if future is not None and future.done():
                keys, held.sending, held.future = held.sending, [], None
                self.timers.forwarding.difference_update(keys)
                try:
                    sent = future.result()
                except Exception as exc:  # the route's bug, or a peer call failing unforeseen: as a refusal
                    sent = Forwarded(0, leader[1].broker or "", repr(exc))
                self._forwarded(leader, sent, len(keys))
                self.delivered += sent.taken - sent.dropped
                if sent.dropped:
                    self._drop(leader[0], leader[1].queue_id, sent.dropped, f"refused by logic queue "
                               f"{leader[1].queue_id}'s leader {sent.broker}: {sent.dropped_why}")
                outcome.done.extend(keys[:sent.taken])
                self._held.difference_update(keys[:sent.taken])
                held.refused = sent.error is not None
                if held.refused:
                    held.parked.extend(keys[sent.taken:])
                    held.retry_at = time.monotonic() + RETRY_PAUSE_S
                else:
                    self._hand_back(held.parked)
                    held.parked = []
            if held.future is None and not held.parked and not held.refused:
                del self._leaders[leader]

    def _release(self) -> None:
        """A refused leader's retry is due: its earliest ``batch_size`` held timers are taken again (the rest once
        it takes them)."""
        now = time.monotonic()
        for held in self._leaders.values():
            if held.future is None and held.parked and held.retry_at <= now:
                held.parked.sort()
                released, held.parked = held.parked[:self.batch_size], held.parked[self.batch_size:]
                self._hand_back(released)

    def _hand_back(self, keys: list[bytes]) -> None:
        if keys:
            self._held.difference_update(keys)
            self.timers.give_back(min(keys))

    def _forwarded(self, leader: Leader, sent: Forwarded, count: int) -> None:
        topic, target = leader
        if sent.error is None:
            self._forwards_refused.discard(leader)
            log.info("timer_forwarded topic=%s logic_queue=%d leader=%s count=%d", topic, target.queue_id,
                     sent.broker, sent.taken - sent.dropped)
        elif leader not in self._forwards_refused:  # once while it lasts: tried again every second
            self._forwards_refused.add(leader)
            log.warning("timer_forward_refused topic=%s logic_queue=%d leader=%s stored=%d waiting=%d reason=%r",
                        topic, target.queue_id, sent.broker or "unknown", sent.taken, count - sent.taken,
                        sent.error)

    def _records(self, raw_topic: bytes, queue_id: int, messages: list[MessageExt]) -> list[bytes]:
        """The messages as they were sent: commitlog records of their real topic, without the delay."""
        return [b"".join(record_parts(raw_topic, queue_id, [m.body], [delivered_properties(m.raw_properties)],
                                      born_timestamp=m.born_timestamp, born_host=m.raw_born_host,
                                      store_host=self.store_host, flag=m.flag, sys_flag=m.sys_flag,
                                      reconsume_times=m.reconsume_times))
                for m in messages]

    def _drop(self, topic: str, queue_id: int, count: int, reason: str) -> None:
        self.dropped += count
        log.warning("timer_message_dropped topic=%s queue_id=%d count=%d reason=%r", topic, queue_id, count, reason)

    def _refused(self, by_store: int, by_leader: int) -> None:
        if self._refused_since is None:  # once while it lasts
            self._refused_since = time.monotonic()
            why = " and ".join(w for n, w in ((by_store, "this broker's store takes no writes"),
                                              (by_leader, "a logic queue's leader takes none now")) if n)
            log.warning("timer_delivery_refused pending=%d waiting_store=%d waiting_leader=%d: %s; retrying every %g s",
                        self.timers.pending, by_store, by_leader, why, RETRY_PAUSE_S)

    def shutdown(self) -> None:
        self._stopped.set()
        self._wakeup.set()
        if self.is_alive():
            self.join(timeout=10)
        self._finish_forwards()
        log.info("timer_delivery_stopped delivered=%d dropped=%d pending=%d", self.delivered, self.dropped,
                 self.timers.pending)

    def _finish_forwards(self) -> None:
        """Forwards under way are waited for a while and settled, so a restart does not send them again; one still
        under way after that is (at-least-once, as a crash between a forward and the delete)."""
        with self.timers.delivery_lock:
            under_way = [h.future for h in self._leaders.values() if h.future is not None]
            if under_way:
                wait(under_way, timeout=SHUTDOWN_FORWARD_WAIT_S)
                outcome = _Outcome(done=[])
                self._collect(outcome)
                try:
                    self._settle(outcome)
                except Exception as exc:
                    log.warning("timer_forwards_unsettled count=%d error=%r: sent again after the restart",
                                len(outcome.done), exc)
            # A delivery started again in this process (a replica promoted again) takes them as any pending timer
            self._hand_back(list(self._held))
            self._leaders.clear()
            self.timers.forwarding.clear()
        self._forwarder.shutdown(wait=False)

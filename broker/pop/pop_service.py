"""POP's state machine: which messages a pop hands out, and acks, changes of invisible time and dead-lettering
of handed-out messages. Everything runs under one lock, and every change is written (``PopStateStore``, one
atomic batch) before it is answered; memory mirrors the database, and is reloaded from it if a write fails.

A pop takes, per queue and lowest offset first: messages whose invisible time passed (handed out again with their
reconsume count raised, or dead-lettered once the count reached the group's retryMaxTimes), in a FIFO group the
messages held back earlier, then fresh messages from the scan offset. In a FIFO group a message group with a
message in flight gets no other: its next message is held back until that one is acked or dead-lettered.

The message is dead-lettered (written to %DLQ%<group>) before its in-flight entry is deleted: a crash between
the two writes it to the dead letters twice, never loses it."""

import contextlib
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from broker.pop.pop_queue_state import InFlight, PopKey, QueuePopState
from broker.pop.pop_state_store import PopStateStore, PopWrite
from broker.store.get_message_result import GetMessageResult, GetMessageStatus
from broker.store.message_store_reader import DEFAULT_MAX_TOTAL_BYTES
from common.message_codec import HEADER_SIZE
from common.message_properties import PROPERTY_SHARDING_KEY, find_property
from common.receipt_handle import ReceiptHandle
from common.request_error import RequestError
from common.wire_batch import OFFSET_QUEUE_OFFSET

log = logging.getLogger(__name__)

OFFSET_RECONSUME_TIMES = 72
RECONSUME = struct.Struct(">i")
QUEUE_OFFSET = struct.Struct(">q")
MESSAGE_GROUP_NEEDLE = PROPERTY_SHARDING_KEY.encode() + b"\x01"
MAX_HELD = 4096  # FIFO: messages held back per queue before the scan stops reading ahead
SCAN_BATCH = 32
# What one pop hands out at most, in bytes (always at least one message), as a pull's answer is bounded: a receive
# of 32 messages of a raised maxMessageSize (up to 1 GiB) would pass gRPC's 256 MiB limit on the answer, failing
# every time while its messages were marked in flight.
MAX_POP_BYTES = 64 * 1024 * 1024
GONE = b""  # _read_one: the message no longer exists (compared by identity)

DeadLetter = Callable[[str, str, bytes, int], None]  # group, topic, record, reconsume times
Progress = Callable[[str, str, int, int], None]  # group, topic, queue id, consumed offset


class QueueReader(Protocol):
    """What a pop reads queues with: the store (``MessageStoreReader``), or a static topic's logic queues
    (``broker/pop/logic_queue_reader.py``)."""

    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int = ..., tags_codes: set[int] | None = None) -> GetMessageResult: ...


@dataclass(frozen=True, slots=True)
class PopQuery:
    reader: QueueReader
    group: str
    topic: str
    queue_ids: list[int]  # in the order to try them
    max_nums: int
    invisible_ms: int
    tags_codes: set[int] | None
    fifo: bool
    max_reconsume_times: int
    max_bytes: int = MAX_POP_BYTES


@dataclass(slots=True)
class Popped:
    record: bytes  # as stored, with the reconsume count of this delivery written in
    handle: ReceiptHandle


@dataclass(slots=True)
class PopOutcome:
    popped: list[Popped]
    scan_offsets: dict[int, int]  # queue id -> where fresh messages start (long polling waits past it)
    next_expiry_ms: int | None  # nothing popped: the soonest an in-flight message of these queues is due again


class HandleRefused(Exception):
    """A receipt handle that names no current delivery (acked, handed out again, or past its invisible time)."""


class QueueUnavailable(Exception):
    """A queue's start or its group's committed offset cannot be read now (a broker holding an older link of a static
    topic's logic queue is down): the queue is passed over by this pop and tried again at the next; the pop fails
    only when every queue it asked for is so."""


class PopService:
    def __init__(self, broker_name: str, db: PopStateStore, dead_letter: DeadLetter,
                 on_progress: Progress, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.broker_name = broker_name
        self.db = db
        self.dead_letter = dead_letter
        self.on_progress = on_progress
        self.clock_ms = clock_ms
        self._lock = threading.RLock()  # re-entrant: a caller may hold it around a call (``held_if_free``)
        self._unavailable: set[PopKey] = set()  # queues passed over for QueueUnavailable (logged when they change)
        self._states = db.load()
        self._last_delivery = _latest_delivery(self._states)
        log.info("pop_state_loaded queues=%d in_flight=%d", len(self._states),
                 sum(len(s.in_flight) for s in self._states.values()))

    @contextlib.contextmanager
    def held_if_free(self) -> Iterator[bool]:
        """POP's lock if no other call holds it now (True: the caller may run a call at once, on its own thread);
        False without waiting."""
        held = self._lock.acquire(blocking=False)
        try:
            yield held
        finally:
            if held:
                self._lock.release()

    # -- pop -------------------------------------------------------------------------------------------------
    def pop(self, query: PopQuery, first_offset: Callable[[int], int],
            committed_offset: Callable[[int], int] = lambda _queue_id: -1) -> PopOutcome:
        """``first_offset(queue_id)``: where a group that never popped this queue starts; ``committed_offset``:
        the group's committed offset on it (-1: none), which pulls (a push consumer of the group) move too."""
        with self._lock:
            try:
                return self._pop(query, first_offset, committed_offset)
            except BaseException:
                self._states = self.db.load()  # a failed read or dead letter mid-pop: back to what is durable
                raise

    def _pop(self, query: PopQuery, first_offset: Callable[[int], int],
             committed_offset: Callable[[int], int]) -> PopOutcome:
        now = self.clock_ms()
        change = PopWrite()
        popped: list[Popped] = []
        scan_offsets: dict[int, int] = {}
        unavailable: list[QueueUnavailable] = []
        for queue_id in query.queue_ids:
            key = (query.group, query.topic, queue_id)
            state = self._states.get(key)
            try:
                if state is None:
                    state = self._states[key] = QueuePopState(first_offset(queue_id))
                    change.scan[key] = state.scan_offset
                elif not state.in_flight and not state.held and (committed := committed_offset(queue_id)) > \
                        state.scan_offset:
                    # Settled up to its scan, the group consumed past it since by pulling (a push consumer of the
                    # group): POP goes on from there, not with what those pulls consumed.
                    state.scan_offset = change.scan[key] = committed
                self._available(key)
            except QueueUnavailable as exc:  # no jump this time; a queue never popped is passed over
                unavailable.append(exc)
                self._passed_over(key, exc)
                if state is None:
                    continue
            if len(popped) < query.max_nums:
                self._pop_queue(query, key, state, now, popped, change)
            scan_offsets[queue_id] = state.scan_offset
        self._write(change)
        if popped:  # the soonest expiry matters only to a pop that waits (found nothing)
            return PopOutcome(popped, scan_offsets, None)
        if len(unavailable) == len(query.queue_ids) and not scan_offsets:
            raise unavailable[0]  # nothing this pop could read: the caller hears why
        expiries = [e for q in query.queue_ids if (state := self._states.get((query.group, query.topic, q)))
                    is not None and (e := state.next_expiry_ms()) is not None]
        return PopOutcome(popped, scan_offsets, min(expiries, default=None))

    def _passed_over(self, key: PopKey, exc: QueueUnavailable) -> None:
        if key not in self._unavailable:  # once while it lasts
            self._unavailable.add(key)
            log.warning("pop_queue_unavailable group=%s topic=%s queue_id=%d reason=%r: passed over until it can be "
                        "read", *key, str(exc))

    def _available(self, key: PopKey) -> None:
        if key in self._unavailable:
            self._unavailable.discard(key)
            log.info("pop_queue_available group=%s topic=%s queue_id=%d", *key)

    def _pop_queue(self, query: PopQuery, key: PopKey, state: QueuePopState, now: int, popped: list[Popped],
                   change: PopWrite) -> None:
        busy = state.busy_groups(now) if query.fifo else set()
        delivery = self._next_delivery()  # what this pop hands out of this queue: one delivery
        for offset in state.expired(now):
            if len(popped) >= query.max_nums:
                return
            entry = state.in_flight[offset]
            if entry.message_group in busy:
                continue
            record = _read_one(query.reader, query.topic, key[2], offset)
            if record is None:  # not readable now (an older item's broker is busy): owed still, tried next pop
                if query.fifo:  # what follows it in its message group waits for it
                    busy.add(entry.message_group)
                continue
            if record is not GONE and entry.reconsume_times >= query.max_reconsume_times:
                self._dead_letter(query, key, offset, record, entry.reconsume_times)
                record = GONE
            if record is GONE:  # dead-lettered, or its commitlog segment expired: nothing is owed any more
                _settle(state, key, offset, change)
                continue
            if not _fits(query, popped, record):  # the answer is full: still due, handed out by the next pop
                return
            self._hand_out(query, key, state, offset, record, entry.reconsume_times + 1, entry.message_group, now,
                           delivery, popped, change)
            if query.fifo:
                busy.add(entry.message_group)
        for offset in sorted(state.held):
            if len(popped) >= query.max_nums:
                return
            group = state.held[offset]
            if group in busy:
                continue
            record = _read_one(query.reader, query.topic, key[2], offset)
            if record is None:  # not readable now: still held, and what follows it in its group waits for it
                busy.add(group)
                continue
            if record is not GONE and not _fits(query, popped, record):  # the answer is full: held for the next pop
                return
            del state.held[offset]
            change.done_held.add((key, offset))
            if record is not GONE:
                self._hand_out(query, key, state, offset, record, 0, group, now, delivery, popped, change)
                busy.add(group)
        self._pop_fresh(query, key, state, now, delivery, busy, popped, change)

    def _pop_fresh(self, query: PopQuery, key: PopKey, state: QueuePopState, now: int, delivery: int,
                   busy: set[str], popped: list[Popped], change: PopWrite) -> None:
        start = state.scan_offset
        full = False
        size = _answer_bytes(popped)  # kept up to date below: one sum per pop, not per message
        while not full and len(popped) < query.max_nums and len(state.held) < MAX_HELD:
            want = query.max_nums - len(popped)
            room = query.max_bytes - size
            if popped and room <= 0:
                break
            result = query.reader.get_message(query.topic, key[2], state.scan_offset,
                                              max(want, SCAN_BATCH) if query.fifo else want,
                                              max_total_bytes=max(min(room, DEFAULT_MAX_TOTAL_BYTES), 1),
                                              tags_codes=query.tags_codes)
            if result.status is GetMessageStatus.OFFSET_TOO_SMALL:  # expired before anyone popped them
                state.scan_offset = result.next_begin_offset
                continue
            if not result.messages:
                if result.status is GetMessageStatus.NO_MATCHED_MESSAGE:  # filtered out: done with them
                    state.scan_offset = result.next_begin_offset
                break
            for record in result.messages:
                offset = _queue_offset(record)
                group = _message_group(record) if query.fifo else ""
                if group not in busy and popped and size + len(record) > query.max_bytes:
                    full = True  # the answer is full: this one starts the next pop (see _fits)
                    break
                state.scan_offset = offset + 1
                if group in busy:
                    state.held[offset] = group
                    change.held[(key, offset)] = group
                    continue
                self._hand_out(query, key, state, offset, record, 0, group, now, delivery, popped, change)
                size += len(record)
                if query.fifo:
                    busy.add(group)
                if len(popped) >= query.max_nums:
                    break
            else:
                state.scan_offset = max(state.scan_offset, result.next_begin_offset)
        if state.scan_offset != start:
            change.scan[key] = state.scan_offset

    def _dead_letter(self, query: PopQuery, key: PopKey, offset: int, record: bytes, reconsume_times: int) -> None:
        """Into %DLQ%<group>, or dropped (logged) when the write refuses it for good: that refusal would come at
        every pop, and abort each one, so the group would get nothing more. A failure that may pass (a full disk)
        still aborts the pop, which leaves the message owed."""
        try:
            self.dead_letter(query.group, query.topic, record, reconsume_times)
        except RequestError as exc:
            log.error("pop_dead_letter_refused group=%s topic=%s queue=%d offset=%d reconsume_times=%d error=%r "
                      "action=dropped", *key, offset, reconsume_times, str(exc))
            return
        log.info("pop_dead_lettered group=%s topic=%s queue=%d offset=%d reconsume_times=%d", *key, offset,
                 reconsume_times)

    def _hand_out(self, query: PopQuery, key: PopKey, state: QueuePopState, offset: int, record: bytes,
                  reconsume_times: int, message_group: str, now: int, delivery: int, popped: list[Popped],
                  change: PopWrite) -> None:
        entry = InFlight(now + query.invisible_ms, reconsume_times, delivery, message_group)
        _put(state, key, offset, entry, change)
        if reconsume_times:
            patched = bytearray(record)
            RECONSUME.pack_into(patched, OFFSET_RECONSUME_TIMES, reconsume_times)
            record = bytes(patched)
        popped.append(Popped(record, self._handle(key, offset, entry)))

    # -- ack, change invisible time, dead letter -------------------------------------------------------------
    def ack(self, group: str, topic: str, handles: list[ReceiptHandle]) -> list[str | None]:
        """Per handle: None when acked, else why it was refused."""
        with self._lock:
            now = self.clock_ms()
            change = PopWrite()
            answers: list[str | None] = []
            for handle in handles:
                key = (group, topic, handle.queue_id)
                why = self._refusal(key, handle, now)
                if why is None:
                    _settle(self._states[key], key, handle.queue_offset, change)
                answers.append(why)
            self._write(change)
            return answers

    def change_invisible_time(self, group: str, topic: str, handle: ReceiptHandle, invisible_ms: int,
                              undelivered: bool = False) -> ReceiptHandle:
        """``undelivered``: the message never reached its consumer; its next delivery keeps this one's count (one
        less is kept, as a delivery adds one). Counted, a client whose receives kept failing had a batch of good
        messages dead-lettered in about a second (the Node.js client review)."""
        with self._lock:
            now = self.clock_ms()
            key = (group, topic, handle.queue_id)
            why = self._refusal(key, handle, now)
            if why is not None:
                raise HandleRefused(why)
            state = self._states[key]
            old = state.in_flight[handle.queue_offset]
            entry = InFlight(now + invisible_ms, old.reconsume_times - undelivered, self._next_delivery(),
                             old.message_group)
            change = PopWrite()
            _put(state, key, handle.queue_offset, entry, change)  # a delivery of its own, with its own time
            self._write(change)
            return self._handle(key, handle.queue_offset, entry)

    def forward_to_dead_letter(self, group: str, topic: str, handle: ReceiptHandle, reader: QueueReader) -> None:
        """The consumer gave up on the message: it goes to %DLQ%<group> now and is done."""
        with self._lock:
            key = (group, topic, handle.queue_id)
            why = self._refusal(key, handle, self.clock_ms())
            if why is not None:
                raise HandleRefused(why)
            entry = self._states[key].in_flight[handle.queue_offset]
            record = _read_one(reader, topic, handle.queue_id, handle.queue_offset)
            if record is None:
                raise HandleRefused(f"the message at offset {handle.queue_offset} cannot be read now: try again")
            if record is not GONE:
                self.dead_letter(group, topic, record, entry.reconsume_times)
            change = PopWrite()
            _settle(self._states[key], key, handle.queue_offset, change)
            self._write(change)

    def forget(self, why: str) -> None:
        """This broker follows another master now: what it kept is stale (that master's copy replaces it:
        :meth:`install`); kept, it would be wrong the next time this broker leads."""
        with self._lock:
            if self._states:
                log.warning("pop_state_forgotten queues=%d reason=%r", len(self._states), why)
            self.db.clear()
            self._states = {}

    def clamp(self, end_of: Callable[[str, int], int | None]) -> None:
        """A promoted slave's copy may name messages that never reached it (asynchronous replication): each queue's
        scan offset is lowered to the queue's end here (``end_of(topic, queue id)``; None: unknown, left as is),
        and what was in flight or held at or past it is dropped, before new messages take those offsets."""
        with self._lock:
            change = PopWrite()
            for key, state in self._states.items():
                try:
                    end = end_of(key[1], key[2])
                except Exception as exc:  # (a queue the topic no longer has): left as is, as an unknown end
                    log.warning("pop_queue_end_unknown group=%s topic=%s queue=%d error=%r", *key, exc)
                    end = None
                if end is None or state.scan_offset <= end:
                    continue
                log.warning("pop_scan_offset_lowered group=%s topic=%s queue=%d from=%d to=%d reason=promoted",
                            *key, state.scan_offset, end)
                state.scan_offset = change.scan[key] = end
                for offset in [o for o in state.in_flight if o >= end]:
                    _settle(state, key, offset, change)
                for offset in [o for o in state.held if o >= end]:
                    del state.held[offset]
                    change.done_held.add((key, offset))
            self._write(change)

    # -- a slave's copy (broker/ha/slave_synchronize.py) ---------------------------------------------------------
    def snapshot(self) -> bytes:
        """The whole state as of now, consistent (no call changes it meanwhile): what a slave installs."""
        with self._lock:
            return self.db.snapshot()

    def snapshot_since(self, known: str) -> tuple[str, bytes | None]:
        """The state's version and, unless that is still ``known`` (the version of a slave's copy), the
        :meth:`snapshot` of it: an unchanged state is neither read nor sent again."""
        with self._lock:
            version = self.db.version
            return version, (None if version == known else self.db.snapshot())

    def copied_from(self) -> str:
        """The master's version this state is an unchanged copy of ("": none)."""
        with self._lock:
            return self.db.copied_from

    def install(self, snapshot: bytes, still_following: Callable[[], bool], version: str = "") -> bool:
        """A slave takes its master's :meth:`snapshot` (of ``version``) as its own state, durably: promoted, it
        hands out what the master had not (as of the copy) and accepts the master's receipt handles. Nothing is
        installed once ``still_following()`` is False (checked under POP's lock, so a late copy never overwrites
        what this broker did as master); False then."""
        with self._lock:
            if not still_following():
                return False
            self.db.replace_with(snapshot)
            self._states = self.db.load()
            self.db.copied_from = version  # only once loaded: a copy that failed to load is taken again
            self._last_delivery = max(self._last_delivery, _latest_delivery(self._states))
            return True

    def forget_queues(self, topic: str, queue_ids: list[int] | None, reason: str) -> None:
        """Every group's state of these queues (None: of all the topic's): the next pop starts from the group's
        committed offset."""
        keys = self._forget(lambda key: key[1] == topic and (queue_ids is None or key[2] in queue_ids))
        if keys:
            log.info("pop_state_forgotten topic=%s queues=%s groups=%d reason=%s", topic,
                     sorted({k[2] for k in keys}), len({k[0] for k in keys}), reason)

    def forget_group(self, group: str, reason: str) -> None:
        """The group's state of every queue (its config was deleted): what it had in flight is owed to nobody now;
        a group made again under the name starts from its committed offsets."""
        keys = self._forget(lambda key: key[0] == group)
        if keys:
            log.info("pop_state_forgotten group=%s queues=%d in_topics=%d reason=%s", group, len(keys),
                     len({k[1] for k in keys}), reason)

    def _forget(self, forgotten: Callable[[PopKey], bool]) -> list[PopKey]:
        with self._lock:
            keys = [k for k in self._states if forgotten(k)]
            if not keys:
                return keys
            change = PopWrite()
            for key in keys:
                state = self._states[key]
                change.deliveries.update({(key, d): {} for d in state.deliveries})
                change.done_held |= {(key, o) for o in state.held}
                change.done_scan.add(key)
            self.db.write(change)  # first: refused, the states stay, and a retry forgets them again
            for key in keys:
                del self._states[key]
            return keys

    def reset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """An operator reset the group's offsets (``resetOffsetByTime``): its queues restart there; what was in
        flight or held back is forgotten (its handles are refused), as the offsets say where to be."""
        with self._lock:
            change = PopWrite()
            for queue_id, offset in offsets.items():
                key = (group, topic, queue_id)
                old = self._states.get(key)
                if old is None:  # never popped here: a first pop starts at the committed offset anyway
                    continue
                change.deliveries.update({(key, d): {} for d in old.deliveries})
                change.done_held |= {(key, o) for o in old.held}
                change.scan[key] = offset
                self._states[key] = QueuePopState(offset)
            self._write(change)
            if change:
                log.info("pop_offsets_reset group=%s topic=%s queues=%s", group, topic, sorted(change.scan))

    def _refusal(self, key: PopKey, handle: ReceiptHandle, now: int) -> str | None:
        if handle.broker_name != self.broker_name:
            return f"receipt handle was issued by broker {handle.broker_name}, not {self.broker_name}"
        state = self._states.get(key)
        entry = state.in_flight.get(handle.queue_offset) if state is not None else None
        if entry is None:
            return (f"no message in flight at offset {handle.queue_offset} of queue {handle.queue_id} for group "
                    f"{key[0]} (acked already, or dead-lettered)")
        if entry.delivery != handle.delivery:
            return "receipt handle is of an earlier delivery (the message was handed out again, or its invisible " \
                   "time changed since)"
        if entry.invisible_until_ms <= now:
            return f"receipt handle expired at {entry.invisible_until_ms} (its invisible time passed)"
        return None

    # -- state ---------------------------------------------------------------------------------------------------
    def _write(self, change: PopWrite) -> None:
        if not change:
            return
        for key, delivery in change.deliveries:  # touched deliveries: what of them is still in flight
            state = self._states.get(key)
            change.deliveries[(key, delivery)] = state.delivery_entries(delivery) if state is not None else {}
        try:
            self.db.write(change)
        except Exception:
            self._states = self.db.load()  # memory ran ahead of what was written: back to what is durable
            raise
        touched = {k for k, _ in (*change.deliveries, *change.held, *change.done_held)}
        for group, topic, queue_id in touched | set(change.scan):
            self.on_progress(group, topic, queue_id, self._states[(group, topic, queue_id)].consumed_offset())

    def _next_delivery(self) -> int:
        # Microseconds of the wall clock, and always rising: a handle from before a restart never matches.
        self._last_delivery = max(self._last_delivery + 1, time.time_ns() // 1000)
        return self._last_delivery

    def _handle(self, key: PopKey, offset: int, entry: InFlight) -> ReceiptHandle:
        return ReceiptHandle(self.broker_name, key[2], offset, entry.delivery, entry.invisible_until_ms,
                             entry.reconsume_times)

    def owed_from(self, group: str, topic: str, queue_id: int) -> int:
        """The lowest offset a pop of the queue may read for the group (0 when it never popped the queue here)."""
        with self._lock:
            state = self._states.get((group, topic, queue_id))
            return state.consumed_offset() if state is not None else 0

    def in_flight_count(self, group: str, topic: str) -> int:
        with self._lock:
            return sum(len(s.in_flight) for (g, t, _), s in self._states.items() if g == group and t == topic)

    def close(self) -> None:
        with self._lock:
            self.db.close()


def _latest_delivery(states: dict[PopKey, QueuePopState]) -> int:
    """The highest delivery number in ``states`` (0 when none): new deliveries are numbered above it."""
    return max((d for s in states.values() for d in s.deliveries), default=0)


def _put(state: QueuePopState, key: PopKey, offset: int, entry: InFlight, change: PopWrite) -> None:
    """``offset`` in flight as ``entry``: its delivery (and the one it leaves, if any) to be written."""
    old = state.in_flight.get(offset)
    if old is not None:
        change.deliveries[(key, old.delivery)] = {}
    state.put_in_flight(offset, entry)
    change.deliveries[(key, entry.delivery)] = {}


def _settle(state: QueuePopState, key: PopKey, offset: int, change: PopWrite) -> None:
    """``offset`` is done (acked, dead-lettered, gone): its delivery to be written without it."""
    change.deliveries[(key, state.remove_in_flight(offset).delivery)] = {}


def _read_one(reader: QueueReader, topic: str, queue_id: int, offset: int) -> bytes | None:
    """The record at ``offset``; :data:`GONE` when it no longer exists (its segment expired: the queue starts
    later, or the read skipped past it); None when it cannot be read now (it is still owed)."""
    result = reader.get_message(topic, queue_id, offset, 1)
    if result.status is GetMessageStatus.FOUND:
        return result.messages[0] if _queue_offset(result.messages[0]) == offset else GONE
    if result.status is GetMessageStatus.OFFSET_TOO_SMALL or (
            result.status is GetMessageStatus.NO_MATCHED_MESSAGE and result.next_begin_offset > offset):
        return GONE
    return None


def _answer_bytes(popped: list[Popped]) -> int:
    return sum(len(p.record) for p in popped)


def _fits(query: PopQuery, popped: list[Popped], record: bytes) -> bool:
    """Whether ``record`` still goes into this pop's answer: the first always does (as a pull answers one message
    larger than its byte limit), the others within ``query.max_bytes``."""
    return not popped or _answer_bytes(popped) + len(record) <= query.max_bytes


def _queue_offset(record: bytes) -> int:
    return int(QUEUE_OFFSET.unpack_from(record, OFFSET_QUEUE_OFFSET)[0])


def _message_group(record: bytes) -> str:
    topic_len = record[88]
    props_len = int.from_bytes(record[89:91], "big")
    start = HEADER_SIZE + topic_len
    group = find_property(record[start:start + props_len], MESSAGE_GROUP_NEEDLE)
    return group.decode(errors="replace") if group is not None else ""

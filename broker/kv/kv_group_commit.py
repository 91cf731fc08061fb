"""Group commit of KV writes: concurrent writers' records are collected, appended together - one commitlog batch
per shard's queue - and answered together once the KV dispatcher applied them.

Why: a put cost mostly per append, not per byte - the store's checks and batch encoding, a commitlog write, a
pass of the dispatch chain with its RocksDB write batch (on the loop for a small group, else after a wake-up of
the reput thread), a wake-up of the writers and an apply timer - and gRPC answers writers released together more
cheaply than one by one.

When a group closes: a lone writer's record is appended at the end of the loop turn it arrived in (it waits
for nothing). Once writers are concurrent - one arrives while others wait, or the last group held more than
one - a group stays open for up to ``LINGER_S``: gRPC hands requests to the loop one at a time, a few hundred
microseconds apart under load, so the records of one loop turn are too few. It closes earlier once as many
records arrived as the last group held, and at least two (the writers answered then are back). It is appended
only once the group before it was applied (``MAX_GROUPS_IN_FLIGHT``; what arrives meanwhile joins it), as
RocketMQ's GroupCommitService gathers the flush requests that arrive during a flush.

What does not change: a write is answered only after its record was applied (in SYNC_FLUSH the reput
dispatches only what was flushed, so also after the fsync); each record keeps its own commitlog offset, by
which a compare-and-set's outcome is found; records are appended in the order they were submitted, so writes
to one key apply in their callers' order of arrival.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.kv.kv_apply_waiters import KvApplyWaiters, StoreFailStopped
from broker.store.put_message_result import AppendResult

# Appends one queue's records as one batch: (shard, queue id, properties, bodies). Raises to refuse them all,
# having written none of them.
AppendGroup = Callable[[int, int, list[bytes], list[bytes]], AppendResult]

# Measured with bench/kv_bench.py's 16 callers: 1 ms made groups of 2-4 records, 3 ms of 4-10 (most closing early,
# when the writers were back), the most puts a second; 5 ms, or no early close, left the broker idle between groups.
LINGER_S = 0.003
MAX_GROUPS_IN_FLIGHT = 1  # appended, not yet applied
# A group this large closes without waiting out the linger: it bounds what a group holds, and how long one
# synchronous append keeps the event loop.
MAX_GROUP_RECORDS = 1024
MAX_GROUP_BYTES = 4 << 20


@dataclass(slots=True)
class _Queued:
    """Records waiting for one queue, in arrival order."""

    shard: int
    properties: list[bytes] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    applied: list["asyncio.Future[int]"] = field(default_factory=list)  # each writer's: its commitlog offset

    def split(self, n: int) -> "_Queued":
        """The first ``n`` records; this keeps the rest."""
        head = _Queued(self.shard, self.properties[:n], self.bodies[:n], self.applied[:n])
        del self.properties[:n], self.bodies[:n], self.applied[:n]
        return head

    def drop_given_up(self) -> None:
        """Leave out the records of writers that gave up (cancelled) before the append: never written."""
        kept = [i for i, future in enumerate(self.applied) if not future.done()]
        self.properties = [self.properties[i] for i in kept]
        self.bodies = [self.bodies[i] for i in kept]
        self.applied = [self.applied[i] for i in kept]


@dataclass(slots=True)
class _Appended:
    """A group in the commitlog, waiting to be applied (the bodies are not kept)."""

    applied: list["asyncio.Future[int]"]
    physical_offsets: list[int]
    on_done: Callable[[int], None]  # called once, with the group's size
    timer: asyncio.TimerHandle | None = None
    done: bool = False

    def settle(self, reason: str | None) -> None:
        """Applied (``reason`` None) or the store fail-stopped: answer every writer still waiting."""
        for future, offset in zip(self.applied, self.physical_offsets, strict=True):
            if future.done():  # the writer gave up (cancelled), or the group timed out
                continue
            if reason is None:
                future.set_result(offset)
            else:
                future.set_exception(StoreFailStopped(reason))
        self._finish()

    def expire(self, timeout_s: float) -> None:
        for future in self.applied:
            if not future.done():
                future.set_exception(TimeoutError(f"not applied within {timeout_s:.0f} s"))
        self._finish()

    def _finish(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if not self.done:  # settled after it expired: let go already
            self.done = True
            self.on_done(len(self.applied))


class KvGroupCommit:
    """Use on the event loop only."""

    def __init__(self, waiters: KvApplyWaiters, append: AppendGroup, apply_timeout_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._waiters = waiters
        self._append = append
        self._apply_timeout_s = apply_timeout_s
        self._queued: dict[int, _Queued] = {}  # by queue id
        self._queued_records = 0
        self._queued_bytes = 0
        self._closing: asyncio.Handle | None = None  # when the queued group closes, once that is scheduled
        self._lingering = False  # _closing is a linger timer, not the end of this loop turn
        self._due = False  # closed while a group was in flight: appended when that one is applied
        self._in_flight = 0  # groups appended, not yet applied
        self._in_flight_records = 0
        self._last_group = 0  # records in the last group appended
        self.groups = 0  # groups appended, and the records they held: their ratio is the mean group size
        self.records = 0

    def submit(self, shard: int, queue_id: int, properties: bytes, body: bytes) -> "asyncio.Future[int]":
        """A future for the record's commitlog offset, set once it was applied. It raises what the append raised
        (nothing of the record's queue was written), TimeoutError (written, not applied in time) or
        StoreFailStopped (written, not applied, and the store stopped)."""
        concurrent = self._queued_records + self._in_flight_records > 0 or self._last_group > 1
        future: asyncio.Future[int] = self._loop.create_future()
        queued = self._queued.get(queue_id)
        if queued is None:
            queued = self._queued[queue_id] = _Queued(shard)
        queued.properties.append(properties)
        queued.bodies.append(body)
        queued.applied.append(future)
        self._queued_records += 1
        self._queued_bytes += len(properties) + len(body)
        if self._closing is None and not self._due:
            self._close_after(LINGER_S if concurrent else 0.0)
        elif self._lingering and (self._queued_records >= max(2, self._last_group) or self._full()):
            self._close_after(0.0)
        return future

    def _full(self) -> bool:
        return self._queued_records >= MAX_GROUP_RECORDS or self._queued_bytes >= MAX_GROUP_BYTES

    def _close_after(self, delay_s: float) -> None:
        if self._closing is not None:
            self._closing.cancel()
        self._lingering = delay_s > 0
        # Without a delay the group still waits for the end of this loop turn: writers that became ready in the
        # same turn join it.
        self._closing = self._loop.call_later(delay_s, self._close) if delay_s else self._loop.call_soon(self._close)

    def _close(self) -> None:
        self._closing = None
        self._lingering = False
        if self._in_flight >= MAX_GROUPS_IN_FLIGHT:
            self._due = True
        else:
            self._commit()

    def _commit(self) -> None:
        """Appends the records queued, up to a group's bounds; what is left is due once this group is applied."""
        self._due = False
        while self._queued:  # (a group applied at once, or refused whole, lets the next go now)
            if self._commit_group(self._take_group()) and self._in_flight >= MAX_GROUPS_IN_FLIGHT:
                break
        self._due = bool(self._queued)

    def _take_group(self) -> dict[int, _Queued]:
        """The oldest records queued, in arrival order per queue, within ``MAX_GROUP_RECORDS`` and
        ``MAX_GROUP_BYTES`` (at least one record). A group closed while another was in flight holds what queued
        meanwhile, which a slow fsync or slave lets grow without bound: one synchronous append on the loop."""
        taken: dict[int, _Queued] = {}
        records = size = 0
        for queue_id, group in list(self._queued.items()):
            n = 0
            while n < len(group.bodies) and (records == 0 or (
                    records < MAX_GROUP_RECORDS and size + len(group.bodies[n]) + len(group.properties[n])
                    <= MAX_GROUP_BYTES)):
                size += len(group.bodies[n]) + len(group.properties[n])
                records += 1
                n += 1
            if n == len(group.bodies):
                taken[queue_id] = self._queued.pop(queue_id)
            else:
                if n:
                    taken[queue_id] = group.split(n)
                break
        self._queued_records -= records
        self._queued_bytes -= size
        return taken

    def _commit_group(self, queued: dict[int, _Queued]) -> bool:
        """Appends ``queued``; whether any of it was (and is in flight now)."""
        writers: list[asyncio.Future[int]] = []
        offsets: list[int] = []
        end_offset = 0
        for queue_id, group in queued.items():
            append = self._append_queue(queue_id, group)
            if append is not None:
                writers += group.applied
                offsets += append.physical_offsets
                end_offset = max(end_offset, append.end_offset)
        if not writers:
            return False
        self.groups += 1
        self.records += len(writers)
        self._last_group = len(writers)
        # Counted before the wait: it may settle (and commit what queued since) from within when_applied.
        self._in_flight += 1
        self._in_flight_records += len(writers)
        appended = _Appended(writers, offsets, self._group_done)
        self._waiters.when_applied(end_offset, appended.settle)
        if not appended.done:
            appended.timer = self._loop.call_later(self._apply_timeout_s, appended.expire, self._apply_timeout_s)
        return True

    def _append_queue(self, queue_id: int, group: _Queued) -> AppendResult | None:
        """One queue's records as one batch; None when none was written (each writer was told why)."""
        if any(future.done() for future in group.applied):
            group.drop_given_up()
            if not group.applied:
                return None
        try:
            return self._append(group.shard, queue_id, group.properties, group.bodies)
        except Exception as exc:  # refused: nothing was written, every writer of the queue hears why
            for future in group.applied:
                future.set_exception(exc)
            return None

    def _group_done(self, records: int) -> None:
        self._in_flight -= 1
        self._in_flight_records -= records
        if self._due:
            self._commit()

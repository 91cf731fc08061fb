"""What the broker knows of its transactions, rebuilt from the half and op queues: pure state, no I/O, no clock.

The check service feeds it the half queue (:meth:`add_half`) and the op queue (:meth:`add_op`) in queue order, from
the progress offsets on; EndTransaction claims a half message (:meth:`begin_end`) and records its end
(:meth:`finish_end`) once the op message is written. From that it answers:

- which half messages are due for a check or a discard (:meth:`due`): one never checked is due
  ``transactionTimeOut`` after it was stored, a checked one ``transactionCheckInterval`` after its last check, and
  one checked ``transactionCheckMax`` times is discarded when due again (upstream: 15 checks, then the discard
  topic). Times are the broker's store times and clock (upstream's born timestamp is the producer's: #9640);
- how far the progress offsets may move (:meth:`progress`): the half offset H past every half message that ended
  with its op message durable (so nothing before H is ever looked at again), the op offset O past every op message
  that names only half messages below H (so every op about a half message at or after H is read again after a
  restart: its end and its check count come back). H is committed before O: a restart with a newer H and an older
  O re-reads ops it does not need; the other way round it would re-check half messages that ended.
- whether an end repeats one already made (answered without a second commit), contradicts it (refused), or names a
  half message that ended so long ago its outcome is no longer kept (refused);
- below which commitlog offset no half message is still needed (:meth:`hold_offset`): the lowest one pending, or,
  lower, where the check service's reading of the half queue stands (``half_message_hold.py`` keeps the commitlog
  from there), and how many half messages reading passed over because their segments were gone.
"""

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from broker.transaction.op_message import OpKind, OpMessage, Outcome

ENDED_KEPT = 100_000  # outcomes kept below the half progress offset, to answer repeated ends

V = TypeVar("V")


@dataclass(slots=True)
class HalfEntry:
    """A half message nobody ended yet."""

    queue_offset: int  # in the half queue: the transaction's key here
    commit_log_offset: int
    store_timestamp: int  # the broker's clock when stored
    producer_group: str


@dataclass(slots=True)
class CheckCount:
    count: int = 0
    last_ms: int = 0  # store time of the last check's op message


@dataclass(frozen=True, slots=True)
class Due:
    checks: list[HalfEntry]
    discards: list[HalfEntry]


class EndDecision(Enum):
    PROCEED = "PROCEED"  # claimed: write it, then finish_end or abort_end
    ALREADY = "ALREADY"  # it ended this way before: answer success, write nothing
    CONFLICT = "CONFLICT"  # it ended the other way
    FORGOTTEN = "FORGOTTEN"  # below the progress offset and its outcome no longer kept
    BUSY = "BUSY"  # another end of it is being written (only when not waiting)


@dataclass(frozen=True, slots=True)
class EndClaim:
    decision: EndDecision
    outcome: Outcome | None = None  # the outcome it had (ALREADY, CONFLICT)
    # PROCEED of a commit or a discard: a commit's real message was written by an end that then failed. Only the
    # COMMIT op is left to write, a discard's too: the message is visible already.
    real_written: bool = False


class TransactionTable:
    def __init__(self, timeout_ms: int, interval_ms: int, check_max: int, ended_kept: int = ENDED_KEPT) -> None:
        self.timeout_ms = timeout_ms
        self.interval_ms = interval_ms
        self.check_max = check_max
        self.ended_kept = ended_kept
        self.half_progress = 0  # H: every half message below it ended durably
        self.op_progress = 0  # O: every op message below it names only half messages below H
        self.half_read = 0  # the next half queue offset to read
        self.op_read = 0  # the next op queue offset to read
        # Every half message stored below this commitlog offset was read (None: the check service does not read
        # here, as on a slave; no hold then).
        self.read_through: int | None = None
        self._cond = threading.Condition()
        self._pending: dict[int, HalfEntry] = {}
        self._checks: dict[int, CheckCount] = {}
        self._ended: OrderedDict[int, Outcome] = OrderedDict()
        self._undurable: dict[int, int] = {}  # ended half offset -> commitlog end of its op message, until flushed
        self._ops: deque[tuple[int, int]] = deque()  # (op queue offset, highest half offset it names), read order
        self._in_flight: set[int] = set()
        self._real_written: set[int] = set()
        # Set once the op queue was read to where the commitlog ended at start: before that an end cannot tell
        # whether it repeats one made before a restart.
        self.ready = threading.Event()

    def start_at(self, half_progress: int, op_progress: int) -> None:
        """Where reading starts (the committed progress offsets); before anything is read."""
        with self._cond:
            self.half_progress = self.half_read = half_progress
            self.op_progress = self.op_read = op_progress

    def lower_half_to(self, end: int) -> bool:
        """The half queue ends at ``end``, below where reading stands (it was cut or deleted under the table):
        reading and H go back to it, and what was known at or past it is dropped, as new half messages take those
        offsets. False if nothing was past ``end``."""
        with self._cond:
            if self.half_read <= end:
                return False
            self.half_read = end
            self.half_progress = min(self.half_progress, end)
            _drop_from(self._pending, end)
            _drop_from(self._checks, end)
            _drop_from(self._ended, end)
            _drop_from(self._undurable, end)
            self._real_written = {q for q in self._real_written if q < end}
            return True

    def lower_op_to(self, end: int) -> bool:
        """The op queue's :meth:`lower_half_to`: new op messages take the offsets from ``end`` on."""
        with self._cond:
            if self.op_read <= end:
                return False
            self.op_read = end
            self.op_progress = min(self.op_progress, end)
            self._ops = deque(item for item in self._ops if item[0] < end)
            return True

    # -- reading the queues ------------------------------------------------------------------------
    def add_half(self, entry: HalfEntry) -> int:
        """Returns how many half messages not ended were passed over below it (their records are gone)."""
        with self._cond:
            q = entry.queue_offset
            if q < self.half_read:
                return 0  # read before
            lost = self._passed_over(q)
            self.half_read = q + 1
            if q not in self._ended:
                self._pending[q] = entry
            return lost

    def skip_halves(self, next_offset: int) -> int:
        """The half queue has nothing readable below ``next_offset`` (expired segments): how many half messages
        not ended that passes over."""
        with self._cond:
            lost = self._passed_over(next_offset)
            self.half_read = max(self.half_read, next_offset)
            return lost

    def _passed_over(self, end: int) -> int:
        """Lock held. The half messages from ``half_read`` to ``end`` that no end names: never read, they are lost."""
        first = self.half_read
        if end <= first:
            return 0
        return end - first - sum(1 for q in self._ended if first <= q < end)

    def hold_offset(self) -> int | None:
        """The commitlog offset below which no half message is still needed: the lowest one pending, or where
        reading stands if lower. None when the half queue is not read here."""
        with self._cond:
            if self.read_through is None:
                return None
            return min(self.read_through, min((e.commit_log_offset for e in self._pending.values()),
                                              default=self.read_through))

    def add_op(self, op_offset: int, op: OpMessage | None, store_timestamp: int, end_offset: int) -> None:
        """The op message at ``op_offset`` (None: one not understood, passed over); ``end_offset`` is the commitlog
        offset after it (its end is durable once the flush passes it)."""
        with self._cond:
            if op_offset < self.op_read:
                return
            self.op_read = op_offset + 1
            if op is None:
                self._ops.append((op_offset, -1))
                return
            if op.kind is OpKind.REMOVE:
                assert op.outcome is not None
                for q in op.half_offsets:
                    self._end(q, op.outcome, end_offset)
            else:
                for q in op.half_offsets:
                    if q not in self._ended:
                        checks = self._checks.setdefault(q, CheckCount())
                        checks.count += 1
                        checks.last_ms = max(checks.last_ms, store_timestamp)
            self._ops.append((op_offset, max(op.half_offsets)))

    def skip_ops(self, next_offset: int) -> None:
        with self._cond:
            self.op_read = max(self.op_read, next_offset)

    def _end(self, q: int, outcome: Outcome, op_end: int) -> None:
        """Lock held. The first outcome recorded stands (an op read back after its end was recorded)."""
        self._pending.pop(q, None)
        self._checks.pop(q, None)
        if q not in self._ended:
            self._ended[q] = outcome
            if q >= self.half_progress:
                self._undurable[q] = op_end

    # -- deciding ----------------------------------------------------------------------------------
    def _due_at(self, entry: HalfEntry) -> int:
        checks = self._checks.get(entry.queue_offset)
        if checks is None or checks.count == 0:
            return entry.store_timestamp + self.timeout_ms
        return checks.last_ms + self.interval_ms

    def due(self, now_ms: int, limit: int) -> Due:
        """Half messages to check and to discard now (at most ``limit`` of them, oldest first), none being ended."""
        checks: list[HalfEntry] = []
        discards: list[HalfEntry] = []
        with self._cond:
            for q in sorted(self._pending):
                entry = self._pending[q]
                if q in self._in_flight or self._due_at(entry) > now_ms:
                    continue
                count = self._checks.get(q, CheckCount()).count
                (discards if count >= self.check_max else checks).append(entry)
                if len(checks) + len(discards) >= limit:
                    break
        return Due(checks, discards)

    def next_due_ms(self) -> int | None:
        """When the next half message known is due; None when none is pending."""
        with self._cond:
            return min(map(self._due_at, self._pending.values()), default=None)

    def check_count(self, half_offset: int) -> int:
        with self._cond:
            checks = self._checks.get(half_offset)
            return checks.count if checks is not None else 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def pending_counting_unread(self, half_queue_end: int) -> int:
        """:attr:`pending`, and the half messages stored since the last read (below ``half_queue_end``, the half
        queue's end) that no end names yet: what an operator means by pending, not only what a pass read."""
        with self._cond:
            return len(self._pending) + self._passed_over(half_queue_end)

    # -- ends --------------------------------------------------------------------------------------
    def begin_end(self, q: int, outcome: Outcome, wait_s: float = 0.0) -> EndClaim:
        """Claim half message ``q`` to end it as ``outcome``. Waits up to ``wait_s`` for the table to be ready and
        for another end of it being written (BUSY after that). A DISCARD of a commit whose op write failed is a
        PROCEED with ``real_written``: the caller writes its COMMIT op instead (nothing else would ever end it)."""
        if not self.ready.wait(wait_s):
            return EndClaim(EndDecision.BUSY)
        with self._cond:
            if not self._cond.wait_for(lambda: q not in self._in_flight, wait_s):
                return EndClaim(EndDecision.BUSY)
            had = self._ended.get(q)
            if had is None and q in self._real_written:
                had = Outcome.COMMIT  # its commit is half written: only a commit, or a discard, finishes it (as COMMIT)
                if outcome in (Outcome.COMMIT, Outcome.DISCARD):
                    self._in_flight.add(q)
                    return EndClaim(EndDecision.PROCEED, real_written=True)
            if had is not None:
                same = had is outcome or (had is Outcome.DISCARD and outcome is Outcome.ROLLBACK)
                return EndClaim(EndDecision.ALREADY if same else EndDecision.CONFLICT, had)
            if q < self.half_progress:
                return EndClaim(EndDecision.FORGOTTEN)
            self._in_flight.add(q)
            return EndClaim(EndDecision.PROCEED)

    def finish_end(self, q: int, outcome: Outcome, op_end: int) -> None:
        """The op message of ``q``'s end is written, ending at commitlog offset ``op_end``."""
        with self._cond:
            self._end(q, outcome, op_end)
            self._in_flight.discard(q)
            self._real_written.discard(q)
            self._cond.notify_all()

    def abort_end(self, q: int, real_written: bool = False) -> None:
        """The end of ``q`` failed; ``real_written``: a commit's real message is stored (its op is not), so a
        retry must not store it again."""
        with self._cond:
            self._in_flight.discard(q)
            if real_written:
                self._real_written.add(q)
            self._cond.notify_all()

    # -- progress ----------------------------------------------------------------------------------
    def progress(self, durable_offset: int) -> tuple[int, int]:
        """Move and return (H, O), given that the commitlog is durable below ``durable_offset``."""
        with self._cond:
            for q, op_end in list(self._undurable.items()):
                if op_end <= durable_offset:
                    del self._undurable[q]
            h = min(self.half_read, min(self._pending, default=self.half_read),
                    min(self._undurable, default=self.half_read), min(self._in_flight, default=self.half_read))
            self.half_progress = max(self.half_progress, h)
            ops = self._ops
            while ops and ops[0][1] < self.half_progress:
                ops.popleft()
            self.op_progress = max(self.op_progress, ops[0][0] if ops else self.op_read)
            self._forget_below(self.half_progress)
            return self.half_progress, self.op_progress

    def _forget_below(self, h: int) -> None:
        """Lock held. Outcomes below H are kept only to answer repeated ends, up to ``ended_kept`` of them."""
        ended = self._ended
        if len(ended) > self.ended_kept:  # oldest recorded first; those at or after H are still needed
            for q in [q for q in ended if q < h][: len(ended) - self.ended_kept]:
                del ended[q]
        for q in [q for q in self._checks if q < h]:  # checks of half messages read before H (after a restart)
            del self._checks[q]


def _drop_from(known: dict[int, V], end: int) -> None:
    """What ``known`` holds of half offsets at or past ``end``, dropped."""
    for q in [q for q in known if q >= end]:
        del known[q]

"""The messages of one queue a push consumer has pulled and not yet finished (upstream's ProcessQueue).

Messages are kept as the runs the pulls returned (a run: consecutive offsets), each with a done mark per message,
so the bookkeeping is a few operations per run, not per message. The offset to commit is the lowest message not
yet done (or the next pull's offset when all are): a slow or failing message holds the commit point back and
never lets a later one be committed past it. Flow control reads the cached count and bytes. Orderly consumption
also keeps the queue's broker lease here.
"""

import threading
import time
from collections import deque
from collections.abc import Collection, Sequence

from client.pulled_messages import PulledMessages
from common.message import MessageExt
from common.message_queue import MessageQueue

_task = threading.local()  # ``pq``: the process queue whose task this thread runs now (between begin and end)


class Run:
    """Messages of one pull, in offset order (decoded when first read, by the thread that handles them); ``low`` is
    the first one not done; ``bytes`` what they weigh for flow control."""

    __slots__ = ("bytes", "done", "forgotten", "last", "left", "low", "msgs")

    def __init__(self, msgs: Sequence[MessageExt], size: int) -> None:
        self.msgs = msgs
        self.last = _last_offset(msgs)
        self.done = bytearray(len(msgs))
        self.low = 0
        self.left = len(msgs)
        self.bytes = size
        self.forgotten = False  # the queue was reset while it was handled: it counts no more


def _last_offset(msgs: Sequence[MessageExt]) -> int:
    if not msgs:
        return -1
    if isinstance(msgs, PulledMessages):
        return msgs.queue_offset_at(len(msgs) - 1)
    return msgs[-1].queue_offset


class ProcessQueue:
    def __init__(self, mq: MessageQueue, next_offset: int) -> None:
        self.mq = mq
        self.next_offset = next_offset  # where the next pull starts
        self.dropped = False
        self.locked = False  # orderly: this member holds the queue's lease
        self.last_lock_s = 0.0
        # orderly: failed tries of the messages not yet done, by offset; kept here, they go when the queue goes (a
        # queue dropped between tries was kept alive, with its cached messages, by the consume service's table)
        self.tries: dict[int, int] = {}
        self.in_flight = 0  # handler calls (tasks) running now
        self.held_by_span = False  # concurrently: pulls wait for the oldest message not done (said once a hold)
        self._runs: deque[Run] = deque()
        self._count = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def put(self, msgs: Sequence[MessageExt], size: int, next_offset: int) -> Run | None:
        """A pull's messages, and where the next pull starts, together: apart, a commit offset read between them (a
        task finishing the earlier run, a rebalance dropping the queue) was the new next offset with the run not
        cached yet, past messages nobody handled. None when the queue was dropped meanwhile (nobody handles it; the
        drop committed what came before it)."""
        run = Run(msgs, size)
        with self._lock:
            if self.dropped:
                return None
            self._runs.append(run)
            self._count += len(msgs)
            self._bytes += run.bytes
            self.next_offset = next_offset
        return run

    def finish(self, run: Run, start: int, stop: int, kept: Collection[int] = ()) -> int:
        """Mark messages ``start..stop-1`` of ``run`` done, except ``kept``; returns the offset to commit now."""
        with self._lock:
            if run.forgotten:  # (its messages left the counts at the reset: they must not go below zero)
                return self._commit_offset()
            done = run.done
            if not kept and not any(done[start:stop]):  # the common case: a whole task's messages, once
                done[start:stop] = b"\x01" * (stop - start)
                run.left -= stop - start
                self._count -= stop - start
            else:
                for i in range(start, stop):
                    if not done[i] and i not in kept:
                        done[i] = 1
                        run.left -= 1
                        self._count -= 1
            low = done.find(0, run.low)
            run.low = len(done) if low < 0 else low
            runs = self._runs
            while runs and not runs[0].left:
                self._bytes -= runs.popleft().bytes
            return self._commit_offset()

    def commit_offset(self) -> int:
        with self._lock:
            return self._commit_offset()

    def _commit_offset(self) -> int:
        if not self._runs:
            return self.next_offset
        run = self._runs[0]
        return run.msgs[run.low].queue_offset

    def first(self) -> tuple[Run, int] | None:
        """Orderly: the next message not done, in queue order (its run and index)."""
        with self._lock:
            if not self._runs:
                return None
            run = self._runs[0]
            return run, run.low

    def span(self) -> int:
        """Offsets from the oldest message not done to the newest message cached (upstream's maxSpan): how far
        finished messages wait behind it (their runs are kept until it is done). Offsets a tag filter skipped after
        the newest do not count: a sparse tag's one message in progress held its queue."""
        with self._lock:
            return self._runs[-1].last - self._commit_offset() if self._runs else 0

    def cached(self) -> tuple[int, int]:
        """Messages and body bytes waiting or in progress."""
        with self._lock:
            return self._count, self._bytes

    def reset(self, next_offset: int) -> None:
        """Offsets moved: forget what was pulled, start again at ``next_offset``."""
        with self._lock:
            for run in self._runs:
                run.forgotten = True
            self._runs.clear()
            self._count = self._bytes = 0
            self.next_offset = next_offset

    # -- handler calls, so a dropped queue can wait for the ones running ------------------------
    def begin(self) -> bool:
        """A task starts; False when the queue was dropped (the task must not run)."""
        with self._lock:
            if self.dropped:
                return False
            self.in_flight += 1
        _task.pq = self
        return True

    def end(self) -> None:
        _task.pq = None
        with self._lock:
            self.in_flight -= 1
            if self.in_flight <= 1:  # (1: a drop by the queue's own task waits for the others alone)
                self._idle.notify_all()

    def drop_and_wait(self, timeout_s: float) -> bool:
        """Stop handing out messages; wait for the tasks running now. False if they outlasted ``timeout_s``. A task
        of this queue dropping it (its handler closed the consumer) does not wait for itself."""
        deadline = time.monotonic() + timeout_s
        own = 1 if getattr(_task, "pq", None) is self else 0
        with self._lock:
            self.dropped = True
            while self.in_flight > own:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

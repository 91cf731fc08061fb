"""Every queue a push consumer holds keeps one long-polling pull in flight (upstream's PullMessageService).

Pulls are asynchronous. An answer is handled where it arrives, on the thread that reads the broker's stream
(callers never block there): its messages are cached in the queue's process queue, the next pull goes out and the
messages go to the consume service, with no hand-off to another thread on the way. The next pull goes out from
there only with the route in the cache; when it needs the name server (every 30 s, when the route expires), this
service's own thread sends it. That thread starts the pulls of queues rebalance hands it and of those waiting out
a pause: a queue over its cache limits waits (flow control) instead of pulling, and a failed pull is tried again
after a pause."""

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from client.callback_future import on_done
from client.client_instance import RouteNotCached
from client.consumer.process_queue import ProcessQueue, Run
from client.errors import MQClientError
from client.pull_consumer import PullConsumer
from client.pulled_messages import PulledMessages
from client.results import PullResult, PullStatus
from common.message import MessageExt

log = logging.getLogger(__name__)


def records_size(msgs: Sequence[MessageExt]) -> int:
    """Bytes of a pull's records (without decoding them when they are still raw)."""
    if isinstance(msgs, PulledMessages):
        return msgs.nbytes
    return sum(len(m.body) for m in msgs)

FLOW_CONTROL_PAUSE_S = 0.05
PULL_FAILURE_PAUSE_S = 1.0
NOT_LOCKED_PAUSE_S = 0.5


@dataclass(frozen=True, slots=True)
class PullSettings:
    batch_size: int = 32
    long_poll_ms: int = 15_000
    cached_messages_limit: int = 1000  # per queue (upstream's pullThresholdForQueue)
    cached_bytes_limit: int = 100 * 1024 * 1024  # per queue (pullThresholdSizeForQueue, MiB)
    # Concurrently: offsets from a queue's oldest message not done to its newest cached one (upstream's
    # consumeConcurrentlyMaxSpan, ProcessQueue.span). Past it the queue waits: behind one message a handler holds,
    # pulls went on and the finished ones piled up (with 100-byte messages, 450,000 and 433 MiB a queue) while the
    # committed offset stayed at the held one.
    max_span: int = 2000


class PullMessageService(threading.Thread):
    def __init__(self, consumer: PullConsumer, settings: PullSettings, expression: Callable[[str], str],
                 on_messages: Callable[[ProcessQueue, Run], None],
                 on_offset_moved: Callable[[ProcessQueue, int], None], orderly: bool,
                 on_passed: Callable[[ProcessQueue], None] = lambda _pq: None) -> None:
        super().__init__(name="push-pull", daemon=True)
        self.consumer = consumer
        self.settings = settings
        self.expression = expression
        self.on_messages = on_messages
        self.on_offset_moved = on_offset_moved
        # A pull moved the queue's next offset past messages the filter skipped: its progress may be committed.
        self.on_passed = on_passed
        self.orderly = orderly
        # (queue, pause in seconds): pull it now (0) or after the pause; None wakes the thread to stop.
        self._events: queue.SimpleQueue[tuple[ProcessQueue, float] | None] = queue.SimpleQueue()
        self._delayed: list[tuple[float, int, ProcessQueue]] = []  # this thread's alone
        self._seq = itertools.count()
        self._stopped = threading.Event()

    def pull_now(self, pq: ProcessQueue) -> None:
        self._events.put((pq, 0.0))

    def run(self) -> None:
        while not self._stopped.is_set():
            timeout = self._delayed[0][0] - time.monotonic() if self._delayed else None
            try:
                event = self._events.get(timeout=max(0.0, timeout) if timeout is not None else None)
            except queue.Empty:
                event = None
            if event is None and self._stopped.is_set():
                return
            if event is not None:
                pq, pause_s = event
                if pause_s:
                    heapq.heappush(self._delayed, (time.monotonic() + pause_s, next(self._seq), pq))
                else:
                    self._pull(pq)
            self._due()

    def _due(self) -> None:
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            self._pull(heapq.heappop(self._delayed)[2])

    def _later(self, pq: ProcessQueue, pause_s: float) -> None:
        """Any thread: this service's thread pulls ``pq`` again after ``pause_s``."""
        self._events.put((pq, pause_s))

    def _pull(self, pq: ProcessQueue) -> None:
        if pq.dropped or self._stopped.is_set():
            return
        count, size = pq.cached()
        if count >= self.settings.cached_messages_limit or size >= self.settings.cached_bytes_limit:
            self._later(pq, FLOW_CONTROL_PAUSE_S)
            return
        if not self.orderly and pq.span() > self.settings.max_span:
            if not pq.held_by_span:  # said once a hold: it lasts as long as the handler holds its message
                pq.held_by_span = True
                log.warning("queue_held_by_span queue=%s oldest_not_done=%d next_offset=%d max_span=%d: a message "
                            "not finished for long holds the queue's pulls and committed offset", pq.mq,
                            pq.commit_offset(), pq.next_offset, self.settings.max_span)
            self._later(pq, FLOW_CONTROL_PAUSE_S)
            return
        pq.held_by_span = False
        if self.orderly and not pq.locked:
            self._later(pq, NOT_LOCKED_PAUSE_S)
            return
        try:
            if threading.current_thread() is self:
                future = self._pull_async(pq)
            else:  # an answer's thread (a stream's reader): it must not wait for the name server
                with self.consumer.client.cache_only():
                    future = self._pull_async(pq)
                if future.done() and isinstance(future.exception(), RouteNotCached):
                    self.pull_now(pq)  # this service's thread looks the route up
                    return
        except MQClientError as exc:
            self._failed(pq, exc)
            return
        on_done(future, lambda f: self._answered(pq, f))  # inline: the next pull goes from the answer's thread

    def _pull_async(self, pq: ProcessQueue) -> Future:
        s = self.settings
        return self.consumer.pull_async(pq.mq, pq.next_offset, s.batch_size, self.expression(pq.mq.topic),
                                        suspend_ms=s.long_poll_ms)

    def _answered(self, pq: ProcessQueue, answer: Future) -> None:
        """The stream reader's thread (or the caller's, for a pull that failed at once)."""
        if pq.dropped or self._stopped.is_set():
            return
        try:
            run = self._take(pq, answer)
            if run is not None:
                self.on_messages(pq, run)
        except Exception:  # a bug: said here with its queue (the future would log it without one)
            if not self._stopped.is_set():  # closing: the consume pool may be gone already
                log.exception("pull_answer_failed queue=%s next_offset=%d", pq.mq, pq.next_offset)

    def _take(self, pq: ProcessQueue, answer: Future) -> Run | None:
        """Caches what ``answer`` brought and sends the queue's next pull; returns the run to hand to the
        consumers, after the pull went out: the next pull's round trip overlaps their work."""
        try:
            result: PullResult = answer.result()
        except MQClientError as exc:
            self._failed(pq, exc)
            return None
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("pull_offset_moved queue=%s from=%d to=%d", pq.mq, pq.next_offset, result.next_begin_offset)
            self.on_offset_moved(pq, result.next_begin_offset)
            self._pull(pq)
            return None
        if result.status is not PullStatus.FOUND:
            if result.next_begin_offset != pq.next_offset:  # (only what the filter skipped lies below it)
                pq.next_offset = result.next_begin_offset
                self.on_passed(pq)
            self._pull(pq)
            return None
        # cached first (flow control counts it), with the next offset
        run = pq.put(result.messages, records_size(result.messages), result.next_begin_offset)
        self._pull(pq)
        return run

    def _failed(self, pq: ProcessQueue, exc: MQClientError) -> None:
        if not self._stopped.is_set():
            log.warning("pull_failed queue=%s error=%s retry_in_s=%.1f", pq.mq, exc, PULL_FAILURE_PAUSE_S)
            self._later(pq, PULL_FAILURE_PAUSE_S)

    def shutdown(self) -> None:
        self._stopped.set()
        self._events.put(None)
        if self.is_alive():
            self.join(timeout=5)

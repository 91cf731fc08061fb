"""Where a push consumer keeps its progress: the brokers for a clustering group (the group shares it), this client's
memory for a broadcasting one (each member reads every message; its progress is its own)."""

import logging
import threading
import time
from collections.abc import Callable

from client.consumer.process_queue import ProcessQueue
from client.errors import MQClientError
from client.pull_consumer import PullConsumer
from common.message_queue import MessageQueue

log = logging.getLogger(__name__)

# An offset that did not change is committed again this often (upstream: every commit pass): a commit a broker could
# not finish (a static topic's older link on a broker that was down: its lag stayed shown for good on an idle group)
# is made again.
RECOMMIT_S = 30.0


class OffsetStore:
    """In-memory offsets; :meth:`persist` writes the changed ones somewhere durable (nowhere, here)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._offsets: dict[MessageQueue, int] = {}
        self._owners: dict[MessageQueue, ProcessQueue] = {}
        self._persisted: dict[MessageQueue, tuple[int, float]] = {}  # offset, when (monotonic)
        self._lock = threading.Lock()
        # Held while an offset is written: :meth:`remove` waits for a write of the queue's old position in flight
        # (after a reset, the next read must not find it landing behind the reset).
        self._writing = threading.Lock()

    def track(self, pq: ProcessQueue, offset: int) -> None:
        """``pq``'s queue is this member's now, starting at ``offset``."""
        with self._lock:
            self._offsets[pq.mq] = offset
            self._owners[pq.mq] = pq

    def update(self, pq: ProcessQueue, offset: int) -> None:
        """Progress of ``pq``. A call finishing after its queue left changes nothing, nor does one finishing after
        the queue was taken again (a reset of the group's offsets restarts it at once): its offset is of the old
        process queue, and written over the reset one it would be persisted at the next commit."""
        with self._lock:
            if self._owners.get(pq.mq) is pq:
                self._offsets[pq.mq] = offset

    def read(self, mq: MessageQueue) -> int:
        """The offset to start ``mq`` at; -1 when none was kept."""
        with self._lock:
            return self._offsets.get(mq, -1)

    def persist(self, mq: MessageQueue) -> None:
        with self._writing:
            with self._lock:
                offset = self._offsets.get(mq)
                persisted, at = self._persisted.get(mq, (None, 0.0))
                if offset is None or (persisted == offset and self._clock() - at < RECOMMIT_S):
                    return
            self._write(mq, offset)
            with self._lock:
                if self._owners.get(mq) is not None:  # (not removed meanwhile)
                    self._persisted[mq] = (offset, self._clock())

    def persist_all(self) -> None:
        with self._lock:
            mqs = list(self._offsets)
        for mq in mqs:
            try:
                self.persist(mq)
            except MQClientError as exc:
                log.warning("offset_persist_failed queue=%s error=%s", mq, exc)

    def remove(self, mq: MessageQueue) -> None:
        """``mq`` left this member: later updates from calls still running must not be written (nor is one being
        written now left to land after this returns)."""
        with self._writing, self._lock:
            self._offsets.pop(mq, None)
            self._owners.pop(mq, None)
            self._persisted.pop(mq, None)

    def _write(self, mq: MessageQueue, offset: int) -> None:
        pass


class RemoteOffsetStore(OffsetStore):
    """A clustering group's offsets, committed to the broker serving each queue."""

    def __init__(self, consumer: PullConsumer) -> None:
        super().__init__()
        self.consumer = consumer

    def read(self, mq: MessageQueue) -> int:
        return self.consumer.committed(mq)

    def _write(self, mq: MessageQueue, offset: int) -> None:
        self.consumer.commit(mq, offset)

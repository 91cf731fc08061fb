"""Orderly consumption: each queue's messages one at a time, in queue order, by one pool thread at a time, and only
while this member holds the queue's lease on the broker.

A message the handler fails suspends its queue for a moment and is tried again in place (the queues of other
members and the other queues of this one go on); after ``max_reconsume_times`` failed tries it is dead-lettered
and the queue moves on (also when the broker refuses the dead letter for good: logged, and skipped).
"""

import logging
import threading
import time

from client.consumer.consume_concurrently_service import Handler, SendBack, handled
from client.consumer.consume_pool import ConsumePool
from client.consumer.group_calls import SendBackRefused
from client.consumer.offset_store import OffsetStore
from client.consumer.process_queue import ProcessQueue, Run
from client.errors import MQClientError
from client.pulled_messages import deliverable
from common.message import MessageExt

log = logging.getLogger(__name__)

SUSPEND_S = 1.0
LEASE_TRUST_S = 30.0  # a lease not renewed this long is not trusted (the broker keeps it 60 s)


class ConsumeOrderlyService:
    def __init__(self, handler: Handler, pool: ConsumePool, offsets: OffsetStore, dead_letter: SendBack,
                 max_reconsume_times: int) -> None:
        self.handler = handler
        self.pool = pool
        self.offsets = offsets
        self.dead_letter = dead_letter
        self.max_reconsume_times = max_reconsume_times
        self._lock = threading.Lock()
        self._running: set[ProcessQueue] = set()
        self._again: set[ProcessQueue] = set()  # new messages came while the queue's task ran
        self._suspended: set[ProcessQueue] = set()  # waiting out a failure: new messages do not wake them
        self._stopped = threading.Event()

    def submit(self, pq: ProcessQueue, run: Run | None = None) -> None:
        with self._lock:
            if pq in self._suspended:
                return
            if pq in self._running:
                self._again.add(pq)
                return
            self._running.add(pq)
        self.pool.submit(self._run, pq)

    def _run(self, pq: ProcessQueue) -> None:
        suspended = False
        try:
            while not self._stopped.is_set() and pq.locked and time.monotonic() - pq.last_lock_s < LEASE_TRUST_S:
                head = pq.first()
                if head is None or not pq.begin():
                    break
                run, index = head
                msg = deliverable(run.msgs, index, pq.mq)
                if msg is None:  # damaged on disk: skipped, said
                    pq.end()
                    self.offsets.update(pq, pq.finish(run, index, index + 1))
                    continue
                try:
                    msg.reconsume_times = pq.tries.get(msg.queue_offset, 0)
                    ok = handled(self.handler, msg)
                finally:
                    pq.end()
                if self._stopped.is_set():  # the consumer closed meanwhile (its offsets are kept): no dead letter
                    break
                if not ok and not self._give_up(pq, msg):
                    suspended = True
                    break
                pq.tries.pop(msg.queue_offset, None)
                self.offsets.update(pq, pq.finish(run, index, index + 1))
        finally:
            with self._lock:
                self._running.discard(pq)
                again = pq in self._again
                self._again.discard(pq)
                if suspended:
                    self._suspended.add(pq)
        if suspended:
            self._resume_later(pq)
        elif again and not self._stopped.is_set():
            self.submit(pq)

    def _give_up(self, pq: ProcessQueue, msg: MessageExt) -> bool:
        """Count a failed try; True when the message is dead-lettered and the queue may move past it."""
        tries = pq.tries.get(msg.queue_offset, 0) + 1
        pq.tries[msg.queue_offset] = tries
        if tries <= self.max_reconsume_times:
            return False
        try:
            self.dead_letter(msg)
        except SendBackRefused as exc:  # refused again at every try: the queue would never move on
            log.error("dead_letter_refused queue=%s offset=%d msg_id=%s error=%s action=skipped", pq.mq,
                      msg.queue_offset, msg.msg_id, exc)
            return True
        except MQClientError as exc:
            log.warning("dead_letter_failed queue=%s offset=%d error=%s", pq.mq, msg.queue_offset, exc)
            return False
        log.warning("orderly_dead_lettered queue=%s offset=%d tries=%d", pq.mq, msg.queue_offset, tries)
        return True

    def _resume_later(self, pq: ProcessQueue) -> None:
        def resume() -> None:
            with self._lock:
                self._suspended.discard(pq)
            if not self._stopped.is_set() and not pq.dropped:
                self.submit(pq)

        timer = threading.Timer(SUSPEND_S, resume)
        timer.daemon = True
        timer.start()

    def shutdown(self) -> None:
        self._stopped.set()

"""Concurrent consumption: the pulled messages of every queue go to one bounded thread pool, a task per pulled run.

A message the handler fails (LATER or an exception) is sent back to the broker, which retries it later through the
group's retry topic (or dead-letters it): the messages behind it go on. While the send-back fails the message
stays in its process queue (holding the commit point) and is tried again here after a pause; one the broker
refuses for good (INVALID_ARGUMENT) is logged and skipped, as it would be refused again at every try.
"""

import logging
import threading
from collections.abc import Callable

from client.consumer.consume_pool import ConsumePool
from client.consumer.consume_result import ConsumeResult
from client.consumer.group_calls import SendBackRefused
from client.consumer.offset_store import OffsetStore
from client.consumer.process_queue import ProcessQueue, Run
from client.errors import MQClientError
from client.pulled_messages import skipped_corrupt
from common.message import MessageExt

log = logging.getLogger(__name__)

LOCAL_RETRY_PAUSE_S = 5.0
TASK_MESSAGES = 64

Handler = Callable[[MessageExt], object]
SendBack = Callable[[MessageExt], None]  # raises MQClientError when no broker took the message


def handled(handler: Handler, msg: MessageExt) -> bool:
    """True when the handler finished the message; False for LATER or an exception (logged). Any exception, as
    upstream catches Throwable: one that is no Exception (an asyncio CancelledError a handler's asyncio.run let out,
    SystemExit) left the rest of its task unhandled and the queue's offset held for good."""
    try:
        return handler(msg) is not ConsumeResult.LATER
    except BaseException:
        _log_failure(msg)
        return False


def _log_failure(msg: MessageExt) -> None:
    try:  # properties another client stored broken (a RECONSUME_TIME that is no number) must not fail the task
        msg_id, reconsume_times = msg.msg_id, msg.reconsume_times
    except Exception:
        msg_id, reconsume_times = "?", -1
    log.exception("consume_failed topic=%s queue_id=%d offset=%d msg_id=%s reconsume_times=%d", msg.topic,
                  msg.queue_id, msg.queue_offset, msg_id, reconsume_times)


class ConsumeConcurrentlyService:
    def __init__(self, handler: Handler, pool: ConsumePool, offsets: OffsetStore,
                 send_back: SendBack | None) -> None:
        """``send_back=None`` (broadcasting): a failed message is logged and skipped, as upstream."""
        self.handler = handler
        self.pool = pool
        self.offsets = offsets
        self.send_back = send_back
        self._stopped = threading.Event()

    def submit(self, pq: ProcessQueue, run: Run) -> None:
        for i in range(0, len(run.msgs), TASK_MESSAGES):
            self.pool.submit(self._run, pq, run, i, min(i + TASK_MESSAGES, len(run.msgs)))

    def _run(self, pq: ProcessQueue, run: Run, start: int, end: int) -> None:
        if not pq.begin():
            return  # the queue left this member: its new owner reads these from the committed offset
        failed: list[int] = []
        stop = start
        try:  # handled() inlined: this loop is the consumer's hot path
            msgs, handler, later = run.msgs, self.handler, ConsumeResult.LATER
            for stop in range(start, end):
                if pq.dropped:
                    break
                try:
                    msg = msgs[stop]
                except MQClientError as exc:  # a record damaged on disk: skipped, said
                    skipped_corrupt(msgs, stop, pq.mq, exc)
                    continue
                try:
                    if handler(msg) is later:
                        failed.append(stop)
                except BaseException:  # any (see handled())
                    failed.append(stop)
                    _log_failure(msg)
            else:
                stop = end
        finally:
            pq.end()
        if self._stopped.is_set():  # the consumer closed meanwhile (its offsets are kept): the group has them again
            return
        kept = [i for i in failed if not self._sent_back(run.msgs[i])]  # still to do: retried here later
        for i in kept:
            self._retry_later(pq, run, i)
        if stop > start:
            self.offsets.update(pq, pq.finish(run, start, stop, kept))

    def _sent_back(self, msg: MessageExt) -> bool:
        if self.send_back is None:
            log.warning("consume_failed_skipped topic=%s offset=%d msg_id=%s (broadcasting: no retry)", msg.topic,
                        msg.queue_offset, msg.msg_id)
            return True
        try:
            self.send_back(msg)
            return True
        except SendBackRefused as exc:  # tried again it is refused again: it would hold the queue's offset forever
            log.error("send_back_refused topic=%s queue_id=%d offset=%d msg_id=%s error=%s action=skipped", msg.topic,
                      msg.queue_id, msg.queue_offset, msg.msg_id, exc)
            return True
        except MQClientError as exc:
            log.warning("send_back_failed msg_id=%s error=%s retry_in_s=%.0f", msg.msg_id, exc, LOCAL_RETRY_PAUSE_S)
            return False

    def _retry_later(self, pq: ProcessQueue, run: Run, index: int) -> None:
        def again() -> None:
            if not self._stopped.is_set() and not pq.dropped:
                self.pool.submit(self._run, pq, run, index, index + 1)

        timer = threading.Timer(LOCAL_RETRY_PAUSE_S, again)
        timer.daemon = True
        timer.start()

    def shutdown(self) -> None:
        self._stopped.set()

"""Push consumer: a thread per queue long-polls the broker and hands each message to ``handler``.

Offsets are committed to the broker every second and on close. A handler that raises gets the same
message again after a pause (at-least-once). This consumer takes every queue of the topic: several
push consumers of one group each receive all messages (there is no rebalancing between members yet).

Static topics: the queues are the topic's logic queues; the pull consumer underneath follows each one's leader
across remaps. A logic queue without a leader at start gets its start offset once it has one.
"""

import logging
import threading
import time
from collections.abc import Callable

from client.errors import MQClientError
from client.pull_consumer import PullConsumer
from client.results import PullStatus
from client.static_route import is_logic_queue
from common.message import MessageExt
from common.message_queue import MessageQueue

log = logging.getLogger(__name__)

Handler = Callable[[MessageExt], object]
LONG_POLL_MS = 15_000
COMMIT_INTERVAL_S = 1.0
RETRY_PAUSE_S = 1.0


class PushConsumer:
    def __init__(self, namesrv_addr: str | None = None, group: str = "DEFAULT_CONSUMER", topic: str = "",
                 tags: str = "*", handler: Handler | None = None, consume_from_first: bool = False,
                 pull_batch_size: int = 32) -> None:
        if not topic or handler is None:
            raise MQClientError("a push consumer needs a topic and a handler")
        self.topic = topic
        self.tags = tags
        self.handler = handler
        self.consume_from_first = consume_from_first
        self.pull_batch_size = pull_batch_size
        self.consumer = PullConsumer(namesrv_addr, group)
        self._offsets: dict[MessageQueue, int] = {}
        self._committed: dict[MessageQueue, int] = {}
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> "PushConsumer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        for mq in self.consumer.queues(self.topic):
            try:
                self._offsets[mq] = self._start_offset(mq)
            except MQClientError as exc:
                if not is_logic_queue(mq):
                    raise
                log.warning("push_start_deferred queue=%s error=%s", mq, exc)  # the pull loop retries
            t = threading.Thread(target=self._pull_loop, args=(mq,), name=f"push-{mq}", daemon=True)
            t.start()
            self._threads.append(t)
        committer = threading.Thread(target=self._commit_loop, name="push-commit", daemon=True)
        committer.start()
        self._threads.append(committer)

    def _start_offset(self, mq: MessageQueue) -> int:
        committed = self.consumer.committed(mq)
        if committed >= 0:
            return committed
        return self.consumer.min_offset(mq) if self.consume_from_first else self.consumer.max_offset(mq)

    def _pull_loop(self, mq: MessageQueue) -> None:
        while not self._stopped.is_set():
            try:
                if mq not in self._offsets:
                    self._offsets[mq] = self._start_offset(mq)
                result = self.consumer.pull(mq, self._offsets[mq], self.pull_batch_size, self.tags,
                                            suspend_ms=LONG_POLL_MS)
            except MQClientError as exc:
                if self._stopped.is_set():
                    return
                log.warning("push_pull_failed queue=%s error=%s", mq, exc)
                self._stopped.wait(RETRY_PAUSE_S)
                continue
            if result.status is PullStatus.OFFSET_ILLEGAL:
                log.warning("push_offset_moved queue=%s from=%d to=%d", mq, self._offsets[mq], result.next_begin_offset)
            for msg in result.messages:
                while not self._consume(mq, msg):
                    if self._stopped.wait(RETRY_PAUSE_S):
                        return
                self._offsets[mq] = msg.queue_offset + 1
            self._offsets[mq] = max(self._offsets[mq], result.next_begin_offset)

    def _consume(self, mq: MessageQueue, msg: MessageExt) -> bool:
        try:
            self.handler(msg)
            return True
        except Exception:
            log.exception("push_handler_failed queue=%s offset=%d", mq, msg.queue_offset)
            return False

    def _commit_loop(self) -> None:
        while not self._stopped.wait(COMMIT_INTERVAL_S):
            self._commit()

    def _commit(self) -> None:
        for mq, offset in list(self._offsets.items()):
            if self._committed.get(mq) != offset:
                try:
                    self.consumer.commit(mq, offset)
                    self._committed[mq] = offset
                except MQClientError as exc:
                    log.warning("push_commit_failed queue=%s error=%s", mq, exc)

    def close(self) -> None:
        self._stopped.set()
        self.consumer.client.close()  # cancels the parked long polls; channels reopen on next use
        deadline = time.monotonic() + 10
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._commit()
        self.consumer.close()

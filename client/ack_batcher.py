"""A simple consumer's acks to one broker address: one request on its way at a time, and what callers ack
meanwhile goes together in the next one. Many receiving threads then cost the broker few ack calls (a call costs
it more than the acks in it), and an ack waits at most for the one before it.

Each caller learns its own handles' outcome: the broker answers the refused handles one by one (``AckResult``),
so one caller's stale handle fails only that caller's ack (:func:`ack_outcomes`)."""

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from common.receipt_handle import MAX_ACK_HANDLES
from common.response_code import ResponseCode
from proto import pop_pb2

log = logging.getLogger(__name__)

SendAcks = Callable[[pop_pb2.AckMessageRequest], "Future[Any]"]
# A caller's handles, and the answer of the request they went in (a response, or the call's failure).
OnAnswer = Callable[[list[str], "Future[Any]"], None]


class AckBatcher:
    def __init__(self, group: str, topic: str, send: SendAcks) -> None:
        self.group = group
        self.topic = topic
        self._send = send
        self._lock = threading.Lock()
        self._waiting: deque[tuple[list[str], OnAnswer]] = deque()
        self._busy = False

    def ack(self, handles: list[str], on_answer: OnAnswer) -> None:
        with self._lock:
            self._waiting.append((handles, on_answer))
            if self._busy:  # goes with the next request, sent when the one on its way is answered
                return
            self._busy = True
        self._send_next()

    def _send_next(self) -> None:
        """Send what is waiting, as one request; a request that fails at once settles its callers here and the
        next goes (a loop, not a recursion through the callbacks)."""
        while True:
            with self._lock:
                batch: list[tuple[list[str], OnAnswer]] = []
                count = 0
                while self._waiting and (not batch or count + len(self._waiting[0][0]) <= MAX_ACK_HANDLES):
                    batch.append(self._waiting.popleft())
                    count += len(batch[-1][0])
                if not batch:
                    self._busy = False
                    return
            try:
                answer = self._send(pop_pb2.AckMessageRequest(
                    group=self.group, topic=self.topic, receipt_handles=[h for handles, _ in batch for h in handles]))
            except Exception as exc:  # the request could not go: each caller of this request hears why
                answer = Future()
                answer.set_exception(exc)
            if not answer.done():
                answer.add_done_callback(functools.partial(self._answered, batch))
                return
            self._settle(batch, answer)

    def _answered(self, batch: list[tuple[list[str], OnAnswer]], done: "Future[Any]") -> None:
        try:
            self._settle(batch, done)
        finally:
            self._send_next()

    def _settle(self, batch: list[tuple[list[str], OnAnswer]], done: "Future[Any]") -> None:
        for handles, on_answer in batch:
            try:
                on_answer(handles, done)
            except Exception:  # one caller's bug must not keep the others (and later acks) waiting
                log.exception("ack_answer_failed topic=%s group=%s", self.topic, self.group)


def ack_outcomes(handles: list[str], response: pop_pb2.AckMessageResponse) -> list[tuple[int, str] | None]:
    """Per handle of ``handles`` (all of the request, or some of it): None when the broker acked it, else its
    refusal (code, why). A broker lists only refused handles (older ones listed every handle, SUCCESS too); a
    refusal without results refused the whole request."""
    if response.code == ResponseCode.SUCCESS:
        return [None] * len(handles)
    refused = {r.receipt_handle: (r.code, r.remark) for r in response.results if r.code != ResponseCode.SUCCESS}
    if not refused:
        return [(response.code, response.remark)] * len(handles)
    return [refused.get(h) for h in handles]

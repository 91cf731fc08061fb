"""A simple consumer's acks to one broker: one request on its way at a time, and what callers ack meanwhile goes
together in the next one. Many receiving threads then cost the broker few ack calls (a call costs it more than
the acks in it), and an ack waits at most for the one before it.

Each caller learns its own handles' outcome: the broker answers the refused handles one by one (``AckResult``),
so one caller's stale handle fails only that caller's ack (:func:`refusal_of`)."""

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from common.response_code import ResponseCode
from proto import pop_pb2

MAX_HANDLES_A_REQUEST = 1024
Send = Callable[[pop_pb2.AckMessageRequest], "Future[Any]"]
Settle = Callable[[list[str], "Future[Any]"], None]  # a caller's handles, and the answer of the request they went in


class AckBatcher:
    def __init__(self, group: str, topic: str, send: Send) -> None:
        self.group = group
        self.topic = topic
        self._send = send
        self._lock = threading.Lock()
        self._waiting: deque[tuple[list[str], Settle]] = deque()
        self._busy = False

    def ack(self, handles: list[str], settle: Settle) -> None:
        with self._lock:
            self._waiting.append((handles, settle))
            if self._busy:  # goes with the next request, sent when the one on its way is answered
                return
            self._busy = True
        self._send_next()

    def _send_next(self) -> None:
        with self._lock:
            batch: list[tuple[list[str], Settle]] = []
            count = 0
            while self._waiting and (not batch or count + len(self._waiting[0][0]) <= MAX_HANDLES_A_REQUEST):
                batch.append(self._waiting.popleft())
                count += len(batch[-1][0])
            if not batch:
                self._busy = False
                return
        request = pop_pb2.AckMessageRequest(group=self.group, topic=self.topic,
                                            receipt_handles=[h for handles, _ in batch for h in handles])
        try:
            answer = self._send(request)
        except Exception as exc:  # no route or channel now: each caller of this request hears why
            answer = Future()
            answer.set_exception(exc)
        answer.add_done_callback(lambda done: self._answered(batch, done))

    def _answered(self, batch: list[tuple[list[str], Settle]], done: "Future[Any]") -> None:
        for handles, settle in batch:
            settle(handles, done)
        self._send_next()


def refusal_of(handles: list[str], response: pop_pb2.AckMessageResponse) -> tuple[int, str] | None:
    """The first of ``handles`` the broker refused in ``response`` (its code and why), or None when all were
    acked."""
    if response.code == ResponseCode.SUCCESS:
        return None
    if not response.results:  # the whole request was refused
        return response.code, response.remark
    refused = {r.receipt_handle: r for r in response.results}
    for handle in handles:
        result = refused.get(handle)
        if result is not None:
            return result.code, result.remark
    return None

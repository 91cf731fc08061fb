"""``Producer(auto_batch=True)``: single sends of a topic that come while earlier ones are on their way leave
together, as one batch (upstream's ``DefaultMQProducer.setAutoBatch``).

A broker stores a batch of 64 messages in about the time it takes for a few single ones, and a producer's
single sends spend most of their time in per-request work on both sides. Here a send goes out at once while
fewer than ``max_in_flight`` requests of its topic are on their way, so a lone sender waits for nothing; past
that, sends wait for the next request to finish and then leave with it, up to ``max_messages`` or
``max_bytes`` a batch (a full batch leaves at once; a message that would take a batch past ``max_bytes`` starts
the next one, and one larger alone goes alone). Under load the batches grow by themselves; nothing is held by a
timer.

Each send gets its own ``SendResult``: the batch's queue, its own queue offset, commitlog offset and message
id. A batch is stored whole or not at all, so its sends succeed or fail together. Sends with a ``sharding_key``,
an explicit queue or a delay go alone (a key's queue is its own; a batch is all delayed or none). A batch the
producer refuses before sending (a message it cannot encode), or the broker refuses for its size (its
maxMessageSize may be below ``max_bytes``), is sent again one message at a time, so only a bad message fails.
``Producer.close`` sends what still waits at once and waits (at most the send timeout) for every request to be
answered before it closes the channels.
"""

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from client.callback_future import CallbackFuture, on_done
from client.errors import MQClientError
from client.results import SendResult
from common.message import Message
from common.response_code import ResponseCode

SendBatch = Callable[[list[Message]], "Future[SendResult]"]
FollowUp = Callable[[str, Callable[[], None]], None]  # (topic, send): send the batch that waited, now or soon


def send_now(topic: str, send: Callable[[], None]) -> None:
    send()


@dataclass(slots=True)
class _Topic:
    """One topic's (and flag's) sends: those waiting, and how many requests are on their way."""

    waiting: list[tuple[Message, "Future[SendResult]"]] = field(default_factory=list)
    waiting_bytes: int = 0
    in_flight: int = 0


class SendAccumulator:
    def __init__(self, send_batch: SendBatch, max_in_flight: int = 2, max_messages: int = 64,
                 max_bytes: int = 256 * 1024, follow_up: FollowUp = send_now) -> None:
        """``follow_up`` sends the batch that waited for an answer; it is called on the thread that completed the
        answer (a stream's reader), which must not wait on anything slow, such as the name server."""
        assert max_in_flight >= 1 and max_messages >= 1 and max_bytes >= 1
        self._send_batch = send_batch
        self._follow_up = follow_up
        self.max_in_flight = max_in_flight
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._topics: dict[tuple[str, int], _Topic] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when a topic has nothing left on its way
        self._closed = False

    def add(self, msg: Message) -> "Future[SendResult]":
        future: Future[SendResult] = CallbackFuture()
        key = (msg.topic, msg.flag)
        with self._lock:
            if self._closed:
                raise MQClientError("cannot send: the producer is closed")
            topic = self._topics.get(key)
            if topic is None:
                topic = self._topics[key] = _Topic()
            batches = []
            if topic.waiting and topic.waiting_bytes + len(msg.body) > self.max_bytes:
                batches.append(self._take(topic))  # full without this message: it leaves, this one starts the next
            topic.waiting.append((msg, future))
            topic.waiting_bytes += len(msg.body)
            full = len(topic.waiting) >= self.max_messages or topic.waiting_bytes >= self.max_bytes
            if full or topic.in_flight < self.max_in_flight:
                batches.append(self._take(topic))
        for batch in batches:
            self._send(key, batch)
        return future

    def close(self, timeout_s: float) -> None:
        """Send what waits now, and wait (at most ``timeout_s``) until every request was answered: the producer
        accepted those sends, and its channels close next. Sends after this are refused."""
        with self._lock:
            self._closed = True
            ready = [(key, self._take(topic)) for key, topic in self._topics.items() if topic.waiting]
        for key, batch in ready:
            self._send(key, batch)
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._topics and (left := deadline - time.monotonic()) > 0:
                self._idle.wait(left)

    def _take(self, topic: _Topic) -> list[tuple[Message, "Future[SendResult]"]]:
        """The waiting sends as one request (under the lock)."""
        batch, topic.waiting, topic.waiting_bytes = topic.waiting, [], 0
        topic.in_flight += 1
        return batch

    def _send(self, key: tuple[str, int], batch: list[tuple[Message, "Future[SendResult]"]]) -> None:
        try:
            sent = self._send_batch([msg for msg, _ in batch])
        except Exception as exc:  # refused before it left: nothing was sent
            if isinstance(exc, MQClientError) and len(batch) > 1:  # one message may be at fault:
                self._split(key, batch)
                self._send_each(key, batch)  # each alone, so only that one fails
                return
            following = self._finish(key)
            for _, future in batch:
                _give(future, error=exc)
            if following:
                self._send(key, following)
            return
        on_done(sent, lambda call: self._settle(key, batch, call))  # inline: the next batch goes at once

    def _settle(self, key: tuple[str, int], batch: list[tuple[Message, "Future[SendResult]"]],
                call: "Future[SendResult]") -> None:
        error = call.exception()
        if error is not None and len(batch) > 1 and refused_for_size(error):
            # Each message may fit alone: they go one by one (not from this thread: a route may be looked up).
            self._split(key, batch)
            self._follow_up(key[0], lambda: self._send_each(key, batch))
            return
        # The slot is given back before the callers hear: a send their callbacks make goes out at once, from
        # their thread, instead of waiting for this (the stream's reader) to send it.
        following = self._finish(key)
        if error is not None:
            for _, future in batch:
                _give(future, error=error)
        else:
            result = call.result()
            for i, (_, future) in enumerate(batch):
                _give(future, result_of(result, i))
        if following:
            self._follow_up(key[0], lambda: self._send(key, following))

    def _split(self, key: tuple[str, int], batch: list[tuple[Message, "Future[SendResult]"]]) -> None:
        """The refused ``batch`` is to go again as one request a message: its slot becomes theirs (one each), so
        :meth:`close` waits for them too."""
        with self._lock:
            self._topics[key].in_flight += len(batch) - 1

    def _send_each(self, key: tuple[str, int], batch: list[tuple[Message, "Future[SendResult]"]]) -> None:
        for item in batch:
            self._send(key, [item])

    def _finish(self, key: tuple[str, int]) -> list[tuple[Message, "Future[SendResult]"]] | None:
        """A request of ``key`` finished: the sends that waited for it, to leave now (None: none waited)."""
        with self._lock:
            topic = self._topics[key]
            topic.in_flight -= 1
            following = self._take(topic) if topic.waiting else None
            if following is None and topic.in_flight == 0:
                del self._topics[key]  # a producer of many topics keeps no state for the idle ones
                self._idle.notify_all()
        return following


def refused_for_size(error: BaseException) -> bool:
    """Whether the broker refused a request for its total body size (above its maxMessageSize)."""
    return (isinstance(error, MQClientError) and error.code == ResponseCode.INVALID_PARAMETER
            and "maxMessageSize" in str(error))


def result_of(batch: SendResult, i: int) -> SendResult:
    """Message ``i``'s own result out of its batch's: consecutive queue offsets (-1, not known yet, stays -1)."""
    offset = batch.queue_offset + i if batch.queue_offset >= 0 else batch.queue_offset
    return SendResult(batch.queue, offset, batch.store_host, batch.physical_offsets[i:i + 1], batch.status,
                      batch.wire_properties[i:i + 1], batch.recall_handles[i:i + 1])


def _give(future: "Future[SendResult]", result: SendResult | None = None, error: BaseException | None = None) -> None:
    """Settle a send's future, unless its caller cancelled it (the message may be stored all the same)."""
    if not future.set_running_or_notify_cancel():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]


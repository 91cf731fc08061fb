"""Simple consumer: broker-side (POP) consumption. The broker keeps the group's progress and what each member
holds: ``receive`` hands out messages that stay invisible to the group for ``invisible_ms``; ``ack`` settles
them; one not acked in time is received again (its ``reconsume_times`` raised), and after the group's
retryMaxTimes it goes to ``%DLQ%<group>``. Members need no rebalancing: any number can receive from any queue.
In a group created with consumeMessageOrderly (``mqadmin updateSubGroup -o true``), a message group's messages
come one after another, each once the one before it was acked.

A receive asks the topic's brokers in turn until one hands out messages (the last one asked holds the long
poll). A broker that cannot be reached is skipped, and while it is marked down not asked at all, so one dead
broker of several costs a receive nothing; a receive fails only when no broker answered.

A message keeps the handle of its delivery in ``receipt_handle``; ``change_invisible`` replaces it."""

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

import grpc

from client import fork_safety
from client.ack_batcher import AckBatcher, ack_outcomes
from client.argument_checks import INT64_MAX, checked_int, checked_timeout_ms, held_s
from client.callback_future import CallbackFuture
from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.grpc_errors import business_error, rpc_error
from client.pull_consumer import checked_consumer_group
from client.pulled_messages import PulledMessages
from client.replica_health import DownAddresses
from client.rpc_stream import RpcStream
from client.static_route import VIRTUAL_BROKER_NAME, is_logic_queue
from common.message import MessageExt
from common.receipt_handle import InvalidReceiptHandle, ReceiptHandle
from common.refusal import says_not_master
from common.response_code import ResponseCode
from common.wait_limits import MAX_INVISIBLE_MS
from proto import broker_pb2, pop_pb2, pop_pb2_grpc

MAX_RECEIVE = 32
NOT_MASTER_PAUSE_S = 1.0  # a receive whose long-polling broker is not master (a failover) waits this long
# An ack or change of invisible time refused by a replica that is no longer its group's master: asked again at the
# master a fresh route names, up to this many tries in all, the next after NOT_MASTER_RETRY_S times the tries so far.
NOT_MASTER_TRIES = 3
NOT_MASTER_RETRY_S = 0.5
SILENT_BROKER_SKIP_S = 5.0  # how long a broker that let a receive time out is asked last (as the proxy does)

log = logging.getLogger(__name__)


class SimpleConsumer:
    """Receives messages the broker hands out (POP) and acks them; no rebalancing, any number of members.

    ::

        with SimpleConsumer("127.0.0.1:9876", group="g1", topic="TopicA") as consumer:
            for msg in consumer.receive(16, invisible_ms=30_000):
                consumer.ack([msg])
    """

    def __init__(self, namesrv_addr: str | None = None, group: str = "DEFAULT_CONSUMER", topic: str = "",
                 tags: str = "*", rpc_timeout_ms: int = 10_000, tls_ca: str | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        if not topic:
            raise MQClientError("a simple consumer needs a topic")
        self.group = checked_consumer_group(group)
        self.topic = topic
        self.tags = tags
        self.client = ClientInstance(namesrv_addr, checked_timeout_ms("rpc_timeout_ms", rpc_timeout_ms), tls_ca=tls_ca,
                                     credentials=credentials)
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._ack_batchers: dict[str, AckBatcher] = {}
        # Brokers whose last receive got no answer in time (a paused process keeps its connection: nothing else
        # marks it down): asked last for a while, so each receive does not wait a timeout on them first.
        self._silent = DownAddresses(hold_s=SILENT_BROKER_SKIP_S)
        self._busy: set[str] = set()  # brokers answering SYSTEM_BUSY now (logged once while it lasts)
        self._forked = False  # this is a child of os.fork(): its acks are refused (``client/fork_safety.py``)
        fork_safety.track(self)

    def forget_after_fork(self) -> None:
        """The child's copy: an ack batcher the parent had busy waits for an answer no thread here will read (an ack
        queued behind it waited for good); acks are refused at once, as the client's other calls are."""
        self._forked = True
        self._lock = threading.Lock()
        self._ack_batchers = {}

    def __enter__(self) -> "SimpleConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    def receive(self, max_nums: int = 16, invisible_ms: int = 30_000, wait_ms: int = 0) -> list[MessageExt]:
        """Up to ``max_nums`` (<= 32) messages, each invisible to the group for ``invisible_ms``. With ``wait_ms``
        the last broker asked holds an empty receive until a message arrives or the time is up."""
        checked_int("max_nums", max_nums, 1, MAX_RECEIVE)
        checked_int("invisible_ms", invisible_ms, 1, MAX_INVISIBLE_MS)
        checked_int("wait_ms", wait_ms, 0, INT64_MAX)  # (any wait: a broker holds it up to its longest)
        brokers, addressing = self._brokers()
        start = next(self._turn)
        ordered = [brokers[(start + i) % len(brokers)] for i in range(len(brokers))]
        # A broker whose master is marked down is asked only when no other one is live (a mark is a guess): one
        # dead broker of several neither fails receives nor takes their long poll.
        ordered = [b for b in ordered if self.client.has_live_master(self.topic, b)] or ordered
        answering = [b for b in ordered if not self._silent.is_down(b)]  # (read once: a mark may expire meanwhile)
        ordered = answering + [b for b in ordered if b not in answering]  # the silent ones last, in turn order
        poller = answering[-1] if answering else ordered[-1]  # holds the long poll: not a silent one
        skipped: list[MQClientError] = []
        for broker_name in ordered:
            last = broker_name == poller
            request = pop_pb2.PopMessageRequest(
                group=self.group, topic=self.topic, queue_id=-1, expression=self.tags, max_msg_nums=max_nums,
                invisible_time_ms=invisible_ms, poll_time_ms=wait_ms if last else 0, addressing=addressing)
            try:
                addr, response = self._on_stream(f"receive from {self.topic}", broker_name, self.client.pop_stream,
                                                 request, timeout_s=self.client.rpc_timeout_s + held_s(wait_ms))
            except MQClientError as exc:
                silent = exc.status == "DEADLINE_EXCEEDED"
                if silent:
                    self._silent.mark(broker_name)
                if not (silent or getattr(exc, "failover", False) or getattr(exc, "no_master", False)):
                    raise
                log.warning("receive_skipped_broker topic=%s group=%s broker=%s error=%s", self.topic, self.group,
                            broker_name, exc)
                skipped.append(exc)
                continue
            if response.code == ResponseCode.NOT_LEADER_FOR_QUEUE:  # a static topic was remapped: new leaders
                self.client.invalidate_route(self.topic)
                continue
            if _not_master(response.code, response.remark):  # a failover
                self.client.invalidate_route(self.topic)
                skipped.append(business_error(f"receive from {self.topic}", addr, response.code, response.remark))
                if last and wait_ms:  # the one to wait on refused: wait a little here, not spin on the route
                    time.sleep(min(wait_ms / 1000, NOT_MASTER_PAUSE_S))
                continue
            if response.code == ResponseCode.SYSTEM_BUSY:  # it cannot read now (a static topic's older link's broker
                # is down): the other brokers' queues are received meanwhile; raised only when none answered
                error = business_error(f"receive from {self.topic}", addr, response.code, response.remark)
                if broker_name not in self._busy:  # once while it lasts
                    self._busy.add(broker_name)
                    log.warning("receive_skipped_broker topic=%s group=%s broker=%s error=%s", self.topic,
                                self.group, broker_name, error)
                skipped.append(error)
                continue
            self._busy.discard(broker_name)
            if response.code == ResponseCode.PULL_NOT_FOUND:
                continue
            if response.code != ResponseCode.SUCCESS:
                raise business_error(f"receive from {self.topic}", addr, response.code, response.remark)
            messages = list(PulledMessages(response.records))
            for msg, popped in zip(messages, response.popped, strict=True):
                msg.receipt_handle = popped.receipt_handle
                msg.reconsume_times = popped.reconsume_times
            return messages
        if len(skipped) == len(ordered):  # no broker answered: the caller hears it, not an empty receive
            raise skipped[0]
        return []

    def ack(self, messages: MessageExt | Iterable[MessageExt]) -> None:
        """Settle received messages (one or many, of any brokers). Raises MQClientError naming the first one the
        broker refused (acked already, received again since, or past its invisible time)."""
        self.ack_async(messages).result()

    def ack_async(self, messages: MessageExt | Iterable[MessageExt]) -> "Future[None]":
        """Like :meth:`ack` but returns at once: a receiver need not wait for its acks before it receives again.
        The future fails as :meth:`ack` raises. Acks of many threads to one broker go together
        (``client/ack_batcher.py``)."""
        if self._forked:
            raise MQClientError(fork_safety.MADE_BEFORE_FORK)
        by_broker: dict[str, list[str]] = {}
        if messages is None or isinstance(messages, (str, bytes)):
            raise MQClientError(f"ack takes a received message or messages, not {type(messages).__name__}")
        for msg in [messages] if isinstance(messages, MessageExt) else messages:
            by_broker.setdefault(_handle(msg).broker_name, []).append(msg.receipt_handle)
        done: Future[None] = CallbackFuture()
        if not by_broker:
            done.set_result(None)
            return done
        left = [len(by_broker)]
        failures: list[MQClientError] = []
        lock = threading.Lock()

        def settle(broker_name: str, tries: int, addr: str, handles: list[str], answer: "Future[Any]") -> None:
            try:
                refused = next((o for o in ack_outcomes(handles, answer.result()) if o is not None), None)
                if refused is not None and tries < NOT_MASTER_TRIES and _not_master(*refused):
                    # A failover moved the group's master (the old one refused all: nothing was acked): acked at the
                    # new one, which took over the POP state and its handles. Kept, every ack went to the old
                    # address until the route expired, and each message came again after its invisible time.
                    self.client.invalidate_route(self.topic)
                    self.client.retry_threads.later(NOT_MASTER_RETRY_S * tries, functools.partial(
                        send, broker_name, handles, tries + 1), functools.partial(failed_to_send, broker_name,
                                                                                  handles, tries + 1))
                    return
                if refused is not None:
                    raise business_error(f"ack of {self.topic} messages", addr, *refused)
            except grpc.RpcError as exc:
                failures.append(rpc_error("ack", addr, exc))
            except MQClientError as exc:
                failures.append(exc)
            except Exception as exc:  # whatever went wrong, this caller's future hears it
                failures.append(MQClientError(f"ack of {self.topic} messages at {addr} failed: {exc!r}"))
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:  # every broker's acks went, whatever another one answered
                if failures:
                    done.set_exception(failures[0])
                else:
                    done.set_result(None)

        def failed_to_send(broker_name: str, handles: list[str], tries: int, exc: BaseException) -> None:
            failed: Future[Any] = Future()
            failed.set_exception(exc)
            settle(broker_name, tries, broker_name, handles, failed)

        def send(broker_name: str, handles: list[str], tries: int) -> None:
            try:
                addr = self.client.master_addr(self.topic, broker_name)  # here: never on a stream's thread
            except MQClientError as exc:
                failed_to_send(broker_name, handles, tries, exc)
                return
            self._ack_batcher(addr).ack(handles, functools.partial(settle, broker_name, tries, addr))

        for broker_name, handles in by_broker.items():
            send(broker_name, handles, 1)
        return done

    def _ack_batcher(self, addr: str) -> AckBatcher:
        batcher = self._ack_batchers.get(addr)
        if batcher is None:
            with self._lock:
                batcher = self._ack_batchers.setdefault(addr, AckBatcher(
                    self.group, self.topic, functools.partial(self._send_acks, addr)))
        return batcher

    def _send_acks(self, addr: str, request: pop_pb2.AckMessageRequest) -> "Future[Any]":
        """One ack request; a failed call marks the route and the broker as any failed call does."""
        answer = self.client.ack_stream(addr).call(request, self.client.rpc_timeout_s)

        def failed(done: "Future[Any]") -> None:
            exc = done.exception()
            if isinstance(exc, grpc.RpcError):
                self.client.invalidate_route(self.topic)
                self.client.report_failure(addr, exc.code())

        answer.add_done_callback(failed)
        return answer

    def change_invisible(self, msg: MessageExt, invisible_ms: int) -> None:
        """Keep ``msg`` invisible for ``invisible_ms`` from now; its ``receipt_handle`` becomes the new one."""
        checked_int("invisible_ms", invisible_ms, 0, MAX_INVISIBLE_MS)
        handle = _handle(msg)
        request = pop_pb2.ChangeInvisibleTimeRequest(group=self.group, topic=self.topic,
                                                     receipt_handle=msg.receipt_handle, invisible_time_ms=invisible_ms)
        for tries in range(1, NOT_MASTER_TRIES + 1):
            addr, response = self._call("change invisible time", handle.broker_name, "ChangeInvisibleTime", request)
            if tries == NOT_MASTER_TRIES or not _not_master(response.code, response.remark):
                break
            self.client.invalidate_route(self.topic)  # a failover: at the new master (see ack_async)
            time.sleep(NOT_MASTER_RETRY_S * tries)
        if response.code != ResponseCode.SUCCESS:
            raise business_error(f"change invisible time of a {self.topic} message", addr, response.code,
                                 response.remark)
        msg.receipt_handle = response.receipt_handle

    def _brokers(self) -> tuple[list[str], "broker_pb2.QueueAddressing"]:
        """The brokers to pop from and how: a normal topic's brokers (their queues), or the brokers leading a
        static topic's logic queues (each pops the logic queues it leads, LOGIC)."""
        queues = self.client.subscribe_queues(self.topic)
        if queues and is_logic_queue(queues[0]):
            leaders = self.client.logic_leaders(self.topic)
            names = sorted({b for b in leaders.values() if b != VIRTUAL_BROKER_NAME})
            addressing = broker_pb2.LOGIC
        else:
            names = sorted({mq.broker_name for mq in queues})
            addressing = broker_pb2.ADDRESSING_UNSPECIFIED
        if not names:
            raise MQClientError(f"topic {self.topic} has no readable queues")
        return names, addressing

    def _call(self, what: str, broker_name: str, method: str, request):
        addr = self.client.master_addr(self.topic, broker_name)
        stub = self.client.stub(pop_pb2_grpc.PopServiceStub, addr)
        return self._answered(what, addr, lambda: getattr(stub, method)(request, timeout=self.client.rpc_timeout_s))

    def _on_stream(self, what: str, broker_name: str, stream: Callable[[str], RpcStream], request,
                   timeout_s: float | None = None):
        """Pops and acks go on the broker's POP streams (many in flight from many threads share a stream)."""
        addr = self.client.master_addr(self.topic, broker_name)
        timeout_s = timeout_s or self.client.rpc_timeout_s
        return self._answered(what, addr, lambda: stream(addr).call(request, timeout_s).result())

    def _answered(self, what: str, addr: str, call: Callable[[], Any]) -> tuple[str, Any]:
        try:
            response = call()
        except grpc.RpcError as exc:
            self.client.invalidate_route(self.topic)
            error = rpc_error(what, addr, exc)
            # as the producer's errors: failover when the broker is gone (marked down)
            error.failover = self.client.report_failure(addr, exc.code())  # type: ignore[attr-defined]
            raise error from None
        self.client.report_answer(addr)
        return addr, response


def _handle(msg: MessageExt) -> ReceiptHandle:
    if not isinstance(msg, MessageExt):
        raise MQClientError(f"ack takes received messages, not {type(msg).__name__}")
    if not msg.receipt_handle:
        raise MQClientError(f"message {msg.msg_id} was not received by a simple consumer: it has no receipt handle")
    try:
        return ReceiptHandle.decode(msg.receipt_handle)
    except InvalidReceiptHandle as exc:
        raise MQClientError(f"message {msg.msg_id} was not received by a simple consumer: {exc}") from None


def _not_master(code: int, remark: str) -> bool:
    return code == ResponseCode.NO_PERMISSION and says_not_master(remark)

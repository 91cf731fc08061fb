"""Producer: round-robin over the topic's writable queues; on failure, retry on another broker's queue;
a ``sharding_key`` always picks the same queue. ``send_timeout_ms`` bounds a whole send, its retries included.

Static topics: the queues are the N logic queues ``MessageQueue(topic, "__logical_queue_broker__", i)``; a send
goes to the current leader of its logic queue, addressed LOGIC. A key hashes over N, which never changes, so it
keeps its logic queue across remaps. A failure (not the leader any more, broker unavailable, ...) refreshes the
route and retries the same logic queue: a logic queue's order matters. Only an unkeyed send whose logic queue
has no leader moves to another logic queue.

Broker groups: a send goes only to a group's master (broker id 0). A master that turns out unreachable is marked
down for a few seconds (``client/replica_health.py``) and sends prefer groups whose master is not marked down, so
while one group's master is dead its queues are skipped instead of each send paying for a failed try. A failover
(the master unreachable, a slave answering NO_PERMISSION because the route is stale, or no master in the route) is
retried within the send's budget: on another group for a normal topic; for a static topic the logic queue's
leader group is fixed, so the send waits for that group to have a master again, looking at the route every
:data:`MASTER_POLL_S`, until the send timeout.

Delivery is at least once: a send whose answer was lost (the broker died after storing it), or that a master
stored without its slave confirming (SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT: delivered once replicated), and is
then retried, may be stored twice. A send never succeeds unless a master answered that it stored the message.
"""

import logging
import os
import socket
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import grpc

from client import fork_safety
from client.argument_checks import checked_timeout_ms
from client.callback_future import CallbackFuture, on_done
from client.client_instance import ClientInstance, RouteNotCached
from client.errors import MQClientError
from client.grpc_errors import business_error, rpc_error
from client.message_encoding import batch_wire_properties
from client.producer_sessions import ProducerSessions, new_client_id
from client.replica_health import channel_connected
from client.results import SendResult, SendStatus
from client.retry_threads import ClientClosed
from client.send_accumulator import SendAccumulator
from client.send_back_pressure import SendBackPressure
from client.static_route import VIRTUAL_BROKER_NAME, is_logic_queue
from client.transaction import Transaction, TransactionChecker
from common.encoded_fields import bytes_field
from common.message import Message
from common.message_id import encode_host
from common.message_properties import (
    HALF_MESSAGE_PROPERTIES,
    PROPERTY_SHARDING_KEY,
    USER_SET_PROPERTIES,
    encode_properties,
)
from common.message_queue import MessageQueue
from common.recall_handle import InvalidRecallHandle, RecallHandle
from common.refusal import says_master_changing, says_not_master
from common.response_code import NOT_REPLICATED_CODES, ResponseCode
from common.topic_validator import InvalidTopicError, validate_user_send_topic
from common.transaction_topic import TRANSACTION_PREPARED_TYPE
from common.wire_batch import encode_wire_batch
from proto import broker_pb2

log = logging.getLogger(__name__)


def local_ip() -> str:
    """This host's address as others see it (upstream's born host): the one the route to a non-local address would
    leave from (a UDP socket's connect sends nothing); 127.0.0.1 when there is none. It was always 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"

# Stored on the master but not confirmed by a slave (none connected yet, or too slow): transient during a failover.
# A retry stores the message again: a normal topic retries only on another group; a static topic, whose group is
# fixed, within its retry budget.
ELSEWHERE_CODES = NOT_REPLICATED_CODES
# Outcomes worth another broker: the broker is gone, overloaded or not serving.
RETRYABLE_STATUS = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
                    grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
RETRYABLE_CODES = {ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
                   ResponseCode.NO_PERMISSION, ResponseCode.TOPIC_NOT_EXIST, *ELSEWHERE_CODES}
# Static topics also retry (the same logic queue, after a route refresh) when the broker no longer leads it.
STATIC_RETRYABLE_CODES = RETRYABLE_CODES | ELSEWHERE_CODES | {ResponseCode.NOT_LEADER_FOR_QUEUE}
RECORDS_FIELD = broker_pb2.SendMessageRequest.DESCRIPTOR.fields_by_name["records"].number
STATIC_RETRY_PAUSE_S = 0.05  # before the 2nd, 3rd, ... retry of a logic queue: doubles, at most 1 s
MASTER_POLL_S = 0.2  # a static send waiting for its leader group's master looks at the route this often
MIN_ATTEMPT_S = 0.05  # a retry with less of the send's timeout left than this is not made
MIN_ATTEMPT_TIMEOUT_S = 0.5  # a static send's late attempt still gets this long, even past the send timeout
# A recall refused by a replica that is no longer master (a failover) is asked again at the master a fresh route
# names: up to this many tries in all, the next after RECALL_RETRY_S times the tries so far.
RECALL_TRIES = 3
RECALL_RETRY_S = 0.5


class Producer:
    """Sends messages to a topic's queues; the module's docstring says how queues are chosen and sends retried.

    ::

        with Producer("127.0.0.1:9876") as producer:
            result = producer.send(Message("TopicA", b"hello", tags="TagA", keys=["order-1"]))
            print(result.msg_id, result.queue.queue_id, result.queue_offset)
    """

    def __init__(self, namesrv_addr: str | None = None, group: str = "DEFAULT_PRODUCER",
                 send_timeout_ms: int = 3000, retry_times: int = 2, use_streams: bool = True,
                 transaction_checker: TransactionChecker | None = None, topics: Sequence[str] = (),
                 tls_ca: str | None = None, credentials: tuple[str, str] | None = None,
                 auto_batch: bool = False, batch_max_in_flight: int = 2,
                 max_in_flight_messages: int = 2048, max_in_flight_bytes: int = 64 * 1024 * 1024) -> None:
        """``use_streams=False`` sends each batch as a unary call instead of on the broker's send stream.
        ``transaction_checker``: what the brokers ask about this group's transactions nobody ended (see
        ``client/transaction.py``); the producer then keeps a session with the masters of ``topics`` and of every
        topic it sends half messages to. ``auto_batch``: single sends of a topic made while
        ``batch_max_in_flight`` requests of it are on their way leave together as one batch
        (``client/send_accumulator.py``). ``max_in_flight_messages`` / ``max_in_flight_bytes`` (of bodies): past
        them a send waits for earlier ones, at most the send timeout (``client/send_back_pressure.py``); 0 for no
        bound (the proxy, whose sends start on its event loop)."""
        if batch_max_in_flight < 1:
            raise MQClientError(f"batch_max_in_flight must be at least 1, not {batch_max_in_flight}")
        if max_in_flight_messages < 0 or max_in_flight_bytes < 0:
            raise MQClientError(f"max_in_flight_messages and max_in_flight_bytes must be 0 (no bound) or more, not "
                                f"{max_in_flight_messages} and {max_in_flight_bytes}")
        self.group = group
        self.use_streams = use_streams
        self.send_timeout_s = checked_timeout_ms("send_timeout_ms", send_timeout_ms)
        self.client = ClientInstance(namesrv_addr, self.send_timeout_s, tls_ca=tls_ca, credentials=credentials)
        # A whole send's budget, its retries included (upstream's rule); an attempt waits at most send_timeout_s of
        # it. The proxy widens it: its clients' calls carry their own deadlines.
        self.send_deadline_s = self.send_timeout_s
        self.retry_times = retry_times
        self.born_host = f"{local_ip()}:{os.getpid() % 65536}"
        self._born_host = encode_host(self.born_host)
        self._round_robin = 0
        self._lock = threading.Lock()
        self._forked = False  # this is a child of os.fork(): its sends are refused (``client/fork_safety.py``)
        fork_safety.track(self)
        self.client_id = new_client_id()
        self._sessions = (ProducerSessions(self.client, group, self.client_id, transaction_checker, topics)
                          if transaction_checker is not None else None)
        self._accumulator = (SendAccumulator(self._send_batch_async, batch_max_in_flight,
                                             follow_up=self._send_follow_up) if auto_batch else None)
        self._in_flight = (SendBackPressure(max_in_flight_messages, max_in_flight_bytes)
                           if max_in_flight_messages and max_in_flight_bytes else None)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._accumulator is not None:  # its waiting sends leave, and are answered, before the channels close
            self._accumulator.close(self.send_timeout_s)
        if self._sessions is not None:
            self._sessions.close()
        self.client.close()

    def forget_after_fork(self) -> None:
        self._forked = True

    # -- API ---------------------------------------------------------------------------------------
    def send(self, msg: Message, sharding_key: str | None = None, queue: MessageQueue | None = None) -> SendResult:
        return self.send_async(msg, sharding_key, queue).result()

    def send_batch(self, msgs: Sequence[Message], sharding_key: str | None = None,
                   queue: MessageQueue | None = None) -> SendResult:
        """Send messages of one topic as one batch to one queue (consecutive queue offsets)."""
        return self.send_batch_async(msgs, sharding_key, queue).result()

    def send_async(self, msg: Message, sharding_key: str | None = None,
                   queue: MessageQueue | None = None) -> "Future[SendResult]":
        if not isinstance(msg, Message):
            raise MQClientError(f"a send takes a Message, not {type(msg).__name__}")
        if (self._accumulator is not None and queue is None and sharding_key is None
                and not (msg.delay_level or msg.deliver_at_ms)):
            accumulator = self._accumulator
            return self._bounded([msg], lambda: accumulator.add(msg))
        return self.send_batch_async([msg], sharding_key, queue)

    def send_batch_async(self, msgs: Sequence[Message], sharding_key: str | None = None,
                         queue: MessageQueue | None = None) -> "Future[SendResult]":
        """Like :meth:`send_batch` but returns at once, unless ``max_in_flight_messages`` or ``max_in_flight_bytes``
        are on their way (then it waits for room); many sends can be in flight from one thread. A send that fails
        over may be stored twice (see the module's docstring: at least once), never acknowledged unstored."""
        _check_send(msgs, queue)
        return self._bounded(msgs, lambda: self._send_batch_async(msgs, sharding_key, queue))

    def _bounded(self, msgs: Sequence[Message], send: Callable[[], "Future[SendResult]"]) -> "Future[SendResult]":
        if self._forked:  # before any lock or count of the parent's (another of its threads may have held them)
            raise MQClientError(fork_safety.MADE_BEFORE_FORK)
        in_flight = self._in_flight
        if in_flight is None:
            return send()
        count, size = len(msgs), sum(len(m.body) for m in msgs if isinstance(m, Message))
        if not in_flight.acquire(count, size, self.send_timeout_s):
            future: Future[SendResult] = CallbackFuture()
            future.set_exception(MQClientError(f"send not made: {in_flight.describe()}, and none finished within the "
                                               f"send timeout of {self.send_timeout_s * 1000:.0f} ms"))
            return future
        try:
            future = send()
        except BaseException:
            in_flight.release(count, size)
            raise
        on_done(future, lambda _: in_flight.release(count, size))
        return future

    def _send_batch_async(self, msgs: Sequence[Message], sharding_key: str | None = None,
                          queue: MessageQueue | None = None, born_timestamp: int = 0) -> "Future[SendResult]":
        send = self._request(msgs, sharding_key=sharding_key, born_timestamp=born_timestamp)
        topic = send.topic
        future: Future[SendResult] = CallbackFuture()
        if queue is None and sharding_key is not None:
            queue = self._queue_for_key(topic, sharding_key)
        may_move = queue is None
        mq = queue or self._next_queue(topic, None, refresh=False)
        if is_logic_queue(mq):
            deadline = time.monotonic() + self.send_timeout_s
            self._attempt_static(send, mq, may_move, 1 + self.retry_times, future, deadline)
            return future
        attempts = 1 if not may_move else 1 + self.retry_times
        self._attempt(send, mq, may_move, attempts, future)
        return future

    def recall(self, topic: str, recall_handle: str) -> str:
        """Take a delayed message back before it is due, by its send's ``SendResult.recall_handle``; returns the
        message's id. Raises MQClientError when it is no longer pending (delivered already, or recalled: code
        QUERY_NOT_FOUND) or the handle is not one of this cluster."""
        try:
            handle = RecallHandle.decode(recall_handle)
        except InvalidRecallHandle as exc:
            raise MQClientError(f"cannot recall: {exc}", ResponseCode.INVALID_PARAMETER) from None
        what = f"recall of message {handle.message_id} of topic {topic}"
        route = self.client.route(topic)
        if not any(bd.broker_name == handle.broker_name for bd in route.broker_datas):
            raise MQClientError(f"{what}: topic {topic}'s route does not name broker {handle.broker_name} (not a "
                                "broker of this cluster, or down long enough for the name server to drop it): "
                                "nothing to recall there now", ResponseCode.QUERY_NOT_FOUND)
        request = broker_pb2.RecallMessageRequest(topic=topic, recall_handle=recall_handle)
        for tries in range(1, RECALL_TRIES + 1):
            addr = self.client.master_addr(topic, handle.broker_name)  # no live master: a retryable error
            try:
                response = self.client.broker(addr).RecallMessage(request, timeout=self.send_timeout_s)
            except grpc.RpcError as exc:
                self.client.invalidate_route(topic)
                self.client.report_failure(addr, exc.code())
                raise rpc_error(what, addr, exc) from None
            if tries == RECALL_TRIES or not (response.code == ResponseCode.NO_PERMISSION
                                             and says_not_master(response.remark)):
                break
            # A failover moved the master (nothing was done): at the master a fresh route names. Kept, the old
            # address refused every recall until the route expired, and the message was delivered when due.
            self.client.invalidate_route(topic)
            time.sleep(RECALL_RETRY_S * tries)
        if response.code == ResponseCode.FLUSH_DISK_TIMEOUT:  # as for a send: recalled, not yet on disk
            log.warning("recall_flush_timeout topic=%s msg_id=%s: recalled, but not yet on disk", topic,
                        handle.message_id)
        elif response.code != ResponseCode.SUCCESS:
            raise business_error(what, addr, response.code, response.remark)
        return str(response.message_id)

    def begin_transaction(self) -> Transaction:
        """A transaction: half messages sent with ``tx.send(msg)``, ended by ``tx.commit()`` or ``tx.rollback()``."""
        if self._sessions is None:
            raise MQClientError("begin_transaction needs Producer(..., transaction_checker=fn): the brokers ask it "
                                "about transactions nobody ended")
        return Transaction(self)

    def _send_half(self, msg: Message) -> SendResult:
        """A half message (its TRAN_MSG and PGROUP set by the transaction) to a queue of its topic; the result's
        queue offset is its offset in the broker's half queue."""
        send = self._request([msg], sys_flag=TRANSACTION_PREPARED_TYPE)
        mq = self._next_queue(send.topic, None, refresh=False)
        if is_logic_queue(mq):
            raise MQClientError(f"topic {send.topic} is a static topic: transactional messages on static topics are "
                                "not supported", ResponseCode.INVALID_PARAMETER)  # the caller's to change
        if self._sessions is not None:  # the proxy keeps sessions of its own, per v2 client
            self._sessions.add_topic(send.topic)  # sessions with its brokers before any check can be due
        future: Future[SendResult] = Future()
        self._attempt(send, mq, True, 1 + self.retry_times, future)
        return future.result()

    def _request(self, msgs: Sequence[Message], sys_flag: int = 0, sharding_key: str | None = None,
                 born_timestamp: int = 0) -> "_Send":
        """``sharding_key``: also each message's message group (``__SHARDINGKEY``, where it names none), so a FIFO
        POP consumer (a RocketMQ 5 client's, through mqproxy) keeps those messages in order as one group.
        ``born_timestamp``: when the messages were made (epoch ms; 0: now), a v2 client's through mqproxy."""
        if not msgs:
            raise MQClientError("a batch needs at least one message")
        if sharding_key is not None and not isinstance(sharding_key, str):
            raise MQClientError(f"sharding_key must be a str, not {type(sharding_key).__name__}")
        topic = msgs[0].topic
        try:
            validate_user_send_topic(topic)
        except InvalidTopicError as exc:
            raise MQClientError(f"cannot send: {exc}") from None
        if any(m.topic != topic for m in msgs):
            raise MQClientError("a batch must have one topic")
        bodies = [m.body for m in msgs]
        if not all(bodies):
            raise MQClientError("cannot send an empty message body")
        properties = batch_wire_properties(msgs, HALF_MESSAGE_PROPERTIES if sys_flag == TRANSACTION_PREPARED_TYPE
                                           else USER_SET_PROPERTIES)
        if sharding_key:
            try:
                group = encode_properties({PROPERTY_SHARDING_KEY: sharding_key})
            except ValueError as exc:
                raise MQClientError(f"sharding_key {sharding_key[:64]!r}: {exc}") from None
            properties = [p if PROPERTY_SHARDING_KEY in m.properties else p + group
                          for p, m in zip(properties, msgs, strict=True)]
        # The batch travels as the records the broker stores: encoded once, here.
        records = encode_wire_batch(topic.encode(), bodies, properties,
                                    born_timestamp=born_timestamp or int(time.time() * 1000),
                                    born_host=self._born_host, flag=msgs[0].flag, sys_flag=sys_flag)
        return _Send(self.group, topic, bytes_field(RECORDS_FIELD, records), tuple(properties))

    def _call(self, addr: str, send: "_Send", queue_id: int, addressing: broker_pb2.QueueAddressing,
              timeout_s: float | None = None) -> Future:
        """One attempt: its own request (a stream stamps each with its id while an earlier attempt may still be
        in flight); the records go along encoded, copied once."""
        request = broker_pb2.SendMessageRequest(producer_group=send.group, topic=send.topic, queue_id=queue_id,
                                                addressing=addressing)
        timeout_s = timeout_s or self.send_timeout_s
        if self.use_streams:
            return self.client.send_stream(addr).call(request, timeout_s, send.records_field)
        request.records = send.records_field[1]
        return self.client.broker(addr).SendMessage.future(request, timeout=timeout_s)

    # -- queue choice ------------------------------------------------------------------------------
    def _queue_for_key(self, topic: str, key: str) -> MessageQueue:
        queues = self.client.publish_queues(topic)
        if not queues:
            raise MQClientError(f"topic {topic} has no writable queue")
        return queues[zlib.crc32(key.encode()) % len(queues)]

    def _next_queue(self, topic: str, avoid_broker: str | None, refresh: bool) -> MessageQueue:
        queues = self.client.publish_queues(topic, refresh)
        if not queues:
            raise MQClientError(f"topic {topic} has no writable queue")
        if is_logic_queue(queues[0]):
            leaders = self.client.logic_leaders(topic, for_publish=True)
            queues = tuple(mq for mq in queues if leaders.get(mq.queue_id, VIRTUAL_BROKER_NAME) != VIRTUAL_BROKER_NAME)
            if not queues:
                raise MQClientError(f"topic {topic}: none of its logic queues has a leader right now")
        with self._lock:
            self._round_robin += 1
            start = self._round_robin
        return self._pick(topic, queues, start, avoid_broker)

    def _pick(self, topic: str, queues: Sequence[MessageQueue], start: int, avoid_broker: str | None) -> MessageQueue:
        """Round robin from ``start``, skipping ``avoid_broker``; a group whose master is dead (marked down) or
        missing would fail the send, so its queues are taken only when no other group has a live master. Round
        robin over the live queues then (the next live queue after a dead group's took all of its share: 5/8 of the
        sends on one queue while a group of 4 queues was down)."""
        live: dict[str, bool] = {}  # per group, asked once

        def takes(mq: MessageQueue) -> bool:
            if mq.broker_name == avoid_broker:
                return False
            group = self._group_of(topic, mq)
            if group not in live:
                live[group] = self.client.has_live_master(topic, group, for_publish=True)
            return live[group]

        first = queues[start % len(queues)]
        if takes(first):  # usually
            return first
        taken = [mq for mq in queues if takes(mq)]
        if taken:
            return taken[start % len(taken)]
        from_start = (queues[(start + i) % len(queues)] for i in range(len(queues)))
        return next((mq for mq in from_start if mq.broker_name != avoid_broker), first)

    def _group_of(self, topic: str, mq: MessageQueue) -> str:
        """The broker group a send to ``mq`` goes to (a logic queue's: its leader's)."""
        if is_logic_queue(mq):
            return self.client.logic_leaders(topic, for_publish=True).get(mq.queue_id, VIRTUAL_BROKER_NAME)
        return mq.broker_name

    def _attempt(self, send: "_Send", mq: MessageQueue, may_move: bool, attempts_left: int,
                 future: "Future[SendResult]", deadline: float | None = None) -> None:
        """One try on ``mq``; a retryable failure tries a queue of another broker while attempts remain and the
        send's ``deadline`` (``send_timeout_ms`` from the send: the whole send's, as upstream's) has not passed.
        Each try waits at most what is left of it."""
        if deadline is None:
            deadline = time.monotonic() + self.send_deadline_s

        def fail(error: MQClientError) -> None:
            if not may_move and _failover(error) and time.monotonic() + MASTER_POLL_S < deadline:
                # A keyed send (a FIFO message group) or a chosen queue stays on its queue: it waits for the
                # group's new master, until the send's deadline, as a static topic's send does (it failed at
                # once: a failover through mqproxy failed every FIFO send meanwhile, the proxy review).
                log.info("send_wait_master topic=%s queue=%s reason=%s", mq.topic, mq, error)
                self.client.invalidate_route(mq.topic)
                self.client.retry_threads.retry(future, lambda: self._attempt(
                    send, mq, False, attempts_left, future, deadline), delay_s=MASTER_POLL_S)
                return
            if not (may_move and attempts_left > 1 and getattr(error, "retryable", False)
                    and time.monotonic() < deadline - MIN_ATTEMPT_S):
                if getattr(error, "retryable", False) or _failover(error):
                    # The next send asks the name server: a try that took the whole deadline (a hung master)
                    # left the route as it was, and every send went to that master until the route expired (30 s),
                    # 20 s after the controller had elected another
                    self.client.invalidate_route(mq.topic)
                future.set_exception(error)
                return
            log.info("send_retry topic=%s broker=%s reason=%s", mq.topic, mq.broker_name, error)
            self.client.retry_threads.retry(
                future, lambda: self._retry_elsewhere(send, mq, attempts_left - 1, future, error, deadline))

        try:
            addr = self.client.master_addr(mq.topic, mq.broker_name, for_publish=True)
        except RouteNotCached as exc:  # within cache_only: nothing was sent, the caller sends outside it
            future.set_exception(exc)
            return
        except MQClientError as exc:
            exc.retryable = True  # type: ignore[attr-defined]  # the broker left the route: try another
            fail(exc)
            return
        call = self._call(addr, send, mq.queue_id, broker_pb2.ADDRESSING_UNSPECIFIED,
                          max(MIN_ATTEMPT_S, min(self.send_timeout_s, deadline - time.monotonic())))

        def done(call: Future) -> None:
            try:
                future.set_result(self._result(mq, addr, call, send))
            except MQClientError as exc:
                fail(exc)

        call.add_done_callback(done)

    def _retry_elsewhere(self, send: "_Send", failed: MessageQueue, attempts_left: int,
                         future: "Future[SendResult]", error: MQClientError, deadline: float) -> None:
        """After a retryable failure on ``failed``: a fresh route, and an attempt on another broker's queue."""
        self.client.invalidate_route(failed.topic)
        try:
            next_mq = self._next_queue(failed.topic, failed.broker_name, refresh=True)
        except MQClientError as exc:
            future.set_exception(exc)
            return
        if getattr(error, "elsewhere_only", False) and next_mq.broker_name == failed.broker_name:
            future.set_exception(error)  # stored there already: another copy on the same group helps nobody
            return
        self._attempt(send, next_mq, True, attempts_left, future, deadline)

    def _attempt_static(self, send: "_Send", mq: MessageQueue, may_move: bool, attempts_left: int,
                        future: "Future[SendResult]", deadline: float, retry: int = 0) -> None:
        """One try on logic queue ``mq`` at its leader. A retryable failure refreshes the route and tries the
        same logic queue again while attempts remain; a failover (its leader group's master unreachable, or none
        in the route) waits for the group to have a master again, until ``deadline``, trying every
        :data:`MASTER_POLL_S`. A logic queue without a leader fails the send, unless ``may_move`` (unkeyed, no
        queue given): then another logic queue that has one is tried."""
        topic = mq.topic

        def again(error: MQClientError) -> None:
            if getattr(error, "failover", False):  # bounded by the send timeout, not by the retry count
                if time.monotonic() + MASTER_POLL_S >= deadline:
                    future.set_exception(error)
                    return
                log.info("send_wait_master topic=%s logic_queue=%d reason=%s", topic, mq.queue_id, error)
                self.client.retry_threads.retry(future, lambda: self._attempt_static(
                    send, mq, may_move, attempts_left, future, deadline, retry + 1),
                    delay_s=0.0 if retry == 0 else MASTER_POLL_S)
                return
            if attempts_left <= 1 or not getattr(error, "retryable", False):
                future.set_exception(error)
                return
            log.info("send_retry topic=%s logic_queue=%d reason=%s", topic, mq.queue_id, error)
            self.client.invalidate_route(topic)
            pause = 0.0 if retry == 0 else min(STATIC_RETRY_PAUSE_S * 2 ** (retry - 1), 1.0)
            self.client.retry_threads.retry(future, lambda: self._attempt_static(
                send, mq, may_move, attempts_left - 1, future, deadline, retry + 1), delay_s=pause)

        try:
            addr = self.client.leader_addr(topic, mq.queue_id, for_publish=True, refresh=retry > 0)
        except MQClientError as exc:
            no_leader = getattr(exc, "no_leader", False)
            if no_leader and may_move and attempts_left > 1:
                self._move_static(send, mq, attempts_left, future, deadline, retry, exc)
                return
            if no_leader and (retry > 0 or getattr(exc, "no_master", False)):
                # mid-remap the new leader may not be registered yet; mid-failover its group has no master yet
                exc.retryable = True  # type: ignore[attr-defined]
                exc.failover = getattr(exc, "no_master", False)  # type: ignore[attr-defined]
                again(exc)
                return
            future.set_exception(exc)
            return
        timeout_s = min(self.send_timeout_s, max(deadline - time.monotonic(), MIN_ATTEMPT_TIMEOUT_S))
        call = self._call(addr, send, mq.queue_id, broker_pb2.LOGIC, timeout_s)

        def done(call: Future) -> None:
            try:
                future.set_result(self._result(mq, addr, call, send, static=True))
            except MQClientError as exc:
                again(exc)

        call.add_done_callback(done)

    def _move_static(self, send: "_Send", mq: MessageQueue, attempts_left: int, future: "Future[SendResult]",
                     deadline: float, retry: int, error: MQClientError) -> None:
        """An unkeyed send whose logic queue has no leader (or whose leader group has no master) tries another
        logic queue, preferring one whose leader group has a live master."""
        log.info("send_move topic=%s from_logic_queue=%d reason=%s", mq.topic, mq.queue_id, error)
        try:
            next_mq = self._next_queue(mq.topic, None, refresh=False)  # leader_addr just refreshed the route
        except MQClientError as exc:
            future.set_exception(exc)
            return
        self._attempt_static(send, next_mq, True, attempts_left - 1, future, deadline, retry)

    def _send_follow_up(self, topic: str, send: Callable[[], None]) -> None:
        """The accumulator's batch that waited for an answer: sent from the answering thread (a stream's reader)
        when the route is cached, else from the retry threads, so the reader does not wait for the name server.
        The check is a likely one (a route invalidated just after it is looked up once more); a miss costs a
        delay of the stream's answers, never a lost send. A static topic's batches always take the retry threads
        (its leaders are looked up per batch)."""
        if self.client.sends_from_cache(topic):
            send()
            return

        def not_sent(error: BaseException) -> None:
            if isinstance(error, ClientClosed):  # sent here all the same: it fails at once on the closed channels
                send()  # (any other error was the send's own, and it answered its futures)

        self.client.retry_threads.later(0.0, send, not_sent)

    def _rpc_failure(self, mq: MessageQueue, addr: str, exc: grpc.RpcError) -> MQClientError:
        err = rpc_error(f"send to {mq}", addr, exc)
        err.retryable = exc.code() in RETRYABLE_STATUS  # type: ignore[attr-defined]
        # The broker is gone: marked down, so sends pick other groups; a static send waits for a new master.
        err.failover = self.client.report_failure(addr, exc.code(),  # type: ignore[attr-defined]
                                                  lambda: self._channel_ready(addr, exc))
        return err

    def _channel_ready(self, addr: str, exc: grpc.RpcError) -> bool:
        """Whether the channel the failed send to ``addr`` went on is connected (asked after one timed out): as
        the error says, when it was failed by a stream that knew."""
        connected = getattr(exc, "connected", None)
        return channel_connected(self.client.channel(addr)) if connected is None else connected

    def _result(self, mq: MessageQueue, addr: str, call: Future, send: "_Send", static: bool = False) -> SendResult:
        try:
            response = call.result()
        except grpc.RpcError as exc:
            raise self._rpc_failure(mq, addr, exc) from None
        self.client.report_answer(addr)
        status = SendStatus.SEND_OK
        if response.code == ResponseCode.FLUSH_DISK_TIMEOUT:  # RocketMQ's answer too: a result, not an error
            log.warning("send_flush_timeout queue=%s: stored, but not yet on disk", mq)
            status = SendStatus.FLUSH_DISK_TIMEOUT
        elif response.code != ResponseCode.SUCCESS:
            raise self._refusal(mq, addr, response, static)
        # A static topic's broker answers in logic terms: the logic queue and its logic offset (-1: undecided).
        queue = mq if static else MessageQueue(mq.topic, mq.broker_name, response.queue_id)
        return SendResult(queue, response.queue_offset, response.store_host, tuple(response.physical_offsets),
                          status, send.properties, tuple(response.recall_handles))

    @staticmethod
    def _refusal(mq: MessageQueue, addr: str, response: broker_pb2.SendMessageResponse,
                 static: bool) -> MQClientError:
        """The error of a send the broker did not store (or stored without its slave confirming), marked with
        how it may be retried."""
        err = business_error(f"send to {mq}", addr, response.code, response.remark)
        err.retryable = response.code in (STATIC_RETRYABLE_CODES if static  # type: ignore[attr-defined]
                                          else RETRYABLE_CODES)
        err.elsewhere_only = response.code in ELSEWHERE_CODES  # type: ignore[attr-defined]
        # A slave refuses writes: the route that named it master is stale (a failover under way).
        err.failover = (response.code == ResponseCode.NO_PERMISSION  # type: ignore[attr-defined]
                        and "slave" in response.remark.lower())
        return err


@dataclass(frozen=True, slots=True)
class _Send:
    """A batch ready to go: its records encoded once (as the ``records`` field of a request), and the small
    property blocks, kept apart so a result does not hold the records alive."""

    group: str
    topic: str
    records_field: tuple[bytes, bytes]  # (field header, records)
    properties: tuple[bytes, ...]


def _failover(error: MQClientError) -> bool:
    """The send's broker group has no reachable master now (gone, deposed, its lease ended, or none in the route):
    nothing was stored by this try, or, for a connection that broke or a master whose lease ended as it stored,
    at least once."""
    return bool(getattr(error, "failover", False) or getattr(error, "no_master", False)
                or says_master_changing(str(error)))


def _check_send(msgs: object, queue: object) -> None:
    """What a send was given, before anything is counted or encoded: a queue of another topic than the messages'
    stored them in their own topic at that queue id, and the result named the other (the SDK review)."""
    if isinstance(msgs, (str, bytes, bytearray, Message)) or not isinstance(msgs, Sequence):
        raise MQClientError(f"a batch is a sequence of Message, not {type(msgs).__name__}")
    for m in msgs:
        if not isinstance(m, Message):
            raise MQClientError(f"a send takes Message objects, not {type(m).__name__}")
    if queue is not None:
        if not isinstance(queue, MessageQueue):
            raise MQClientError(f"queue must be a MessageQueue, not {type(queue).__name__}")
        if msgs and queue.topic != msgs[0].topic:
            raise MQClientError(f"queue {queue} is of topic {queue.topic}, not the messages' topic {msgs[0].topic}")

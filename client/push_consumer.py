"""Push consumer: the members of a group share a topic's queues, and ``handler`` is called for each message.

- Membership: a session with every broker of the topic (heartbeats; the broker tells the group when a member joins
  or leaves, and the members rebalance at once; a periodic pass every 20 s is the safety net).
- Rebalance (``client/consumer/rebalance_impl.py``): queues split by ``allocate`` (upstream's averaging by
  default); ``message_model="BROADCASTING"`` gives every member every queue, with offsets kept by the member.
- Consumption: a long-polling pull in flight per queue, its answer taken on the stream's reader thread; the
  handler runs in the consume pool (``client/consumer/consume_pool.py``: at most ``consume_threads`` threads, as
  many running at once as keep tasks finishing); the committed offset is the lowest message not yet done.
- Failures: a handler that raises or returns ``ConsumeResult.LATER`` has its message retried through
  ``%RETRY%<group>`` (10 s, 30 s, 1 m, ...) and after ``max_reconsume_times`` retries (None: the group's
  retryMaxTimes, 16 unless ``updateSubGroup -r`` changed it) it goes to ``%DLQ%<group>``.
  ``orderly=True``: one member holds a queue at a time (a broker lease) and consumes it in order, suspending the
  queue on a failure instead of skipping the message.

Static topics: the queues are the topic's logic queues; the pull consumer underneath follows their leaders.
"""

import contextlib
import dataclasses
import itertools
import logging
import os
import socket
import threading

from client.argument_checks import checked_int
from client.consumer.allocate_strategy import AllocateStrategy, allocate_averagely
from client.consumer.consume_concurrently_service import ConsumeConcurrentlyService, Handler
from client.consumer.consume_orderly_service import ConsumeOrderlyService
from client.consumer.consume_pool import ConsumePool
from client.consumer.consumer_sessions import REOPEN_PAUSE_S, ConsumerSessions
from client.consumer.group_calls import GroupCalls, queue_ref
from client.consumer.offset_store import OffsetStore, RemoteOffsetStore
from client.consumer.process_queue import ProcessQueue, Run
from client.consumer.pull_message_service import PullMessageService, PullSettings
from client.consumer.rebalance_impl import RebalanceImpl, RebalanceSettings
from client.errors import MQClientError
from client.pull_consumer import PullConsumer, checked_consumer_group
from common.group_topics import is_retry_topic, retry_topic
from common.message import MessageExt
from common.message_properties import PROPERTY_RECONSUME_TIME, PROPERTY_RETRY_TOPIC, encode_properties
from common.subscription import parse_sub_expression
from common.wait_limits import MAX_SUSPEND_MS
from proto import consumer_pb2

log = logging.getLogger(__name__)

REBALANCE_INTERVAL_S = 20.0
REBALANCE_RETRY_S = 1.0
COMMIT_INTERVAL_S = 1.0
LEASE_RENEW_S = 20.0
LEASE_RETRY_S = 0.5  # the first retry of a lost lease, doubled up to LEASE_RETRY_MAX_S while it stays lost
LEASE_RETRY_MAX_S = 4.0
# How long close() waits for handler calls still running once the queues are released (upstream waits for none by
# default): a handler that never returns kept its application from closing, for good.
HANDLER_WAIT_S = 30.0
DEFAULT_MAX_RECONSUME_TIMES = 16  # orderly consumers retry in place: the limit is theirs, not the group's
MESSAGE_MODELS = ("CLUSTERING", "BROADCASTING")
MAX_PULL_BATCH_SIZE = 1024  # the broker's MAX_PULL_NUMS: it refuses every larger pull
INT32_MAX = 2**31 - 1
# What each numeric setting may be (upstream's checkConfig): refused at once, not by every pull or heartbeat after
# start (a pull_batch_size the broker refuses consumed nothing, a heartbeat_interval_ms of 0 spun client and broker).
SETTING_RANGES = {
    "pull_batch_size": (1, MAX_PULL_BATCH_SIZE),
    "consume_threads": (1, 1000),  # upstream's consumeThreadMax range
    "heartbeat_interval_ms": (100, 600_000),  # keep it below the brokers' channelExpiredTimeout (30 s by default)
    "long_poll_ms": (0, MAX_SUSPEND_MS),  # a broker holds a pull at most its longPollingMaxSuspendMs (30 s by default)
    "max_reconsume_times": (0, INT32_MAX),  # as updateSubGroup -r
}
_instances = itertools.count()
# Two processes may share a host address and a pid: PID 1 of two containers on the host's network, or processes of
# two PID namespaces. With equal ids the broker took them for one member: both consumed every queue of their share.
_PROCESS_NONCE = os.urandom(4).hex()


def checked_setting(name: str, value: object) -> int:
    """``value`` if it is an integer in the range of setting ``name``; else MQClientError naming both."""
    return checked_int(name, value, *SETTING_RANGES[name])


def new_client_id() -> str:
    """Unique per consumer: host address, process, a counter and a random part per process (upstream:
    ip@pid#nanotime)."""
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}@{os.getpid()}#{next(_instances)}#{_PROCESS_NONCE}"


class PushConsumer:
    """Calls ``handler`` for each message of ``topic``, sharing the topic's queues with the group's other members;
    the module's docstring says how queues are shared and failures retried.

    ::

        consumer = PushConsumer("127.0.0.1:9876", group="g1", topic="TopicA", handler=lambda msg: print(msg.body))
        consumer.start()  # ... consumer.close() when done
    """

    def __init__(self, namesrv_addr: str | None = None, group: str = "DEFAULT_CONSUMER", topic: str = "",
                 tags: str = "*", handler: Handler | None = None, consume_from_first: bool = False,
                 max_reconsume_times: int | None = None, orderly: bool = False, message_model: str = "CLUSTERING",
                 pull_batch_size: int = 64, consume_threads: int = 16, allocate: AllocateStrategy = allocate_averagely,
                 heartbeat_interval_ms: int = 10_000, long_poll_ms: int = 15_000,
                 tls_ca: str | None = None, credentials: tuple[str, str] | None = None) -> None:
        if not topic or handler is None:
            raise MQClientError("a push consumer needs a topic and a handler")
        if not callable(handler) or not callable(allocate):
            raise MQClientError(f"handler and allocate must be callables, not {handler!r} and {allocate!r}")
        checked_consumer_group(group)  # before anything is started for it
        if message_model not in MESSAGE_MODELS:
            raise MQClientError(f"message_model {message_model!r} is not one of {', '.join(MESSAGE_MODELS)}")
        if not isinstance(tags, str):
            raise MQClientError(f"tags must be a subscription expression (a str: '*' or 'TagA || TagB'), not {tags!r}")
        try:
            parse_sub_expression(tags)  # the brokers would refuse every pull
        except ValueError as exc:
            raise MQClientError(f"tags: {exc}") from None
        if max_reconsume_times is not None:
            checked_setting("max_reconsume_times", max_reconsume_times)
        for name, value in (("pull_batch_size", pull_batch_size), ("consume_threads", consume_threads),
                            ("heartbeat_interval_ms", heartbeat_interval_ms), ("long_poll_ms", long_poll_ms)):
            checked_setting(name, value)
        self.group = group
        self.topic = topic
        self.tags = tags
        self.handler = handler
        # None: the group's retryMaxTimes on the broker (16 unless ``updateSubGroup -r`` says otherwise)
        self.max_reconsume_times = max_reconsume_times
        self.orderly = orderly
        self.broadcasting = message_model == "BROADCASTING"
        self.client_id = new_client_id()
        self.consumer = PullConsumer(namesrv_addr, group, tls_ca=tls_ca, credentials=credentials)
        client = self.consumer.client
        self.calls = GroupCalls(client, group, self.client_id)
        self.offsets = OffsetStore() if self.broadcasting else RemoteOffsetStore(self.consumer)
        self._pool = ConsumePool(consume_threads, f"consume-{group}")
        self.consume: ConsumeConcurrentlyService | ConsumeOrderlyService = (
            ConsumeOrderlyService(self.handler, self._pool, self.offsets, self._dead_letter,
                                  DEFAULT_MAX_RECONSUME_TIMES if max_reconsume_times is None else max_reconsume_times)
            if orderly else ConsumeConcurrentlyService(self.handler, self._pool, self.offsets,
                                                       None if self.broadcasting else self._send_back))
        self.pull_service = PullMessageService(
            self.consumer, PullSettings(batch_size=pull_batch_size, long_poll_ms=long_poll_ms), self._expression,
            self._on_messages, self._on_offset_moved, orderly, self._on_passed)
        self._wakeup = threading.Event()  # a notice came (a member joined or left, offsets reset) or closing
        self.rebalance_impl = RebalanceImpl(
            self.consumer, self.calls, self.offsets, allocate,
            RebalanceSettings(self.client_id, self.broadcasting, orderly, consume_from_first),
            self._topics, self.pull_service.pull_now, interrupted=self._wakeup.is_set)
        self.sessions = ConsumerSessions(client, self._heartbeat, self._on_notice, heartbeat_interval_ms / 1000,
                                         self._on_session_broken)
        self._renew_soon = threading.Event()  # orderly: a session broke; its leases are asked for again soon
        self._stopped = threading.Event()
        self._started = False
        self._life = threading.Lock()  # start and close: each once
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> "PushConsumer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- life --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Join the group and consume. Once: a second call (or one after close) raises MQClientError. A start that
        fails (the topic has no route) closes the consumer before it raises: nothing of it is left running."""
        with self._life:
            if self._started or self._stopped.is_set():
                raise MQClientError(f"push consumer {self.client_id} of group {self.group} was "
                                    f"{'started' if self._started else 'closed'} already: a consumer starts once")
            self._started = True
        try:
            self.consumer.queues(self.topic)  # fails now, clearly, for a topic with no route
            self._keep_sessions()
            self.pull_service.start()
            for name, target in (("rebalance", self._rebalance_loop), ("commit", self._commit_loop),
                                 ("lease", self._lease_loop)):
                if name == "lease" and not self.rebalance_impl.settings.leases:  # (broadcasting takes none)
                    continue
                t = threading.Thread(target=target, name=f"push-{name}-{self.group}", daemon=True)
                t.start()
                self._threads.append(t)
        except BaseException:
            self.close()
            raise
        log.info("push_consumer_started group=%s topic=%s client=%s model=%s orderly=%s", self.group, self.topic,
                 self.client_id, "BROADCASTING" if self.broadcasting else "CLUSTERING", self.orderly)

    def close(self) -> None:
        """Leave cleanly: stop pulling, let running handler calls finish (for at most 10 s), commit, leave the group
        (the other members take the queues over from the committed offsets at once), then wait for handler calls
        still running, for at most :data:`HANDLER_WAIT_S` (what they handle is not committed: the group has it
        again; one that never returns is left running on its daemon thread, with a warning).

        From a handler (a consume pool thread) it does all of this as well, but does not wait for that handler's own
        task: it returns with the consumer closed while the handler still runs. The rest of that task's messages are
        not handled, and the message being handled is not committed (the group has it again). A second close (from
        any thread) returns at once."""
        with self._life:
            if self._stopped.is_set():
                return
            self._stopped.set()
        self._wakeup.set()
        self._renew_soon.set()
        for t in self._threads:  # no rebalance, commit or lease renewal from here on
            t.join(timeout=10)
        self.pull_service.shutdown()
        self.rebalance_impl.drop_all()
        self.offsets.persist_all()
        # Concurrently: before waiting for slow handlers, the queues being released (a member still in the group
        # kept them from the others until its last handler returned). Orderly: after, so no other member handles a
        # queue's next message while this one still handles its previous.
        if not self.orderly:
            self.sessions.close()
        self.consume.shutdown()
        running = self._pool.shutdown(wait=True, cancel_futures=True, timeout=HANDLER_WAIT_S)
        if running:  # a handler that never returns must not keep its application from closing
            log.warning("push_consumer_handlers_still_running group=%s client=%s handlers=%d waited_s=%.0f "
                        "why='closed without them: what they handle is not committed, the group has it again'",
                        self.group, self.client_id, len(running), HANDLER_WAIT_S)
        if self.orderly:
            self.sessions.close()
        self.consumer.close()
        log.info("push_consumer_closed group=%s client=%s", self.group, self.client_id)

    # -- membership and rebalance ------------------------------------------------------------------
    def _topics(self) -> list[str]:
        return [self.topic] if self.broadcasting else [self.topic, retry_topic(self.group)]

    def _expression(self, topic: str) -> str:
        return "*" if is_retry_topic(topic) else self.tags

    def _keep_sessions(self) -> None:
        addrs: set[str] = set()
        for topic in self._topics():
            with contextlib.suppress(MQClientError):  # the retry topic before the first heartbeat created it
                addrs.update(self.calls.session_addrs(topic, refresh=True))
        self.sessions.keep(addrs)

    def _heartbeat(self) -> consumer_pb2.HeartbeatFrame:
        data = consumer_pb2.ConsumerData(
            group=self.group, consume_type=consumer_pb2.CONSUME_PASSIVELY,
            message_model=consumer_pb2.BROADCASTING if self.broadcasting else consumer_pb2.CLUSTERING,
            subscriptions=[consumer_pb2.Subscription(topic=t, expression=self._expression(t)) for t in self._topics()],
            queues=[queue_ref(mq) for mq in self.rebalance_impl.held()], orderly=self.orderly)
        return consumer_pb2.HeartbeatFrame(client_id=self.client_id, consumers=[data])

    def _on_notice(self, notice: consumer_pb2.GroupNotice) -> None:
        if notice.group != self.group:
            return
        if notice.kind == consumer_pb2.GroupNotice.OFFSETS_RESET:
            self.rebalance_impl.note_reset(notice.topic, notice.broker_name, dict(notice.queue_offsets))
        self._wakeup.set()

    def _on_session_broken(self, addr: str) -> None:
        """Orderly: the broker freed this member's leases when its session ended (another member may lock the
        queues at once), so none is trusted until renewed: a member whose connection blipped went on consuming its
        queues beside the one that took them, out of order, for up to its lease's trust (30 s)."""
        if not self.rebalance_impl.settings.leases:
            return
        suspended = 0
        for pq in list(self.rebalance_impl.process_queues.values()):
            try:
                leased_there = self.calls.lock_addr(pq.mq) == addr
            except MQClientError:  # no route to its leaseholder now: not trusted either
                leased_there = True
            if leased_there and pq.locked:
                pq.locked = False
                suspended += 1
        if suspended:
            log.warning("queue_leases_suspended broker=%s queues=%d client=%s: session broke; renewed once it is "
                        "open again", addr, suspended, self.client_id)
            self._renew_soon.set()

    def _rebalance_loop(self) -> None:
        pause = 0.0
        while not self._stopped.is_set():
            self._wakeup.wait(pause)
            self._wakeup.clear()
            if self._stopped.is_set():
                return
            self.rebalance_impl.restart_reset_queues()
            self._keep_sessions()
            before = self.rebalance_impl.held()
            complete = self.rebalance_impl.rebalance()
            if self.rebalance_impl.held() != before:
                self.sessions.beat_now()  # the brokers show the new assignment (consumerConnection)
            pause = REBALANCE_INTERVAL_S if complete else REBALANCE_RETRY_S

    def _lease_loop(self) -> None:
        """Renew every LEASE_RENEW_S; while a lease is lost (a broker that stalled past a renewal, or restarted), ask
        again soon, backing off: a single failed renewal stopped the member's queues for 20 s, while nobody
        else could take them either."""
        wait = LEASE_RENEW_S
        while not self._stopped.is_set():
            if self._renew_soon.wait(wait):
                self._renew_soon.clear()  # after the session reopened: the broker has seen the old one end by then
                wait = LEASE_RETRY_S
                if self._stopped.wait(REOPEN_PAUSE_S + LEASE_RETRY_S):
                    return
            if self._stopped.is_set():
                return
            held, lost = self.rebalance_impl.renew_leases()
            for pq in held:  # a queue whose lease came back consumes what waits
                assert isinstance(self.consume, ConsumeOrderlyService)
                self.consume.submit(pq)
            if not lost:
                wait = LEASE_RENEW_S
            else:
                wait = LEASE_RETRY_S if wait == LEASE_RENEW_S else min(wait * 2, LEASE_RETRY_MAX_S)

    def _commit_loop(self) -> None:
        while not self._stopped.wait(COMMIT_INTERVAL_S):
            self.offsets.persist_all()

    # -- consumption -------------------------------------------------------------------------------
    def _on_messages(self, pq: ProcessQueue, run: Run) -> None:
        if is_retry_topic(pq.mq.topic):  # the handler sees a retried message as it was first sent
            for msg in run.msgs:
                props = msg.properties
                msg.topic = props.get(PROPERTY_RETRY_TOPIC, msg.topic)
                msg.reconsume_times = int(props.get(PROPERTY_RECONSUME_TIME, "0"))
        self.consume.submit(pq, run)

    def _on_passed(self, pq: ProcessQueue) -> None:
        """Messages the subscription's tags skip were passed over: committed as consumed once nothing before them is
        waiting (upstream's correctTagsOffset); they showed as lag, and a queue of other tags only grew it."""
        self.offsets.update(pq, pq.commit_offset())

    def _on_offset_moved(self, pq: ProcessQueue, offset: int) -> None:
        pq.reset(offset)
        self.offsets.update(pq, offset)

    def _send_back(self, msg: MessageExt) -> None:
        limit = -1 if self.max_reconsume_times is None else self.max_reconsume_times
        self.calls.send_back(msg, msg.topic, 0, limit)

    def _dead_letter(self, msg: MessageExt) -> None:
        """Orderly: a message is tried again in place, so its own count (RECONSUME_TIME) never grew; the dead letter
        carries the tries made (``reconsume_times``, as the orderly service set it), as upstream's does."""
        counted = encode_properties({**msg.properties, PROPERTY_RECONSUME_TIME: str(msg.reconsume_times)})
        self.calls.send_back(dataclasses.replace(msg, raw_properties=counted, _properties=None), msg.topic, -1, -1)

    # -- introspection -----------------------------------------------------------------------------
    def assigned_queues(self) -> list:
        """The queues this member consumes now."""
        return self.rebalance_impl.held()

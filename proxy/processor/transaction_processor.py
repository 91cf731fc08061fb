"""Transactions through the proxy (upstream's TransactionProcessor): half messages, EndTransaction, and the
brokers' check-back of unresolved ones as a Telemetry ``recover_orphaned_transaction_command``.

A half message is sent as the SDK's transactions send it (``Producer._send_half``: TRAN_MSG and PGROUP set, one
message per request); its transaction id (``common.transaction_id``) goes back to the v2 client with the message
id. v2 sends name no producer group, so the proxy picks one per topic (:func:`producer_group`): the same string is
the half message's PGROUP and the group the check sessions heartbeat.

Checks: the proxy keeps one ``ProducerSession`` with each master of the topics its producers publish (the SDK's
:class:`ProducerSessions`, in the proxy's own name), heartbeating the group of every topic a producer connected here
said it publishes (its Telemetry settings) or sent a half message to (with its Telemetry stream open here: a
client without one gets no check, and nothing would ever say it left). Settings come first, so after a proxy
restart the sessions are back as soon as the producers reconnect, not only once one sends another transactional
message. A broker's check becomes a ``RecoverOrphanedTransactionCommand`` pushed to one producer of the topic
connected here (any: upstream asks one of the group), whose checker answers with
EndTransaction(source=SOURCE_SERVER_CHECK). A topic's group leaves the heartbeat when its last producer goes (its
Telemetry stream ends or it says it terminates); a check then finds no producer and counts all the same, as upstream
(a group gone for good does not keep a half message for ever: ``transactionCheckMax``).

Threads: EndTransaction goes to the broker on the proxy's own channel from the event loop, and a half message on the
broker's send stream (``LoopProducer``), both within what is left of the client's deadline. Only what must block (a
route missing from the cache, the check sessions' routes) runs in worker threads, and in this processor's own few
(:data:`TRANSACTION_THREADS`): a paused broker or a stalled name server holds none of the threads the other calls
use, and an end nobody waits for any more is not retried."""

import asyncio
import contextlib
import logging
import random
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import grpc

from client.client_instance import ClientInstance, RouteNotCached
from client.errors import MQClientError
from client.producer_sessions import ProducerSessions, new_client_id
from client.results import SendResult
from client.transaction import END_ATTEMPTS, END_RETRY_PAUSE_S, RETRYABLE_STATUS, TransactionResolution
from client.transaction import RESOLUTIONS as BROKER_RESOLUTIONS
from common.acl import inner_metadata
from common.message import Message
from common.message_codec import CorruptRecordError, decode_record
from common.refusal import says_not_master
from common.response_code import NOT_REPLICATED_CODES, ResponseCode
from common.topic_validator import InvalidTopicError, validate_topic
from common.transaction_id import InvalidTransactionId, TransactionId
from common.transaction_topic import PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_PREPARED
from proto import transaction_pb2
from proto.v2 import definition_pb2, service_pb2
from proxy.deadline import NO_DEADLINE, Deadline
from proxy.loop_producer import LoopProducer, settled
from proxy.message_convert import OutgoingMessage, to_v2_message
from proxy.proxy_acl import current_user
from proxy.telemetry_channels import TelemetryChannels
from proxy.topic_route_service import TopicRouteService, client_error
from proxy.v2_codes import Code, ProxyError, broker_refusal, ok_status, rpc_failure

log = logging.getLogger(__name__)
_ABSENT = object()

GROUP_PREFIX = "PROXY_TX_"
GROUPS_PER_SESSION = 512  # topics one sessions object heartbeats (a broker takes up to 1024 groups a heartbeat)
TRANSACTION_THREADS = 4  # route misses of half messages and the check sessions' route look-ups, nothing else
BUSY_CODES = (ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE)  # the SDK's end retries these too
RESOLUTIONS = {definition_pb2.COMMIT: TransactionResolution.COMMIT,
               definition_pb2.ROLLBACK: TransactionResolution.ROLLBACK}


def producer_group(topic: str) -> str:
    """The producer group of a topic's transactions sent through the proxy."""
    return GROUP_PREFIX + topic


def _never_asked(_msg: object) -> TransactionResolution:  # checks are forwarded, see _ClientSessions._answer
    return TransactionResolution.UNKNOWN


class _ProxySessions(ProducerSessions):
    """The proxy's sessions with the masters of up to ``GROUPS_PER_SESSION`` topics; they heartbeat the groups of
    the topics a connected producer publishes. A check is forwarded to a producer, never answered here."""

    def __init__(self, processor: "TransactionProcessor", client: ClientInstance, client_id: str,
                 loop: asyncio.AbstractEventLoop, heartbeat_interval_s: float) -> None:
        self._processor = processor
        self._loop = loop
        self._groups: tuple[str, ...] = ()  # replaced whole: the session threads read it while the loop changes it
        super().__init__(client, GROUP_PREFIX, client_id, _never_asked, heartbeat_interval_s=heartbeat_interval_s)

    def heartbeat(self) -> transaction_pb2.ProducerHeartbeat:
        return transaction_pb2.ProducerHeartbeat(client_id=self.client_id, producer_groups=self._groups)

    def checks(self, topics: Iterable[str]) -> None:
        """Heartbeat the groups of ``topics`` (no others), with sessions open to their masters. Blocks (routes)."""
        topics = sorted(topics)
        groups = tuple(producer_group(t) for t in topics)
        if groups == self._groups:
            return
        self._groups = groups
        self.set_topics(topics)
        self.heartbeat_now()

    def _answer(self, addr: str, check: transaction_pb2.TransactionCheckRequest) -> None:
        try:
            TransactionId.decode(check.transaction_id)
            ext = decode_record(check.record)
        except (InvalidTransactionId, CorruptRecordError) as exc:
            log.error("transaction_check_unreadable broker=%s error=%s", addr, exc)
            return
        message = to_v2_message(ext, ext.topic, "", 0, 0)
        message.system_properties.message_type = definition_pb2.TRANSACTION
        if check.msg_id:
            message.system_properties.message_id = check.msg_id
        with contextlib.suppress(RuntimeError):  # the loop closed: the proxy stopped
            self._loop.call_soon_threadsafe(self._processor.forward_check, message, check.transaction_id)


class TransactionProcessor:
    def __init__(self, channels: TelemetryChannels, producer: LoopProducer | None = None,
                 heartbeat_interval_s: float = 10.0, routes: TopicRouteService | None = None) -> None:
        self.channels = channels
        self.producer = producer
        self.routes = routes  # the brokers a transaction id may name (None: EndTransaction is not served)
        self.heartbeat_interval_s = heartbeat_interval_s
        # topic -> the producers connected here that publish it (said so in their settings, or sent it a half
        # message): its group is heartbeated while there is one. Touched on the event loop only.
        # Each producer with the user it was let in as (ACL on): a check goes to that client id only on a stream of
        # the same user (another user may open a stream under the id, to collect the checks: whole messages).
        self._publishers: dict[str, dict[str, str | None]] = {}
        self._sessions: list[_ProxySessions] = []  # each for up to GROUPS_PER_SESSION topics, in order
        self._placed: dict[str, int] = {}  # topic -> the index of its sessions
        self._syncing: asyncio.Lock | None = None  # made on the loop, at first use
        self._closed = False
        self._threads = ThreadPoolExecutor(TRANSACTION_THREADS, thread_name_prefix="proxy-transaction")
        self._forwarding: set[asyncio.Future[None]] = set()  # checks being forwarded (held: tasks are weak)

    def _producer(self) -> LoopProducer:
        if self.producer is None:
            raise ProxyError(Code.NOT_IMPLEMENTED, "transactional messages are not served by this proxy")
        return self.producer

    def _routes(self) -> TopicRouteService:
        if self.routes is None:
            raise ProxyError(Code.NOT_IMPLEMENTED, "transactional messages are not served by this proxy")
        return self.routes

    async def send_half_message(self, message: OutgoingMessage, client_id: str,
                                deadline: Deadline = NO_DEADLINE) -> service_pb2.SendResultEntry:
        """Store ``message`` as a half message (invisible until committed); the entry carries its transaction id."""
        producer = self._producer()
        msg = message.message
        if msg.delay_level or msg.deliver_at_ms:
            raise ProxyError(Code.BAD_REQUEST, "a transactional message cannot be delayed")
        group = producer_group(msg.topic)
        half = replace(msg, properties={**msg.properties, PROPERTY_TRANSACTION_PREPARED: "true",
                                        PROPERTY_PRODUCER_GROUP: group})
        await self.publishes(client_id, [msg.topic])  # sessions before any check can be due
        try:
            result = await asyncio.wait_for(self._stored_half(producer, half, message.born_timestamp),
                                            deadline.wait_s())
        except MQClientError as exc:
            raise client_error(f"half message to topic {msg.topic}", exc) from None
        except TimeoutError:  # the SDK's future goes on: stored or not, the broker checks it back as any half message
            raise ProxyError(Code.PROXY_TIMEOUT, f"half message to topic {msg.topic}: not stored before the "
                                                 "client's deadline") from None
        if not result.physical_offsets:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"the half message of topic {msg.topic} was stored "
                                                         "without an offset")
        tx = TransactionId(result.queue.broker_name, result.physical_offsets[0], result.queue_offset)
        log.debug("transaction_half_sent tx=%s topic=%s client_id=%s", tx, msg.topic, client_id)
        return service_pb2.SendResultEntry(status=ok_status(), message_id=message.message_id,
                                           transaction_id=tx.encode(), offset=-1)

    async def _stored_half(self, producer: LoopProducer, half: Message, born_timestamp: int) -> SendResult:
        """The half message sent: from the loop when its route is cached, else started in this processor's threads
        (the route is looked up first, a blocking name server call)."""
        future = _half_from_loop(producer, half, born_timestamp)
        if future is None:
            future = await asyncio.get_running_loop().run_in_executor(self._threads, producer.send_half_async, half,
                                                                      born_timestamp)
        return await settled(future)

    async def publishes(self, client_id: str, topics: Iterable[str]) -> None:
        """Producer ``client_id`` publishes ``topics``: their groups are heartbeated, so their checks come here."""
        if self.producer is None or not client_id or self._closed:
            return
        if self.channels.get(client_id) is None:
            # No Telemetry stream here: no check can reach it (a check with no producer counts all the same), and
            # only the end of that stream or a NotifyClientTermination takes a producer out: a client sending half
            # messages without one was kept, and its topic's group heartbeated, for the proxy's life.
            return
        joined = False
        for topic in topics:
            try:
                validate_topic(producer_group(topic))  # a name the brokers refuse would break every group's session
            except InvalidTopicError as exc:
                log.info("transaction_checks_not_kept topic=%.64r client_id=%s reason=%r", topic, client_id, str(exc))
                continue
            clients = self._publishers.setdefault(topic, {})
            joined |= not clients
            clients[client_id] = current_user()
        if joined:
            await self._sync()

    async def _sync(self) -> None:
        """Every sessions' heartbeat to the topics with a producer connected here: a topic that has one gets a place
        (in the first sessions with room, made as needed), one that has none any more leaves its sessions."""
        if self._syncing is None:
            self._syncing = asyncio.Lock()
        async with self._syncing:  # one at a time: each sets its sessions' groups whole
            for topic in [t for t, clients in self._publishers.items() if not clients]:
                del self._publishers[topic]
                self._placed.pop(topic, None)
            for topic in sorted(self._publishers):
                if topic not in self._placed and not self._closed:
                    self._placed[topic] = self._place()
            loop = asyncio.get_running_loop()
            for i, sessions in enumerate(self._sessions):  # routes: may block on the name server
                await loop.run_in_executor(self._threads, sessions.checks,
                                           [t for t, at in self._placed.items() if at == i])

    def _place(self) -> int:
        """The index of the first sessions with room for a topic (new sessions when none has)."""
        used = [0] * len(self._sessions)
        for at in self._placed.values():
            used[at] += 1
        for i, n in enumerate(used):
            if n < GROUPS_PER_SESSION:
                return i
        assert self.producer is not None
        self._sessions.append(_ProxySessions(self, self.producer.client, new_client_id(), asyncio.get_running_loop(),
                                             self.heartbeat_interval_s))
        return len(self._sessions) - 1

    async def end_transaction(self, request: service_pb2.EndTransactionRequest, client_id: str,
                              time_remaining_s: float | None = None) -> service_pb2.EndTransactionResponse:
        """Commit or roll back the half message ``request.transaction_id`` names, while the client waits."""
        producer = self._producer()
        try:
            tx = TransactionId.decode(request.transaction_id)
        except InvalidTransactionId as exc:
            raise ProxyError(Code.INVALID_TRANSACTION_ID, str(exc)) from None
        resolution = RESOLUTIONS.get(request.resolution)
        if resolution is None:
            raise ProxyError(Code.BAD_REQUEST, "an end of transaction is COMMIT or ROLLBACK")
        topic = request.topic.name
        if not topic:
            raise ProxyError(Code.ILLEGAL_TOPIC, "an end of transaction names its message's topic")
        if await self._routes().unknown_brokers(topic, (tx.broker_name,), for_publish=True):
            raise ProxyError(Code.INVALID_TRANSACTION_ID, f"transaction id {request.transaction_id[:120]!r} names a "
                                                          f"broker topic {topic} is not on")
        end = transaction_pb2.EndTransactionRequest(
            producer_group=producer_group(topic), transaction_id=tx.encode(), msg_id=request.message_id,
            resolution=BROKER_RESOLUTIONS[resolution], client_id=client_id,
            from_check=request.source == definition_pb2.SOURCE_SERVER_CHECK)
        await self._end_at_master(topic, tx, end, f"{resolution.value.lower()} of transaction {tx}",
                                  Deadline.after(time_remaining_s), producer.send_timeout_s)
        return service_pb2.EndTransactionResponse(status=ok_status())

    async def _end_at_master(self, topic: str, tx: TransactionId, request: transaction_pb2.EndTransactionRequest,
                             what: str, deadline: Deadline, timeout_s: float) -> None:
        """EndTransaction at the master of the broker ``tx`` names, retried as the SDK's ``end_transaction`` retries
        (unreachable or busy: it may be restarting), each try within what is left of the client's deadline."""
        error = ProxyError(Code.PROXY_TIMEOUT, f"{what}: the client's deadline left no time to ask the broker")
        tries = 0
        for tries in range(1, END_ATTEMPTS + 1):
            if tries > 1:
                left = deadline.left_s()
                if left is not None and left <= END_RETRY_PAUSE_S:
                    break  # no time for another try: the client would not hear of it
                await asyncio.sleep(END_RETRY_PAUSE_S)
            timeout = deadline.cap(timeout_s)
            if timeout <= 0:
                break
            retry = await self._end_once(topic, tx, request, what, timeout)
            if retry is None:
                return
            error = retry
        log.info("transaction_end_gave_up tx=%s tries=%d reason=%r", tx, tries, error.message)
        raise error

    async def _end_once(self, topic: str, tx: TransactionId, request: transaction_pb2.EndTransactionRequest,
                        what: str, timeout: float) -> ProxyError | None:
        """One try: None when the broker took it, the error when another try may do (the broker unreachable or
        busy); any other refusal is raised."""
        routes = self._routes()
        addr = await routes.master_addr(topic, tx.broker_name, for_publish=True)
        try:
            response = await routes.brokers.transaction_service(addr).EndTransaction(
                request, timeout=timeout, metadata=inner_metadata())
        except grpc.RpcError as exc:
            routes.unreachable(topic, addr, exc)
            if exc.code() not in RETRYABLE_STATUS:
                raise rpc_failure(what, addr, exc) from None
            return rpc_failure(what, addr, exc)
        routes.answered(addr)
        if response.code == ResponseCode.FLUSH_DISK_TIMEOUT:
            log.warning("transaction_end_flush_timeout tx=%s: stored, but not yet on disk", tx)
            return None
        if response.code == ResponseCode.SUCCESS or response.code in NOT_REPLICATED_CODES:
            return None  # (ended on the master, its slave not confirming yet: as the SDK's end)
        refused = broker_refusal(what, response.code, response.remark)
        if response.code == ResponseCode.NO_PERMISSION and says_not_master(response.remark):
            routes.client.invalidate_route(topic)  # a failover: the next try asks the group's new master
            return refused
        if response.code not in BUSY_CODES:
            raise refused
        return refused

    def forward_check(self, message: definition_pb2.Message, transaction_id: str) -> None:
        """A broker asks about a transaction: a producer of its topic connected here resolves it."""
        task = asyncio.ensure_future(self._forward_check(message, transaction_id))
        self._forwarding.add(task)
        task.add_done_callback(self._forwarding.discard)

    async def _forward_check(self, message: definition_pb2.Message, transaction_id: str) -> None:
        if not await self.recover_orphaned_transaction(message, transaction_id):
            log.info("transaction_check_unforwarded tx=%s topic=%s: no producer connected that may publish it",
                     transaction_id, message.topic.name)

    async def recover_orphaned_transaction(self, message: definition_pb2.Message, transaction_id: str) -> bool:
        """Ask one producer that publishes ``message``'s topic (any: upstream asks one of the group) to resolve the
        transaction; False when no such producer is connected to this proxy. With ACL on, the producer's user must
        still have Pub on the topic (asked again now: a check carries the whole message, and the user's policies or
        account may have gone since its settings were let in)."""
        topic = message.topic.name
        producers = {ch.client_id: ch for ch in self.channels.producers_of(topic)}
        for client_id, user in self._publishers.get(topic, {}).items():  # also those that sent it half messages
            channel = self.channels.get(client_id)
            if channel is not None and channel.client_type == definition_pb2.PRODUCER and channel.user == user:
                producers[client_id] = channel
        candidates = list(producers.values())
        random.shuffle(candidates)
        claim = definition_pb2.Settings(client_type=definition_pb2.PRODUCER, publishing=definition_pb2.Publishing(
            topics=[definition_pb2.Resource(name=topic)]))
        for channel in candidates:
            refused = await channel.may_claim(claim) if channel.may_claim is not None else None
            if refused is not None:
                log.warning("transaction_check_withheld tx=%s topic=%s client_id=%s user=%s reason=%r",
                            transaction_id, topic, channel.client_id, channel.user, refused.message)
                continue
            channel.send(service_pb2.TelemetryCommand(
                recover_orphaned_transaction_command=service_pb2.RecoverOrphanedTransactionCommand(
                    message=message, transaction_id=transaction_id)))
            return True
        return False

    async def client_gone(self, client_id: str) -> None:
        """The client ended its Telemetry stream or terminated: the groups of topics only it published leave the
        heartbeat (their checks find no producer meanwhile, as when none is connected)."""
        left = False
        for clients in self._publishers.values():
            if clients.pop(client_id, _ABSENT) is not _ABSENT:
                left |= not clients
        if left:
            await self._sync()

    def close(self) -> None:
        self._closed = True
        gone, self._sessions = self._sessions, []
        for sessions in gone:
            sessions.close()
        self._threads.shutdown(wait=False, cancel_futures=True)


def _half_from_loop(producer: LoopProducer, half: Message, born_timestamp: int) -> Future[SendResult] | None:
    """The half message started on the loop; None when its route was not cached after all (nothing was sent)."""
    try:
        with producer.client.cache_only():
            future = producer.send_half_async(half, born_timestamp)
    except RouteNotCached:
        return None
    if future.done() and isinstance(future.exception(), RouteNotCached):
        return None
    return future

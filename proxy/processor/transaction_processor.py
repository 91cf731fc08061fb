"""Transactions through the proxy (upstream's TransactionProcessor): half messages, EndTransaction, and the
brokers' check-back of unresolved ones as a Telemetry ``recover_orphaned_transaction_command``.

A half message is sent as the SDK's transactions send it (``Producer._send_half``: TRAN_MSG and PGROUP set, one
message per request); its transaction id (``common.transaction_id``) goes back to the v2 client with the message
id. v2 sends name no producer group, so the proxy picks one per topic (:func:`producer_group`): the same string is
the half message's PGROUP and the group the check sessions heartbeat.

Checks: per v2 client and topic it sent half messages to, the SDK's :class:`ProducerSessions` keeps a
``ProducerSession`` with the topic's masters in the client's name; a broker's check becomes a
``RecoverOrphanedTransactionCommand`` pushed to that client (or any producer of the topic connected here), whose
checker answers with EndTransaction(source=SOURCE_SERVER_CHECK). The sessions close when the client's Telemetry
stream ends or it says it terminates."""

import asyncio
import contextlib
import logging
import random
import threading
from dataclasses import replace

from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.producer import Producer
from client.producer_sessions import ProducerSessions
from client.transaction import HalfMessage, TransactionResolution, end_transaction
from common.message_codec import CorruptRecordError, decode_record
from common.transaction_id import InvalidTransactionId, TransactionId
from common.transaction_topic import PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_PREPARED
from proto import transaction_pb2
from proto.v2 import definition_pb2, service_pb2
from proxy.message_convert import OutgoingMessage, to_v2_message
from proxy.telemetry_channels import TelemetryChannels
from proxy.topic_route_service import client_error
from proxy.v2_codes import Code, ProxyError, ok_status

log = logging.getLogger(__name__)

GROUP_PREFIX = "PROXY_TX_"
RESOLUTIONS = {definition_pb2.COMMIT: TransactionResolution.COMMIT,
               definition_pb2.ROLLBACK: TransactionResolution.ROLLBACK}


def producer_group(topic: str) -> str:
    """The producer group of a topic's transactions sent through the proxy."""
    return GROUP_PREFIX + topic


def _never_asked(_msg: object) -> TransactionResolution:  # checks are forwarded, see _ClientSessions._answer
    return TransactionResolution.UNKNOWN


class _ClientSessions(ProducerSessions):
    """One v2 client's sessions for one topic's group: a check is forwarded to the client, never answered here."""

    def __init__(self, processor: "TransactionProcessor", client: ClientInstance, topic: str, client_id: str,
                 loop: asyncio.AbstractEventLoop, heartbeat_interval_s: float) -> None:
        self._processor = processor
        self._loop = loop
        super().__init__(client, producer_group(topic), client_id, _never_asked, topics=[topic],
                         heartbeat_interval_s=heartbeat_interval_s)

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
            self._loop.call_soon_threadsafe(self._processor.forward_check, self.client_id, message,
                                            check.transaction_id)


class TransactionProcessor:
    def __init__(self, channels: TelemetryChannels, producer: Producer | None = None,
                 heartbeat_interval_s: float = 10.0) -> None:
        self.channels = channels
        self.producer = producer
        self.heartbeat_interval_s = heartbeat_interval_s
        self._sessions: dict[tuple[str, str], _ClientSessions] = {}  # (client id, topic)
        self._lock = threading.Lock()

    def _producer(self) -> Producer:
        if self.producer is None:
            raise ProxyError(Code.NOT_IMPLEMENTED, "transactional messages are not served by this proxy")
        return self.producer

    async def send_half_message(self, message: OutgoingMessage, client_id: str) -> service_pb2.SendResultEntry:
        """Store ``message`` as a half message (invisible until committed); the entry carries its transaction id."""
        producer = self._producer()
        msg = message.message
        if msg.delay_level or msg.deliver_at_ms:
            raise ProxyError(Code.BAD_REQUEST, "a transactional message cannot be delayed")
        group = producer_group(msg.topic)
        half = replace(msg, properties={**msg.properties, PROPERTY_TRANSACTION_PREPARED: "true",
                                        PROPERTY_PRODUCER_GROUP: group})
        if client_id:
            self._keep_sessions(producer, client_id, msg.topic)  # before any check can be due
        try:
            result = await asyncio.to_thread(producer._send_half, half)
        except MQClientError as exc:
            raise client_error(f"half message to topic {msg.topic}", exc) from None
        if not result.physical_offsets:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"the half message of topic {msg.topic} was stored "
                                                         "without an offset")
        tx = TransactionId(result.queue.broker_name, result.physical_offsets[0], result.queue_offset)
        log.debug("transaction_half_sent tx=%s topic=%s client_id=%s", tx, msg.topic, client_id)
        return service_pb2.SendResultEntry(status=ok_status(), message_id=message.message_id,
                                           transaction_id=tx.encode(), offset=-1)

    def _keep_sessions(self, producer: Producer, client_id: str, topic: str) -> None:
        key = (client_id, topic)
        with self._lock:
            if key not in self._sessions:
                self._sessions[key] = _ClientSessions(self, producer.client, topic, client_id,
                                                      asyncio.get_running_loop(), self.heartbeat_interval_s)

    async def end_transaction(self, request: service_pb2.EndTransactionRequest,
                              client_id: str) -> service_pb2.EndTransactionResponse:
        """Commit or roll back the half message ``request.transaction_id`` names."""
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
        half = HalfMessage(topic, tx, request.message_id)
        try:
            await asyncio.to_thread(end_transaction, producer.client, producer_group(topic), half, resolution,
                                    timeout_s=producer.send_timeout_s,
                                    from_check=request.source == definition_pb2.SOURCE_SERVER_CHECK,
                                    client_id=client_id)
        except MQClientError as exc:
            raise client_error(f"{resolution.value.lower()} of transaction {tx}", exc) from None
        return service_pb2.EndTransactionResponse(status=ok_status())

    def forward_check(self, client_id: str, message: definition_pb2.Message, transaction_id: str) -> None:
        """A broker asks about a transaction of ``client_id``: that client resolves it (any producer of the topic
        connected here when it is gone)."""
        channel = self.channels.get(client_id)
        command = service_pb2.TelemetryCommand(
            recover_orphaned_transaction_command=service_pb2.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=transaction_id))
        if channel is not None and channel.client_type == definition_pb2.PRODUCER:
            channel.send(command)
        elif not self.recover_orphaned_transaction(message, transaction_id):
            log.info("transaction_check_unforwarded tx=%s topic=%s: no producer connected", transaction_id,
                     message.topic.name)

    def recover_orphaned_transaction(self, message: definition_pb2.Message, transaction_id: str) -> bool:
        """Ask one producer that publishes ``message``'s topic (any: upstream asks one of the group) to resolve the
        transaction; False when no such producer is connected to this proxy."""
        producers = self.channels.producers_of(message.topic.name)
        if not producers:
            return False
        random.choice(producers).send(service_pb2.TelemetryCommand(
            recover_orphaned_transaction_command=service_pb2.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=transaction_id)))
        return True

    async def client_gone(self, client_id: str) -> None:
        """The client ended its Telemetry stream or terminated: its check sessions close."""
        with self._lock:
            gone = [self._sessions.pop(key) for key in list(self._sessions) if key[0] == client_id]
        for sessions in gone:
            await asyncio.to_thread(sessions.close)

    def close(self) -> None:
        with self._lock:
            gone, self._sessions = list(self._sessions.values()), {}
        for sessions in gone:
            sessions.close()

"""SendMessage (upstream's ProducerProcessor): v2 messages sent through the SDK's producer, which picks the queue
as for any producer of this cluster: round robin over the writable queues (a static topic's logic queues),
moving to another broker when one fails; a FIFO message's message group is its sharding key, so a group always
lands on the same queue. The client's queue choice never reaches the proxy (a v2 send names none).

Transactional messages go to the transaction processor; everything else is stored as sent, with the client's
message id as the message's unique key."""

import asyncio
import logging
from concurrent.futures import Future

from client.client_instance import RouteNotCached
from client.errors import MQClientError
from client.results import SendResult, SendStatus
from proto.v2 import definition_pb2, service_pb2
from proxy.deadline import Deadline
from proxy.loop_producer import LoopProducer, settled
from proxy.message_convert import OutgoingMessage, compressed, to_outgoing
from proxy.processor.names import check_topic
from proxy.processor.transaction_processor import TransactionProcessor
from proxy.topic_route_service import client_error
from proxy.v2_codes import Code, ProxyError, ok_status, overall_status

log = logging.getLogger(__name__)

MAX_MESSAGES_PER_SEND = 1024


class SendProcessor:
    def __init__(self, producer: LoopProducer, transactions: TransactionProcessor, max_body_size: int) -> None:
        self.producer = producer
        self.transactions = transactions
        self.max_body_size = max_body_size

    async def send_message(self, request: service_pb2.SendMessageRequest, client_id: str,
                           time_remaining_s: float | None = None) -> service_pb2.SendMessageResponse:
        if not request.messages:
            raise ProxyError(Code.BAD_REQUEST, "a send needs at least one message")
        if len(request.messages) > MAX_MESSAGES_PER_SEND:
            raise ProxyError(Code.BAD_REQUEST, f"a send carries at most {MAX_MESSAGES_PER_SEND} messages")
        deadline = Deadline.after(time_remaining_s)
        if len(request.messages) == 1:  # the usual send: no task for it
            entries = [await self._send_one(request.messages[0], client_id, deadline)]
        else:
            entries = await asyncio.gather(*(self._send_one(msg, client_id, deadline) for msg in request.messages))
        return service_pb2.SendMessageResponse(status=overall_status([e.status for e in entries]), entries=entries)

    async def _send_one(self, msg: definition_pb2.Message, client_id: str,
                        deadline: Deadline) -> service_pb2.SendResultEntry:
        """One message's entry: its own status, so one bad message of a request does not fail the others."""
        try:
            outgoing = await self._convert(msg)
            if outgoing.transactional:
                return await self.transactions.send_half_message(outgoing, client_id, deadline)
            return entry(outgoing, await self._send(outgoing))
        except ProxyError as exc:
            return service_pb2.SendResultEntry(status=exc.status(), message_id=msg.system_properties.message_id)
        except Exception:  # the proxy's fault: this message's entry says so, the others' stand (a retry of the
            # whole request would store them twice)
            log.exception("send_entry_failed topic=%s message_id=%s", msg.topic.name,
                          msg.system_properties.message_id)
            return service_pb2.SendResultEntry(
                status=definition_pb2.Status(code=Code.INTERNAL_SERVER_ERROR, message="the proxy failed this message"),
                message_id=msg.system_properties.message_id)

    async def _convert(self, msg: definition_pb2.Message) -> OutgoingMessage:
        if compressed(msg):  # decompressing up to max_body_size takes a while: other clients are served meanwhile
            return await asyncio.to_thread(to_outgoing, msg, self.max_body_size)
        return to_outgoing(msg, self.max_body_size)

    async def recall_message(self, request: service_pb2.RecallMessageRequest) -> service_pb2.RecallMessageResponse:
        """A delayed message taken back before it is due, on the broker its recall handle names."""
        topic = check_topic(request.topic.name)
        if not request.recall_handle:
            raise ProxyError(Code.BAD_REQUEST, "a recall names a recall handle")
        try:
            # the broker's address may need a route lookup (a blocking name server call): not on the loop
            message_id = await asyncio.to_thread(self.producer.recall, topic, request.recall_handle)
        except MQClientError as exc:
            raise client_error(f"recall in topic {topic}", exc) from None
        return service_pb2.RecallMessageResponse(status=ok_status(), message_id=message_id)

    async def _send(self, outgoing: OutgoingMessage) -> SendResult:
        what = f"send to topic {outgoing.message.topic}"
        try:
            future = self._send_from_loop(outgoing) if self.producer.sends_from_loop(outgoing.message.topic) else None
            if future is None:  # the producer looks the route up first (a blocking name server call): not on the loop
                future = await asyncio.to_thread(self.producer.send_born_async, outgoing.message,
                                                 outgoing.message_group, outgoing.born_timestamp)
            return await settled(future)
        except MQClientError as exc:
            error = client_error(what, exc)
            if error.code == Code.BAD_REQUEST and outgoing.message.deliver_at_ms:  # the broker's timer limits
                error = ProxyError(Code.ILLEGAL_DELIVERY_TIME, error.message)
            raise error from None

    def _send_from_loop(self, outgoing: OutgoingMessage) -> Future[SendResult] | None:
        """The send started on the loop; None when its route was not in the cache after all (nothing was sent:
        the miss comes before any attempt, raised or set on the future at once)."""
        try:
            with self.producer.client.cache_only():
                future = self.producer.send_born_async(outgoing.message, outgoing.message_group,
                                                       outgoing.born_timestamp)
        except RouteNotCached:
            return None
        if future.done() and isinstance(future.exception(), RouteNotCached):
            return None
        return future


def entry(outgoing: OutgoingMessage, result: SendResult) -> service_pb2.SendResultEntry:
    status = ok_status()
    if result.status is SendStatus.FLUSH_DISK_TIMEOUT:  # stored, not yet on disk: upstream's answer for it
        status = definition_pb2.Status(code=Code.MASTER_PERSISTENCE_TIMEOUT,
                                       message="stored, but not flushed to disk within syncFlushTimeout")
    return service_pb2.SendResultEntry(status=status, message_id=outgoing.message_id, offset=result.queue_offset,
                                       recall_handle=result.recall_handle)

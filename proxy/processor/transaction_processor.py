"""Transactions through the proxy (upstream's TransactionProcessor): half messages, EndTransaction, and the
brokers' check-back of unresolved ones as a Telemetry ``recover_orphaned_transaction_command``.

Not served yet: the brokers' half-message store and check loop are the transaction work of issue 17, which
fills in this module (and only this one: the send processor hands it every TRANSACTION message, the servicer
every EndTransaction). Until then both answer NOT_IMPLEMENTED, so a v2 producer's transactional send fails loudly
and no half message is ever stored as an ordinary, deliverable one.

The check-back half is here already: :meth:`recover_orphaned_transaction` pushes the command to a producer of the
message's topic connected to this proxy; the client runs its checker and answers with an EndTransaction whose
source is SOURCE_SERVER_CHECK (not on the Telemetry stream)."""

import random

from proto.v2 import definition_pb2, service_pb2
from proxy.message_convert import OutgoingMessage
from proxy.telemetry_channels import TelemetryChannels
from proxy.v2_codes import Code, ProxyError

NOT_SERVED = "transactional messages are not served by this cluster yet"


class TransactionProcessor:
    def __init__(self, channels: TelemetryChannels) -> None:
        self.channels = channels

    async def send_half_message(self, message: OutgoingMessage, client_id: str) -> service_pb2.SendResultEntry:
        """Store ``message`` as a half message (invisible until committed); the entry carries its transaction id."""
        raise ProxyError(Code.NOT_IMPLEMENTED, f"{NOT_SERVED}: half message {message.message_id} of topic "
                                               f"{message.message.topic} refused")

    async def end_transaction(self, request: service_pb2.EndTransactionRequest,
                              client_id: str) -> service_pb2.EndTransactionResponse:
        """Commit or roll back the half message ``request.transaction_id`` names."""
        raise ProxyError(Code.NOT_IMPLEMENTED, f"{NOT_SERVED}: cannot end transaction {request.transaction_id[:80]!r}")

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

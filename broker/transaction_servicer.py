"""The broker's transaction face (proto/transaction.proto): decode, call the processor, encode. What a processor
raises is answered by the RPC boundary (``common/rpc_boundary.py``)."""

from broker.broker_servicer import run
from broker.ha.ha_service import HAService
from broker.transaction.end_transaction_processor import EndTransactionProcessor
from broker.transaction.producer_manager import ProducerManager
from common.acl import acl_refusals
from common.rpc_boundary import rpc_boundary
from proto import transaction_pb2, transaction_pb2_grpc


@rpc_boundary(transaction_pb2.DESCRIPTOR.services_by_name["TransactionService"])
class TransactionServicer(transaction_pb2_grpc.TransactionServiceServicer):
    def __init__(self, end: EndTransactionProcessor, producers: ProducerManager, ha: HAService | None = None) -> None:
        self.end = end
        self.producers = producers
        self.ha = ha  # a SYNC_MASTER answers an end once its slaves have it, as a send

    async def EndTransaction(self, request, context):  # checks the half message's topic once read (ACL on)
        response = await acl_refusals(context, run(self.end.end, request, in_thread=True))
        if self.ha is not None:
            await self.ha.acknowledged(response)
        return response

    async def ProducerSession(self, request_iterator, context):
        async for check in self.producers.session(request_iterator, context.peer()):
            yield check

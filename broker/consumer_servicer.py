"""The broker's consumer-group face (proto/consumer.proto): decode, call a processor, encode. What a processor
raises is answered by the RPC boundary (``common/rpc_boundary.py``)."""

from broker.broker_servicer import run
from broker.ha.ha_service import HAService
from broker.processor.consumer_group_processor import ConsumerGroupProcessor
from broker.processor.send_msg_back_processor import SendMsgBackProcessor
from common.rpc_boundary import rpc_boundary
from proto import consumer_pb2, consumer_pb2_grpc


@rpc_boundary(consumer_pb2.DESCRIPTOR.services_by_name["ConsumerService"])
class ConsumerServicer(consumer_pb2_grpc.ConsumerServiceServicer):
    def __init__(self, groups: ConsumerGroupProcessor, send_back: SendMsgBackProcessor,
                 ha: HAService | None = None) -> None:
        self.groups = groups
        self.send_back = send_back
        self.ha = ha  # a SYNC_MASTER answers a sent-back message once its slaves have it, as a send

    async def ConsumerSession(self, request_iterator, context):
        async for notice in self.groups.session(request_iterator, context.peer()):
            yield notice

    async def GetConsumerList(self, request, context):
        return self.groups.consumer_list(request)

    async def LockBatchMQ(self, request, context):
        return await run(self.groups.lock_batch, request, remote=True)  # a moved logic queue asks its old leader

    async def UnlockBatchMQ(self, request, context):
        return self.groups.unlock_batch(request)

    async def ConsumerSendMsgBack(self, request, context):
        response = await run(self.send_back.send_back, request, in_thread=True)
        if self.ha is not None:
            await self.ha.acknowledged(response)
        return response

    async def GetConsumerConnection(self, request, context):
        return self.groups.connection(request)

    async def ResetOffsetByTime(self, request, context):
        response = await run(self.groups.reset_offset_by_time, request, remote=True)  # static topics' peers, a tier
        self.groups.announce_reset(request, response.offsets)
        return response

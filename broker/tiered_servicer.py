"""The broker's tiered-storage face (proto/tiered.proto): decode, call the tiered processor, encode."""

from typing import TYPE_CHECKING

from broker.broker_servicer import answer
from proto import tiered_pb2_grpc

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController


class TieredServicer(tiered_pb2_grpc.TieredServiceServicer):
    def __init__(self, controller: "BrokerController") -> None:
        self.tiered = controller.tiered_processor

    async def GetTieredStatus(self, request, context):
        return await answer(context, self.tiered.status, request)

    async def GetTieredMetadata(self, request, context):
        return await answer(context, self.tiered.metadata, request, in_thread=True)

    async def ReplaceSegments(self, request, context):
        return await answer(context, self.tiered.replace_segments, request)

    async def MarkExpiredSegments(self, request, context):
        return await answer(context, self.tiered.mark_expired, request, in_thread=True)

    async def DropSegments(self, request, context):
        return await answer(context, self.tiered.drop_segments, request)

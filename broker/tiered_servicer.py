"""The broker's tiered-storage face (proto/tiered.proto): decode, call the tiered processor, encode. What the
processor raises is answered by the RPC boundary (``common/rpc_boundary.py``)."""

import asyncio

from broker.processor.tiered_processor import TieredProcessor
from common.rpc_boundary import rpc_boundary
from proto import tiered_pb2, tiered_pb2_grpc


@rpc_boundary(tiered_pb2.DESCRIPTOR.services_by_name["TieredService"])
class TieredServicer(tiered_pb2_grpc.TieredServiceServicer):
    def __init__(self, tiered: TieredProcessor) -> None:
        self.tiered = tiered

    async def GetTieredStatus(self, request, context):
        return self.tiered.status(request)

    async def GetTieredMetadata(self, request, context):  # a snapshot of every segment: off the event loop
        return await asyncio.to_thread(self.tiered.metadata, request)

    async def ReplaceSegments(self, request, context):  # asks the backend for the merged object: off the event loop
        return await asyncio.to_thread(self.tiered.replace_segments, request)

    async def MarkExpiredSegments(self, request, context):
        return await asyncio.to_thread(self.tiered.mark_expired, request)

    async def GetTierCopy(self, request, context):  # a snapshot of the tier's metadata: off the event loop
        return await asyncio.to_thread(self.tiered.tier_copy, request)

    async def DropSegments(self, request, context):
        return self.tiered.drop_segments(request)

"""The broker's KV face (proto/kv.proto): decode, call the KV processor, encode. What the processor raises is
answered by the RPC boundary (``common/rpc_boundary.py``)."""

from broker.processor.kv_processor import KvProcessor
from common.rpc_boundary import rpc_boundary
from common.stream_answers import answer_frames
from proto import kv_pb2, kv_pb2_grpc


@rpc_boundary(kv_pb2.DESCRIPTOR.services_by_name["KvService"])
class KvServicer(kv_pb2_grpc.KvServiceServicer):
    def __init__(self, kv: KvProcessor) -> None:
        self.kv = kv

    async def Write(self, request, context):
        return await self.kv.write(request)

    async def WriteStream(self, request_iterator, context):
        # Each write in a task of its own: those in flight together join one group commit, as concurrent calls.
        async for frame in answer_frames(request_iterator, self.kv.write, kv_pb2.KvWriteResponse, in_order=False,
                                         rpc="KvWriteStream"):
            yield frame

    async def Get(self, request, context):
        return await self.kv.get(request)

    async def GetStream(self, request_iterator, context):
        # Each get in a task of its own: one that reads a moved shard's older broker holds up no other.
        async for frame in answer_frames(request_iterator, self.kv.get, kv_pb2.KvGetResponse, in_order=False,
                                         rpc="KvGetStream"):
            yield frame

    async def Scan(self, request, context):
        return await self.kv.scan(request)

    async def ExportSnapshot(self, request, context):
        async for chunk in self.kv.export_snapshot(request):
            yield chunk

    async def ImportSnapshot(self, request_iterator, context):
        return await self.kv.import_snapshot(request_iterator)

    async def Provision(self, request, context):
        return await self.kv.provision(request)

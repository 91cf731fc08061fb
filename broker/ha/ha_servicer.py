"""The replication port's gRPC face (proto/ha.proto): a slave's stream and its state copy, handed to the HA
service."""

from broker.ha.ha_service import HAService
from common.rpc_boundary import rpc_boundary
from proto import ha_pb2, ha_pb2_grpc


@rpc_boundary(ha_pb2.DESCRIPTOR.services_by_name["HaService"])
class HaServicer(ha_pb2_grpc.HaServiceServicer):
    def __init__(self, ha: HAService) -> None:
        self.ha = ha

    async def Replicate(self, request_iterator, context):
        async for frame in self.ha.replicate(request_iterator):
            yield frame

    async def CopyState(self, request, context):
        async for chunk in self.ha.copy_state(request):
            yield chunk

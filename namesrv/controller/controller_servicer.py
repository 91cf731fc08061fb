"""ControllerService over gRPC (proto/controller.proto): decode, call the ControllerService, encode.

Malformed requests (RequestError) and anything unexpected are answered by the RPC boundary
(``common/rpc_boundary.py``); the controller's own outcomes are mapped here: a refused decision is
FAILED_PRECONDITION, an unknown group or replica NOT_FOUND.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from common.request_error import RequestError, require
from common.rpc_boundary import UndecodableRequest, rpc_boundary
from namesrv.controller import controller_codec
from namesrv.controller.controller_service import ControllerService
from namesrv.controller.replica_models import Heartbeat
from namesrv.controller.replicas_info_manager import ControllerNotFound, ControllerRefusal
from proto import controller_pb2, controller_pb2_grpc


@asynccontextmanager
async def _controller_outcomes(context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
    try:
        yield
    except ControllerRefusal as exc:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    except ControllerNotFound as exc:
        await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))


async def _heartbeats(frames: AsyncIterator[controller_pb2.BrokerHeartbeat | UndecodableRequest]
                      ) -> AsyncIterator[Heartbeat]:
    async for frame in frames:
        if isinstance(frame, UndecodableRequest):
            raise RequestError(f"a heartbeat does not parse: {frame.reason}")
        yield controller_codec.heartbeat_from_proto(frame)


@rpc_boundary(controller_pb2.DESCRIPTOR.services_by_name["ControllerService"])
class ControllerServicer(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(self, service: ControllerService) -> None:
        self.service = service

    async def ControllerSession(self, request_iterator: AsyncIterator[controller_pb2.BrokerHeartbeat],
                                context: grpc.aio.ServicerContext) -> AsyncIterator[controller_pb2.ReplicaAssignment]:
        async with _controller_outcomes(context):
            async for assignment, heartbeat_seq in self.service.session(_heartbeats(request_iterator)):
                yield controller_codec.assignment_to_proto(assignment, heartbeat_seq)

    async def AlterSyncStateSet(self, request: controller_pb2.AlterSyncStateSetRequest,
                                context: grpc.aio.ServicerContext) -> controller_pb2.ReplicaAssignment:
        require(bool(request.broker_name), "AlterSyncStateSet without broker_name")
        async with _controller_outcomes(context):
            assignment = await self.service.alter_sync_state_set(
                request.broker_name, request.master_id, request.master_epoch, request.sync_state_set_epoch,
                request.new_sync_state_set)
        return controller_codec.assignment_to_proto(assignment)

    async def ElectMaster(self, request: controller_pb2.ElectMasterRequest,
                          context: grpc.aio.ServicerContext) -> controller_pb2.ReplicaAssignment:
        require(bool(request.broker_name), "ElectMaster without broker_name")
        async with _controller_outcomes(context):
            assignment = await self.service.elect_master(request.broker_name, request.broker_id)
        return controller_codec.assignment_to_proto(assignment)

    async def GetSyncStateData(self, request: controller_pb2.GetSyncStateDataRequest,
                               context: grpc.aio.ServicerContext) -> controller_pb2.SyncStateData:
        require(bool(request.broker_name), "GetSyncStateData without broker_name")
        async with _controller_outcomes(context):
            data = await self.service.get_sync_state_data(request.broker_name)
        return controller_codec.sync_state_data_to_proto(data)

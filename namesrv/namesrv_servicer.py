"""NamesrvService over gRPC: decode, call the RouteInfoManager, encode. What a handler raises is answered by the
RPC boundary (``common/rpc_boundary.py``): malformed requests as INVALID_ARGUMENT, anything unexpected as INTERNAL.

Every manager call runs in a worker thread: a million-topic registration holds the manager's lock for seconds,
and a handler waiting on that lock inside the event loop would stall every other call and the expiry scan.
"""

import asyncio
from collections.abc import Callable

import grpc

from common.refusal import Refusal
from common.request_error import require
from common.response_code import ResponseCode
from common.rpc_boundary import rpc_boundary
from namesrv import route_codec
from namesrv.route_info_manager import RouteInfoManager
from proto import common_pb2, namesrv_pb2, namesrv_pb2_grpc


@rpc_boundary(namesrv_pb2.DESCRIPTOR.services_by_name["NamesrvService"])
class NamesrvServicer(namesrv_pb2_grpc.NamesrvServiceServicer):
    def __init__(self, manager: RouteInfoManager,
                 runtime_info: Callable[[], dict[str, str]] | None = None) -> None:
        self.manager = manager
        self._runtime_info = runtime_info or (lambda: {})

    async def RegisterBroker(self, request: namesrv_pb2.RegisterBrokerRequest,
                             context: grpc.aio.ServicerContext) -> namesrv_pb2.RegisterBrokerResponse:
        def register() -> namesrv_pb2.RegisterBrokerResponse:
            result = self.manager.register_broker(route_codec.register_request_from_proto(request))
            code = ResponseCode.NO_PERMISSION if result.refused else ResponseCode.SUCCESS
            return namesrv_pb2.RegisterBrokerResponse(code=code, remark=result.remark,
                                                      need_full=result.need_full)

        return await asyncio.to_thread(register)  # decoding a large compressed body belongs off the loop too

    async def UnregisterBroker(self, request: namesrv_pb2.UnregisterBrokerRequest,
                               context: grpc.aio.ServicerContext) -> common_pb2.CommandResponse:
        require(bool(request.broker_addr), "UnregisterBroker without broker_addr")
        removed = await asyncio.to_thread(self.manager.unregister_broker, request.cluster_name,
                                          request.broker_name, request.broker_id, request.broker_addr)
        remark = "" if removed else (f"no broker {request.broker_name}/{request.broker_id} registered at "
                                     f"{request.broker_addr}")
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS, remark=remark)

    async def GetRouteInfoByTopic(self, request: namesrv_pb2.GetRouteInfoRequest,
                                  context: grpc.aio.ServicerContext) -> namesrv_pb2.GetRouteInfoResponse:
        require(bool(request.topic), "GetRouteInfoByTopic with an empty topic")
        route = await asyncio.to_thread(self.manager.pickup_topic_route_data, request.topic)
        if route is None:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST,
                          f"No topic route info in name server for the topic: {request.topic}")
        heard = self.manager.brokers_heard_while_warming()
        return namesrv_pb2.GetRouteInfoResponse(code=ResponseCode.SUCCESS, route=route_codec.route_to_proto(route),
                                                warming_up=heard is not None, brokers_heard=sorted(heard or ()))

    async def GetBrokerClusterInfo(self, request: common_pb2.Empty,
                                   context: grpc.aio.ServicerContext) -> namesrv_pb2.ClusterInfo:
        info = await asyncio.to_thread(self.manager.get_broker_cluster_info)
        answer = route_codec.cluster_info_to_proto(info)
        answer.warming_up = self.manager.brokers_heard_while_warming() is not None
        return answer

    async def GetAllTopicList(self, request: common_pb2.Empty,
                              context: grpc.aio.ServicerContext) -> namesrv_pb2.TopicList:
        return await asyncio.to_thread(lambda: namesrv_pb2.TopicList(topics=self.manager.get_all_topic_list()))

    async def DeleteTopicInNamesrv(self, request: namesrv_pb2.DeleteTopicInNamesrvRequest,
                                   context: grpc.aio.ServicerContext) -> common_pb2.CommandResponse:
        require(bool(request.topic), "DeleteTopicInNamesrv with an empty topic")
        removed = await asyncio.to_thread(self.manager.delete_topic, request.topic, request.cluster_name or None,
                                          frozenset(request.broker_names))
        remark = "" if removed else f"topic {request.topic} was not registered" + (
            f" in cluster {request.cluster_name}" if request.cluster_name else "")
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS, remark=remark)

    async def WipeWritePermOfBroker(self, request: namesrv_pb2.WritePermRequest,
                                    context: grpc.aio.ServicerContext) -> namesrv_pb2.WritePermResponse:
        return await self._set_write_perm(request, False)

    async def AddWritePermOfBroker(self, request: namesrv_pb2.WritePermRequest,
                                   context: grpc.aio.ServicerContext) -> namesrv_pb2.WritePermResponse:
        return await self._set_write_perm(request, True)

    async def _set_write_perm(self, request: namesrv_pb2.WritePermRequest,
                              writeable: bool) -> namesrv_pb2.WritePermResponse:
        require(bool(request.broker_name), "a write-perm request without broker_name")
        count = await asyncio.to_thread(self.manager.set_write_perm, request.broker_name, writeable)
        if count < 0:
            return namesrv_pb2.WritePermResponse(code=ResponseCode.SUCCESS, registered=False,
                                                 remark=f"broker {request.broker_name} is not registered here")
        return namesrv_pb2.WritePermResponse(code=ResponseCode.SUCCESS, topic_count=count, registered=True)

    async def GetNamesrvRuntimeInfo(self, request: common_pb2.Empty,
                                    context: grpc.aio.ServicerContext) -> namesrv_pb2.NamesrvRuntimeInfo:
        stats = await asyncio.to_thread(self.manager.stats)
        return namesrv_pb2.NamesrvRuntimeInfo(table={**self._runtime_info(), **stats.as_table()})

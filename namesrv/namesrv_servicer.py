"""NamesrvService over gRPC: decode, call the RouteInfoManager, encode.

Every manager call runs in a worker thread: a million-topic registration holds the manager's lock for seconds,
and a handler waiting on that lock inside the event loop would stall every other call and the expiry scan.
"""

import asyncio
from collections.abc import Callable
from typing import NoReturn

import grpc

from common.response_code import ResponseCode
from namesrv import route_codec
from namesrv.route_codec import MalformedRequest
from namesrv.route_info_manager import RouteInfoManager
from proto import common_pb2, namesrv_pb2, namesrv_pb2_grpc


class NamesrvServicer(namesrv_pb2_grpc.NamesrvServiceServicer):
    def __init__(self, manager: RouteInfoManager,
                 runtime_info: Callable[[], dict[str, str]] | None = None) -> None:
        self.manager = manager
        self._runtime_info = runtime_info or (lambda: {})

    async def RegisterBroker(self, request: namesrv_pb2.RegisterBrokerRequest,
                             context: grpc.aio.ServicerContext) -> namesrv_pb2.RegisterBrokerResponse:
        def register() -> namesrv_pb2.RegisterBrokerResponse:
            result = self.manager.register_broker(route_codec.register_request_from_proto(request))
            return namesrv_pb2.RegisterBrokerResponse(code=ResponseCode.SUCCESS, remark=result.remark,
                                                      need_full=result.need_full)

        try:
            return await asyncio.to_thread(register)  # decoding a large compressed body belongs off the loop too
        except MalformedRequest as e:
            await _invalid(context, str(e))

    async def UnregisterBroker(self, request: namesrv_pb2.UnregisterBrokerRequest,
                               context: grpc.aio.ServicerContext) -> common_pb2.CommandResponse:
        if not request.broker_addr:
            await _invalid(context, "UnregisterBroker without broker_addr")
        removed = await asyncio.to_thread(self.manager.unregister_broker, request.cluster_name,
                                          request.broker_name, request.broker_id, request.broker_addr)
        remark = "" if removed else (f"no broker {request.broker_name}/{request.broker_id} registered at "
                                     f"{request.broker_addr}")
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS, remark=remark)

    async def GetRouteInfoByTopic(self, request: namesrv_pb2.GetRouteInfoRequest,
                                  context: grpc.aio.ServicerContext) -> namesrv_pb2.GetRouteInfoResponse:
        if not request.topic:
            await _invalid(context, "GetRouteInfoByTopic with an empty topic")
        route = await asyncio.to_thread(self.manager.pickup_topic_route_data, request.topic)
        if route is None:
            return namesrv_pb2.GetRouteInfoResponse(
                code=ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {request.topic}")
        return namesrv_pb2.GetRouteInfoResponse(code=ResponseCode.SUCCESS, route=route_codec.route_to_proto(route))

    async def GetBrokerClusterInfo(self, request: common_pb2.Empty,
                                   context: grpc.aio.ServicerContext) -> namesrv_pb2.ClusterInfo:
        info = await asyncio.to_thread(self.manager.get_broker_cluster_info)
        return route_codec.cluster_info_to_proto(info)

    async def GetAllTopicList(self, request: common_pb2.Empty,
                              context: grpc.aio.ServicerContext) -> namesrv_pb2.TopicList:
        return await asyncio.to_thread(lambda: namesrv_pb2.TopicList(topics=self.manager.get_all_topic_list()))

    async def DeleteTopicInNamesrv(self, request: namesrv_pb2.DeleteTopicInNamesrvRequest,
                                   context: grpc.aio.ServicerContext) -> common_pb2.CommandResponse:
        if not request.topic:
            await _invalid(context, "DeleteTopicInNamesrv with an empty topic")
        removed = await asyncio.to_thread(self.manager.delete_topic, request.topic, request.cluster_name or None)
        remark = "" if removed else f"topic {request.topic} was not registered" + (
            f" in cluster {request.cluster_name}" if request.cluster_name else "")
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS, remark=remark)

    async def GetNamesrvRuntimeInfo(self, request: common_pb2.Empty,
                                    context: grpc.aio.ServicerContext) -> namesrv_pb2.NamesrvRuntimeInfo:
        stats = await asyncio.to_thread(self.manager.stats)
        return namesrv_pb2.NamesrvRuntimeInfo(table={**self._runtime_info(), **stats.as_table()})


async def _invalid(context: grpc.aio.ServicerContext, message: str) -> NoReturn:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
    raise AssertionError("unreachable: abort raises")  # tells type checkers this never returns

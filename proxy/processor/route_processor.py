"""QueryRoute (upstream's RouteActivity): the topic's queues as v2 clients see them.

Every queue names broker id 0 (clients take only masters' queues) and, as its endpoints, the proxy itself: clients
send every data-plane call here. The endpoints are the ones the client asked with (its access point), as upstream
answers, so a proxy behind a published port or a load balancer hands out an address the client can reach; the
proxy's own listen address only when the request names none.

A normal topic's queues are its brokers' queues (broker names kept: a receive on a queue pops on that broker). A
static topic's are its logic queues, named by the logic-queue broker name, so clients that know nothing of static
topics still use them: the proxy maps each to its leader."""

from common.perm import is_readable, is_writeable
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from proto import common_pb2
from proto.v2 import definition_pb2, service_pb2
from proxy.processor.names import check_topic
from proxy.topic_route_service import StaticView, TopicRouteService
from proxy.v2_codes import ok_status

Permission = definition_pb2.Permission
ACCEPT_MESSAGE_TYPES = (definition_pb2.NORMAL, definition_pb2.FIFO, definition_pb2.DELAY, definition_pb2.TRANSACTION)


class RouteProcessor:
    def __init__(self, routes: TopicRouteService, own_endpoints: definition_pb2.Endpoints) -> None:
        self.routes = routes
        self.own_endpoints = own_endpoints

    async def query_route(self, request: service_pb2.QueryRouteRequest) -> service_pb2.QueryRouteResponse:
        topic = check_topic(request.topic.name)
        endpoints = request.endpoints if request.endpoints.addresses else self.own_endpoints
        route = await self.routes.route(topic, for_publish=True)
        view = self.routes.static_view(route)
        queues = logic_queues(topic, view, endpoints) if view is not None else broker_queues(topic, route, endpoints)
        return service_pb2.QueryRouteResponse(status=ok_status(), message_queues=queues)


def v2_queue(topic: str, queue_id: int, permission: definition_pb2.Permission, broker_name: str,
             endpoints: definition_pb2.Endpoints) -> definition_pb2.MessageQueue:
    return definition_pb2.MessageQueue(
        topic=definition_pb2.Resource(name=topic), id=queue_id, permission=permission,
        broker=definition_pb2.Broker(name=broker_name, id=0, endpoints=endpoints),
        accept_message_types=ACCEPT_MESSAGE_TYPES)


def broker_queues(topic: str, route: common_pb2.TopicRouteData,
                  endpoints: definition_pb2.Endpoints) -> list[definition_pb2.MessageQueue]:
    """Each broker's queues 0..max(read, write)-1, each with the permissions its id has there. A broker without a
    master in the route is left out: its queues take no writes and no pops now."""
    masters = {bd.broker_name for bd in route.broker_datas if 0 in bd.broker_addrs}
    out = []
    for qd in sorted(route.queue_datas, key=lambda d: d.broker_name):
        if qd.broker_name not in masters:
            continue
        readable = qd.read_queue_nums if is_readable(qd.perm) else 0
        writable = qd.write_queue_nums if is_writeable(qd.perm) else 0
        for queue_id in range(max(readable, writable)):
            permission = _permission(queue_id < readable, queue_id < writable)
            out.append(v2_queue(topic, queue_id, permission, qd.broker_name, endpoints))
    return out


def logic_queues(topic: str, view: StaticView,
                 endpoints: definition_pb2.Endpoints) -> list[definition_pb2.MessageQueue]:
    """Logic queues 0..N-1; one nobody leads right now has no permission (clients skip it until a route refresh
    shows its new leader)."""
    return [v2_queue(topic, logic_id, Permission.READ_WRITE if view.led(logic_id) else Permission.NONE,
                     LOGICAL_QUEUE_MOCK_BROKER_NAME, endpoints) for logic_id in range(view.total)]


def _permission(readable: bool, writable: bool) -> definition_pb2.Permission:
    if readable and writable:
        return Permission.READ_WRITE
    if readable:
        return Permission.READ
    return Permission.WRITE if writable else Permission.NONE

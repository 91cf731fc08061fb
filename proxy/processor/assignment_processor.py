"""QueryAssignment (PushConsumer): which queues a v2 push consumer receives from. The consumers of a group share
nothing client-side (POP keeps the group's progress on the brokers), so every member gets the same answer: one
assignment per broker of a normal topic (queue id -1: any of its queues, the broker picks), one per led logic
queue of a static topic (a pop there goes to that logic queue's leader). A FIFO group needs nothing more: the
brokers keep each message group in order whichever member pops."""

from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from proto.v2 import definition_pb2, service_pb2
from proxy.processor.names import check_group, check_topic
from proxy.processor.route_processor import v2_queue
from proxy.topic_route_service import TopicRouteService
from proxy.v2_codes import ok_status

ANY_QUEUE = -1


class AssignmentProcessor:
    def __init__(self, routes: TopicRouteService, own_endpoints: definition_pb2.Endpoints) -> None:
        self.routes = routes
        self.own_endpoints = own_endpoints

    async def query_assignment(self, request: service_pb2.QueryAssignmentRequest
                               ) -> service_pb2.QueryAssignmentResponse:
        topic = check_topic(request.topic.name)
        check_group(request.group.name)
        endpoints = request.endpoints if request.endpoints.addresses else self.own_endpoints
        route = await self.routes.route(topic)
        view = self.routes.static_view(route)
        if view is not None:
            queues = [v2_queue(topic, logic_id, definition_pb2.READ_WRITE, LOGICAL_QUEUE_MOCK_BROKER_NAME, endpoints)
                      for logic_id in range(view.total) if view.led(logic_id)]
        else:
            queues = [v2_queue(topic, ANY_QUEUE, definition_pb2.READ_WRITE, name, endpoints)
                      for name in self.routes.readable_brokers(route)]
        return service_pb2.QueryAssignmentResponse(
            status=ok_status(), assignments=[definition_pb2.Assignment(message_queue=q) for q in queues])

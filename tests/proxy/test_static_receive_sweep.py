"""A receive naming one logic queue of a static topic gets the messages of its other logic queues too when its own
has none. The official Node.js client names logic queue 0 only (it takes a queue id for a broker id): the messages
of the others were never received, and the group's lag grew for good."""

import uuid

import grpc
from google.protobuf.duration_pb2 import Duration

from client import Admin, Message, Producer
from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from tests.cluster import wait_static_route
from tests.proxy.conftest import ProxyCluster

LOGIC_QUEUES = 4


def test_a_receive_naming_logic_queue_0_gets_the_messages_of_the_others(proxy_cluster: ProxyCluster):
    topic, group = f"StaticSweep_{uuid.uuid4().hex[:8]}", f"static-sweep-{uuid.uuid4().hex[:8]}"
    with Admin(proxy_cluster.namesrv) as admin:
        admin.update_static_topic(topic, LOGIC_QUEUES, brokers=["broker-a"])
        wait_static_route(proxy_cluster.namesrv, topic, 0)
    with Producer(proxy_cluster.namesrv) as producer:
        queues = {mq.queue_id: mq for mq in producer.client.publish_queues(topic, refresh=True)}
        sent = {producer.send(Message(topic, f"q{q}-{i}".encode()), queue=queues[q]).msg_id
                for q in (1, 2, 3) for i in range(3)}  # none in logic queue 0
    with grpc.insecure_channel(proxy_cluster.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        route = stub.QueryRoute(service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic)), timeout=10)
        [first] = [mq for mq in route.message_queues if mq.id == 0]
        got: set[str] = set()
        for _ in range(10):
            request = service_pb2.ReceiveMessageRequest(
                group=definition_pb2.Resource(name=group), message_queue=first, batch_size=32, auto_renew=False,
                invisible_duration=Duration(seconds=60), long_polling_timeout=Duration(seconds=1))
            got |= {r.message.system_properties.message_id for r in stub.ReceiveMessage(request, timeout=10)
                    if r.HasField("message")}
            if got == sent:
                break
        assert got == sent

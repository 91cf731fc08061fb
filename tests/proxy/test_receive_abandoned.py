"""A receive whose call ends before its answer does (the client's deadline passed while large messages were on their
way, or the client went away): its messages were left invisible for the whole invisible time, came due together,
and went the same way again, so a consumer with a short long-polling time and large messages got nothing, ever.
They are visible again at once now, and that delivery does not count as an attempt."""

import uuid

import grpc
from google.protobuf.duration_pb2 import Duration

from client import Message, Producer
from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from tests.cluster import wait_until
from tests.proxy.conftest import ProxyCluster

Code = definition_pb2.Code
BODY = 1 << 20
COUNT = 8


def receive_request(topic: str, group: str, wait_s: int) -> service_pb2.ReceiveMessageRequest:
    return service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name=group), message_queue=definition_pb2.MessageQueue(
            topic=definition_pb2.Resource(name=topic)), batch_size=COUNT, auto_renew=False,
        invisible_duration=Duration(seconds=120), long_polling_timeout=Duration(seconds=wait_s))


def test_a_receive_cancelled_before_its_answer_ended_hands_its_messages_out_again(proxy_cluster: ProxyCluster):
    topic, group = f"Abandoned_{uuid.uuid4().hex[:8]}", f"abandoned-{uuid.uuid4().hex[:8]}"
    proxy_cluster.cluster.create_topic(topic, 1)
    with Producer(proxy_cluster.namesrv) as producer:
        [mq, *_] = producer.client.publish_queues(topic, refresh=True)
        sent = {producer.send(Message(topic, bytes([i]) * BODY), queue=mq).msg_id for i in range(COUNT)}
    with grpc.insecure_channel(proxy_cluster.endpoint, options=[("grpc.max_receive_message_length", 64 << 20)]) \
            as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        call = stub.ReceiveMessage(receive_request(topic, group, 5), timeout=30)
        assert next(call).status.code == Code.OK  # the messages are popped: 8 MiB on their way
        call.cancel()
        got: dict[str, int] = {}

        def received_again() -> bool:
            for response in stub.ReceiveMessage(receive_request(topic, group, 2), timeout=30):
                if response.HasField("message"):
                    got[response.message.system_properties.message_id] = \
                        response.message.system_properties.delivery_attempt
            return set(got) == sent

        wait_until(received_again, timeout=30, what="the cancelled receive's messages handed out again")
        # No attempt of the client's: counted, receives that kept failing dead-lettered a batch in about a second
        assert set(got.values()) == {1}

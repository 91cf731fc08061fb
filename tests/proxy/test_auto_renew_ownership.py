"""Auto-renew through real daemons with raw v2 stubs: a message is renewed only for a client with a Telemetry stream
open, and only that client stops its renewing. A request the broker refuses (an ack or change of invisible
duration naming another group or topic) and a NotifyClientTermination naming the client's id from another
connection leave the message with its consumer; the client's own termination lets it come back to the group."""

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from proto.v2 import definition_pb2 as d
from proto.v2 import service_pb2 as s
from proto.v2 import service_pb2_grpc as sg
from tests.collected_stream import collected
from tests.proxy.conftest import ProxyCluster, running_proxy_cluster

INVISIBLE_MS = 3000  # the proxy's default invisible time: a message not renewed comes back this soon
RENEW_AHEAD_MS = 1500  # margin for a loaded machine
GROUP = "RenewOwnerG"
HELD_S = 2 * INVISIBLE_MS / 1000  # renewed, a message stays with its consumer this long and more
COMES_BACK_S = 10.0  # not renewed, it comes back well within this


@pytest.fixture(scope="module")
def renew_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    with running_proxy_cluster(tmp_path_factory.mktemp("renew-owner"), proxy_args=(
            "--default-invisible-ms", str(INVISIBLE_MS), "--renew-ahead-ms", str(RENEW_AHEAD_MS))) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def stub(renew_cluster: ProxyCluster) -> Iterator[sg.MessagingServiceStub]:
    with grpc.insecure_channel(renew_cluster.endpoint) as channel:
        yield sg.MessagingServiceStub(channel)


def fresh_topic(cluster: ProxyCluster) -> str:
    topic = f"RenewOwner_{uuid.uuid4().hex[:8]}"
    cluster.cluster.create_topic(topic, 1)
    return topic


def md(client_id: str) -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id)]


@contextmanager
def telemetry(stub: sg.MessagingServiceStub, client_id: str) -> Iterator[None]:
    """``client_id``'s Telemetry stream, as a PushConsumer of GROUP keeps it open, on ``stub``'s connection."""
    stop = threading.Event()

    def commands() -> Iterator[s.TelemetryCommand]:
        yield s.TelemetryCommand(settings=d.Settings(client_type=d.PUSH_CONSUMER, subscription=d.Subscription(
            group=d.Resource(name=GROUP))))
        stop.wait(120)

    with collected(stub.Telemetry(commands(), metadata=md(client_id)), stop.set, errors=False) as got:
        answer = got.get(timeout=15)
        assert answer.status.code == d.Code.OK, answer
        yield


def send(stub: sg.MessagingServiceStub, topic: str, count: int) -> None:
    answer = stub.SendMessage(s.SendMessageRequest(messages=[d.Message(
        topic=d.Resource(name=topic), body=f"m{i}".encode(),
        system_properties=d.SystemProperties(message_id=uuid.uuid4().hex)) for i in range(count)]), timeout=10)
    assert answer.status.code == d.Code.OK, answer.status


def receive(stub: sg.MessagingServiceStub, topic: str, client_id: str, auto_renew: bool,
            poll_ms: int = 0) -> list[d.Message]:
    request = s.ReceiveMessageRequest(group=d.Resource(name=GROUP), message_queue=d.MessageQueue(
        topic=d.Resource(name=topic), id=-1), filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        batch_size=32, auto_renew=auto_renew, long_polling_timeout=Duration(nanos=poll_ms * 1_000_000))
    if not auto_renew:  # a PushConsumer's receive names no invisible time: the proxy renews its messages
        request.invisible_duration.FromMilliseconds(30_000)
    answers = list(stub.ReceiveMessage(request, metadata=md(client_id), timeout=10))
    return [a.message for a in answers if a.HasField("message")]


def received_with_auto_renew(stub: sg.MessagingServiceStub, topic: str, client_id: str, count: int) -> list[str]:
    """The receipt handles of ``count`` messages ``client_id`` received as a PushConsumer does."""
    got: list[d.Message] = []
    deadline = time.monotonic() + 10
    while len(got) < count and time.monotonic() < deadline:
        got += receive(stub, topic, client_id, auto_renew=True)
    assert len(got) == count, got
    return [m.system_properties.receipt_handle for m in got]


def another_consumer_gets(stub: sg.MessagingServiceStub, topic: str, within_s: float) -> list[d.Message]:
    """What another consumer of GROUP receives within ``within_s`` (as soon as anything comes)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = receive(stub, topic, "another-consumer", auto_renew=False, poll_ms=500)
        if got:
            return got
    return []


def ack(stub: sg.MessagingServiceStub, topic: str, group: str, handle: str, client_id: str) -> d.Status:
    return stub.AckMessage(s.AckMessageRequest(group=d.Resource(name=group), topic=d.Resource(name=topic), entries=[
        s.AckMessageEntry(message_id="m", receipt_handle=handle)]), metadata=md(client_id), timeout=10).status


def test_messages_of_a_client_without_a_telemetry_stream_come_back_to_the_group(renew_cluster: ProxyCluster,
                                                                                stub: sg.MessagingServiceStub):
    """A caller that never opened a stream (or left without a word) is told of by nothing: its messages were
    renewed for renew_max_ms (3 h), and the group's healthy consumers got none of them."""
    topic = fresh_topic(renew_cluster)
    send(stub, topic, 1)
    received_with_auto_renew(stub, topic, "no-stream-client", 1)
    assert [m.body for m in another_consumer_gets(stub, topic, COMES_BACK_S)] == [b"m0"]


def test_requests_the_broker_refuses_leave_the_message_renewed(renew_cluster: ProxyCluster,
                                                               stub: sg.MessagingServiceStub):
    topic, other_topic, client = fresh_topic(renew_cluster), fresh_topic(renew_cluster), "renewed-client"
    with telemetry(stub, client):
        send(stub, topic, 3)
        handles = received_with_auto_renew(stub, topic, client, 3)
        change = s.ChangeInvisibleDurationRequest(group=d.Resource(name="OtherGroup"), topic=d.Resource(name=topic),
                                                  receipt_handle=handles[2], invisible_duration=Duration(seconds=10),
                                                  message_id="m")
        refused = [ack(stub, topic, "OtherGroup", handles[0], client),
                   ack(stub, other_topic, GROUP, handles[1], client),
                   stub.ChangeInvisibleDuration(change, metadata=md(client), timeout=10).status]
        assert [status.code for status in refused] == [d.Code.INVALID_RECEIPT_HANDLE] * 3, refused
        assert another_consumer_gets(stub, topic, HELD_S) == [], "a message came back while its consumer held it"
        assert [ack(stub, topic, GROUP, h, client).code for h in handles] == [d.Code.OK] * 3


def test_only_the_client_itself_ends_its_renewing(renew_cluster: ProxyCluster, stub: sg.MessagingServiceStub):
    """NotifyClientTermination naming a live client's id, from another connection, is refused; the client's own
    (on the connection of its stream, as the official clients make every call) lets its messages come back."""
    topic, client = fresh_topic(renew_cluster), "terminating-client"
    with telemetry(stub, client):
        send(stub, topic, 1)
        received_with_auto_renew(stub, topic, client, 1)
        # its own connection: a channel sharing no connection with the test's other channels
        with grpc.insecure_channel(renew_cluster.endpoint, options=[("grpc.use_local_subchannel_pool", 1)]) as other:
            forged = sg.MessagingServiceStub(other).NotifyClientTermination(
                s.NotifyClientTerminationRequest(group=d.Resource(name=GROUP)), metadata=md(client), timeout=10)
        assert forged.status.code == d.Code.FORBIDDEN, forged.status
        assert another_consumer_gets(stub, topic, HELD_S) == [], "renewing stopped on another caller's word"
        own = stub.NotifyClientTermination(s.NotifyClientTerminationRequest(group=d.Resource(name=GROUP)),
                                           metadata=md(client), timeout=10)
        assert own.status.code == d.Code.OK, own.status
        assert [m.body for m in another_consumer_gets(stub, topic, COMES_BACK_S)] == [b"m0"]

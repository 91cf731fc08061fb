"""A client's mistakes answered with the v2 code that names them, not INTERNAL_SERVER_ERROR (real daemons, raw v2
stubs): receipt handles and transaction ids naming a broker the topic is not on, a receive naming a static topic's
logic queue on a normal topic, tags and keys beyond the properties limit, a tag expression no message can match.
Forged broker names cost the name server no route fetch each."""

import uuid
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from proto.v2 import definition_pb2 as d
from proto.v2 import service_pb2 as s
from proto.v2 import service_pb2_grpc as sg
from proxy.processor.names import tag_expression
from proxy.v2_codes import ProxyError
from tests.metrics.test_metrics_daemons import PROM_FLAGS, metrics_port, scrape
from tests.proxy.conftest import ProxyCluster, running_proxy_cluster

GROUP = "MistakesG"
MD = [("x-mq-client-id", "mistaken-client")]


@pytest.fixture(scope="module")
def counted_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    """Its name server counts the calls it takes (the route fetches among them)."""
    with running_proxy_cluster(tmp_path_factory.mktemp("client-mistakes"), namesrv_args=PROM_FLAGS) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def stub(counted_cluster: ProxyCluster) -> Iterator[sg.MessagingServiceStub]:
    with grpc.insecure_channel(counted_cluster.endpoint) as channel:
        yield sg.MessagingServiceStub(channel)


@pytest.fixture(scope="module")
def topic(counted_cluster: ProxyCluster) -> str:
    name = f"Mistakes_{uuid.uuid4().hex[:8]}"
    counted_cluster.cluster.create_topic(name, 2)
    return name


def message(topic: str, body: bytes = b"x", **system: object) -> d.Message:
    return d.Message(topic=d.Resource(name=topic), body=body, system_properties=d.SystemProperties(
        message_id=uuid.uuid4().hex, **system))


def send(stub: sg.MessagingServiceStub, *messages: d.Message) -> s.SendMessageResponse:
    return stub.SendMessage(s.SendMessageRequest(messages=messages), metadata=MD, timeout=10)


def ack(stub: sg.MessagingServiceStub, topic: str, handles: list[str]) -> s.AckMessageResponse:
    return stub.AckMessage(s.AckMessageRequest(group=d.Resource(name=GROUP), topic=d.Resource(name=topic), entries=[
        s.AckMessageEntry(message_id="m", receipt_handle=h) for h in handles]), metadata=MD, timeout=30)


def receive(stub: sg.MessagingServiceStub, topic: str, expression: str, group: str = GROUP, broker: str = "",
            queue_id: int = -1) -> tuple[d.Status, list[d.Message]]:
    answers = list(stub.ReceiveMessage(s.ReceiveMessageRequest(
        group=d.Resource(name=group), message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=queue_id,
                                                                   broker=d.Broker(name=broker)),
        filter_expression=d.FilterExpression(type=d.TAG, expression=expression), batch_size=32,
        invisible_duration=Duration(seconds=30), long_polling_timeout=Duration()), metadata=MD, timeout=10))
    return answers[0].status, [a.message for a in answers if a.HasField("message")]


def forged_handle(broker_name: str) -> str:
    return f"v1|{broker_name}|0|0|1|1|0"


@pytest.mark.parametrize("broker_name", ["no-such-broker", LOGICAL_QUEUE_MOCK_BROKER_NAME])
@pytest.mark.parametrize("rpc", ["ack", "change", "dead-letter"])
def test_a_receipt_handle_naming_a_broker_the_topic_is_not_on_is_invalid(stub: sg.MessagingServiceStub, topic: str,
                                                                         rpc: str, broker_name: str):
    handle, group, resource = forged_handle(broker_name), d.Resource(name=GROUP), d.Resource(name=topic)
    if rpc == "ack":
        status = ack(stub, topic, [handle]).entries[0].status
    elif rpc == "change":
        status = stub.ChangeInvisibleDuration(s.ChangeInvisibleDurationRequest(
            group=group, topic=resource, receipt_handle=handle, invisible_duration=Duration(seconds=10),
            message_id="m"), metadata=MD, timeout=10).status
    else:
        status = stub.ForwardMessageToDeadLetterQueue(s.ForwardMessageToDeadLetterQueueRequest(
            group=group, topic=resource, receipt_handle=handle, message_id="m"), metadata=MD, timeout=10).status
    assert status.code == d.Code.INVALID_RECEIPT_HANDLE, status


def test_forged_broker_names_cost_no_route_fetch_each(counted_cluster: ProxyCluster, stub: sg.MessagingServiceStub,
                                                      topic: str):
    """One ack naming 1,024 brokers made a name server route fetch for each; the good entry is acked all the
    same."""
    send(stub, message(topic))
    _, (popped,) = receive(stub, topic, "*")
    port = metrics_port(counted_cluster.cluster.namesrv)

    def fetches() -> float:
        return scrape(port).value("rocketmq_rpc_requests_total", request_code="GetRouteInfoByTopic")

    before = fetches()
    handles = [forged_handle(f"fake-{i}") for i in range(1023)] + [popped.system_properties.receipt_handle]
    answer = ack(stub, topic, handles)
    made = fetches() - before
    codes = [e.status.code for e in answer.entries]
    assert codes == [d.Code.INVALID_RECEIPT_HANDLE] * 1023 + [d.Code.OK], set(codes)
    assert answer.status.code == d.Code.MULTIPLE_RESULTS
    assert made <= 2, f"{made:.0f} route fetches for one ack"


def test_a_transaction_id_naming_an_unknown_broker_is_invalid(stub: sg.MessagingServiceStub, topic: str):
    answer = stub.EndTransaction(s.EndTransactionRequest(
        topic=d.Resource(name=topic), message_id="m", transaction_id="tx1|broker-zz|0|0", resolution=d.COMMIT),
        metadata=MD, timeout=15)
    assert answer.status.code == d.Code.INVALID_TRANSACTION_ID, answer.status


@pytest.mark.parametrize("queue_id", [0, -1, 5, 2**31 - 1])
def test_a_receive_naming_a_logic_queue_of_a_normal_topic_is_a_bad_request(stub: sg.MessagingServiceStub, topic: str,
                                                                           queue_id: int):
    status, _ = receive(stub, topic, "*", broker=LOGICAL_QUEUE_MOCK_BROKER_NAME, queue_id=queue_id)
    assert status.code == d.Code.BAD_REQUEST, status


def test_tags_and_keys_beyond_the_properties_limit_are_refused_by_name(stub: sg.MessagingServiceStub, topic: str):
    answer = send(stub, message(topic, tag="t" * 40_000), message(topic, keys=[f"k{i}" for i in range(10_000)]))
    assert [e.status.code for e in answer.entries] == [d.Code.MESSAGE_PROPERTIES_TOO_LARGE] * 2, answer


@pytest.mark.parametrize("expression", ["A|B", "A||B|C", "A|||B", "A\tB", "A||B\x7f"])
def test_a_tag_expression_no_message_can_match_is_refused(expression: str):
    with pytest.raises(ProxyError) as err:
        tag_expression(d.FilterExpression(type=d.TAG, expression=expression))
    assert err.value.code == d.Code.ILLEGAL_FILTER_EXPRESSION, err.value.message


@pytest.mark.parametrize("expression", ["*", "", "A", "A || B", "A||B", " Tag-1 || tag.2 "])
def test_tag_expressions_are_taken_as_written(expression: str):
    assert tag_expression(d.FilterExpression(type=d.TAG, expression=expression)) == (expression.strip() or "*")


def test_a_filter_typo_does_not_skip_the_groups_backlog(counted_cluster: ProxyCluster, stub: sg.MessagingServiceStub):
    """"A|B" (one bar) named a tag no send may carry: POP moved the group past every message it did not match."""
    topic = f"Typo_{uuid.uuid4().hex[:8]}"
    counted_cluster.cluster.create_topic(topic, 1)
    assert [e.status.code for e in send(stub, *(message(topic, tag="A") for _ in range(5))).entries] == [d.Code.OK] * 5
    status, _ = receive(stub, topic, "A|B", group="TypoG")
    assert status.code == d.Code.ILLEGAL_FILTER_EXPRESSION, status
    got: list[d.Message] = []
    for _ in range(4):  # one broker's messages a receive
        got += receive(stub, topic, "A", group="TypoG")[1]
    assert len(got) == 5

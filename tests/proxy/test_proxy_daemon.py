"""mqproxy as a daemon, spoken to with this repository's copy of the v2 protos: the ready line, a clean stop, one
proxy per port, the routes and settings clients rely on, and bad input answered with a v2 status that says what is
wrong (never status code 0, never a crash: the daemon keeps serving). Static topics across a remap, and (against
stand-in brokers, which no real cluster can hold still) a receive whose logic queue leader keeps refusing."""

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from client import Admin, PullConsumer
from client.errors import MQClientError
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from proto import pop_pb2, pop_pb2_grpc
from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from proxy.broker_channels import BrokerChannels
from proxy.processor.consume_processor import ConsumeProcessor
from proxy.proxy_config import ProxyConfig
from proxy.topic_route_service import TopicRouteService
from proxy.v2_codes import ProxyError
from tests.cluster import REPO, static_route_epoch, wait_static_route, wait_until
from tests.proxy.conftest import OfficialClient, ProxyCluster, start_proxy

Code = definition_pb2.Code


@pytest.fixture(scope="module")
def stub(proxy_cluster: ProxyCluster) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(proxy_cluster.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


@pytest.fixture(scope="module")
def topic(proxy_cluster: ProxyCluster) -> str:
    name = f"ProxyDaemon_{uuid.uuid4().hex[:8]}"
    proxy_cluster.cluster.create_topic(name, 4)
    return name


def endpoints(host: str, port: int) -> definition_pb2.Endpoints:
    return definition_pb2.Endpoints(scheme=definition_pb2.IPv4,
                                    addresses=[definition_pb2.Address(host=host, port=port)])


def v2_message(topic: str, body: bytes = b"x", message_id: str = "", **system: object) -> definition_pb2.Message:
    return definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=body,
                                  system_properties=definition_pb2.SystemProperties(
                                      message_id=message_id or uuid.uuid4().hex.upper(), **system))


def send(stub: service_pb2_grpc.MessagingServiceStub, *messages: definition_pb2.Message,
         **user_properties: str) -> service_pb2.SendMessageResponse:
    for m in messages:
        m.user_properties.update(user_properties)
    return stub.SendMessage(service_pb2.SendMessageRequest(messages=messages), timeout=10)


# -- the daemon ----------------------------------------------------------------------------------------------------
def test_ready_line_then_sigterm_stops_it_cleanly(proxy_cluster: ProxyCluster, tmp_path: Path):
    proxy = start_proxy(tmp_path, proxy_cluster.namesrv)
    assert any(line.startswith("mqproxy ready on 127.0.0.1:") for line in proxy.stdout_lines)
    assert proxy.stop(signal.SIGTERM) == 0
    log = proxy.log()
    assert "proxy_started host=127.0.0.1" in log and "proxy_stopped" in log and "Traceback" not in log


def test_a_second_proxy_on_the_same_port_exits_with_one_line(proxy_cluster: ProxyCluster):
    port = proxy_cluster.endpoint.rsplit(":", 1)[1]
    proc = subprocess.run([sys.executable, "-m", "proxy.main", "-n", proxy_cluster.namesrv, "-p", port], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(f"mqproxy: error: cannot listen on 127.0.0.1:{port}")


def test_no_name_server_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "proxy.main", "-p", "0"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "--namesrv-addr" in proc.stderr and "Traceback" not in proc.stderr


# -- routes, assignments, settings ---------------------------------------------------------------------------------
def test_route_names_master_queues_at_the_access_point_the_client_used(stub, topic: str):
    asked = endpoints("10.9.8.7", 18081)  # a published port or a load balancer: the client's own access point
    answer = stub.QueryRoute(service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic),
                                                           endpoints=asked), timeout=10)
    assert answer.status.code == Code.OK
    queues = answer.message_queues
    assert sorted({(q.broker.name, q.id) for q in queues}) == [(b, i) for b in ("broker-a", "broker-b")
                                                               for i in range(4)]
    for q in queues:
        assert q.broker.id == 0 and q.broker.endpoints == asked and q.permission == definition_pb2.READ_WRITE
        assert set(q.accept_message_types) == {definition_pb2.NORMAL, definition_pb2.FIFO, definition_pb2.DELAY,
                                               definition_pb2.TRANSACTION}


def test_route_without_an_access_point_names_the_proxy(stub, topic: str, proxy_cluster: ProxyCluster):
    answer = stub.QueryRoute(service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic)), timeout=10)
    host, port = proxy_cluster.endpoint.rsplit(":", 1)
    assert answer.status.code == Code.OK
    assert {(a.host, a.port) for q in answer.message_queues for a in q.broker.endpoints.addresses} == {
        (host, int(port))}


def test_assignment_is_one_queue_per_broker(stub, topic: str):
    answer = stub.QueryAssignment(service_pb2.QueryAssignmentRequest(
        topic=definition_pb2.Resource(name=topic), group=definition_pb2.Resource(name="AssignG"),
        endpoints=endpoints("127.0.0.1", 1)), timeout=10)
    assert answer.status.code == Code.OK
    assert sorted((a.message_queue.broker.name, a.message_queue.id) for a in answer.assignments) == [
        ("broker-a", -1), ("broker-b", -1)]


def telemetry(stub, settings: definition_pb2.Settings) -> service_pb2.TelemetryCommand:
    call = stub.Telemetry(iter([service_pb2.TelemetryCommand(settings=settings)]),
                          metadata=[("x-mq-client-id", f"test-{uuid.uuid4().hex[:6]}")], timeout=10)
    return next(call)


def test_settings_reply_tells_producers_the_body_limit_and_consumers_their_group_settings(stub, topic: str):
    producer = telemetry(stub, definition_pb2.Settings(
        client_type=definition_pb2.PRODUCER,
        publishing=definition_pb2.Publishing(topics=[definition_pb2.Resource(name=topic)])))
    assert producer.status.code == Code.OK
    assert producer.settings.publishing.max_body_size == 4 * 1024 * 1024  # without it every send fails client-side
    assert producer.settings.backoff_policy.max_attempts == 3

    consumer = telemetry(stub, definition_pb2.Settings(
        client_type=definition_pb2.SIMPLE_CONSUMER,
        subscription=definition_pb2.Subscription(group=definition_pb2.Resource(name="SettingsG"))))
    assert consumer.status.code == Code.OK
    sub = consumer.settings.subscription
    assert (sub.fifo, sub.receive_batch_size, sub.long_polling_timeout.seconds) == (False, 32, 20)
    assert consumer.settings.backoff_policy.max_attempts == 17  # retryMaxTimes 16, plus the first delivery
    assert [d.seconds for d in consumer.settings.backoff_policy.customized_backoff.next][:4] == [1, 5, 10, 30]


def test_settings_of_a_fifo_group_say_fifo(stub, proxy_cluster: ProxyCluster):
    with Admin(proxy_cluster.namesrv) as admin:
        admin.update_subscription_group("FifoSettingsG", cluster="DefaultCluster", consume_message_orderly=True,
                                        retry_max_times=3)
    consumer = telemetry(stub, definition_pb2.Settings(
        client_type=definition_pb2.PUSH_CONSUMER,
        subscription=definition_pb2.Subscription(group=definition_pb2.Resource(name="FifoSettingsG"))))
    assert consumer.settings.subscription.fifo and consumer.settings.backoff_policy.max_attempts == 4


# -- bad input ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("message", "code"), [
    (lambda t: v2_message("bad topic!", b"x"), Code.ILLEGAL_TOPIC),
    (lambda t: v2_message("%DLQ%someGroup", b"x"), Code.ILLEGAL_TOPIC),
    (lambda t: v2_message(t, b""), Code.MESSAGE_BODY_EMPTY),
    (lambda t: v2_message(t, b"x" * (4 * 1024 * 1024 + 1)), Code.MESSAGE_BODY_TOO_LARGE),
    (lambda t: definition_pb2.Message(topic=definition_pb2.Resource(name=t), body=b"x"), Code.ILLEGAL_MESSAGE_ID),
    (lambda t: v2_message(t, tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
    (lambda t: v2_message(t, keys=["ok", " "]), Code.ILLEGAL_MESSAGE_KEY),
    (lambda t: v2_message(t, message_group="g" * 65), Code.ILLEGAL_MESSAGE_GROUP),
    (lambda t: v2_message(t, message_type=definition_pb2.FIFO), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (lambda t: v2_message(t, body_encoding=definition_pb2.GZIP), Code.MESSAGE_CORRUPTED),
    (lambda t: v2_message(t, message_type=definition_pb2.LITE), Code.UNSUPPORTED),
], ids=["topic", "system-topic", "empty-body", "body-too-large", "no-message-id", "tag", "key", "group",
        "type-conflict", "not-gzip", "lite"])
def test_bad_messages_are_refused_with_the_code_that_names_the_fault(stub, topic: str, message, code):
    answer = send(stub, message(topic))
    assert answer.status.code == code and answer.entries[0].status.code == code, answer
    assert answer.status.message


def test_reserved_property_names_are_refused(stub, topic: str):
    for name in ("UNIQ_KEY", "TAGS", "__SHARDINGKEY", "TIMER_DELIVER_MS", "RETRY_TOPIC"):
        answer = send(stub, v2_message(topic), **{name: "forged"})
        assert answer.status.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY, (name, answer)


def test_delivery_time_beyond_the_brokers_limit_is_refused(stub, topic: str):
    far = int(time.time()) + 30 * 24 * 3600  # timerMaxDelaySec is 3 days
    answer = send(stub, v2_message(topic, delivery_timestamp=Timestamp(seconds=far), message_type=definition_pb2.DELAY))
    assert answer.status.code == Code.ILLEGAL_DELIVERY_TIME and "timerMaxDelaySec" in answer.status.message, answer


def test_one_bad_message_does_not_fail_the_good_ones(stub, topic: str):
    answer = send(stub, v2_message(topic, b"good"), v2_message(topic, b""))
    assert [e.status.code for e in answer.entries] == [Code.OK, Code.MESSAGE_BODY_EMPTY]
    assert answer.status.code == Code.MULTIPLE_RESULTS


def test_bytes_that_are_no_request_get_bad_request(proxy_cluster: ProxyCluster):
    with grpc.insecure_channel(proxy_cluster.endpoint) as channel:
        call = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage", request_serializer=None,
                                   response_deserializer=service_pb2.SendMessageResponse.FromString)
        answer = call(b"\xff\xff\xff\xff", timeout=10)
    assert answer.status.code == Code.BAD_REQUEST and "does not parse" in answer.status.message


def test_bad_receipt_and_recall_handles_and_names_are_refused(stub, topic: str):
    ack = stub.AckMessage(service_pb2.AckMessageRequest(
        group=definition_pb2.Resource(name="G"), topic=definition_pb2.Resource(name=topic),
        entries=[service_pb2.AckMessageEntry(message_id="m", receipt_handle="not-a-handle")]), timeout=10)
    assert ack.status.code == Code.INVALID_RECEIPT_HANDLE and ack.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
    change = stub.ChangeInvisibleDuration(service_pb2.ChangeInvisibleDurationRequest(
        group=definition_pb2.Resource(name="G"), topic=definition_pb2.Resource(name=topic), receipt_handle="x",
        invisible_duration=Duration(seconds=5)), timeout=10)
    assert change.status.code == Code.INVALID_RECEIPT_HANDLE
    route = stub.QueryRoute(service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="")), timeout=10)
    assert route.status.code == Code.ILLEGAL_TOPIC
    receive = list(stub.ReceiveMessage(service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name="bad group"), message_queue=definition_pb2.MessageQueue(
            topic=definition_pb2.Resource(name=topic)), batch_size=1), timeout=10))
    assert [r.status.code for r in receive] == [Code.ILLEGAL_CONSUMER_GROUP]
    receive = list(stub.ReceiveMessage(service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name="G"), message_queue=definition_pb2.MessageQueue(
            topic=definition_pb2.Resource(name=topic)), batch_size=1,
        filter_expression=definition_pb2.FilterExpression(type=definition_pb2.TAG, expression="a || ")), timeout=10))
    assert [r.status.code for r in receive] == [Code.ILLEGAL_FILTER_EXPRESSION]
    recall = stub.RecallMessage(service_pb2.RecallMessageRequest(), timeout=10)
    assert recall.status.code == Code.ILLEGAL_TOPIC
    for handle, code, says in (("", Code.BAD_REQUEST, "names a recall handle"),
                               ("r1|nope", Code.BAD_REQUEST, "not one this cluster issued"),
                               ("r1|no-such-broker|1|2|m", Code.NOT_FOUND, "route does not name")):
        recall = stub.RecallMessage(service_pb2.RecallMessageRequest(topic=definition_pb2.Resource(name=topic),
                                                                     recall_handle=handle), timeout=10)
        assert recall.status.code == code and says in recall.status.message, recall.status


def test_what_is_not_served_answers_a_status_not_code_zero(stub, topic: str):
    end = stub.EndTransaction(service_pb2.EndTransactionRequest(topic=definition_pb2.Resource(name=topic),
                                                                message_id="m", transaction_id="nope"), timeout=10)
    assert end.status.code not in (Code.CODE_UNSPECIFIED, Code.OK) and end.status.message
    pull = list(stub.PullMessage(service_pb2.PullMessageRequest(), timeout=10))
    assert [p.status.code for p in pull] == [Code.NOT_IMPLEMENTED]
    heartbeat = stub.Heartbeat(service_pb2.HeartbeatRequest(client_type=definition_pb2.PRODUCER), timeout=10)
    assert heartbeat.status.code == Code.OK


def test_still_serving_after_bad_input(stub, topic: str, proxy_cluster: ProxyCluster):
    assert proxy_cluster.proxy.alive
    answer = send(stub, v2_message(topic, b"after"))
    assert answer.status.code == Code.OK and answer.entries[0].message_id
    assert "Traceback" not in proxy_cluster.proxy.log()


# -- static topics -------------------------------------------------------------------------------------------------
def test_static_topic_is_its_logic_queues_and_sends_land_in_them(proxy_cluster: ProxyCluster, stub,
                                                                 official_client: OfficialClient):
    topic = f"ProxyStatic_{uuid.uuid4().hex[:8]}"
    with Admin(proxy_cluster.namesrv) as admin:
        admin.update_static_topic(topic, 3, cluster="DefaultCluster")
        wait_until(lambda: admin.is_static_topic(topic), timeout=15, what="the static topic routed")

    def logic_queues() -> list[tuple[str, int, int]]:
        answer = stub.QueryRoute(service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic)),
                                 timeout=10)
        return sorted((q.broker.name, q.id, q.permission) for q in answer.message_queues)

    # Each broker registers its part of the mapping on its own: until the last one has, a logic queue whose
    # leader is not routed yet shows no write permission.
    expected = [(LOGICAL_QUEUE_MOCK_BROKER_NAME, i, definition_pb2.READ_WRITE) for i in range(3)]
    wait_until(lambda: logic_queues() == expected, timeout=15, what=f"the proxy to route {expected}")

    lines = official_client.run("produce.py", proxy_cluster.endpoint, topic, 9, "--prefix", "static")
    sent = {line["message_id"] for line in lines if "message_id" in line}
    with PullConsumer(proxy_cluster.namesrv, group="static_reader") as consumer:
        def stored() -> dict[str, int]:
            found = {}
            for mq in consumer.queues(topic):
                assert mq.broker_name == LOGICAL_QUEUE_MOCK_BROKER_NAME
                for msg in consumer.pull(mq, offset=0, max_nums=32).messages:
                    found[msg.msg_id] = mq.queue_id
            return found if len(found) >= 9 else {}
        found = wait_until(stored, timeout=15, what="the static topic's messages")
    assert set(found) == sent and set(found.values()) == {0, 1, 2}  # round robin over the logic queues


def test_transactional_send_to_a_static_topic_is_a_bad_request(proxy_cluster: ProxyCluster, stub):
    topic = static_topic(proxy_cluster, f"ProxyStaticTx_{uuid.uuid4().hex[:8]}", ["broker-a"])
    answer = stub.SendMessage(service_pb2.SendMessageRequest(messages=[
        v2_message(topic, message_type=definition_pb2.TRANSACTION)]), metadata=client_id(), timeout=10)
    assert answer.entries[0].status.code == Code.BAD_REQUEST, answer  # the client's to change, not the proxy's fault
    assert "static topic" in answer.entries[0].status.message


def test_receive_right_after_a_remap_pops_at_the_new_leader(proxy_cluster: ProxyCluster, stub):
    """The old leader answers NOT_LEADER_FOR_QUEUE: the proxy fetches the route again and pops at the new leader,
    not an INTERNAL error until its cached route (30 s) expires."""
    topic = static_topic(proxy_cluster, f"ProxyStaticRemap_{uuid.uuid4().hex[:8]}", ["broker-a"])
    sent = {e.message_id for e in send(stub, *(v2_message(topic, b"m%d" % i) for i in range(4))).entries}
    first = receive_logic(stub, topic, "remap_readers")  # the proxy's route now names broker-a as the leader
    assert first[0].status.code == Code.OK, first[0].status
    remap(proxy_cluster, topic, ["broker-b"])

    after = receive_logic(stub, topic, "remap_readers")
    assert after[0].status.code == Code.OK, after[0].status
    assert {r.message.system_properties.message_id for r in after if r.HasField("message")} <= sent
    assert "logic_queue_leader_moved" in proxy_cluster.proxy.log()


def test_dead_lettering_a_message_popped_before_a_remap_goes_through_the_broker_that_popped_it(
        proxy_cluster: ProxyCluster, stub):
    """Its receipt handle names the old leader, which reads the message back from the link it holds (it refused
    to read a logic queue it no longer led: every forward failed, INTERNAL, and the official clients retried it
    for good)."""
    topic = static_topic(proxy_cluster, f"ProxyStaticDlq_{uuid.uuid4().hex[:8]}", ["broker-a"])
    send(stub, v2_message(topic, b"doomed"))
    (message,) = [r.message for r in receive_logic(stub, topic, "remap_dlq") if r.HasField("message")]
    remap(proxy_cluster, topic, ["broker-b"])

    answer = stub.ForwardMessageToDeadLetterQueue(service_pb2.ForwardMessageToDeadLetterQueueRequest(
        group=definition_pb2.Resource(name="remap_dlq"), topic=definition_pb2.Resource(name=topic),
        receipt_handle=message.system_properties.receipt_handle, message_id=message.system_properties.message_id,
        delivery_attempt=1, max_delivery_attempts=16), metadata=client_id(), timeout=10)
    assert answer.status.code == Code.OK, answer.status
    with PullConsumer(proxy_cluster.namesrv, group="dlq-reader") as reader:  # %DLQ%remap_dlq holds it
        def dead_lettered() -> list[bytes]:
            try:  # the broker registers the topic it made for the dead letter with the name server on its own
                queues = reader.queues("%DLQ%remap_dlq")
            except MQClientError:
                return []
            return [m.body for q in queues for m in reader.pull(q, 0, 8).messages]
        assert wait_until(dead_lettered, timeout=10, what="the message in the DLQ") == [b"doomed"]


class NotLeader(pop_pb2_grpc.PopServiceServicer):
    """A broker that leads no logic queue (fenced by a remap): every pop is refused NOT_LEADER_FOR_QUEUE."""

    def __init__(self) -> None:
        self.pops = 0

    async def PopMessage(self, request, context):
        self.pops += 1
        return pop_pb2.PopMessageResponse(code=ResponseCode.NOT_LEADER_FOR_QUEUE, remark="not the leader")


class Leaders:
    """The SDK's route cache as the proxy sees it: logic queue 0's leader, then ``fresh`` once the route was
    invalidated (None: the fresh route names no leader, as mid-remap)."""

    def __init__(self, first: str, fresh: str | None) -> None:
        self.first, self.fresh = first, fresh
        self.invalidated = 0

    def leader_addr(self, topic: str, logic_id: int) -> str:
        addr = self.fresh if self.invalidated else self.first
        if addr is None:
            err = MQClientError(f"logic queue {logic_id} of topic {topic} has no leader right now")
            err.no_leader = True  # type: ignore[attr-defined]  # as the SDK's
            raise err
        return addr

    def invalidate_route(self, topic: str) -> None:
        self.invalidated += 1

    def route(self, topic: str, for_publish: bool = False) -> None:  # the receive's look at other logic queues
        raise MQClientError(f"no route of {topic} in this test")

    def cache_only(self) -> contextlib.AbstractContextManager[None]:  # every answer is "cached" here
        return contextlib.nullcontext()


@pytest.mark.parametrize("fresh, pops", [("old", [1, 0]), ("new", [1, 1]), (None, [1, 0])],
                         ids=["route-not-updated-yet", "new-leader-refuses-too", "no-leader-yet"])
def test_a_leader_that_keeps_refusing_is_asked_once_more_then_answered_as_transient(fresh: str | None,
                                                                                     pops: list[int]):
    """The refreshed route may still name the old leader (the name server has not heard of the remap): no second
    pop there. A new leader is asked once. Either way, and when the route names no leader yet, the answer is a
    transient one, not INTERNAL_SERVER_ERROR."""
    async def scenario() -> None:
        brokers = [NotLeader(), NotLeader()]
        servers, addrs = [], []
        for broker in brokers:
            server = grpc.aio.server()
            pop_pb2_grpc.add_PopServiceServicer_to_server(broker, server)
            addrs.append(f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}")
            await server.start()
            servers.append(server)
        leaders = Leaders(addrs[0], {"old": addrs[0], "new": addrs[1], None: None}[fresh])
        channels = BrokerChannels()
        processor = ConsumeProcessor(TopicRouteService(leaders, channels), channels,  # type: ignore[arg-type]
                                     ProxyConfig(namesrv_addr="unused:9876"), online=lambda client_id: True)
        request = service_pb2.ReceiveMessageRequest(
            group=definition_pb2.Resource(name="g"), message_queue=definition_pb2.MessageQueue(
                topic=definition_pb2.Resource(name="T"), id=0,
                broker=definition_pb2.Broker(name=LOGICAL_QUEUE_MOCK_BROKER_NAME)), batch_size=1,
            invisible_duration=Duration(seconds=30))
        try:
            with pytest.raises(ProxyError) as refused:
                [r async for r in processor.receive_message(request, "cid", None)]
        finally:
            await channels.close()
            for server in servers:
                await server.stop(None)
        assert refused.value.code == Code.HA_NOT_AVAILABLE, refused.value.message
        assert fresh is None or "remap" in refused.value.message  # the broker's remark names only itself
        assert leaders.invalidated == 1
        assert [b.pops for b in brokers] == pops

    asyncio.run(scenario())


def static_topic(proxy_cluster: ProxyCluster, topic: str, brokers: list[str]) -> str:
    """A static topic of one logic queue on ``brokers``, routed by the name server."""
    with Admin(proxy_cluster.namesrv) as admin:
        admin.update_static_topic(topic, 1, brokers=brokers)
    wait_static_route(proxy_cluster.namesrv, topic, 0)
    return topic


def remap(proxy_cluster: ProxyCluster, topic: str, brokers: list[str]) -> None:
    """The topic's logic queues moved to ``brokers``, and the name server routing the new leaders."""
    with Admin(proxy_cluster.namesrv) as admin:
        epoch = static_route_epoch(admin, topic)
        admin.remap_static_topic(topic, brokers=brokers)
    wait_static_route(proxy_cluster.namesrv, topic, epoch + 1)


def receive_logic(stub: service_pb2_grpc.MessagingServiceStub, topic: str,
                  group: str) -> list[service_pb2.ReceiveMessageResponse]:
    """One receive of a message from logic queue 0, without long polling."""
    return list(stub.ReceiveMessage(service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name=group), message_queue=definition_pb2.MessageQueue(
            topic=definition_pb2.Resource(name=topic), id=0,
            broker=definition_pb2.Broker(name=LOGICAL_QUEUE_MOCK_BROKER_NAME)),
        filter_expression=definition_pb2.FilterExpression(type=definition_pb2.TAG, expression="*"), batch_size=1,
        invisible_duration=Duration(seconds=30)), metadata=client_id(), timeout=10))


def client_id() -> list[tuple[str, str]]:
    return [("x-mq-client-id", f"test-{uuid.uuid4().hex[:6]}")]

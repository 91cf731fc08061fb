"""The pull consumer on static topics (and, for contrast, normal topics) against fake brokers."""

import grpc
import pytest

from client.errors import MQClientError
from client.pull_consumer import MAX_PULL_HOPS, PullConsumer
from client.results import PullStatus
from common.message_codec import encode_record
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME as MOCK
from proto import broker_pb2
from tests.client.fakes import FakeCluster, FakeRpcError, FakeStaticTopic, normal_route, static_route

T = "StaticT"


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster("broker-a", "broker-b")


@pytest.fixture
def consumer(fake: FakeCluster):
    c = PullConsumer("fake-namesrv:9876", group="cg")
    fake.install(c.client)
    yield c
    c.close()


def q(i: int) -> MessageQueue:
    return MessageQueue(T, MOCK, i)


def pulls(fake: FakeCluster) -> list[tuple[str, int, int]]:
    """(broker, logic queue, offset) of every pull, in order; all must be addressed LOGIC."""
    calls = fake.all_calls("PullMessage")
    assert all(r.addressing == broker_pb2.LOGIC for _, r in calls)
    return [(b, r.queue_id, r.queue_offset) for b, r in calls]


def test_queues_of_a_static_topic_are_its_logic_queues(fake, consumer):
    FakeStaticTopic(fake, T, {0: "broker-a", 1: None, 2: "broker-b"})
    assert consumer.queues(T) == [q(0), q(1), q(2)]


def test_a_pull_goes_to_the_leader_and_hands_out_logic_offsets_and_ids(fake, consumer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-b"})
    topic.remap(1, "broker-a", logic_start=10_000)
    topic.append(1, b"x", b"y")
    result = consumer.pull(q(1), 10_000)
    assert result.status is PullStatus.FOUND
    assert [(m.body, m.queue_offset, m.queue_id) for m in result.messages] == [(b"x", 10_000, 1), (b"y", 10_001, 1)]
    assert result.next_begin_offset == 10_002
    assert pulls(fake) == [("broker-a", 1, 10_000)]


def test_a_drained_older_link_is_hopped_transparently(fake, consumer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a"})
    topic.append(0, b"a0", b"a1", b"a2")
    topic.remap(0, "broker-b", logic_start=10_000)
    topic.append(0, b"b0")
    first = consumer.pull(q(0), 1)
    assert [(m.body, m.queue_offset) for m in first.messages] == [(b"a1", 1), (b"a2", 2)]
    second = consumer.pull(q(0), first.next_begin_offset)  # offset 3: the old link is drained
    assert second.status is PullStatus.FOUND
    assert [(m.body, m.queue_offset) for m in second.messages] == [(b"b0", 10_000)]
    assert second.next_begin_offset == 10_001
    assert pulls(fake) == [("broker-b", 0, 1), ("broker-b", 0, 3), ("broker-b", 0, 10_000)]


def test_a_hop_into_an_empty_leader_answers_no_new_msg(fake, consumer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a"})
    topic.append(0, b"a0")
    topic.remap(0, "broker-b", logic_start=10_000)
    result = consumer.pull_async(q(0), 1).result(5)
    assert (result.status, result.next_begin_offset) == (PullStatus.NO_NEW_MSG, 10_000)


def test_the_hop_loop_is_bounded(fake, consumer):
    fake.routes[T] = static_route(T, 1, {"broker-a": (1000, {0: 0})})
    fake.brokers["broker-a"].handlers["PullMessage"] = lambda req: broker_pb2.PullMessageResponse(
        code=ResponseCode.PULL_RETRY_IMMEDIATELY, next_begin_offset=req.queue_offset + 10)
    result = consumer.pull(q(0), 0)
    assert result.status is PullStatus.NO_MATCHED_MSG
    assert result.next_begin_offset == 10 * (MAX_PULL_HOPS + 1)
    assert len(pulls(fake)) == MAX_PULL_HOPS + 1
    assert MAX_PULL_HOPS == 8


def test_a_pull_at_a_former_leader_refreshes_the_route_and_retries_once(fake, consumer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a"})
    topic.append(0, b"a0")
    consumer.client.route(T)
    topic.remap(0, "broker-b", logic_start=10_000)
    result = consumer.pull(q(0), 0)
    assert [(m.body, m.queue_offset) for m in result.messages] == [(b"a0", 0)]
    assert pulls(fake) == [("broker-a", 0, 0), ("broker-b", 0, 0)]


def test_a_pull_refused_twice_fails_with_not_leader(fake, consumer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a"})
    topic.fenced = {"broker-a"}
    with pytest.raises(MQClientError, match="NOT_LEADER_FOR_QUEUE") as info:
        consumer.pull(q(0), 0)
    assert info.value.code == ResponseCode.NOT_LEADER_FOR_QUEUE
    assert pulls(fake) == [("broker-a", 0, 0)] * 2


def test_a_pull_at_an_unreachable_leader_retries_at_the_new_one(fake, consumer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a"})
    consumer.client.route(T)
    fake.brokers["broker-a"].down = True
    topic.remap(0, "broker-b", logic_start=10_000)
    topic.append(0, b"b0")
    result = consumer.pull(q(0), 10_000)
    assert [m.body for m in result.messages] == [b"b0"]
    assert pulls(fake) == [("broker-a", 0, 10_000), ("broker-b", 0, 10_000)]


def test_pulls_and_offsets_on_a_queue_without_leader_fail_clearly(fake, consumer):
    FakeStaticTopic(fake, T, {0: "broker-a", 1: None})
    message = f"logic queue 1 of topic {T} has no leader right now"
    with pytest.raises(MQClientError, match=message):
        consumer.pull(q(1), 0)
    with pytest.raises(MQClientError, match=message):
        consumer.pull_async(q(1), 0).result(5)
    for call in (lambda: consumer.commit(q(1), 3), lambda: consumer.committed(q(1)), lambda: consumer.min_offset(q(1)),
                 lambda: consumer.max_offset(q(1)), lambda: consumer.search_offset(q(1), 0)):
        with pytest.raises(MQClientError, match=message):
            call()
    assert fake.calls == []


def test_offsets_go_logic_to_the_leader(fake, consumer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a"})
    topic.append(0, b"a0", b"a1")
    topic.remap(0, "broker-b", logic_start=10_000)
    topic.append(0, b"b0")
    assert consumer.committed(q(0)) == -1
    consumer.commit(q(0), 10_001)
    assert consumer.committed(q(0)) == 10_001
    assert consumer.min_offset(q(0)) == 0
    assert consumer.max_offset(q(0)) == 10_001
    assert consumer.search_offset(q(0), 0) == 10_001
    assert {b for b, _, _ in fake.calls} == {"broker-b"}
    assert all(r.addressing == broker_pb2.LOGIC and r.queue_id == 0 for _, _, r in fake.calls)


def test_offset_calls_at_a_former_leader_retry_once_at_the_new_one(fake, consumer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a"})
    consumer.client.route(T)
    topic.remap(0, "broker-b", logic_start=10_000)
    consumer.commit(q(0), 10_000)
    assert [(b, m) for b, m, _ in fake.calls] == [("broker-a", "UpdateConsumerOffset"),
                                                   ("broker-b", "UpdateConsumerOffset")]
    topic.fenced = {"broker-b"}
    with pytest.raises(MQClientError, match="NOT_LEADER_FOR_QUEUE"):
        consumer.max_offset(q(0))
    assert [b for b, m, _ in fake.calls if m == "GetMaxOffset"] == ["broker-b", "broker-b"]


# -- normal topics keep their behaviour ----------------------------------------------------------------
def test_a_normal_topic_pull_is_unaddressed_and_never_hops(fake, consumer):
    fake.routes["N"] = normal_route("N", {"broker-a": 1})
    fake.brokers["broker-a"].handlers["PullMessage"] = lambda req: broker_pb2.PullMessageResponse(
        code=ResponseCode.PULL_RETRY_IMMEDIATELY, next_begin_offset=5)
    result = consumer.pull(MessageQueue("N", "broker-a", 0), 0)
    assert (result.status, result.next_begin_offset) == (PullStatus.NO_MATCHED_MSG, 5)
    calls = fake.all_calls("PullMessage")
    assert len(calls) == 1 and calls[0][1].addressing == broker_pb2.ADDRESSING_UNSPECIFIED


def test_a_normal_topic_pull_keeps_physical_ids_and_offsets(fake, consumer):
    fake.routes["N"] = normal_route("N", {"broker-a": 4})
    fake.brokers["broker-a"].handlers["PullMessage"] = lambda req: broker_pb2.PullMessageResponse(
        code=ResponseCode.SUCCESS, next_begin_offset=8,
        records=encode_record(b"N", 3, b"body", b"", queue_offset=7))
    result = consumer.pull(MessageQueue("N", "broker-a", 3), 7)
    assert [(m.queue_id, m.queue_offset) for m in result.messages] == [(3, 7)]


def test_a_normal_topic_offset_call_is_unaddressed_and_not_retried(fake, consumer):
    fake.routes["N"] = normal_route("N", {"broker-a": 1})

    def refuse(req):
        raise FakeRpcError(grpc.StatusCode.UNAVAILABLE)

    fake.brokers["broker-a"].handlers["GetMaxOffset"] = refuse
    with pytest.raises(MQClientError, match="UNAVAILABLE"):
        consumer.max_offset(MessageQueue("N", "broker-a", 0))
    fake.brokers["broker-a"].handlers["GetMaxOffset"] = lambda req: broker_pb2.OffsetResponse(
        code=ResponseCode.NOT_LEADER_FOR_QUEUE, remark="?")
    with pytest.raises(MQClientError, match="NOT_LEADER_FOR_QUEUE"):
        consumer.max_offset(MessageQueue("N", "broker-a", 0))
    calls = fake.all_calls("GetMaxOffset")
    assert len(calls) == 2 and all(r.addressing == broker_pb2.ADDRESSING_UNSPECIFIED for _, r in calls)
    assert isinstance(calls[0][1], broker_pb2.QueueRequest)

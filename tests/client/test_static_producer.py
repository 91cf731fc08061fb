"""The producer on static topics (and, for contrast, normal topics) against fake brokers."""

import zlib
from collections import Counter

import grpc
import pytest

from client.errors import MQClientError
from client.producer import Producer
from common.message import Message
from common.message_queue import MessageQueue
from common.refusal import LEASE_ENDED_UNACKNOWLEDGED
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME as MOCK
from proto import broker_pb2
from tests.client.fakes import FakeCluster, FakeRpcError, FakeStaticTopic, normal_route, static_route

T = "StaticT"


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster("broker-a", "broker-b")


@pytest.fixture
def producer(fake: FakeCluster):
    p = Producer("fake-namesrv:9876", group="pg", retry_times=2)
    fake.install(p.client)
    yield p
    p.close()


def sends(fake: FakeCluster) -> list[tuple[str, int]]:
    """(broker, logic queue id) of every SendMessage the brokers received, in order."""
    return [(b, r.queue_id) for b, r in fake.all_calls("SendMessage")]


def key_with_queue(n: int, queue_id: int) -> str:
    return next(k for k in (f"user-{i}" for i in range(10_000)) if zlib.crc32(k.encode()) % n == queue_id)


def test_an_unkeyed_send_goes_logic_to_the_leader_and_answers_in_logic_terms(fake, producer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-b"})
    topic.append(0, b"old", b"older")
    topic.append(1, b"x")
    results = [producer.send(Message(T, f"m{i}".encode())) for i in range(4)]
    for r, (broker, request) in zip(results, fake.all_calls("SendMessage"), strict=True):
        assert request.addressing == broker_pb2.LOGIC
        assert r.queue == MessageQueue(T, MOCK, request.queue_id)
        assert broker == topic.leader(request.queue_id)
    assert sorted((r.queue.queue_id, r.queue_offset) for r in results) == [(0, 2), (0, 3), (1, 1), (1, 2)]


def test_an_unkeyed_send_never_picks_a_queue_without_leader(fake, producer):
    FakeStaticTopic(fake, T, {0: "broker-a", 1: None, 2: "broker-b", 3: None})
    results = [producer.send(Message(T, b"m")) for _ in range(12)]
    assert {r.queue.queue_id for r in results} == {0, 2}
    assert {q for _, q in sends(fake)} == {0, 2}


def test_the_queues_of_a_group_whose_master_is_down_are_shared_by_the_others(fake, producer):
    """The next live queue after a dead group's took the share of each of its queues: 5 of 8 picks on one queue."""
    fake.routes["NormalT"] = normal_route("NormalT", {"broker-a": 4, "broker-b": 4})
    queues = producer.client.publish_queues("NormalT")
    producer.client.down.mark(fake.brokers["broker-a"].addr)
    picks = Counter(producer._pick("NormalT", queues, start, None) for start in range(8))
    assert picks == {MessageQueue("NormalT", "broker-b", q): 2 for q in range(4)}


def test_an_unkeyed_send_fails_clearly_when_no_queue_has_a_leader(fake, producer):
    FakeStaticTopic(fake, T, {0: None, 1: None})
    with pytest.raises(MQClientError, match=f"topic {T}: none of its logic queues has a leader right now"):
        producer.send(Message(T, b"m"))
    assert sends(fake) == []


def test_a_key_picks_crc32_mod_n_and_keeps_its_logic_queue_across_a_remap(fake, producer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-a", 2: "broker-b", 3: "broker-b"})
    key = key_with_queue(4, 1)
    first = producer.send(Message(T, b"1"), sharding_key=key)
    assert first.queue == MessageQueue(T, MOCK, 1)
    assert first.queue_offset == 0
    topic.remap(1, "broker-b", logic_start=10_000)  # the cached route still says broker-a
    second = producer.send(Message(T, b"2"), sharding_key=key)
    assert second.queue == MessageQueue(T, MOCK, 1)
    assert second.queue_offset == 10_000
    # broker-a answered NOT_LEADER_FOR_QUEUE; the retry went to the same logic queue at broker-b
    assert sends(fake) == [("broker-a", 1), ("broker-a", 1), ("broker-b", 1)]


def test_a_key_to_a_queue_without_leader_fails_clearly(fake, producer):
    FakeStaticTopic(fake, T, {0: "broker-a", 1: None, 2: "broker-b"})
    key = key_with_queue(3, 1)
    with pytest.raises(MQClientError, match=f"logic queue 1 of topic {T} has no leader right now"):
        producer.send(Message(T, b"m"), sharding_key=key)
    assert sends(fake) == []
    with pytest.raises(MQClientError, match="has no leader right now"):
        producer.send_async(Message(T, b"m"), sharding_key=key).result(5)


def test_an_unkeyed_send_retries_the_same_logic_queue_after_not_leader(fake, producer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-b"})
    producer.client.route(T)  # cache the route before the remap
    topic.remap(0, "broker-b", logic_start=10_000)
    topic.remap(1, "broker-a", logic_start=10_000)
    results = [producer.send(Message(T, b"m")) for _ in range(2)]
    assert {r.queue.queue_id for r in results} == {0, 1}
    assert {r.queue_offset for r in results} == {10_000}
    calls = sends(fake)
    # each send's first try hit the old leader and its retry the new one, on the same logic queue
    first_queue = calls[0][1]
    assert calls[:2] == [(topic.chains[first_queue][0].bname, first_queue),
                         (topic.chains[first_queue][-1].bname, first_queue)]
    assert len(calls) == 3  # the second send already had the refreshed route


def test_not_leader_everywhere_fails_after_retry_times_on_the_same_queue(fake, producer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-b"})
    topic.fenced = {"broker-a", "broker-b"}  # every broker answers NOT_LEADER_FOR_QUEUE
    with pytest.raises(MQClientError, match="NOT_LEADER_FOR_QUEUE") as info:
        producer.send(Message(T, b"m"), sharding_key=key_with_queue(2, 1))
    assert info.value.code == ResponseCode.NOT_LEADER_FOR_QUEUE
    assert sends(fake) == [("broker-b", 1)] * 3  # 1 + retry_times, all on logic queue 1
    del fake.calls[:]
    with pytest.raises(MQClientError, match="NOT_LEADER_FOR_QUEUE"):
        producer.send(Message(T, b"m"))  # unkeyed: also stays on its logic queue
    assert len(set(sends(fake))) == 1 and len(sends(fake)) == 3


def test_an_unavailable_leader_is_retried_on_the_same_logic_queue(fake, producer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-a"})
    producer.client.route(T)
    fake.brokers["broker-a"].down = True
    topic.remap(0, "broker-b", logic_start=10_000)
    r = producer.send(Message(T, b"m"), queue=MessageQueue(T, MOCK, 0))
    assert (r.queue, r.queue_offset) == (MessageQueue(T, MOCK, 0), 10_000)
    assert sends(fake) == [("broker-a", 0), ("broker-b", 0)]


def test_a_keyed_retry_waits_out_a_moment_without_leader(fake, producer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a"})
    producer.client.route(T)
    topic.unled = {0}  # broker-a gave up queue 0 and broker-b has not registered it yet
    topic.fenced = {"broker-a"}
    fetches = len(fake.fetches)
    real_route = topic.route

    def route_then_remap():  # the name server learns of the new leader right after this fetch
        route = real_route()
        if len(fake.fetches) > fetches + 1:
            topic.remap(0, "broker-b", logic_start=10_000)
            route = real_route()
        return route

    topic.route = route_then_remap
    r = producer.send(Message(T, b"m"), sharding_key="k")
    assert (r.queue.queue_id, r.queue_offset) == (0, 10_000)
    assert sends(fake) == [("broker-a", 0), ("broker-b", 0)]


def test_a_keyed_send_gives_up_when_the_queue_stays_without_leader(fake, producer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a"})
    producer.client.route(T)
    topic.unled = {0}
    topic.fenced = {"broker-a"}
    with pytest.raises(MQClientError, match=f"logic queue 0 of topic {T} has no leader right now"):
        producer.send(Message(T, b"m"), sharding_key="k")
    assert sends(fake) == [("broker-a", 0)]


def test_an_unkeyed_send_moves_only_when_its_queue_lost_its_leader(fake, producer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-b"})
    topic.unled = {1}
    producer.client.route(T)  # cached: only queue 0 has a leader
    topic.unled = {0}  # now queue 0 has none, queue 1 is back
    topic.fenced = {"broker-a"}
    r = producer.send(Message(T, b"m"))
    assert r.queue == MessageQueue(T, MOCK, 1)
    assert sends(fake) == [("broker-a", 0), ("broker-b", 1)]


def test_a_logic_offset_not_decided_yet_comes_back_as_minus_one(fake, producer):
    fake.routes[T] = static_route(T, 1, {"broker-a": (1000, {0: 0})})
    fake.brokers["broker-a"].handlers["SendMessage"] = lambda req: broker_pb2.SendMessageResponse(
        code=ResponseCode.SUCCESS, queue_id=req.queue_id, queue_offset=-1, physical_offsets=[77])
    r = producer.send(Message(T, b"m"))
    assert (r.queue, r.queue_offset, r.count) == (MessageQueue(T, MOCK, 0), -1, 1)
    assert fake.all_calls("SendMessage")[0][1].addressing == broker_pb2.LOGIC


def test_a_batch_on_a_static_topic_lands_on_one_logic_queue(fake, producer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-b"})
    r = producer.send_batch([Message(T, b"1"), Message(T, b"2"), Message(T, b"3")], sharding_key="order-7")
    assert r.queue.broker_name == MOCK
    assert r.queue.queue_id == zlib.crc32(b"order-7") % 2
    assert topic.chains[r.queue.queue_id][-1].bodies == [b"1", b"2", b"3"]
    assert r.count == 3


def test_async_sends_on_a_static_topic(fake, producer):
    topic = FakeStaticTopic(fake, T, {0: "broker-a", 1: "broker-b"})
    futures = [producer.send_async(Message(T, f"{i}".encode()), sharding_key="same") for i in range(5)]
    results = [f.result(5) for f in futures]
    q = zlib.crc32(b"same") % 2
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    assert topic.chains[q][-1].bodies == [f"{i}".encode() for i in range(5)]


# -- normal topics keep their behaviour ----------------------------------------------------------------
def test_a_normal_topic_sends_unaddressed_and_moves_to_another_broker(fake, producer):
    fake.routes["N"] = normal_route("N", {"broker-a": 1, "broker-b": 1})

    def ok(req):
        return broker_pb2.SendMessageResponse(code=ResponseCode.SUCCESS, queue_id=req.queue_id, queue_offset=7)

    def unavailable(req):
        raise FakeRpcError(grpc.StatusCode.UNAVAILABLE)

    fake.brokers["broker-a"].handlers["SendMessage"] = unavailable
    fake.brokers["broker-b"].handlers["SendMessage"] = ok
    producer._round_robin = -1  # the next pick is the first queue: broker-a's
    r = producer.send(Message("N", b"m"))
    assert r.queue == MessageQueue("N", "broker-b", 0)
    calls = fake.all_calls("SendMessage")
    assert [b for b, _ in calls] == ["broker-a", "broker-b"]
    assert all(req.addressing == broker_pb2.ADDRESSING_UNSPECIFIED for _, req in calls)


def test_a_normal_topic_keyed_send_does_not_retry(fake, producer):
    fake.routes["N"] = normal_route("N", {"broker-a": 2})
    fake.brokers["broker-a"].handlers["SendMessage"] = lambda req: broker_pb2.SendMessageResponse(
        code=ResponseCode.SYSTEM_BUSY, remark="busy")
    with pytest.raises(MQClientError, match="SYSTEM_BUSY"):
        producer.send(Message("N", b"m"), sharding_key="k")
    assert len(fake.all_calls("SendMessage")) == 1


def test_a_keyed_send_answered_lease_ended_is_sent_again_to_its_group(fake, producer):
    """A master whose controller lease ended as it stored the send answers SERVICE_NOT_AVAILABLE "stored here, not
    acknowledged": a send kept on its queue (keyed, a FIFO message group's) failed at once (CI, an electMaster under
    load); it waits for the group's master as for a deposed one, and is sent again (at least once)."""
    fake.routes["N"] = normal_route("N", {"broker-a": 2})
    answers = iter([broker_pb2.SendMessageResponse(code=ResponseCode.SERVICE_NOT_AVAILABLE,
                                                   remark=f"this master's {LEASE_ENDED_UNACKNOWLEDGED}; send again")])

    def lease_ended_once(req):
        return next(answers, broker_pb2.SendMessageResponse(code=ResponseCode.SUCCESS, queue_id=req.queue_id,
                                                            queue_offset=3))

    fake.brokers["broker-a"].handlers["SendMessage"] = lease_ended_once
    r = producer.send(Message("N", b"m"), sharding_key="k")
    assert r.queue_offset == 3
    assert len(fake.all_calls("SendMessage")) == 2

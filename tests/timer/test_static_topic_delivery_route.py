"""Where the timer delivers a static topic's due message (``broker/statictopic/timer_delivery_route.py``): here
while this broker leads its logic queue, else to the leader by this broker's chain, else by the name servers'
route once this broker dropped the chain; its logic queue comes from REAL_LOGIC_QID, or, for a timer stored
before that was recorded, from the chain that holds its physical queue here."""

from pathlib import Path

import grpc
import pytest

from broker.out.peer_brokers import PeerBrokerError
from broker.statictopic.timer_delivery_route import StaticTopicDeliveryRoute, _chunks
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.timer.delay_router import DelayRouter, delivered_properties, timer_target
from broker.timer.delivery_route import LEADER_BY_ROUTE, DeliveryTarget
from common.message_properties import decode_properties, encode_properties
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem as Item
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from proto import broker_pb2

TOPIC = "StaticT"


def moved_detail(bname: str) -> TopicQueueMappingDetail:
    """Logic queue 0 moved from broker-a (physical 0) to broker-b (physical 3); logic queue 1 stays on broker-a
    (physical 1), after having been on broker-b."""
    return TopicQueueMappingDetail(TOPIC, 2, bname, 2000, hosted_queues={
        0: [Item(0, 0, "broker-a", 0, 0, 10), Item(1, 3, "broker-b", 10_000)],
        1: [Item(0, 2, "broker-b", 0, 0, 4), Item(1, 1, "broker-a", 10_000)],
    })


class FakePeers:
    def __init__(self, leader: str = "broker-c", code: int = ResponseCode.SUCCESS, max_records: int = 0) -> None:
        self.leader, self.code = leader, code
        self.max_records = max_records  # a send whose records are longer is refused INVALID_ARGUMENT (0: none is)
        self.sent: list[tuple[str, broker_pb2.SendMessageRequest]] = []

    def logic_queue_leader(self, topic: str, logic_queue_id: int) -> str:
        if not self.leader:
            raise PeerBrokerError("no name server answered the route of StaticT")
        return self.leader

    def call(self, bname: str, method: str, request: broker_pb2.SendMessageRequest) -> broker_pb2.SendMessageResponse:
        assert method == "SendMessage"
        self.sent.append((bname, request))
        if self.max_records and max(map(len, request.records.split(b"|")[:-1])) > self.max_records:
            raise PeerBrokerError(f"SendMessage on broker {bname} failed: INVALID_ARGUMENT: message body exceeds "
                                  "maxMessageSize", reachable=True, status=grpc.StatusCode.INVALID_ARGUMENT)
        return broker_pb2.SendMessageResponse(code=self.code, remark="not now")


def route(tmp_path: Path, bname: str, detail: TopicQueueMappingDetail | None, peers: FakePeers | None = None,
          max_bytes: int = 1 << 20) -> StaticTopicDeliveryRoute:
    manager = TopicQueueMappingManager(tmp_path, bname)
    if detail is not None:
        manager.update(detail)
    return StaticTopicDeliveryRoute(bname, manager, peers or FakePeers(), max_bytes)  # type: ignore[arg-type]


def test_a_normal_topic_and_a_led_logic_queue_are_delivered_here(tmp_path: Path):
    a = route(tmp_path, "broker-a", moved_detail("broker-a"))
    assert a.target("NormalT", 5, None) == DeliveryTarget(5)
    assert a.target(TOPIC, 1, 1) == DeliveryTarget(1)
    assert a.target(TOPIC, 1, None) == DeliveryTarget(1)  # a timer stored before REAL_LOGIC_QID: by its chain


def test_a_moved_logic_queue_goes_to_its_leader_by_the_chain_or_the_route(tmp_path: Path):
    a = route(tmp_path, "broker-a", moved_detail("broker-a"))
    assert a.target(TOPIC, 0, 0) == DeliveryTarget(0, "broker-b")
    assert a.target(TOPIC, 0, None) == DeliveryTarget(0, "broker-b")
    dropped = route(tmp_path / "dropped", "broker-a", None)  # the clean service dropped the chain it no longer led
    assert dropped.target(TOPIC, 0, 0) == DeliveryTarget(0, LEADER_BY_ROUTE)
    assert dropped.target(TOPIC, 0, None) == DeliveryTarget(0)  # logic queue unknown: nothing better than here


def test_a_logic_queue_led_here_again_on_another_physical_queue_is_put_there(tmp_path: Path):
    b = route(tmp_path, "broker-b", moved_detail("broker-b"))
    assert b.target(TOPIC, 2, 1) == DeliveryTarget(1, "broker-a")
    assert b.target(TOPIC, 0, 0) == DeliveryTarget(3)  # sent when it was broker-b's physical 0 (say): led here now


def test_a_forward_sends_logic_addressed_records_in_chunks_and_stops_at_a_refusal(tmp_path: Path):
    peers = FakePeers()
    a = route(tmp_path, "broker-a", moved_detail("broker-a"), peers, max_bytes=250)
    records = [bytes([i]) * 100 for i in range(5)]
    sent = a.forward(DeliveryTarget(0, LEADER_BY_ROUTE), TOPIC, records)
    assert (sent.taken, sent.broker, sent.error) == (5, "broker-c", None)
    assert [(b, r.topic, r.queue_id, r.addressing, len(r.records)) for b, r in peers.sent] == [
        ("broker-c", TOPIC, 0, broker_pb2.LOGIC, 200), ("broker-c", TOPIC, 0, broker_pb2.LOGIC, 200),
        ("broker-c", TOPIC, 0, broker_pb2.LOGIC, 100)]
    not_leader = FakePeers(code=ResponseCode.NOT_LEADER_FOR_QUEUE)
    refused = route(tmp_path / "r", "broker-a", moved_detail("broker-a"), not_leader)
    sent = refused.forward(DeliveryTarget(0, "broker-b"), TOPIC, records)
    assert (sent.taken, sent.broker) == (0, "broker-b")
    assert sent.error == "broker broker-b answered NOT_LEADER_FOR_QUEUE: not now"
    unknown = route(tmp_path / "u", "broker-a", None, FakePeers(leader=""))
    assert unknown.forward(DeliveryTarget(0, LEADER_BY_ROUTE), TOPIC, records).error == \
        "no name server answered the route of StaticT"


@pytest.mark.parametrize("sizes,expected", [([], []), ([300], [[300]]), ([100, 100, 100], [[100, 100], [100]])])
def test_chunks_keep_order_and_hold_at_least_one_record(sizes: list[int], expected: list[list[int]]):
    assert [[len(r) for r in c] for c in _chunks([b"x" * n for n in sizes], 250)] == expected


def test_the_logic_queue_travels_in_the_timer_properties_and_is_gone_once_delivered():
    router = DelayRouter([1000], 86_400_000)
    raw = router.timer_properties(encode_properties({"UNIQ_KEY": "U"}), TOPIC, 3, 1_700_000_000_000, 7)
    target = timer_target(raw)
    assert target is not None and (target.topic, target.queue_id, target.logic_queue_id) == (TOPIC, 3, 7)
    assert decode_properties(delivered_properties(raw)) == {"UNIQ_KEY": "U"}
    again = router.timer_properties(raw, TOPIC, 4, 1_700_000_000_000)  # re-delayed as a normal topic's: replaced
    target = timer_target(again)
    assert target is not None and (target.queue_id, target.logic_queue_id) == (4, None)


def test_a_record_the_leader_refuses_for_good_is_dropped_alone_and_the_others_forwarded(tmp_path: Path):
    """A chunk with a record over the leader's maxMessageSize was refused whole, held and retried every second, for
    ever (the timers review, by reading): sent again a record at a time, only that one is dropped."""
    peers = FakePeers(max_records=10)
    a = route(tmp_path, "broker-a", moved_detail("broker-a"), peers)
    records = [b"small-%d|" % i for i in range(3)] + [b"x" * 50 + b"|"] + [b"small-3|"]
    sent = a.forward(DeliveryTarget(0, "broker-b"), TOPIC, records)
    assert (sent.taken, sent.dropped, sent.error) == (5, 1, None)
    assert "maxMessageSize" in sent.dropped_why
    stored = [r.records for _, r in peers.sent[1:] if len(r.records) <= 11]
    assert stored == [b"small-0|", b"small-1|", b"small-2|", b"small-3|"]

"""MovedQueueLeases with a fake previous leader: a live holder there keeps the queue here, none lets it go, and one
that cannot answer is asked once (a second at most) and the queue granted a lease time later, without asking again
(a lock request waited a peer call's 10 s at every renewal on a hung previous leader, and timed out whole, for
queues that never moved too: the diff review)."""

from dataclasses import dataclass, field

from broker.client.rebalance_lock_manager import RebalanceLockManager
from broker.out.peer_brokers import PeerBrokerError
from broker.statictopic import moved_queue_leases
from broker.statictopic.moved_queue_leases import MovedQueueLeases
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME as LOGIC_BROKER
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from proto import consumer_pb2

QUEUE = ("T", LOGIC_BROKER, 0)
NOW_WALL = 10_000_000


@dataclass
class Chain:
    chain: list[LogicQueueMappingItem]


@dataclass
class FakePeers:
    holder: str | None = None  # None: it does not answer
    calls: list[float] = field(default_factory=list)

    def call(self, bname, method, request, service=None, timeout_s=None):
        self.calls.append(timeout_s)
        if self.holder is None:
            raise PeerBrokerError(f"{method} on broker {bname} failed: DEADLINE_EXCEEDED")
        held = [consumer_pb2.QueueLease(queue=request.queues[0], client_id=self.holder)] if self.holder else []
        return consumer_pb2.LockBatchResponse(held=held)


class FakeStaticTopics:
    def __init__(self, peers: FakePeers) -> None:
        self.peer_brokers = peers

    def context(self, topic, queue_id, addressing):
        return Chain([LogicQueueMappingItem(0, 0, "broker-a"),
                      LogicQueueMappingItem(1, 0, "broker-b", time_of_start=NOW_WALL - 1000)])


def leases(peers: FakePeers, clock: list[int]) -> tuple[MovedQueueLeases, RebalanceLockManager]:
    locks = RebalanceLockManager(60_000, clock=lambda: clock[0])
    moved = MovedQueueLeases("broker-b", FakeStaticTopics(peers), locks,  # type: ignore[arg-type]
                             wall_ms=lambda: NOW_WALL, clock_ms=lambda: clock[0])
    return moved, locks


def test_a_live_holder_at_the_previous_leader_keeps_the_queue_here() -> None:
    clock = [0]
    moved, locks = leases(FakePeers(holder="A"), clock)
    assert not moved.allows("g", "B", QUEUE)
    assert locks.holder("g", QUEUE) == "A"
    assert locks.try_lock("g", "A", [QUEUE]) == [QUEUE] and locks.try_lock("g", "B", [QUEUE]) == []


def test_no_holder_at_the_previous_leader_lets_it_go_at_once() -> None:
    peers = FakePeers(holder="")
    moved, _ = leases(peers, [0])
    assert moved.allows("g", "B", QUEUE) and moved.allows("g", "C", QUEUE)
    assert len(peers.calls) == 1  # asked once a link


def test_a_previous_leader_that_cannot_answer_is_asked_once_and_waited_for_a_lease_time() -> None:
    clock = [0]
    peers = FakePeers(holder=None)
    moved, _ = leases(peers, clock)
    assert not moved.allows("g", "B", QUEUE)
    assert peers.calls == [moved_queue_leases.HOLDERS_TIMEOUT_S]  # a second at most, not a peer call's 10 s
    clock[0] += 30_000
    assert not moved.allows("g", "B", QUEUE) and len(peers.calls) == 1  # not asked again
    clock[0] += 30_000
    assert moved.allows("g", "B", QUEUE) and len(peers.calls) == 1


def test_a_normal_queue_and_a_queue_held_here_are_not_asked_about() -> None:
    peers = FakePeers(holder="A")
    moved, locks = leases(peers, [0])
    assert moved.allows("g", "B", ("T", "broker-b", 0))
    locks.try_lock("g", "C", [QUEUE])
    assert moved.allows("g", "B", QUEUE) and peers.calls == []

"""The broker's view of group members, and orderly leases, with an injected clock."""

from broker.client.consumer_manager import ConsumerInfo, ConsumerManager
from broker.client.consumer_sessions import ConsumerSessions
from broker.client.rebalance_lock_manager import RebalanceLockManager
from proto import consumer_pb2


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_join_and_session_close_change_the_group():
    m = ConsumerManager(30_000, Clock())
    assert m.heartbeat(1, "c1", "a:1", [ConsumerInfo("g")]) == {"g"}
    assert m.heartbeat(1, "c1", "a:1", [ConsumerInfo("g")]) == set()  # a refresh changes nothing
    assert m.heartbeat(2, "c2", "a:2", [ConsumerInfo("g"), ConsumerInfo("h")]) == {"g", "h"}
    assert m.client_ids("g") == ["c1", "c2"]
    assert m.close_session(2) == {"g", "h"}
    assert m.client_ids("g") == ["c1"] and m.client_ids("h") == []


def test_a_session_that_stops_naming_a_group_leaves_it():
    m = ConsumerManager(30_000, Clock())
    m.heartbeat(1, "c1", "a:1", [ConsumerInfo("g"), ConsumerInfo("h")])
    assert m.heartbeat(1, "c1", "a:1", [ConsumerInfo("g")]) == {"h"}


def test_silent_members_expire():
    clock = Clock()
    m = ConsumerManager(30_000, clock)
    m.heartbeat(1, "c1", "a:1", [ConsumerInfo("g")])
    clock.now = 20_000
    m.heartbeat(2, "c2", "a:2", [ConsumerInfo("g")])
    clock.now = 30_001
    assert m.scan_expired() == {"g"}
    assert m.client_ids("g") == ["c2"]


def test_the_old_session_of_a_reconnected_client_does_not_remove_it():
    m = ConsumerManager(30_000, Clock())
    m.heartbeat(1, "c1", "a:1", [ConsumerInfo("g")])
    m.heartbeat(2, "c1", "a:1", [ConsumerInfo("g")])  # the same client on a new stream
    assert m.close_session(1) == set()
    assert m.client_ids("g") == ["c1"]


def test_leases_are_exclusive_renewable_and_end():
    clock = Clock()
    locks = RebalanceLockManager(60_000, clock)
    q1, q2 = ("T", "b", 0), ("T", "b", 1)
    assert locks.try_lock("g", "c1", [q1, q2]) == [q1, q2]
    assert locks.try_lock("g", "c2", [q1, q2]) == []
    clock.now = 50_000
    assert locks.try_lock("g", "c1", [q1]) == [q1]  # renewed
    clock.now = 70_000
    assert locks.try_lock("g", "c2", [q1, q2]) == [q2]  # q2's lease ran out, q1's was renewed at 50 s
    locks.unlock("g", "c1", [q1])
    assert locks.holder("g", q1) is None
    assert locks.release_client("g", "c2") == 1 and locks.holder("g", q2) is None


def orderly_frame(client_id: str) -> consumer_pb2.HeartbeatFrame:
    return consumer_pb2.HeartbeatFrame(client_id=client_id,
                                       consumers=[consumer_pb2.ConsumerData(group="g", orderly=True)])


def test_an_old_session_ending_after_a_reconnect_keeps_the_clients_leases():
    clock = Clock()
    locks = RebalanceLockManager(60_000, clock)
    sessions = ConsumerSessions(ConsumerManager(120_000, clock), locks)
    q = ("T", "b", 0)
    old = sessions.open("a:1")
    sessions.heartbeat(old, orderly_frame("c1"))
    assert locks.try_lock("g", "c1", [q]) == [q]
    new = sessions.open("a:2")  # c1's stream broke on its side; it reopened before the broker saw the old one end
    sessions.heartbeat(new, orderly_frame("c1"))
    sessions.close(old)
    assert sessions.manager.client_ids("g") == ["c1"]
    assert locks.holder("g", q) == "c1"
    assert locks.try_lock("g", "c2", [q]) == []
    sessions.close(new)  # now c1 leaves: its lease ends at once
    assert locks.holder("g", q) is None

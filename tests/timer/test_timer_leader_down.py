"""A static topic's delayed messages whose logic queue's leader is down (refusing, or not answering) do not hold up
the other due timers: more than a batch (1,024) of them are held while the leader is down, the timers due after
them are delivered on time, and once the leader is back each held one is forwarded once, in due order, none lost."""

import threading
import time
from pathlib import Path

from broker.timer.delivery_route import DeliveryTarget, Forwarded
from broker.timer.timer_delivery_service import wall_clock_ms
from common.message_codec import decode_record
from tests.cluster import wait_until
from tests.timer.timer_node import Node, bodies, start

HELD = 1100  # more than a delivery batch
LEADER = DeliveryTarget(0, "broker-b")


class LeaderDownRoute:
    """Topic "ST" moved to broker-b as logic queue 0, forwarded there; broker-b refuses at once while ``down``, and
    while ``stalled`` is clear a forward hangs (a peer that does not answer) until it is set, then is refused."""

    def __init__(self) -> None:
        self.down = True
        self.stalled = threading.Event()
        self.stalled.set()
        self.calls = 0
        self.forwarded: list[bytes] = []  # bodies broker-b stored

    def target(self, topic: str, queue_id: int, logic_queue_id: int | None) -> DeliveryTarget:
        return LEADER if topic == "ST" else DeliveryTarget(queue_id)

    def forward(self, target: DeliveryTarget, topic: str, records: list[bytes]) -> Forwarded:
        self.calls += 1
        if not self.stalled.is_set():
            self.stalled.wait(30)
            return Forwarded(0, "broker-b", "SendMessage on broker broker-b failed: DEADLINE_EXCEEDED")
        if self.down:
            return Forwarded(0, "broker-b", "SendMessage on broker broker-b failed: UNAVAILABLE: Connection refused")
        self.forwarded.extend(decode_record(r).body for r in records)
        return Forwarded(len(records), "broker-b")


def started(nodes: list[Node], tmp_path: Path) -> tuple[Node, LeaderDownRoute, int, list[int]]:
    """A node whose delivery thread runs on the wall clock, with HELD static-topic timers due already: their due
    time and commitlog offsets."""
    node = start(nodes, tmp_path)
    route = LeaderDownRoute()
    node.delivery.route = route
    node.delivery.clock_ms = wall_clock_ms
    due = wall_clock_ms() - 1000
    return node, route, due, node.send([due] * HELD, topic="ST", queue_id=1)


def plain_delivered_on_time(node: Node) -> None:
    due = wall_clock_ms() + 500
    node.send([due] * 5, topic="Plain", queue_id=0)
    wait_until(lambda: len(node.delivered("Plain", 0)) == 5, timeout=4, interval=0.05,
               what="the plain topic's delayed messages, due 0.5 s after the held ones")
    got = node.delivered("Plain", 0)
    assert all(due <= m.store_timestamp < due + 1500 for m in got), [m.store_timestamp - due for m in got]
    assert bodies(got) == [b"m%d" % i for i in range(HELD, HELD + 5)]


def all_forwarded_once_the_leader_is_back(node: Node, route: LeaderDownRoute) -> None:
    route.down = False
    wait_until(lambda: node.timers.pending == 0, timeout=10, interval=0.05, what="the held timers forwarded")
    assert route.forwarded == [b"m%d" % i for i in range(HELD)]  # each once, in due (here: send) order
    assert node.delivered("ST", 1) == []  # nothing put into the old physical queue here
    assert node.delivery.delivered == HELD + 5 and node.delivery.dropped == 0
    assert not node.timers.held and not node.timers.forwarding


def test_timers_a_refusing_leader_holds_do_not_block_the_later_ones(tmp_path: Path, nodes: list[Node]):
    node, route, _, _ = started(nodes, tmp_path)
    node.delivery.start()
    wait_until(lambda: route.calls, timeout=5, what="a forward refused")
    plain_delivered_on_time(node)
    # (a delivered timer is removed once its message is put: a moment after the message shows)
    wait_until(lambda: node.timers.pending == HELD, timeout=5, what="the plain timers removed")
    assert route.forwarded == []
    calls = route.calls
    time.sleep(1.5)
    assert route.calls - calls <= 2  # one forward a retry (every second), not one a pass
    all_forwarded_once_the_leader_is_back(node, route)


def test_a_leader_that_does_not_answer_holds_up_no_pass_and_what_is_under_way_is_not_recalled(
        tmp_path: Path, nodes: list[Node]):
    node, route, due, offsets = started(nodes, tmp_path)
    route.stalled.clear()
    node.delivery.start()
    wait_until(lambda: route.calls, timeout=5, what="a forward under way")
    plain_delivered_on_time(node)  # while the forward hangs
    assert route.calls == 1  # the timers taken after it wait for it: no second forward to that leader
    with node.timers.delivery_lock:  # as a recall looks: the forward's timers are not pending, those behind it are
        assert node.timers.pending_record(due, offsets[0]) is None
        assert node.timers.pending_record(due, offsets[-1]) is not None
    route.stalled.set()  # the peer call times out: refused
    all_forwarded_once_the_leader_is_back(node, route)


def test_held_timers_survive_a_restart(tmp_path: Path, nodes: list[Node]):
    """Held in memory only: after a restart (a kill alike: they stay stored) each is forwarded once."""
    node, route, _, _ = started(nodes, tmp_path)
    assert node.deliver() == 1024 and node.deliver() == HELD - 1024
    assert node.timers.pending == HELD and len(node.timers.held) == HELD and route.calls == 1
    node.stop()
    nodes.remove(node)
    again = start(nodes, tmp_path)
    again.delivery.route = route = LeaderDownRoute()
    again.delivery.clock_ms = wall_clock_ms
    route.down = False
    assert again.timers.pending == HELD
    assert again.deliver() == 1024 and again.deliver() == HELD - 1024 and again.timers.pending == 0
    assert route.forwarded == [b"m%d" % i for i in range(HELD)]

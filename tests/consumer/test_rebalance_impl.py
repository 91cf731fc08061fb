"""Rebalance against a group whose member list the test sets: a member that joins while a pass is still taking
queues from the old list must not find those queues consumed beside it (the pass stops and the next one reads the
new list), and what the member shows as held is only ever a finished pass's result."""

import threading
import time
from typing import cast

from client.consumer import rebalance_impl as rebalance_impl_module
from client.consumer.allocate_strategy import allocate_averagely
from client.consumer.group_calls import GroupCalls
from client.consumer.offset_store import OffsetStore
from client.consumer.process_queue import ProcessQueue
from client.consumer.rebalance_impl import RebalanceImpl, RebalanceSettings
from client.pull_consumer import PullConsumer
from common.group_topics import retry_topic
from common.message_queue import MessageQueue

TOPIC = "RebalanceT"
QUEUES = [MessageQueue(TOPIC, broker, qid) for broker in ("broker-a", "broker-b") for qid in (0, 1)]
ME, OTHER = "10.0.0.1@1#0", "10.0.0.1@1#1"  # sorted: ME takes the first half of the sorted queues


class Group:
    """The broker side as the member sees it: the topic's queues, the member list, leases, committed offsets."""

    def __init__(self, members: list[str]) -> None:
        self.members = members
        self.leased: set[MessageQueue] = set()

    # PullConsumer
    def queues(self, topic: str) -> list[MessageQueue]:
        return list(QUEUES)

    def min_offset(self, mq: MessageQueue) -> int:
        return 0

    def max_offset(self, mq: MessageQueue) -> int:
        return 0

    # GroupCalls
    def consumer_list(self, topic: str) -> list[str]:
        return list(self.members)

    def lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        self.leased.update(mqs)
        return set(mqs)

    def unlock(self, mq: MessageQueue) -> None:
        self.leased.discard(mq)


class JoinWhileTaking:
    """Takes the member's queues as a pass adds them; after the first one, ``OTHER`` joins (the broker's notice
    interrupts the pass) and the member list grows."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.interrupted = False
        self.taken: list[MessageQueue] = []
        self.held_while_taking: list[list[MessageQueue]] = []
        self.impl: RebalanceImpl | None = None

    def on_added(self, pq: ProcessQueue) -> None:
        assert self.impl is not None
        self.taken.append(pq.mq)
        self.held_while_taking.append(self.impl.held())
        if OTHER not in self.group.members:
            self.group.members.append(OTHER)
            self.interrupted = True


def rebalance_impl(group: Group, joiner: JoinWhileTaking, orderly: bool = False) -> RebalanceImpl:
    impl = RebalanceImpl(cast(PullConsumer, group), cast(GroupCalls, group), OffsetStore(), allocate_averagely,
                         RebalanceSettings(ME, broadcasting=False, orderly=orderly, consume_from_first=True),
                         lambda: [TOPIC], joiner.on_added, interrupted=lambda: joiner.interrupted)
    joiner.impl = impl
    return impl


def test_a_pass_stops_taking_queues_when_a_member_joins_and_the_next_takes_only_its_share() -> None:
    group = Group([ME])
    joiner = JoinWhileTaking(group)
    impl = rebalance_impl(group, joiner)
    assert impl.rebalance() is False  # alone, it would take all four; it took one, then the join stopped it
    assert joiner.taken == QUEUES[:1]
    joiner.interrupted = False  # the loop runs the next pass at once
    assert impl.rebalance() is True
    mine = allocate_averagely(ME, QUEUES, [ME, OTHER])
    assert impl.held() == mine == QUEUES[:2]
    assert set(joiner.taken) == set(mine)  # never a queue of the new member's share


def test_held_shows_a_finished_pass_never_half_of_one() -> None:
    group = Group([ME, OTHER])
    joiner = JoinWhileTaking(group)
    impl = rebalance_impl(group, joiner)
    assert impl.rebalance() is True
    assert joiner.held_while_taking == [[], []]  # while the pass took its two queues, none showed
    assert impl.held() == QUEUES[:2]


def test_an_orderly_pass_that_stops_frees_the_leases_of_the_queues_it_did_not_take() -> None:
    group = Group([ME])
    joiner = JoinWhileTaking(group)
    impl = rebalance_impl(group, joiner, orderly=True)
    assert impl.rebalance() is False
    assert group.leased == set(joiner.taken) == set(QUEUES[:1])  # the other three were leased, then freed
    joiner.interrupted = False
    assert impl.rebalance() is True
    assert group.leased == set(impl.held()) == set(QUEUES[:2])


class RetryTopicRegistering(Group):
    """The group's retry topic as each broker registers it after the member's first heartbeat: broker-b later."""

    def __init__(self) -> None:
        super().__init__([ME])
        self.retry_brokers = ["broker-a"]

    def queues(self, topic: str) -> list[MessageQueue]:
        if topic == RETRY:
            return [MessageQueue(RETRY, broker, 0) for broker in self.retry_brokers]
        return list(QUEUES)


RETRY = retry_topic("rebalance-group")


def test_a_retry_route_missing_a_broker_of_the_topics_is_read_again_soon() -> None:
    # A route read before broker-b registered the retry topic: the pass is incomplete (the next comes in a second,
    # not the periodic 20 s), so retried messages stored on broker-b are consumed at once once it registers.
    group = RetryTopicRegistering()
    taken: list[MessageQueue] = []
    impl = RebalanceImpl(cast(PullConsumer, group), cast(GroupCalls, group), OffsetStore(), allocate_averagely,
                         RebalanceSettings(ME, broadcasting=False, orderly=False, consume_from_first=True),
                         lambda: [RETRY, TOPIC], lambda pq: taken.append(pq.mq))
    assert impl.rebalance() is False
    assert MessageQueue(RETRY, "broker-a", 0) in taken
    group.retry_brokers.append("broker-b")
    assert impl.rebalance() is True
    assert {mq for mq in taken if mq.topic == RETRY} == {MessageQueue(RETRY, b, 0) for b in ("broker-a", "broker-b")}


class CommittingGroup(Group):
    """The broker's committed offsets, as a reset leaves them and as the member's commits write them."""

    def __init__(self) -> None:
        super().__init__([ME])
        self.committed: dict[MessageQueue, int] = {}


class BrokerOffsets(OffsetStore):
    def __init__(self, group: CommittingGroup) -> None:
        super().__init__()
        self.group = group

    def read(self, mq: MessageQueue) -> int:
        return self.group.committed.get(mq, -1)

    def _write(self, mq: MessageQueue, offset: int) -> None:
        self.group.committed[mq] = offset


def test_a_reset_is_not_undone_by_a_call_finishing_while_its_queue_restarts() -> None:
    group = CommittingGroup()
    group.committed = dict.fromkeys(QUEUES, 0)
    offsets = BrokerOffsets(group)
    impl = RebalanceImpl(cast(PullConsumer, group), cast(GroupCalls, group), offsets, allocate_averagely,
                         RebalanceSettings(ME, broadcasting=False, orderly=False, consume_from_first=True),
                         lambda: [TOPIC], lambda pq: None)
    assert impl.rebalance() is True
    mq = QUEUES[0]
    pq = impl.process_queues[mq]
    assert pq.begin()  # a handler call runs on the queue
    offsets.update(pq, 256)
    offsets.persist_all()
    assert group.committed[mq] == 256
    group.committed[mq] = 0  # resetOffsetByTime on the broker; its notice restarts the queue
    restart = threading.Thread(target=impl.restart_queues, args=(TOPIC, mq.broker_name))
    restart.start()
    deadline = time.monotonic() + 10
    while not pq.dropped and time.monotonic() < deadline:  # the restart waits for the running call
        time.sleep(0.005)
    assert pq.dropped
    offsets.update(pq, 264)  # the call finishes with the old position ...
    offsets.persist_all()  # ... and the commit loop runs
    pq.end()
    restart.join(10)
    assert not restart.is_alive()
    assert group.committed[mq] == 0  # was 264: the reset undone
    assert impl.process_queues[mq] is not pq and offsets.read(mq) == 0


def committing_impl(group: CommittingGroup, offsets: OffsetStore, orderly: bool = False,
                    broadcasting: bool = False, consume_from_first: bool = True) -> RebalanceImpl:
    return RebalanceImpl(cast(PullConsumer, group), cast(GroupCalls, group), offsets, allocate_averagely,
                         RebalanceSettings(ME, broadcasting=broadcasting, orderly=orderly,
                                           consume_from_first=consume_from_first), lambda: [TOPIC], lambda pq: None)


def started(orderly: bool = False) -> tuple[CommittingGroup, BrokerOffsets, RebalanceImpl]:
    """A member alone in its group, every queue committed at 0, after its first pass."""
    group = CommittingGroup()
    group.committed = dict.fromkeys(QUEUES, 0)
    offsets = BrokerOffsets(group)
    impl = committing_impl(group, offsets, orderly=orderly)
    assert impl.rebalance() is True
    return group, offsets, impl


def test_a_reset_restarts_the_other_queues_of_the_broker_while_one_handler_is_slow() -> None:
    """Each queue's offset was forgotten only once the queue before it was waited for: while a slow handler held the
    first, the commit loop wrote the others' old positions over the reset, and they never replayed."""
    group, offsets, impl = started()
    slow, other = impl.process_queues[QUEUES[0]], impl.process_queues[QUEUES[1]]
    assert slow.begin()  # a handler call runs on queue 0
    offsets.update(other, 77)
    offsets.persist_all()
    group.committed.update({QUEUES[0]: 0, QUEUES[1]: 0})  # resetOffsetByTime on broker-a
    restart = threading.Thread(target=impl.restart_queues, args=(TOPIC, "broker-a", {0: 0, 1: 0}))
    restart.start()
    deadline = time.monotonic() + 10
    while not slow.dropped and time.monotonic() < deadline:
        time.sleep(0.005)
    offsets.persist_all()  # the commit loop runs while the restart waits for the slow call
    slow.end()
    restart.join(10)
    assert not restart.is_alive()
    assert group.committed[QUEUES[1]] == 0  # was 77: the reset undone
    assert impl.process_queues[QUEUES[1]] is not other and impl.process_queues[QUEUES[1]].next_offset == 0


def test_a_commit_of_the_old_position_landing_after_the_reset_is_written_over_by_the_notices_offsets() -> None:
    group, offsets, impl = started()
    offsets.update(impl.process_queues[QUEUES[1]], 514)
    group.committed[QUEUES[1]] = 3  # the broker's reset ...
    offsets.persist_all()  # ... and the member's commit, before its notice came
    assert group.committed[QUEUES[1]] == 514
    impl.restart_queues(TOPIC, "broker-a", {0: 0, 1: 3})
    assert group.committed[QUEUES[1]] == 3 and impl.process_queues[QUEUES[1]].next_offset == 3
    assert offsets.read(QUEUES[1]) == 3


class FullGroup(CommittingGroup):
    def max_offset(self, mq: MessageQueue) -> int:
        return 600


def test_a_broadcasting_member_restarts_at_the_reset_offsets_not_at_the_queue_end() -> None:
    """Its offsets are its own (in memory): restarted without them, it started at the end and skipped its backlog."""
    group = FullGroup()
    impl = committing_impl(group, OffsetStore(), broadcasting=True, consume_from_first=False)
    assert impl.rebalance() is True
    assert impl.process_queues[QUEUES[0]].next_offset == 600
    impl.restart_queues(TOPIC, "broker-a", {0: 0, 1: 0})
    assert [impl.process_queues[mq].next_offset for mq in QUEUES] == [0, 0, 600, 600]


def handler_call(pq: ProcessQueue) -> threading.Event:
    """A handler call running on ``pq`` on a pool thread of its own (a drop never waits for its caller's own call);
    setting the event returned ends it."""
    started, done = threading.Event(), threading.Event()

    def call() -> None:
        assert pq.begin()
        started.set()
        done.wait(30)
        pq.end()

    threading.Thread(target=call, daemon=True).start()
    assert started.wait(5)
    return done


def returned(pq: ProcessQueue, call: threading.Event) -> None:
    call.set()
    deadline = time.monotonic() + 5
    while pq.in_flight and time.monotonic() < deadline:
        time.sleep(0.005)


def test_an_orderly_queue_is_kept_with_its_lease_while_its_handler_runs_past_the_drop_wait(monkeypatch) -> None:
    """A member joined: the queue going to it was unlocked after 10 s although its handler still ran, and the new
    owner consumed the queue beside it, out of order. It is kept (lease renewed) until the handler returns."""
    monkeypatch.setattr(rebalance_impl_module, "DROP_WAIT_S", 0.2)
    group, _, impl = started(orderly=True)
    mq = QUEUES[2]  # the first of the joiner's share
    pq = impl.process_queues[mq]
    call = handler_call(pq)
    group.members.append(OTHER)
    assert impl.rebalance() is False  # again soon
    assert impl.process_queues[mq] is pq and mq in group.leased and QUEUES[3] not in group.leased
    impl.renew_leases()
    assert mq in group.leased
    returned(pq, call)
    assert impl.rebalance() is True
    assert mq not in impl.process_queues and mq not in group.leased
    group.members.remove(OTHER)
    assert impl.rebalance() is True and impl.process_queues[mq] is not pq


def test_a_slow_orderly_handler_holds_up_neither_the_queues_a_pass_adds_nor_the_passes_after_it(monkeypatch) -> None:
    """A member joined, this one gave up a queue whose handler still ran and got another: the pass waited on the
    handler before taking the new queue, and every pass after it waited as long again on the kept one, so the new
    queue went unconsumed for two waits or more (20 s with the real wait; the rebalance review). The new queue is
    taken first, and a kept queue is only looked at again."""
    monkeypatch.setattr(rebalance_impl_module, "DROP_WAIT_S", 0.5)
    group, _, impl = started(orderly=True)
    group.members.append(OTHER)
    assert impl.rebalance() is True
    assert impl.held() == QUEUES[:2]
    slow = impl.process_queues[QUEUES[0]]
    call = handler_call(slow)
    first = "10.0.0.0@1#0"  # sorts before ME: its share is the first two queues; ME's is now QUEUES[2]
    group.members.append(first)
    taken_at: list[float] = []
    impl.on_added = lambda pq: taken_at.append(time.monotonic())
    start = time.monotonic()
    assert impl.rebalance() is False  # the slow queue is kept, its lease too
    assert taken_at and taken_at[0] - start < 0.25  # QUEUES[2] taken before the wait, not after it
    assert QUEUES[2] in impl.process_queues and QUEUES[1] not in impl.process_queues
    assert impl.process_queues[QUEUES[0]] is slow and QUEUES[0] in group.leased
    start = time.monotonic()
    assert impl.rebalance() is False and time.monotonic() - start < 0.25  # looked at, not waited for again
    returned(slow, call)
    assert impl.rebalance() is True
    assert sorted(impl.process_queues) == [QUEUES[2]] and QUEUES[0] not in group.leased


def test_closing_waits_for_a_kept_queues_handler_and_commits_past_it(monkeypatch) -> None:
    """A queue kept for its slow handler by a pass was not waited for by the close after it: its offset was
    committed before the running message, and the member taking the queue next handled that message again (the
    diff review)."""
    monkeypatch.setattr(rebalance_impl_module, "DROP_WAIT_S", 0.5)
    group, _, impl = started(orderly=True)
    leaving = impl.process_queues[QUEUES[2]]
    call = handler_call(leaving)
    group.members.append(OTHER)  # QUEUES[2:] are OTHER's now
    assert impl.rebalance() is False and impl.process_queues[QUEUES[2]] is leaving  # kept
    threading.Timer(0.2, call.set).start()  # the handler returns while the member closes
    impl.drop_all()
    assert QUEUES[2] not in impl.process_queues and QUEUES[2] not in group.leased  # waited for, then released


def test_an_orderly_queue_restarted_by_a_reset_waits_for_its_running_handler(monkeypatch) -> None:
    monkeypatch.setattr(rebalance_impl_module, "DROP_WAIT_S", 0.2)
    group, _, impl = started(orderly=True)
    mq = QUEUES[0]
    pq = impl.process_queues[mq]
    call = handler_call(pq)
    impl.restart_queues(TOPIC, "broker-a", {0: 0, 1: 0})
    assert impl.process_queues[mq] is pq and pq.dropped and mq in group.leased  # no second process queue yet
    assert impl.process_queues[QUEUES[1]].next_offset == 0
    assert impl.rebalance() is False
    returned(pq, call)
    assert impl.rebalance() is True
    assert impl.process_queues[mq] is not pq and impl.process_queues[mq].next_offset == 0


def test_a_reset_start_is_used_by_the_pass_right_after_the_reset_only() -> None:
    """A reset queue that went to another member meanwhile starts, should it come back much later, at the group's
    committed offset by then, not at the reset's (that replayed everything since)."""
    group, _, impl = started()
    group.members.append(OTHER)  # broker-b's queues are OTHER's from the next pass on
    impl.restart_queues(TOPIC, "broker-b", {0: 5, 1: 5})
    assert QUEUES[2] not in impl.process_queues
    group.committed[QUEUES[2]] = 42  # OTHER consumed on
    group.members.remove(OTHER)
    assert impl.rebalance() is True
    assert impl.process_queues[QUEUES[2]].next_offset == 42


def test_an_orderly_queue_a_reset_restarted_and_the_next_pass_gave_away_is_unlocked() -> None:
    group = CommittingGroup()
    group.committed = dict.fromkeys(QUEUES, 0)
    impl = committing_impl(group, BrokerOffsets(group), orderly=True)
    assert impl.rebalance() is True and group.leased == set(QUEUES)
    group.members.append(OTHER)
    impl.restart_queues(TOPIC, "broker-b", {0: 5, 1: 5})
    assert group.leased == set(QUEUES[:2])  # OTHER may lock broker-b's queues at once, not after the lease


def test_reset_notices_of_one_static_topic_from_two_brokers_restart_the_queues_of_both() -> None:
    """Every broker leading some of a static topic's logic queues announces its own, under one (mock) broker name:
    the second notice replaced the first, and the first one's queues went on from their old positions."""
    group, offsets, impl = started()
    for mq in QUEUES[:2]:
        offsets.update(impl.process_queues[mq], 50)
    offsets.persist_all()
    impl.note_reset(TOPIC, "broker-a", {0: 3})
    impl.note_reset(TOPIC, "broker-a", {1: 4})
    impl.restart_reset_queues()
    assert [impl.process_queues[mq].next_offset for mq in QUEUES[:2]] == [3, 4]
    assert [group.committed[mq] for mq in QUEUES[:2]] == [3, 4]


def test_a_queue_given_away_with_a_reset_pending_is_released_without_its_old_position() -> None:
    """A pass that drops a queue whose reset notice is not yet acted on committed the old position over the reset,
    and the member taking the queue started there."""
    group, offsets, impl = started()
    offsets.update(impl.process_queues[QUEUES[2]], 90)
    offsets.persist_all()
    group.committed[QUEUES[2]] = 1  # the broker's reset, its notice on the way
    impl.note_reset(TOPIC, "broker-b", {0: 1, 1: 1})
    group.members.append(OTHER)  # ... and a pass giving broker-b's queues away runs first
    assert impl.rebalance() is True
    assert QUEUES[2] not in impl.process_queues and group.committed[QUEUES[2]] == 1  # was 90
    impl.restart_reset_queues()  # (none of them is this member's now)
    assert QUEUES[2] not in impl.process_queues


def test_a_deferred_orderly_restart_given_away_when_its_handler_returned_is_unlocked(monkeypatch) -> None:
    monkeypatch.setattr(rebalance_impl_module, "DROP_WAIT_S", 0.2)
    group, _, impl = started(orderly=True)
    mq = QUEUES[2]
    pq = impl.process_queues[mq]
    call = handler_call(pq)
    impl.restart_queues(TOPIC, "broker-b", {0: 0, 1: 0})
    assert impl.process_queues[mq] is pq and mq in group.leased
    group.members.append(OTHER)  # the queue is OTHER's by the time the handler returns
    returned(pq, call)
    impl.rebalance()
    assert mq not in impl.process_queues and mq not in group.leased  # it waited for the lease to expire


class Broadcast(Group):
    """A broadcasting member's view: no member list is read; ``gone`` brokers' queues are out of the route."""

    def __init__(self) -> None:
        super().__init__([ME])
        self.gone: set[str] = set()

    def queues(self, topic: str) -> list[MessageQueue]:
        return [mq for mq in QUEUES if mq.broker_name not in self.gone]

    def max_offset(self, mq: MessageQueue) -> int:
        return 100  # where a queue without a kept offset would start (consume_from_first=False)


def broadcasting_impl(group: Broadcast, offsets: OffsetStore, orderly: bool = False) -> RebalanceImpl:
    return RebalanceImpl(cast(PullConsumer, group), cast(GroupCalls, group), offsets, allocate_averagely,
                         RebalanceSettings(ME, broadcasting=True, orderly=orderly, consume_from_first=False),
                         lambda: [TOPIC], lambda pq: None)


def test_a_broadcasting_member_continues_a_queue_its_broker_dropped_for_a_while_where_it_was() -> None:
    """The queue's offset went with the drop: taken again, it started at the queue's end, and what was stored while
    its broker was away, and not yet consumed before, was lost (18 of 143 in the review's broker restart)."""
    group, offsets = Broadcast(), OffsetStore()
    impl = broadcasting_impl(group, offsets)
    assert impl.rebalance() is True and len(impl.process_queues) == 4
    mq = QUEUES[2]  # broker-b's
    impl.process_queues[mq].next_offset = 107  # pulled and handled up to there
    group.gone = {"broker-b"}
    impl.rebalance()
    assert mq not in impl.process_queues
    group.gone = set()
    impl.rebalance()
    assert impl.process_queues[mq].next_offset == 107


def test_broadcasting_orderly_members_take_no_lease() -> None:
    """Each broadcasting member consumes every queue: the first one's leases shut every other member out."""
    group = Broadcast()
    impl = broadcasting_impl(group, OffsetStore(), orderly=True)
    assert impl.rebalance() is True and len(impl.process_queues) == 4
    assert not group.leased
    assert all(pq.locked and pq.last_lock_s == float("inf") for pq in impl.process_queues.values())

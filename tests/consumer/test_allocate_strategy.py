"""Upstream's AllocateMessageQueueAveragely cases: contiguous shares, extras to the first members, idle members."""

from client.consumer.allocate_strategy import allocate_averagely
from common.message_queue import MessageQueue


def queues(n: int) -> list[MessageQueue]:
    return [MessageQueue("T", f"broker-{'ab'[i % 2]}", i // 2) for i in range(n)]


def shares(n_queues: int, n_members: int) -> list[list[MessageQueue]]:
    members = [f"c{i}" for i in range(n_members)]
    return [allocate_averagely(m, list(reversed(queues(n_queues))), list(reversed(members))) for m in members]


def test_eight_queues_three_members_get_three_three_two_contiguous():
    got = shares(8, 3)
    assert [len(s) for s in got] == [3, 3, 2]
    assert [q for share in got for q in share] == sorted(queues(8))


def test_every_queue_exactly_once_for_any_member_count():
    for n_queues in range(1, 17):
        for n_members in range(1, 10):
            got = shares(n_queues, n_members)
            assert sorted(q for share in got for q in share) == sorted(queues(n_queues))


def test_members_beyond_the_queue_count_stay_idle():
    got = shares(2, 4)
    assert [len(s) for s in got] == [1, 1, 0, 0]


def test_a_client_not_in_the_list_gets_nothing():
    assert allocate_averagely("stranger", queues(4), ["c0", "c1"]) == []

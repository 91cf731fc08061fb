"""PopService's decisions with a clock in hand and a reader that can fail: a message that cannot be read for a
moment (an older item's broker busy) stays owed, in flight or held back, and is handed out once readable; one
whose segment expired is dropped; a failure mid-pop leaves what is durable."""

import pytest

from broker.pop.pop_service import PopQuery, PopService
from broker.pop.pop_state_store import PopStateStore
from broker.store.get_message_result import GetMessageResult, GetMessageStatus
from common.message_codec import record_parts
from common.message_properties import PROPERTY_SHARDING_KEY, encode_properties

TOPIC = "T"


def record(offset: int, group: str = "") -> bytes:
    props = encode_properties({PROPERTY_SHARDING_KEY: group} if group else {})
    return b"".join(record_parts(TOPIC.encode(), 0, [f"m{offset}".encode()], [props], born_timestamp=1,
                                 born_host=bytes(8), queue_offset=offset))


class Reader:
    """A queue of records from offset ``first``; ``busy`` answers as a busy peer would (nothing now)."""

    def __init__(self, records: list[bytes], first: int = 0) -> None:
        self.records, self.first, self.busy = records, first, False
        self.busy_at: set[int] = set()  # offsets answered as busy (a read of them alone)

    def get_message(self, topic, queue_id, offset, max_msg_nums, max_total_bytes=0, tags_codes=None):
        end = self.first + len(self.records)
        if self.busy or offset >= end or (offset in self.busy_at and max_msg_nums == 1):
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, self.first, end)
        if offset < self.first:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, self.first, self.first, end)
        found = self.records[offset - self.first: offset - self.first + max_msg_nums]
        return GetMessageResult(GetMessageStatus.FOUND, offset + len(found), self.first, end, found)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def service(tmp_path, clock: Clock, dead: list) -> PopService:
    return PopService("broker-a", PopStateStore(tmp_path / "pop", sync=False),
                      lambda g, t, r, n: dead.append((r, n)), lambda *a: None, clock_ms=clock)


def query(reader: Reader, n: int = 32, fifo: bool = False, retries: int = 16) -> PopQuery:
    return PopQuery(reader, "g", TOPIC, [0], n, 1000, None, fifo, retries)


def offsets(outcome) -> list[int]:
    return [p.handle.queue_offset for p in outcome.popped]


def test_an_unreadable_in_flight_message_stays_owed_and_comes_back_once_readable(tmp_path):
    clock, dead = Clock(), []
    pop, reader = service(tmp_path, clock, dead), Reader([record(0)])
    assert offsets(pop.pop(query(reader), lambda q: 0)) == [0]
    clock.now += 2000
    reader.busy = True
    assert offsets(pop.pop(query(reader), lambda q: 0)) == []  # due, but cannot be read now: kept
    reader.busy = False
    again = pop.pop(query(reader), lambda q: 0)
    assert offsets(again) == [0] and again.popped[0].handle.reconsume_times == 1


def test_a_held_fifo_message_survives_an_unreadable_moment(tmp_path):
    clock, dead = Clock(), []
    pop, reader = service(tmp_path, clock, dead), Reader([record(0, "a"), record(1, "a")])
    first = pop.pop(query(reader, fifo=True), lambda q: 0)
    assert offsets(first) == [0]  # offset 1 is held behind it
    pop.ack("g", TOPIC, [first.popped[0].handle])
    reader.busy = True
    assert offsets(pop.pop(query(reader, fifo=True), lambda q: 0)) == []
    reader.busy = False
    assert offsets(pop.pop(query(reader, fifo=True), lambda q: 0)) == [1]


def test_a_fifo_message_unreadable_for_a_moment_holds_back_the_rest_of_its_group(tmp_path):
    """Its message group stays busy while it cannot be read: the next of the group was handed out before it."""
    clock, dead = Clock(), []
    pop = service(tmp_path, clock, dead)
    reader = Reader([record(0, "a"), record(1, "a"), record(2, "b")])
    assert offsets(pop.pop(query(reader, fifo=True), lambda q: 0)) == [0, 2]  # 1 is held behind 0
    clock.now += 2000  # neither was acked
    reader.busy_at = {0}
    assert offsets(pop.pop(query(reader, fifo=True), lambda q: 0)) == [2]  # not 1: 0 is owed first
    reader.busy_at = set()
    clock.now += 2000
    assert offsets(pop.pop(query(reader, fifo=True), lambda q: 0)) == [0, 2]


def test_a_message_whose_segment_expired_is_dropped_and_progress_moves_on(tmp_path):
    clock, dead = Clock(), []
    pop, reader = service(tmp_path, clock, dead), Reader([record(0), record(1)])
    assert offsets(pop.pop(query(reader, n=1), lambda q: 0)) == [0]
    clock.now += 2000
    reader.records, reader.first = [record(1)], 1  # offset 0 expired
    assert offsets(pop.pop(query(reader), lambda q: 0)) == [1]
    assert dead == []


def test_a_failed_dead_letter_leaves_the_message_owed(tmp_path):
    clock = Clock()

    def refuse(*_a) -> None:
        raise RuntimeError("disk full")

    pop = PopService("broker-a", PopStateStore(tmp_path / "pop", sync=False), refuse, lambda *a: None,
                     clock_ms=clock)
    reader = Reader([record(0)])
    assert offsets(pop.pop(query(reader, retries=0), lambda q: 0)) == [0]
    clock.now += 2000
    with pytest.raises(RuntimeError, match="disk full"):
        pop.pop(query(reader, retries=0), lambda q: 0)
    assert pop.in_flight_count("g", TOPIC) == 1  # still owed: dead-lettering is tried again


def test_a_queue_led_again_is_forgotten_and_restarts_from_the_committed_offset(tmp_path):
    """A→B→A: what this broker kept for the logic queue (scan offset, in-flight) is stale once it leads it again;
    the next pop starts where the group's committed offset says, durably (the state store too)."""
    clock, dead = Clock(), []
    pop, reader = service(tmp_path, clock, dead), Reader([record(o) for o in range(10)])
    assert offsets(pop.pop(query(reader, n=3), lambda q: 0)) == [0, 1, 2]  # 0..2 in flight, scan at 3
    pop.forget_queues(TOPIC, [0], "test")
    assert offsets(pop.pop(query(reader, n=2), lambda q: 6)) == [6, 7]  # committed by the other leader: 6
    pop.db.close()
    reopened = service(tmp_path, clock, dead)  # what was forgotten stays forgotten after a restart
    clock.now += 5000  # 6, 7 due again; 0..2 are gone for good
    assert offsets(reopened.pop(query(reader, n=32), lambda q: 0)) == [6, 7, 8, 9]


def test_a_forget_the_state_store_refused_is_done_again_by_a_retry(tmp_path, monkeypatch):
    """The forget is written before the states go from memory: refused (a full disk), they stay, and a retry
    forgets them durably. Gone from memory first, a retry found nothing to forget, and a restart brought the stale
    scan offset and in-flight messages back."""
    clock, dead = Clock(), []
    pop, reader = service(tmp_path, clock, dead), Reader([record(o) for o in range(10)])
    assert offsets(pop.pop(query(reader, n=3), lambda q: 0)) == [0, 1, 2]
    write = pop.db.write

    def refused(change):
        raise Exception("IO error: No space left on device: While appending to file: pop/000004.log")

    monkeypatch.setattr(pop.db, "write", refused)
    with pytest.raises(Exception, match="No space left on device"):
        pop.forget_queues(TOPIC, [0], "test")
    monkeypatch.setattr(pop.db, "write", write)
    pop.forget_queues(TOPIC, [0], "test")  # the retry
    pop.db.close()
    reopened = service(tmp_path, clock, dead)
    clock.now += 5000
    assert offsets(reopened.pop(query(reader, n=2), lambda q: 6)) == [6, 7]  # from the committed offset


def test_a_message_released_undelivered_keeps_its_count_and_is_not_dead_lettered(tmp_path):
    """mqproxy releases a receive whose answer it could not write (the call ended first): counted as deliveries,
    a client whose receives kept failing had good messages dead-lettered in about a second (Node.js client review).
    A release that is no such (``undelivered`` off) still counts, as any change of invisible time."""
    clock, dead = Clock(), []
    pop, reader = service(tmp_path, clock, dead), Reader([record(0), record(1)])
    for _ in range(5):
        got = pop.pop(query(reader, retries=2), lambda q: 0).popped
        assert [(p.handle.queue_offset, p.handle.reconsume_times) for p in got] == [(0, 0), (1, 0)]
        for p in got:
            pop.change_invisible_time("g", TOPIC, p.handle, 0, undelivered=True)
    assert dead == []
    got = pop.pop(query(reader, retries=2), lambda q: 0).popped
    pop.change_invisible_time("g", TOPIC, got[0].handle, 0)
    again = pop.pop(query(reader, retries=2), lambda q: 0).popped
    assert [(p.handle.queue_offset, p.handle.reconsume_times) for p in again][:1] == [(0, 1)]

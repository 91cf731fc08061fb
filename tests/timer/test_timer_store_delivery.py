"""The timer store in a real message store's dispatch chain and its delivery with an injected clock: timers kept
by due time, idempotent replay (delivered timers never come back), delivery in due order and never early, drops,
refusals kept for later, the delivery thread's wake-up, both flush modes."""

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from broker.store.config import FlushDiskType, StoreType
from broker.store.message_store import MessageStore
from broker.store.put_message_result import PutMessageResult, PutMessageStatus
from broker.timer import timer_delivery_service, timer_message_store
from broker.timer.clock_step import ClockStepWatch
from broker.timer.delivery_route import DeliveryTarget, Forwarded
from broker.timer.timer_delivery_service import wall_clock_ms
from broker.timer.timer_message_store import DELETIONS_FROM_KEY, due_of_key, timer_key
from common.message import MessageExt
from common.message_codec import decode_record
from common.message_properties import encode_properties
from common.timer_topic import TIMER_QUEUE_ID, TIMER_TOPIC
from common.wire_batch import WireBatch
from tests.cluster import wait_until
from tests.disk.rocksdb_refusal import RefusingDb, rocksdb_disk_full
from tests.store.conftest import store_config
from tests.timer.timer_node import NOW, ROUTER, Node, bodies, replayed_whole, start


# -- the store -------------------------------------------------------------------------------------------
def test_timers_are_kept_by_due_time_with_their_records(tmp_path: Path, nodes: list[Node]):
    node = start(nodes, tmp_path)
    offsets = node.send([NOW + 300, NOW + 100, NOW + 200])
    node.store.put_messages("Other", 0, [b"not a timer"], [b""])
    node.send([NOW + 100])
    assert node.timers.pending == 4 and node.timers.first_due() == NOW + 100
    taken = node.timers.take_due(NOW + 1000, 10)
    assert [due_of_key(k) for k, _ in taken] == [NOW + 100, NOW + 100, NOW + 200, NOW + 300]
    assert decode_record(taken[2][1]).physical_offset == offsets[2]  # the record's bytes, copied
    assert node.timers.take_due(NOW + 99, 10) == []


def test_a_pass_takes_timers_up_to_a_byte_cap_and_the_next_takes_the_rest(tmp_path: Path, nodes: list[Node],
                                                                          monkeypatch: pytest.MonkeyPatch):
    """A pass took up to 1,024 timers whatever their size, held about three times over: 400 delayed messages of
    4 MiB due together took a broker to 5 GB (the timers review). Past the byte cap it takes no more (at least one)."""
    node = start(nodes, tmp_path)
    node.send([NOW + 1, NOW + 2, NOW + 3])
    first = node.timers.take_due(NOW + 10, 10, max_bytes=1)
    assert [due_of_key(k) for k, _ in first] == [NOW + 1]
    assert [due_of_key(k) for k, _ in node.timers.take_due(NOW + 10, 10)] == [NOW + 2, NOW + 3]  # after the first
    node.timers.give_back(first[0][0])
    monkeypatch.setattr(timer_delivery_service, "PASS_MAX_BYTES", 1)
    node.now = NOW + 10
    assert [node.deliver() for _ in range(4)] == [1, 1, 1, 0]
    assert [m.body for m in node.delivered()] == [b"m0", b"m1", b"m2"]


def test_replay_skips_what_was_stored_and_never_brings_back_delivered_timers(tmp_path: Path):
    node = Node(tmp_path)
    node.send([NOW + 10, NOW + 20, NOW + 30])
    node.now = NOW + 20
    assert node.deliver() == 2
    node.send([NOW + 40])
    node.stop()
    # the consume queue forgets everything: the whole commitlog is dispatched again on the next start
    shutil.rmtree(tmp_path / "store" / "consumequeue")
    again = Node(tmp_path)
    try:
        assert again.store.reput.reput_from_offset == again.store.commit_log.max_offset()
        assert again.timers.pending == 2 and again.pending_dues() == [NOW + 30, NOW + 40]
        assert bodies(again.delivered()) == [b"m0", b"m1"]  # replayed into the consume queue, not re-delivered
    finally:
        again.stop()


def test_a_store_replaying_the_whole_commitlog_does_not_deliver_again(tmp_path: Path, nodes: list[Node]):
    """What a slave's timer store sees: every timer its master stored, and the markers of those it delivered (or
    dropped): once promoted it delivers only the rest."""
    node = Node(tmp_path, queue_exists=lambda topic, queue_id: topic != "Gone")
    node.send([NOW + 10, NOW + 20, NOW + 30])
    node.send([NOW + 15], topic="Gone")
    node.now = NOW + 20
    assert node.deliver() == 3 and node.delivery.dropped == 1
    node.stop()
    again = replayed_whole(nodes, tmp_path)
    assert again.timers.pending == 1 and again.timers.first_due() == NOW + 30
    again.now = NOW + 1000
    assert again.deliver() == 1 and bodies(again.delivered()) == [b"m0", b"m1", b"m2"]


def test_markers_of_a_large_batch_fit_maxmessagesize(tmp_path: Path, nodes: list[Node]):
    node = Node(tmp_path, max_message_size=4096)  # 256 keys a marker record
    node.send([NOW + i for i in range(300)])
    node.now = NOW + 1000
    assert node.deliver() == 300 and node.timers.pending == 0
    node.stop()
    assert replayed_whole(nodes, tmp_path).timers.pending == 0


def test_markers_fit_the_commitlog_segment(tmp_path: Path, nodes: list[Node]):
    node = start(nodes, tmp_path)  # 64 KiB segments: one marker record holds about 4,000 keys
    node.delivery.batch_size = 5000
    node.send([NOW + i for i in range(5000)])
    node.now = NOW + 10_000
    assert node.deliver() == 5000 and node.timers.pending == 0
    node.stop()
    assert replayed_whole(nodes, tmp_path).timers.pending == 0


class RefusesMarkers:
    """The store refusing the timer topic's writes between a delivery's puts and its marker (a lease lost, a disk
    filled by the delivery itself)."""

    def __init__(self, store: MessageStore) -> None:
        self.store, self.store_host = store, store.store_host
        self.config, self.commit_log = store.config, store.commit_log

    def put_wire_batch(self, batch: WireBatch, *, wait_flushed: bool = True,
                       admit: Callable[[], bool] | None = None) -> PutMessageResult:
        if batch.topic == TIMER_TOPIC.encode():
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, "fenced")
        return self.store.put_wire_batch(batch, wait_flushed=wait_flushed, admit=admit)

    def wait_flushed(self, offset: int) -> PutMessageStatus:
        return self.store.wait_flushed(offset)


def test_a_refused_marker_goes_with_the_next_one(tmp_path: Path, nodes: list[Node],
                                                 caplog: pytest.LogCaptureFixture):
    node = Node(tmp_path)
    node.send([NOW + 1, NOW + 2])
    node.delivery.store = RefusesMarkers(node.store)
    node.now = NOW + 10
    with caplog.at_level(logging.WARNING):
        assert node.deliver() == 2 and node.timers.pending == 0
    assert "timer_marker_refused count=2" in caplog.text
    node.delivery.store = node.store
    node.send([NOW + 3])
    assert node.deliver() == 1
    node.stop()
    assert replayed_whole(nodes, tmp_path).timers.pending == 0


def test_checkpoint_moves_with_timers_and_on_flush(tmp_path: Path, nodes: list[Node]):
    node = start(nodes, tmp_path)
    node.send([NOW])
    stored = node.timers._stored
    assert stored == node.store.commit_log.max_offset()
    result = node.store.put_messages("Other", 0, [b"x"], [b""])
    assert node.store.wait_dispatched(result.append.end_offset)
    assert node.timers._stored == stored  # no write for other topics' records ...
    node.timers.flush()  # ... until a flush moves the mark (and syncs the WAL)
    assert node.timers._stored == node.timers.checkpoint() == result.append.end_offset


def test_a_timer_write_the_disk_refused_is_replayed_after_a_restart_even_if_a_flush_came_between(tmp_path: Path):
    """The dispatch of a timer fails (its write batch refused: the store fail-stops), and the dispatcher flush
    service goes on. That flush must not move the checkpoint past the timer that was never written: a restart
    replays from the checkpoint, and the acknowledged delayed message would be gone."""
    node = Node(tmp_path)
    refusing = RefusingDb(node.timers._db, "write", times=1)  # the timer's batch
    node.timers._db = refusing  # type: ignore[assignment]
    props = ROUTER.timer_properties(encode_properties({"UNIQ_KEY": "m0", "DELAY": "1"}), "Real", 1, NOW + 60_000)
    put = node.store.put_messages(TIMER_TOPIC, TIMER_QUEUE_ID, [b"m0"], [props], born_timestamp=NOW,
                                  born_host="10.1.2.3:99")
    assert put.ok  # acknowledged: its dispatch comes after
    wait_until(lambda: node.store.running_flags.fail_stop_reason is not None,
               what="the store to fail-stop on the refused write")
    assert node.timers.pending == 0
    node.timers.flush()  # the flush service's next pass, the disk writable again
    node.store.shutdown()
    node.timers._db = refusing.db  # type: ignore[assignment]
    node.timers.close()
    again = Node(tmp_path)
    try:
        assert again.timers.pending == 1
        assert again.pending_dues() == [NOW + 60_000]
    finally:
        again.stop()


def test_timers_need_no_clean_close(tmp_path: Path):
    """The timer store dropped without close or flush still has every timer (the WAL is on). A process kill is
    tests/integration/test_delayed_messages.py's."""
    node = Node(tmp_path)
    node.send([NOW + i for i in range(100)])
    node.store.shutdown()  # the commitlog's own stop; the timer store is dropped without close or flush
    node.timers._db = None
    again = Node(tmp_path)
    try:
        assert again.timers.pending == 100
    finally:
        again.stop()


def test_a_new_timer_store_on_an_old_store_starts_at_its_flushed_end(tmp_path: Path):
    """A store from before delayed messages is not replayed whole for a timer store that cannot need it."""
    old = MessageStore(store_config(tmp_path / "store"))
    old.start()
    for _ in range(20):
        assert old.put_messages("Old", 0, [b"x" * 1000] * 10, [b""] * 10).ok
    old.shutdown()
    node = Node(tmp_path)
    try:
        end = node.store.commit_log.max_offset()
        assert node.timers.checkpoint() == end and node.timers.pending == 0
        assert node.store.reput.reput_from_offset == end
    finally:
        node.stop()


def test_a_pending_timer_outlives_its_commitlog_segment(tmp_path: Path, nodes: list[Node]):
    node = start(nodes, tmp_path, file_reserved_time_hours=0)  # every sealed segment has expired
    (offset,) = node.send([NOW + 50])
    for _ in range(20):  # 160 KB of other messages: the 64 KiB segment holding the timer record is sealed
        assert node.store.put_messages("Other", 0, [b"x" * 8000], [b""]).ok
    assert node.store.wait_dispatched(node.store.commit_log.max_offset())
    assert node.store.delete_expired_files() == 0  # the timer store's durable checkpoint is still below it
    node.timers.flush()
    assert node.store.delete_expired_files() > 0
    assert node.store.commit_log.min_offset() > offset and node.store.commit_log.read_record(offset) is None
    node.now = NOW + 50
    assert node.deliver() == 1 and bodies(node.delivered()) == [b"m0"]


# -- delivery ----------------------------------------------------------------------------------------------
def test_delivery_in_due_order_never_early(tmp_path: Path, nodes: list[Node]):
    node = start(nodes, tmp_path)
    node.send([NOW + 300, NOW + 100, NOW + 200, NOW + 100])  # m0..m3
    node.now = NOW + 99
    assert node.deliver() == 0 and node.delivered() == []
    node.now = NOW + 100
    assert node.deliver() == 2
    assert bodies(node.delivered()) == [b"m1", b"m3"]  # equal due times: in commitlog order
    node.now = NOW + 1000
    assert node.deliver() == 2
    delivered = node.delivered()
    assert bodies(delivered) == [b"m1", b"m3", b"m2", b"m0"]
    assert node.timers.pending == 0 and node.delivery.delivered == 4
    m = delivered[0]
    assert (m.topic, m.queue_id, m.born_timestamp, m.born_host, m.flag) == ("Real", 1, NOW - 5, "10.1.2.3:99", 5)
    assert m.properties == {"UNIQ_KEY": "m1"}  # no DELAY, REAL_TOPIC, REAL_QID, TIMER_OUT_MS
    assert node.store.query_message("Real", "m1")[0].body == b"m1"  # indexed under its real topic


def test_level_timers_a_backward_clock_step_left_late_are_due_their_delay_from_the_step(
        tmp_path: Path, nodes: list[Node], caplog: pytest.LogCaptureFixture):
    """A level is stored as a due time by the clock at the send: after the clock stepped back an hour, level timers
    sent before waited that hour more. Each is due its level's delay from when the step was seen (never early: it
    was sent before), once, and a pass takes them within its byte cap; a time the producer gave stays due when it
    says."""
    node = start(nodes, tmp_path)
    node.now = NOW
    node.delivery.steps = ClockStepWatch(node.timers, ROUTER, NOW)
    ten_s = ROUTER.delay_of_level(3)
    node.send([NOW + ten_s] * 3, properties={"DELAY": "3"})  # m0..m2: sent now with level 3
    node.send([NOW + ten_s], properties={"TIMER_DELIVER_MS": str(NOW + ten_s)})  # m3: a time
    assert node.deliver() == 0
    stepped = NOW - 3_600_000  # the clock stepped back an hour
    node.now = stepped
    with caplog.at_level(logging.WARNING):
        assert node.deliver() == 0
    assert "timer_clock_stepped_back by_ms=3600000 level_timers_corrected=3" in caplog.text
    node.now = stepped + ten_s - 1
    assert node.deliver() == 0  # not before their delay
    node.now = stepped + ten_s
    node.delivery.batch_size = 2
    assert [node.deliver(), node.deliver(), node.deliver()] == [2, 1, 0]  # within a pass's room
    assert bodies(node.delivered()) == [b"m0", b"m1", b"m2"]
    node.now = NOW + ten_s
    assert node.deliver() == 1 and bodies(node.delivered()) == [b"m0", b"m1", b"m2", b"m3"]  # once each


def test_delivery_takes_a_batch_at_a_time_and_groups_by_queue(tmp_path: Path, nodes: list[Node]):
    node = start(nodes, tmp_path)
    node.delivery.batch_size = 3
    node.send([NOW + i for i in range(4)], queue_id=0)
    node.send([NOW + 10 + i for i in range(3)], topic="Second", queue_id=2)
    node.now = NOW + 100
    assert [node.deliver() for _ in range(4)] == [3, 3, 1, 0]
    assert bodies(node.delivered(queue_id=0)) == [b"m0", b"m1", b"m2", b"m3"]
    assert bodies(node.delivered("Second", 2)) == [b"m4", b"m5", b"m6"]


def test_a_timer_dispatched_below_the_scan_floor_is_found(tmp_path: Path, nodes: list[Node]):
    node = start(nodes, tmp_path)
    node.send([NOW + 10, NOW + 500])
    node.now = NOW + 100
    assert node.deliver() == 1
    node.send([NOW + 50])  # due before where the last scan ended (a time in the past at send)
    assert node.timers.first_due() == NOW + 50
    assert node.deliver() == 1 and bodies(node.delivered()) == [b"m0", b"m2"]


def test_timers_of_a_gone_topic_are_dropped_with_a_warning(tmp_path: Path, nodes: list[Node],
                                                           caplog: pytest.LogCaptureFixture):
    node = start(nodes, tmp_path, queue_exists=lambda topic, queue_id: topic != "Gone")
    node.send([NOW, NOW], topic="Gone", queue_id=0)
    node.send([NOW])
    with caplog.at_level(logging.WARNING):
        assert node.deliver() == 3
    assert "timer_message_dropped topic=Gone queue_id=0 count=2" in caplog.text
    assert node.delivery.dropped == 2 and node.delivery.delivered == 1 and node.timers.pending == 0
    assert bodies(node.delivered()) == [b"m2"]


def test_a_store_that_refuses_writes_keeps_the_timers(tmp_path: Path, nodes: list[Node],
                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(timer_delivery_service, "RETRY_PAUSE_S", 0)
    node = start(nodes, tmp_path)
    refuse = [True]
    put_wire_batch = node.store.put_wire_batch

    def put(batch: WireBatch, *, wait_flushed: bool = True,
            admit: Callable[[], bool] | None = None) -> PutMessageResult:
        if refuse[0]:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, "disk full")
        return put_wire_batch(batch, wait_flushed=wait_flushed, admit=admit)

    monkeypatch.setattr(node.store, "put_wire_batch", put)
    node.send([NOW, NOW + 1])
    node.now = NOW + 10
    assert node.deliver() == 2
    assert node.timers.pending == 2 and node.delivered() == []
    refuse[0] = False
    assert node.deliver() == 2  # taken again: the floor went back to them
    assert bodies(node.delivered()) == [b"m0", b"m1"] and node.timers.pending == 0


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
@pytest.mark.parametrize("store_type", list(StoreType))
def test_the_delivery_thread_wakes_for_an_earlier_timer(tmp_path: Path, nodes: list[Node], flush: FlushDiskType,
                                                        store_type: StoreType):
    node = start(nodes, tmp_path, flush_disk_type=flush, store_type=store_type)
    node.delivery.clock_ms = wall_clock_ms
    node.delivery.max_sleep_s = 30  # it sleeps towards the far timer: only the dispatch of the near one wakes it
    node.send([wall_clock_ms() + 60_000])
    node.delivery.start()
    time.sleep(0.05)
    due = wall_clock_ms() + 200
    node.send([due])
    deadline = time.monotonic() + 5
    while not node.delivered() and time.monotonic() < deadline:
        time.sleep(0.01)
    delivered = node.delivered()
    assert bodies(delivered) == [b"m1"]
    assert delivered[0].store_timestamp >= due  # never early
    assert delivered[0].store_timestamp - due < 1000


@pytest.mark.parametrize(("flushed", "kept"), [(PutMessageStatus.FLUSH_DISK_TIMEOUT, False),
                                               (PutMessageStatus.SERVICE_NOT_AVAILABLE, True)])
def test_a_failed_flush_keeps_the_timers_a_slow_one_does_not(tmp_path: Path, nodes: list[Node],
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              flushed: PutMessageStatus, kept: bool):
    """A timeout is a send's FLUSH_DISK_TIMEOUT (stored, not yet on disk); a failed fsync fail-stops the store and
    may have lost the put: the timers stay, to be delivered after the restart."""
    monkeypatch.setattr(timer_delivery_service, "RETRY_PAUSE_S", 0)
    node = start(nodes, tmp_path)
    monkeypatch.setattr(node.store, "wait_flushed", lambda offset: flushed)
    node.send([NOW, NOW + 1])
    node.now = NOW + 10
    assert node.deliver() == 2
    assert node.timers.pending == (2 if kept else 0) and node.delivery.delivered == (0 if kept else 2)


def test_a_put_that_raises_leaves_the_timers_to_be_taken_again(tmp_path: Path, nodes: list[Node],
                                                                monkeypatch: pytest.MonkeyPatch):
    node = start(nodes, tmp_path)
    node.send([NOW, NOW + 1])
    node.now = NOW + 10
    put_wire_batch = node.store.put_wire_batch
    monkeypatch.setattr(node.store, "put_wire_batch", lambda batch, wait_flushed=True, admit=None: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        node.deliver()
    monkeypatch.setattr(node.store, "put_wire_batch", put_wire_batch)
    assert node.deliver() == 2 and bodies(node.delivered()) == [b"m0", b"m1"]


def test_a_pass_that_raises_part_way_settles_what_it_put_and_hands_back_the_rest(tmp_path: Path, nodes: list[Node],
                                                                                 monkeypatch: pytest.MonkeyPatch):
    """Queue 1's put went through, queue 2's raised: queue 1's timer is removed (not put again when an earlier
    timer lowers the scan floor), queue 2's and queue 3's (not tried yet) are taken by the next pass."""
    node = start(nodes, tmp_path)
    node.send([NOW + 1], queue_id=1)
    node.send([NOW + 2], queue_id=2)
    node.send([NOW + 3], queue_id=3)
    node.now = NOW + 10
    put_wire_batch = node.store.put_wire_batch

    def put_failing_queue_2(batch: WireBatch, *, wait_flushed: bool = True,
                            admit: Callable[[], bool] | None = None) -> PutMessageResult:
        if batch.topic == b"Real" and batch.queue_id == 2:
            raise RuntimeError("injected")
        return put_wire_batch(batch, wait_flushed=wait_flushed, admit=admit)

    monkeypatch.setattr(node.store, "put_wire_batch", put_failing_queue_2)
    with pytest.raises(RuntimeError, match="injected"):
        node.deliver()
    assert node.delivery.delivered == 1 and node.timers.pending == 2
    monkeypatch.setattr(node.store, "put_wire_batch", put_wire_batch)
    node.now += 1000
    assert node.deliver() == 2 and node.timers.pending == 0
    node.send([NOW - 5], queue_id=4)  # due earlier than all of them: lowers the scan floor
    assert node.deliver() == 1
    assert [bodies(node.delivered(queue_id=q)) for q in (1, 2, 3, 4)] == [[b"m0"], [b"m1"], [b"m2"], [b"m3"]]
    node.stop()
    assert replayed_whole(nodes, tmp_path).timers.pending == 0  # each marked: a promoted slave delivers none again


def test_a_topic_deleted_between_the_check_and_the_put_drops_the_message(tmp_path: Path, nodes: list[Node],
                                                                         caplog: pytest.LogCaptureFixture):
    """deleteTopic lands right after the delivery saw the topic: the put, admitted under the commitlog's lock,
    is refused, so the topic made again under the name does not start with the old message."""
    topics, checks, box = {"Real"}, [0], []

    def queue_exists(topic: str, queue_id: int) -> bool:
        checks[0] += 1
        if checks[0] == 1:  # the delivery's check (outside the lock) says yes; deleteTopic lands right after it
            assert box[0].store.delete_topic(topic) is None  # its deletion record, then its config goes
            topics.discard(topic)
            return True
        return topic in topics

    node = start(nodes, tmp_path, queue_exists=queue_exists)
    box.append(node)
    node.send([NOW - 1])
    with caplog.at_level(logging.WARNING):
        assert node.deliver() == 1
    assert "timer_message_dropped topic=Real queue_id=1 count=1" in caplog.text and "deleted while" in caplog.text
    assert node.delivery.dropped == 1 and node.delivery.delivered == 0 and node.timers.pending == 0
    topics.add("Real")  # made again: its first message has queue offset 0
    assert node.store.put_messages("Real", 1, [b"new"], [b""]).queue_offset == 0
    assert [(m.queue_offset, m.body) for m in node.delivered()] == [(0, b"new")]


class MovedQueueRoute:
    """Queue 1 of "Real" moved to broker-b as logic queue 0: its messages are forwarded, the first ``refusals``
    forwards refused; every other queue is delivered here."""

    def __init__(self, refusals: int = 0, too_large: bytes = b"") -> None:
        self.refusals = refusals
        self.too_large = too_large  # the body the leader refuses for good (over its maxMessageSize)
        self.forwarded: list[tuple[DeliveryTarget, list[MessageExt]]] = []

    def target(self, topic: str, queue_id: int, logic_queue_id: int | None) -> DeliveryTarget:
        return DeliveryTarget(0, "broker-b") if (topic, queue_id) == ("Real", 1) else DeliveryTarget(queue_id)

    def forward(self, target: DeliveryTarget, topic: str, records: list[bytes]) -> Forwarded:
        if self.refusals:
            self.refusals -= 1
            return Forwarded(0, "broker-b", "broker broker-b answered NOT_LEADER_FOR_QUEUE")
        messages = [decode_record(r) for r in records]
        self.forwarded.append((target, [m for m in messages if m.body != self.too_large]))
        dropped = sum(m.body == self.too_large for m in messages)
        return Forwarded(len(records), "broker-b", None, dropped, "message body exceeds maxMessageSize")


def test_messages_of_a_moved_queue_are_forwarded_and_kept_while_refused(tmp_path: Path, nodes: list[Node],
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="broker.timer.timer_delivery_service")
    monkeypatch.setattr(timer_delivery_service, "RETRY_PAUSE_S", 0)
    node = start(nodes, tmp_path)
    route = node.delivery.route = MovedQueueRoute(refusals=2)
    node.send([NOW, NOW + 1], properties={"KEYS": "k"})
    node.send([NOW + 2], queue_id=2)
    node.now = NOW + 10
    assert node.deliver() == 3  # queue 2 here; queue 1 refused by its leader: kept
    assert bodies(node.delivered(queue_id=2)) == [b"m2"] and node.timers.pending == 2
    assert node.deliver() == 2 and node.timers.pending == 2  # refused again: logged once
    assert node.deliver() == 2 and node.timers.pending == 0
    assert node.delivered() == [] and node.delivery.delivered == 3  # nothing put into the old queue here
    [(target, sent)] = route.forwarded
    assert target == DeliveryTarget(0, "broker-b") and bodies(sent) == [b"m0", b"m1"]
    assert sent[0].properties == {"UNIQ_KEY": "m0", "KEYS": "k"} and sent[0].born_timestamp == NOW - 5
    refused = [r for r in caplog.records if "timer_forward_refused" in r.getMessage()]
    assert len(refused) == 1 and "leader=broker-b stored=0 waiting=2" in refused[0].getMessage()
    [waiting] = [r.getMessage() for r in caplog.records if "timer_delivery_refused" in r.getMessage()]
    assert "waiting_store=0 waiting_leader=2: a logic queue's leader takes none now" in waiting
    assert any("timer_forwarded topic=Real logic_queue=0 leader=broker-b count=2" in r.getMessage()
               for r in caplog.records)


def test_a_full_disk_failing_every_delivery_pass_is_one_log_line_and_delivery_resumes(
        tmp_path: Path, nodes: list[Node], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """The timer store's RocksDB refusing on a full disk fails every pass: logged once, on one line (the disk's
    reason, not a bug's traceback), and what was due is delivered once the disk takes writes again."""
    node = start(nodes, tmp_path)
    node.send([NOW - 1])
    monkeypatch.setattr(timer_delivery_service, "RETRY_PAUSE_S", 0.01)
    take_due = node.timers.take_due
    refused, disk_full = [0], [True]

    def take_due_unless_full(now_ms: int, limit: int, max_bytes: int | None = None) -> list:
        if not disk_full[0]:
            return take_due(now_ms, limit, max_bytes)
        refused[0] += 1
        raise rocksdb_disk_full("timer/000009.log")

    monkeypatch.setattr(node.timers, "take_due", take_due_unless_full)
    caplog.set_level(logging.ERROR, logger=timer_delivery_service.__name__)
    node.delivery.start()
    wait_until(lambda: refused[0] >= 5, timeout=10, interval=0.01, what="five refused delivery passes")
    failures = [r for r in caplog.records if "timer_delivery_failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is None, [r.getMessage() for r in failures]
    assert "No space left on device" in failures[0].getMessage()

    disk_full[0] = False  # the disk has room again: the next pass delivers
    wait_until(node.delivered, timeout=10, interval=0.01, what="the due message delivered")
    assert bodies(node.delivered()) == [b"m0"]


def test_timers_recorded_before_their_topic_s_deletion_are_dropped_and_later_ones_delivered(
        tmp_path: Path, nodes: list[Node]):
    """The timer store notes each deleteTopic record dispatch reaches: a timer recorded before it was for the topic
    that is gone, and must not start one made again under the name (the delivery only asked whether a config exists,
    which a topic made again has); one recorded after it is the new topic's. The note survives a restart."""
    node = start(nodes, tmp_path)
    node.send([NOW + 10], topic="Again")
    assert node.store.delete_topic("Again") is None
    node.send([NOW + 20], topic="Again")
    node.stop()
    again = start(nodes, tmp_path)
    again.now = NOW + 100
    assert again.deliver() == 2 and again.delivery.dropped == 1
    assert bodies(again.delivered(topic="Again")) == [b"m1"]


def test_a_topic_with_no_config_here_never_seen_deleted_is_delivered_to(tmp_path: Path, nodes: list[Node]):
    """A replica promoted before it copied a topic its master made in its last seconds holds the topic's timers
    (replicated with the commitlog) but not its config: the messages were acknowledged, so they are delivered (they
    were dropped as the messages of a deleted topic). A configured topic that lost the queue still drops them."""
    node = start(nodes, tmp_path, queue_exists=lambda topic, queue_id: topic == "Known" and queue_id == 0)
    node.delivery.topic_configured = lambda topic: topic == "Known"
    node.send([NOW + 10], topic="BornLate")
    node.send([NOW + 10], topic="Known", queue_id=3)
    node.now = NOW + 100
    assert node.deliver() == 2 and node.delivery.dropped == 1
    assert bodies(node.delivered(topic="BornLate")) == [b"m0"]


def test_a_store_of_a_release_that_noted_no_deletions_drops_unconfigured_topics_older_timers(
        tmp_path: Path, nodes: list[Node]):
    """A timer store from before deletions were noted knows none before its checkpoint: a timer recorded then for a
    topic with no config here may be a deleted topic's, and is dropped as that release did (it was delivered into
    the deleted topic after the upgrade). One recorded after the upgrade is delivered."""
    node = start(nodes, tmp_path, queue_exists=lambda topic, queue_id: False)
    node.delivery.topic_configured = lambda topic: False
    node.send([NOW + 10], topic="Gone")
    node.timers.flush()
    node.stop()
    db = Rdict(str(tmp_path / "timer"), options=Options(raw_mode=True))  # as the older release left it
    db.delete(DELETIONS_FROM_KEY)
    db.close()
    again = start(nodes, tmp_path, queue_exists=lambda topic, queue_id: False)
    again.delivery.topic_configured = lambda topic: False
    again.send([NOW + 10], topic="Gone")
    again.now = NOW + 100
    assert again.deliver() == 2 and again.delivery.dropped == 1
    assert bodies(again.delivered(topic="Gone")) == [b"m0"]  # the new node's first send


def test_a_deletion_noted_past_a_lost_tail_moves_to_the_commitlog_end(tmp_path: Path, nodes: list[Node]):
    """After a machine crash the deleteTopic record can be lost with the commitlog's tail while the timer store kept
    its note: new timers at those offsets are a topic made again, not the deleted one's."""
    node = start(nodes, tmp_path)
    end = node.store.commit_log.max_offset()
    node.timers.topic_deleted("Again", end + 5_000)
    node.timers._applied = end + 10_000  # (what a store that outlived the commitlog's tail holds)
    node.timers.truncate_dirty(end)
    assert node.timers.deleted_at("Again") == end


def test_a_message_over_a_lowered_maxmessagesize_drops_alone_not_with_its_queue_s_others(
        tmp_path: Path, nodes: list[Node], caplog: pytest.LogCaptureFixture):
    """A queue's due timers are put as one batch; one the store refuses for good (a body over a maxMessageSize
    lowered since it was sent) dropped every other of the batch (the timers review: 101 dropped, 0 of 100 small
    ones delivered)."""
    node = start(nodes, tmp_path)
    node.send([NOW] * 11)  # bodies m0..m9 of 2 bytes, and m10 of 3
    node.store.config.max_message_size = 2
    with caplog.at_level(logging.WARNING):
        assert node.deliver() == 11
    assert "timer_message_dropped topic=Real queue_id=1 count=1 " in caplog.text
    assert node.delivery.dropped == 1 and node.delivery.delivered == 10 and node.timers.pending == 0
    assert bodies(node.delivered()) == [b"m%d" % i for i in range(10)]


def test_a_forwarded_message_its_leader_refuses_for_good_is_counted_dropped(tmp_path: Path, nodes: list[Node],
                                                                         caplog: pytest.LogCaptureFixture):
    node = start(nodes, tmp_path)
    route = node.delivery.route = MovedQueueRoute(too_large=b"m1")
    node.send([NOW, NOW, NOW])
    node.now = NOW + 10
    with caplog.at_level(logging.WARNING):
        assert node.deliver() == 3
    assert node.delivery.delivered == 2 and node.delivery.dropped == 1 and node.timers.pending == 0
    assert bodies(route.forwarded[0][1]) == [b"m0", b"m2"]
    assert "timer_message_dropped topic=Real queue_id=0 count=1 reason=\"refused by logic queue 0's leader broker-b" \
        in caplog.text


def test_first_due_walks_past_recalled_timers_once_not_at_every_call(tmp_path: Path, nodes: list[Node],
                                                                     monkeypatch: pytest.MonkeyPatch):
    """Recalled timers leave tombstones; first_due, called ten times a second, walked past all of them from the scan
    floor every time (the timers review: 200k recalled, 17 ms a call). It starts where its last call found one, until
    a timer is added below that."""
    node = start(nodes, tmp_path)
    offsets = node.send([NOW + 1000 + i for i in range(50)] + [NOW + 5000])
    node.timers.remove([timer_key(NOW + 1000 + i, offsets[i]) for i in range(50)])  # recalled
    starts: list[bytes] = []
    raw_keys = timer_message_store.raw_keys

    def recording(db, from_key: bytes = b"", **kw):
        starts.append(from_key)
        return raw_keys(db, from_key=from_key, **kw)

    monkeypatch.setattr(timer_message_store, "raw_keys", recording)
    live = timer_key(NOW + 5000, offsets[50])
    assert node.timers.first_due() == NOW + 5000 and starts[-1] < timer_key(NOW + 1000, 0)  # the first walks
    assert node.timers.first_due() == NOW + 5000 and starts[-1] == live  # the next start at what it found
    [earlier] = node.send([NOW + 3000])  # added below it: found
    assert node.timers.first_due() == NOW + 3000
    node.timers.remove([timer_key(NOW + 3000, earlier)])
    assert node.timers.first_due() == NOW + 5000
    node.now = NOW + 6000
    taken = node.timers.take_due(node.now, 10)
    assert [k for k, _ in taken] == [live] and node.timers.first_due() is None
    node.timers.give_back(live)  # handed back (a refused delivery): pending again
    assert node.timers.first_due() == NOW + 5000

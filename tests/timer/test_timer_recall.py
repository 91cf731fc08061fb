"""Recalling delayed messages in a real message store with the timer store in its chain: a recalled timer is never
delivered, in either flush mode, after a restart that replays the commitlog, or when the recall races the
delivery; a handle that does not name a pending message of the topic is refused and changes nothing."""

import shutil
import threading
import time
from pathlib import Path

import pytest

from broker.processor.recall_message_processor import RecallMessageProcessor
from broker.store.config import FlushDiskType
from broker.timer.timer_message_store import marker_body, timer_key
from broker.timer.timer_recall import marker_properties, recall_handles
from common.message_codec import decode_record
from common.message_properties import encode_properties
from common.recall_handle import RecallHandle
from common.refusal import Refusal
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.timer_topic import TIMER_DELETES_QUEUE_ID, TIMER_QUEUE_ID, TIMER_TOPIC
from proto import broker_pb2
from tests.timer.timer_node import NOW, ROUTER, Node, bodies, replayed_whole, start

BROKER = "broker-a"


def handles_of(node: Node, offsets: list[int]) -> list[str]:
    """The handles the send path answers for these timers (their records' properties, as stored)."""
    props = [decode_record(node.store.commit_log.read_record(o)).raw_properties for o in offsets]
    return recall_handles(BROKER, props, node.store.store_host, offsets)


def delivers_only(again: Node, expected: list[bytes]) -> None:
    """A restarted node holds the timers of ``expected`` (due at NOW + 100) and delivers them, no other."""
    assert again.timers.pending == len(expected) and again.timers.first_due() == NOW + 100
    again.now = NOW + 100
    assert again.deliver() == len(expected) and bodies(again.delivered()) == expected


def key_of(handle: RecallHandle) -> bytes:
    return timer_key(handle.due_ms, handle.physical_offset)


def processor(node: Node, is_master: bool = True) -> RecallMessageProcessor:
    return RecallMessageProcessor(BROKER, lambda: node.timers, node.store, lambda: is_master)


def recall(node: Node, handle: str, topic: str = "Real") -> broker_pb2.RecallMessageResponse:
    return processor(node).recall(broker_pb2.RecallMessageRequest(topic=topic, recall_handle=handle))


def refused_code(node: Node, handle: str, topic: str = "Real") -> int:
    with pytest.raises(Refusal) as refused:
        recall(node, handle, topic)
    return refused.value.code


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_a_recalled_timer_is_never_delivered(tmp_path: Path, nodes: list[Node], flush: FlushDiskType):
    node = start(nodes, tmp_path, flush_disk_type=flush)
    offsets = node.send([NOW + 100, NOW + 100, NOW + 200])  # m0, m1, m2
    handles = handles_of(node, offsets)
    assert RecallHandle.decode(handles[1]) == RecallHandle(BROKER, NOW + 100, offsets[1], "m1")
    assert recall(node, handles[1]).message_id == "m1"
    assert node.timers.pending == 2 and node.timers.first_due() == NOW + 100
    assert refused_code(node, handles[1]) == ResponseCode.QUERY_NOT_FOUND  # recalled already
    node.now = NOW + 1000
    assert node.deliver() == 2 and bodies(node.delivered()) == [b"m0", b"m2"]
    assert refused_code(node, handles[0]) == ResponseCode.QUERY_NOT_FOUND  # delivered already
    assert node.timers.pending == 0


def test_a_recall_right_after_the_send_waits_for_the_timer_to_reach_the_store(tmp_path: Path, nodes: list[Node]):
    """A send is answered once its record is appended; its timer reaches the timer store on the reput thread."""
    node = start(nodes, tmp_path)
    props = ROUTER.timer_properties(encode_properties({"UNIQ_KEY": "m0"}), "Real", 1, NOW + 100)
    outcome: list[str] = []
    with node.timers._apply_lock:  # the reput thread cannot store the timer yet
        put = node.store.put_messages(TIMER_TOPIC, TIMER_QUEUE_ID, [b"m0"], [props])
        (handle,) = recall_handles(BROKER, [props], node.store.store_host, put.append.physical_offsets)
        recaller = threading.Thread(target=lambda: outcome.append(recall(node, handle).message_id))
        recaller.start()
        recaller.join(0.5)
        assert recaller.is_alive() and outcome == []  # waiting for the dispatch
    recaller.join(10)
    assert outcome == ["m0"] and node.timers.pending == 0


def test_a_timer_its_slaves_have_not_confirmed_is_not_waited_for(tmp_path: Path, nodes: list[Node]):
    """A replication-gated master dispatches only what its slaves confirmed: a recall says so at once."""
    node = start(nodes, tmp_path)
    node.store.commit_log.replication_gated = True  # and no slave confirms anything
    props = ROUTER.timer_properties(encode_properties({"UNIQ_KEY": "m0"}), "Real", 1, NOW + 100)
    put = node.store.put_messages(TIMER_TOPIC, TIMER_QUEUE_ID, [b"m0"], [props])
    (handle,) = recall_handles(BROKER, [props], node.store.store_host, put.append.physical_offsets)
    started = time.monotonic()
    assert refused_code(node, handle) == ResponseCode.SLAVE_NOT_AVAILABLE
    assert time.monotonic() - started < 1.0


def test_a_handle_that_names_no_pending_message_of_the_topic_changes_nothing(tmp_path: Path, nodes: list[Node]):
    node = start(nodes, tmp_path)
    offsets = node.send([NOW + 100])
    (handle,) = handles_of(node, offsets)
    parsed = RecallHandle.decode(handle)
    end = node.store.commit_log.max_offset()
    assert refused_code(node, handle, topic="Other") == ResponseCode.QUERY_NOT_FOUND  # another topic's permission
    assert refused_code(node, parsed._replace(message_id="m9").encode()) == ResponseCode.QUERY_NOT_FOUND
    assert refused_code(node, parsed._replace(due_ms=NOW + 101).encode()) == ResponseCode.QUERY_NOT_FOUND
    assert refused_code(node, parsed._replace(broker_name="broker-b").encode()) == ResponseCode.QUERY_NOT_FOUND
    with pytest.raises(Refusal) as refused:
        processor(node, is_master=False).recall(broker_pb2.RecallMessageRequest(topic="Real", recall_handle=handle))
    assert refused.value.code == ResponseCode.NO_PERMISSION and "slave" in str(refused.value)
    for bad in ("", "r1|broker-a|x|1|m0", "v1|broker-a|1|1|m0", "r1|broker-a|1|1|", "r1|broker-a|1|-1|m0"):
        with pytest.raises(RequestError, match="recall handle"):
            recall(node, bad)
    with pytest.raises(RequestError):
        recall(node, handle, topic="")
    assert node.store.commit_log.max_offset() == end  # nothing written
    node.now = NOW + 100
    assert node.deliver() == 1 and bodies(node.delivered()) == [b"m0"]


def test_a_recall_marker_is_replayed_after_a_crash_before_the_timer_store_saw_it(tmp_path: Path, nodes: list[Node]):
    node = Node(tmp_path)
    offsets = node.send([NOW + 100, NOW + 100])
    node.timers.flush()
    handle = RecallHandle.decode(handles_of(node, offsets)[0])
    dispatch = node.timers.dispatch
    node.timers.dispatch = lambda requests, end_offset: None  # the process dies before the timer store's turn
    marker = node.store.put_messages(TIMER_TOPIC, TIMER_DELETES_QUEUE_ID, [marker_body([key_of(handle)])],
                                     [marker_properties("Real", handle)])
    assert node.store.wait_dispatched(marker.append.end_offset)
    node.timers.dispatch = dispatch
    node.stop()
    delivers_only(start(nodes, tmp_path), [b"m1"])


def test_only_the_markers_queue_takes_timers_out(tmp_path: Path, nodes: list[Node]):
    """A timer-topic record of queue 0 shaped like a marker (only a send can put one there) is a timer."""
    node = start(nodes, tmp_path)
    (victim,) = node.send([NOW + 100])
    handle = RecallHandle.decode(handles_of(node, [victim])[0])
    forged = node.store.put_messages(TIMER_TOPIC, TIMER_QUEUE_ID, [marker_body([key_of(handle)])],
                                     [marker_properties("Real", handle)])
    assert node.store.wait_dispatched(forged.append.end_offset)
    assert node.timers.pending == 2
    node.now = NOW + 100
    assert node.deliver() == 2  # the forged one has no due time or queue: dropped
    assert bodies(node.delivered()) == [b"m0"]


def test_a_recall_stays_after_a_restart_that_replays_the_commitlog(tmp_path: Path, nodes: list[Node]):
    node = Node(tmp_path)
    offsets = node.send([NOW + 100, NOW + 100])
    recall(node, handles_of(node, offsets)[0])
    node.stop()
    shutil.rmtree(tmp_path / "store" / "consumequeue")  # the whole commitlog is dispatched again
    delivers_only(start(nodes, tmp_path), [b"m1"])


def test_a_timer_and_its_recall_replayed_in_one_dispatch(tmp_path: Path, nodes: list[Node]):
    """A timer store rebuilt from the commitlog's start: the timer and its marker arrive in the same batch."""
    node = Node(tmp_path)
    offsets = node.send([NOW + 100, NOW + 100])
    recall(node, handles_of(node, offsets)[1])
    node.stop()
    delivers_only(replayed_whole(nodes, tmp_path), [b"m0"])


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_a_recall_racing_the_delivery_either_recalls_or_finds_it_delivered(tmp_path: Path, nodes: list[Node],
                                                                           flush: FlushDiskType):
    node = start(nodes, tmp_path, flush_disk_type=flush)
    count = 40
    offsets = node.send([NOW + i for i in range(count)])
    handles = handles_of(node, offsets)
    outcomes: dict[int, int] = {}

    def recall_all() -> None:
        for i in range(count - 1, -1, -1):  # against the delivery's order: they meet half-way
            try:
                recall(node, handles[i])
                outcomes[i] = ResponseCode.SUCCESS
            except Refusal as exc:
                outcomes[i] = exc.code

    recaller = threading.Thread(target=recall_all)
    recaller.start()
    for step in range(count):
        node.now = NOW + step
        node.deliver()
    recaller.join(30)
    assert not recaller.is_alive()
    node.now = NOW + count
    node.deliver()
    delivered = {int(b[1:]) for b in bodies(node.delivered())}
    recalled = {i for i, code in outcomes.items() if code == ResponseCode.SUCCESS}
    assert set(outcomes.values()) <= {ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND}
    assert recalled.isdisjoint(delivered) and recalled | delivered == set(range(count))
    assert node.timers.pending == 0


def test_a_handle_round_trips_whatever_the_message_id_holds():
    handle = RecallHandle("broker-a", NOW, 123, "id|with|bars")
    assert RecallHandle.decode(handle.encode()) == handle

"""Deleting a topic's queues from the store (``MessageStore.delete_topic``, what ``deleteTopic`` does to it)."""

import subprocess
import sys
import threading
from pathlib import Path

from broker.store.config import StoreType
from broker.store.get_message_result import GetMessageStatus
from broker.store.message_store import MessageStore
from common.message_codec import decode_record
from tests.store.conftest import StoreFactory, held_dispatch, store_config

REPO_ROOT = Path(__file__).resolve().parents[2]

TOPIC = "GoneT"


def test_a_record_appended_just_before_the_delete_does_not_bring_its_queue_back(open_store: StoreFactory):
    """A record still on its way through dispatch when the topic is deleted used to make its queue again, with
    the old queue offsets: a topic created again under the name then held a message of the deleted one."""
    store = open_store()
    assert store.put_messages(TOPIC, 1, [b"old-0", b"old-1"], [b"", b""]).ok
    gate = held_dispatch(store)
    late = store.put_messages(TOPIC, 1, [b"late"], [b""])
    assert late.ok and late.queue_offset == 2
    deleting = threading.Thread(target=store.delete_topic, args=(TOPIC,))
    deleting.start()
    deleting.join(0.5)  # the delete waits for the late record's dispatch (it did not, before)
    gate.set()
    deleting.join(10)
    assert not deleting.is_alive()
    assert store.wait_dispatched(late.append.end_offset)
    assert_gone(store)


def test_a_delete_not_dispatched_in_time_says_so_and_takes_effect_once_it_is(open_store: StoreFactory):
    """Dispatch held (replicas or the disk behind): the delete says so. Its record is in the log, so the topic goes
    where dispatch reaches it, and a message sent meanwhile belongs to the topic made again, from offset 0."""
    store = open_store()
    assert store.put_messages(TOPIC, 0, [b"a", b"b"], [b"", b""]).ok
    assert store.wait_dispatched(store.commit_log.max_offset())
    gate = held_dispatch(store)
    why = store.delete_topic(TOPIC, timeout_s=0.2)
    assert why is not None and "not dispatched within 0.2 s" in why
    assert store.max_offset(TOPIC, 0) == 2  # not yet
    again = store.put_messages(TOPIC, 0, [b"new"], [b""])
    assert again.ok and again.queue_offset == 0
    gate.set()
    assert store.wait_dispatched(again.append.end_offset)
    assert store.max_offset(TOPIC, 0) == 1
    assert [decode_record(m).body for m in store.get_message(TOPIC, 0, 0, 10).messages] == [b"new"]
    assert store.delete_topic(TOPIC) is None  # a retry: the new message goes too
    assert_gone(store)


def test_a_deleted_topic_starts_again_at_queue_offset_zero(open_store: StoreFactory):
    store = open_store()
    for _ in range(3):
        assert store.put_messages(TOPIC, 0, [b"old"], [b""]).ok
    store.delete_topic(TOPIC)
    assert_gone(store)
    again = store.put_messages(TOPIC, 0, [b"new"], [b""])
    assert again.ok and again.queue_offset == 0
    assert store.wait_dispatched(again.append.end_offset)
    assert [decode_record(m).body for m in store.get_message(TOPIC, 0, 0, 10).messages] == [b"new"]
    store.shutdown()
    store = open_store()  # and so it stays after a restart
    assert store.max_offset(TOPIC, 0) == 1
    assert [decode_record(m).body for m in store.get_message(TOPIC, 0, 0, 10).messages] == [b"new"]


def assert_gone(store: MessageStore) -> None:
    for queue_id in range(4):
        assert store.max_offset(TOPIC, queue_id) == 0, queue_id
        assert not store.get_message(TOPIC, queue_id, 0, 10).messages, queue_id


def test_an_offset_of_the_deleted_queue_moves_to_the_first_message_of_the_queue_made_again(open_store: StoreFactory):
    """A consumer still at an offset of the deleted topic's queue (a pull parked at the deletion, a push consumer's
    position) pulls the topic made again: it was moved to the new queue's end, past its first messages, and
    never consumed them. An offset past the end of a queue never deleted still moves to the end."""
    store = open_store()
    assert store.put_messages(TOPIC, 0, [b"old"] * 5, [b""] * 5).ok
    assert store.put_messages("KeptT", 0, [b"kept"] * 2, [b""] * 2).ok
    store.delete_topic(TOPIC)
    again = store.put_messages(TOPIC, 0, [b"new-0", b"new-1"], [b"", b""])
    assert again.ok and store.wait_dispatched(again.append.end_offset)
    stale = store.get_message(TOPIC, 0, 5, 32)  # where the consumer of the deleted queue was
    assert (stale.status, stale.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0)  # was 2
    assert [decode_record(m).body for m in store.get_message(TOPIC, 0, 0, 32).messages] == [b"new-0", b"new-1"]
    beyond = store.get_message(TOPIC, 0, 9, 32)  # never an offset of either queue: the end, as before
    assert beyond.next_begin_offset == 2
    kept = store.get_message("KeptT", 0, 7, 32)  # a queue never deleted (e.g. a new master's, short of its tail)
    assert (kept.status, kept.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 2)


# A child that stores, deletes and stores again, then idles until it is killed. Its dispatchers never write a
# checkpoint (one flush an hour), so the replay after the SIGKILL starts at the commitlog's first record.
CHILD = """
import sys, time
from broker.store.config import StoreType
from broker.store.message_store import MessageStore
from tests.store.conftest import store_config
store = MessageStore(store_config(sys.argv[1], store_type=StoreType(sys.argv[2]),
                                  flush_interval_consume_queue_ms=3_600_000))
store.start()
for body in (b"old-0", b"old-1", b"old-2"):
    assert store.put_messages("GoneT", 0, [body], [b""]).ok
assert store.delete_topic("GoneT") is None
again = store.put_messages("GoneT", 0, [b"new-0"], [b""])
assert again.ok and again.queue_offset == 0
assert store.wait_dispatched(again.append.end_offset)
print("done", flush=True)
time.sleep(600)
"""


def test_a_deleted_topic_stays_deleted_after_a_crash_soon_after(tmp_path: Path, store_type: StoreType):
    """The replay after a SIGKILL started below the delete and made the deleted topic's queue again from its old
    records: the topic made again under the name read old-0.. at offsets 0.. and new-0 was lost behind them."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "store"), store_type.value],
                             cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # the child's own asserts end it (EOF) rather than hang
        assert line == b"done\n", child.stderr.read().decode() if child.stderr else line
    finally:
        child.kill()
        child.wait(10)
    store = MessageStore(store_config(tmp_path / "store", store_type=store_type))
    store.start()
    try:
        assert store.max_offset(TOPIC, 0) == 1
        assert [decode_record(m).body for m in store.get_message(TOPIC, 0, 0, 10).messages] == [b"new-0"]
        assert store.put_messages(TOPIC, 0, [b"new-1"], [b""]).queue_offset == 1
    finally:
        store.shutdown()


def test_a_slave_dispatching_its_masters_log_deletes_the_topic_where_the_master_did(tmp_path: Path,
                                                                                   store_type: StoreType):
    """The deletion travels in the log: a slave's queue of the deleted topic went on holding the old messages, and
    the messages of the topic made again (offsets 0..) were taken for ones it already had and never served."""
    master = MessageStore(store_config(tmp_path / "master", store_type=store_type))
    slave = MessageStore(store_config(tmp_path / "slave", store_type=store_type))
    master.start()
    slave.start()
    try:
        for body in (b"old-0", b"old-1", b"old-2"):
            assert master.put_messages(TOPIC, 0, [body], [b""]).ok
        assert master.delete_topic(TOPIC) is None
        assert master.put_messages(TOPIC, 0, [b"new-0"], [b""]).queue_offset == 0
        end = master.commit_log.max_offset()
        while (at := slave.commit_log.max_offset()) < end:  # what a slave's HA client does, a segment at a time
            slave.commit_log.append_replica(at, bytes(master.commit_log.read_replica(at, end - at)))
        assert slave.wait_dispatched(end)
        assert slave.max_offset(TOPIC, 0) == 1
        assert [decode_record(m).body for m in slave.get_message(TOPIC, 0, 0, 10).messages] == [b"new-0"]
    finally:
        master.shutdown()
        slave.shutdown()

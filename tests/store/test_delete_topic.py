"""Deleting a topic's queues from the store (``MessageStore.delete_topic``, what ``deleteTopic`` does to it)."""

import threading

from broker.store.message_store import MessageStore
from common.message_codec import decode_record
from tests.store.conftest import StoreFactory, held_dispatch

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


def test_a_delete_that_cannot_wait_for_dispatch_drops_nothing(open_store: StoreFactory):
    """Dispatch held (replicas or the disk behind): the delete says so and leaves the queue whole for a retry."""
    store = open_store()
    gate = held_dispatch(store)
    put = store.put_messages(TOPIC, 0, [b"a", b"b"], [b"", b""])
    assert put.ok
    assert store.delete_topic(TOPIC, timeout_s=0.2) is False
    gate.set()
    assert store.wait_dispatched(put.append.end_offset)
    assert store.max_offset(TOPIC, 0) == 2
    assert store.put_messages(TOPIC, 0, [b"c"], [b""]).queue_offset == 2
    assert store.delete_topic(TOPIC) is True
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

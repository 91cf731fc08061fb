"""The read API: statuses, limits, tag filtering."""

from broker.store.get_message_result import GetMessageStatus
from common.message_codec import decode_record
from common.message_properties import encode_properties, tags_code
from tests.store.conftest import StoreFactory


def _put(store, topic: str, n: int, tags: list[str | None] | None = None, size: int = 100):
    r = None
    for i in range(n):
        tag = tags[i % len(tags)] if tags else None
        r = store.put_messages(topic, 0, [f"{i:04d}".encode() * (size // 4)],
                               [encode_properties({"TAGS": tag} if tag else {})])
    store.wait_dispatched(r.append.end_offset)


def test_statuses_and_next_offsets(open_store: StoreFactory):
    store = open_store()
    empty = store.get_message("ReadT", 0, 0, 10)
    assert (empty.status, empty.next_begin_offset, empty.min_offset, empty.max_offset) == (
        GetMessageStatus.NO_MESSAGE, 0, 0, 0)
    _put(store, "ReadT", 10)
    found = store.get_message("ReadT", 0, 3, 4)
    assert found.status is GetMessageStatus.FOUND
    assert [decode_record(m).queue_offset for m in found.messages] == [3, 4, 5, 6]
    assert (found.next_begin_offset, found.min_offset, found.max_offset) == (7, 0, 10)
    one = store.get_message("ReadT", 0, 10, 4)
    assert (one.status, one.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 10)
    badly = store.get_message("ReadT", 0, 50, 4)
    assert (badly.status, badly.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 10)


def test_offset_too_small_points_at_min(open_store: StoreFactory):
    store = open_store()
    _put(store, "SmallT", 5)
    store.consume_queue_store._queues[("SmallT", 0)].min_offset = 2  # as expiry would leave it
    got = store.get_message("SmallT", 0, 1, 4)
    assert (got.status, got.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, 2)


def test_max_bytes_limits_but_returns_at_least_one(open_store: StoreFactory):
    store = open_store()
    _put(store, "BytesT", 10, size=1000)
    record = len(store.get_message("BytesT", 0, 0, 1).messages[0])
    got = store.get_message("BytesT", 0, 0, 10, max_total_bytes=3 * record + 10)
    assert len(got.messages) == 3 and got.next_begin_offset == 3 and got.total_bytes == 3 * record
    tiny = store.get_message("BytesT", 0, 0, 10, max_total_bytes=1)
    assert len(tiny.messages) == 1 and tiny.next_begin_offset == 1


def test_tag_filter(open_store: StoreFactory):
    store = open_store()
    _put(store, "TagT", 30, tags=["A", "B", None])
    got = store.get_message("TagT", 0, 0, 100, tags_codes={tags_code("B")})
    msgs = [decode_record(m) for m in got.messages]
    assert [m.queue_offset for m in msgs] == list(range(1, 30, 3))
    assert {m.tags for m in msgs} == {"B"}
    assert got.next_begin_offset == 30
    none = store.get_message("TagT", 0, 0, 100, tags_codes={tags_code("Z")})
    assert (none.status, none.next_begin_offset) == (GetMessageStatus.NO_MATCHED_MESSAGE, 30)
    both = store.get_message("TagT", 0, 0, 5, tags_codes={tags_code("A"), tags_code("B")})
    assert [decode_record(m).queue_offset for m in both.messages] == [0, 1, 3, 4, 6]
    assert both.next_begin_offset == 7

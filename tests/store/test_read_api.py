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


def test_runs_join_records_that_follow_one_another_and_nothing_else(open_store: StoreFactory):
    """``runs=True`` (a pull that sends records on joined): the same bytes, in the same order, as record by record;
    one item per stretch of records back to back in one commitlog segment. Two queues written in turns, a tag
    filter and segment ends break the stretches."""
    store = open_store(mapped_file_size_commit_log=8 * 1024)
    r = None
    for round_ in range(6):
        for queue_id in (0, 1):
            bodies = [f"{queue_id}-{round_}-{i}".encode() * 30 for i in range(5)]
            tags = [encode_properties({"TAGS": "A" if i % 4 else "B"}) for i in range(5)]
            r = store.put_messages("RunT", queue_id, bodies, tags)
    assert r is not None
    store.wait_dispatched(r.append.end_offset)
    for offset, max_nums, max_bytes, codes in ((0, 30, 1 << 20, None), (3, 11, 1 << 20, None),
                                               (0, 30, 2000, None), (0, 30, 1 << 20, {tags_code("A")})):
        single = store.get_message("RunT", 0, offset, max_nums, max_bytes, codes)
        joined = store.get_message("RunT", 0, offset, max_nums, max_bytes, codes, runs=True)
        assert b"".join(joined.messages) == b"".join(single.messages) and joined.total_bytes == single.total_bytes
        assert (joined.status, joined.next_begin_offset) == (single.status, single.next_begin_offset)
        stretches, end = 0, None
        for record in single.messages:
            m = decode_record(record)
            segment_start = m.physical_offset - m.physical_offset % (8 * 1024)
            stretches += m.physical_offset != end or m.physical_offset == segment_start
            end = m.physical_offset + len(record)
        assert len(joined.messages) == stretches < len(single.messages)
    # Within one batch (a stretch found in one pass, not record by record), with max_bytes cutting it (at least
    # one record is answered), and from the middle of a batch.
    for offset, max_nums, max_bytes, expected in ((0, 5, 1 << 20, 5), (1, 3, 1 << 20, 3), (0, 5, 600, 2),
                                                  (2, 5, 10, 1), (5, 5, 1 << 20, 5)):
        single = store.get_message("RunT", 1, offset, max_nums, max_bytes)
        joined = store.get_message("RunT", 1, offset, max_nums, max_bytes, runs=True)
        assert len(single.messages) == expected and len(joined.messages) == 1
        assert b"".join(joined.messages) == b"".join(single.messages) and joined.total_bytes == single.total_bytes
        assert (joined.status, joined.next_begin_offset) == (single.status, single.next_begin_offset)

"""Dispatch hints (issue 14): reput takes what the appender knew instead of parsing it back, and what it takes is
exactly what parsing the commitlog gives (a restart replays the same records by parsing)."""

import os
from pathlib import Path

import pytest

from broker.store.config import FlushDiskType
from broker.store.dispatch import reput_service
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_hints import DispatchHints
from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.store.message_store import MessageStore
from common.message_properties import encode_properties, tags_code
from common.wire_batch import WireBatch, encode_wire_batch
from tests.store.conftest import store_config


class KeepingDispatcher(CommitLogDispatcher):
    """Keeps every request whole (``checkpoint`` 0: a restart replays the whole commitlog to it)."""

    name = "keeping"

    def __init__(self) -> None:
        self.requests: list[DispatchRequest] = []

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        self.requests.extend(requests)

    def checkpoint(self) -> int:
        return 0


def _open(root: Path, dispatcher: CommitLogDispatcher, **overrides: object) -> MessageStore:
    store = MessageStore(store_config(root, **overrides))
    store.register_dispatcher(dispatcher)
    store.start()
    return store


def _props(i: int) -> bytes:
    """Property blocks that change every few records, some without tags, some with unique keys."""
    if i % 7 == 0:
        return b""
    if i % 5 == 0:
        return encode_properties({"TAGS": f"T{i % 3}", "UNIQ_KEY": os.urandom(8).hex()})
    return encode_properties({"TAGS": f"T{i // 4 % 3}", "KEYS": "k"})


def _put_a_mix(store: MessageStore) -> int:
    """Unary batches, producer-encoded batches, several topics and queues, records that end segments (64 KiB)."""
    end = 0
    for i in range(120):
        n = 1 + i % 9
        bodies = [os.urandom(200 + 97 * ((i + k) % 40)) for k in range(n)]
        props = [_props(i + k) for k in range(n)]
        topic = f"Hint{i % 3}"
        if i % 2:
            result = store.put_messages(topic, i % 4, bodies, props)
        else:
            records = encode_wire_batch(topic.encode(), bodies, props, born_timestamp=i, born_host=bytes(8))
            result = store.put_wire_batch(WireBatch.parse(records, topic.encode(), i % 4, store.store_host, 64))
        assert result.ok and result.append is not None
        end = result.append.end_offset
    return end


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_hinted_dispatch_equals_what_parsing_the_commitlog_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 flush: FlushDiskType, store_type: str):
    parsed: list[int] = []
    real_parse = reput_service.parse_records

    def counted_parse(*args: object, **kwargs: object) -> tuple[list[DispatchRequest], int, bool]:
        requests, pos, hit_end = real_parse(*args, **kwargs)  # type: ignore[arg-type]
        parsed.append(len(requests))
        return requests, pos, hit_end

    monkeypatch.setattr(reput_service, "parse_records", counted_parse)
    hinted = KeepingDispatcher()
    store = _open(tmp_path, hinted, flush_disk_type=flush, store_type=store_type)
    end = _put_a_mix(store)
    assert store.wait_dispatched(end, 10)
    assert store.commit_log.mapped_file_queue.min_offset() == 0 and end > 4 * 64 * 1024  # several segments
    assert store.reput.hints.dropped == 0
    if flush is FlushDiskType.ASYNC_FLUSH:
        assert sum(parsed) == 0  # every record came from a hint: the appender confirms after recording it
    else:  # the flusher confirms: between a write and its hint it may flush and confirm, and reput parses those
        assert sum(parsed) <= len(hinted.requests) // 10, f"{sum(parsed)} of {len(hinted.requests)} parsed"
    assert store.reput.hints.pending_records == 0
    store.shutdown()

    parsed_before = sum(parsed)  # (SYNC_FLUSH: the few reput parsed above)
    replayed = KeepingDispatcher()
    store = _open(tmp_path, replayed, flush_disk_type=flush, store_type=store_type)  # no hints: parsed
    assert store.wait_dispatched(end, 10)
    assert sum(parsed) - parsed_before == len(hinted.requests)
    assert replayed.requests == hinted.requests
    assert store.max_offset("Hint0", 0) == len([r for r in hinted.requests if r[0] == "Hint0" and r[1] == 0])
    store.shutdown()


def test_reput_parses_what_was_not_hinted(tmp_path: Path):
    """Too many hints waiting: the rest go unhinted, and reput parses them, in order, the same."""
    kept = KeepingDispatcher()
    store = _open(tmp_path, kept)
    store.reput.hints.max_pending_records = 3
    store.commit_log.replication_gated = True  # nothing is confirmed until the "replicas" say so
    results = [store.put_messages("Gated", i % 2, [b"x" * (100 + i)], [_props(i)]) for i in range(10)]
    assert store.reput.hints.dropped == 7
    store.commit_log.set_replicated_offset(results[-1].append.end_offset)
    assert store.wait_dispatched(results[-1].append.end_offset, 10)
    assert [r[3] for r in kept.requests] == [p for r in results for p in r.append.physical_offsets]
    assert [r[2] for r in kept.requests] == [i // 2 for i in range(10)]
    assert store.reput.hints.pending_records == 0
    store.shutdown()


def test_an_observer_that_fails_costs_only_the_hints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    kept = KeepingDispatcher()
    store = _open(tmp_path, kept)
    real_appended = store.reput.hints.appended
    calls = [0]

    def fails_once(*args: object) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise MemoryError("no room for the hint")
        real_appended(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store.reput.hints, "appended", fails_once)
    results = [store.put_messages("Obs", 0, [b"x" * 50] * 3, [_props(i)] * 3) for i in range(4)]
    assert all(r.ok for r in results)
    assert [r.append.queue_offset for r in results] == [0, 3, 6, 9]  # the queue offsets moved on all the same
    assert store.wait_dispatched(results[-1].append.end_offset, 10)
    assert [r[2] for r in kept.requests] == list(range(12))
    store.shutdown()


def test_property_blocks_given_as_buffers_are_hinted_as_bytes():
    block = encode_properties({"TAGS": "TagA"})
    batch = WireBatch.of(b"T", 0, [b"a", b"b"], [memoryview(block), bytearray(block)], born_timestamp=0,
                         born_host=bytes(8), store_host=bytes(8))
    assert [type(p) for p in batch.properties] == [bytes, bytes] and batch.properties == [block, block]
    hints = DispatchHints()
    hints.appended("T", 0, 0, [0, 100], [100, 100], batch.properties, 1, 200)
    taken = hints.take(0, 200, 4096)
    assert taken is not None and taken[0][0][5] == taken[0][1][5] == tags_code("TagA")


def _hints_of(*runs: tuple[int, int, int]) -> DispatchHints:
    """Hints of runs (start, end, records) of one queue."""
    hints = DispatchHints()
    queue_offset = 0
    for start, end, n in runs:
        size = (end - start) // n
        hints.appended("T", 0, queue_offset, range(start, end, size), [size] * n, [b""] * n, 1, end)
        queue_offset += n
    return hints


def test_a_hint_is_taken_only_where_reput_stands_and_within_the_confirm_offset():
    hints = _hints_of((0, 100, 2), (100, 300, 4), (400, 500, 1))
    assert hints.take(50, 1000, 4096) is None  # no hint starts there
    hints = _hints_of((0, 100, 2), (100, 300, 4), (400, 500, 1))
    assert hints.take(0, 49, 4096) is None  # not one whole record of the first is confirmed
    taken = hints.take(0, 99, 4096)  # the first record of the first is
    assert taken is not None and taken[1] == 50 and [r[3] for r in taken[0]] == [0]
    taken = hints.take(50, 1000, 4096)  # consecutive hints come together; the one after a gap does not
    assert taken is not None and taken[1] == 300 and [r[3] for r in taken[0]] == [50, 100, 150, 200, 250]
    assert [r[2] for r in taken[0]] == list(range(1, 6))
    assert hints.take(300, 1000, 4096) is None  # the gap (an end-of-segment marker): parsed
    taken = hints.take(400, 1000, 4096)
    assert taken is not None and taken[1] == 500


def test_hints_reput_went_past_are_dropped_and_a_truncation_forgets_all():
    hints = _hints_of((0, 100, 2), (100, 200, 2), (200, 300, 2))
    assert hints.take(40, 300, 4096) is None  # reput parsed [0, 40): that hint is of no use any more
    taken = hints.take(100, 300, 2)  # at most 2 records unless one hint has more
    assert taken is not None and taken[1] == 200
    hints.forget()
    assert hints.take(200, 300, 4096) is None


def test_a_truncated_commitlog_leaves_no_hint_for_the_bytes_written_over(tmp_path: Path):
    kept = KeepingDispatcher()
    store = _open(tmp_path, kept)
    store.commit_log.replication_gated = True
    first = store.put_messages("Cut", 0, [b"a" * 100], [_props(1)])
    store.commit_log.set_replicated_offset(first.append.end_offset)
    assert store.wait_dispatched(first.append.end_offset, 10)
    lost = store.put_messages("Cut", 0, [b"b" * 100], [_props(2)])  # never confirmed: a replica cuts it
    store.commit_log.truncate_tail(first.append.end_offset)
    data = WireBatch.of(b"Cut", 1, [b"c" * 300], [b""], born_timestamp=0, born_host=bytes(8),
                        store_host=store.store_host)
    data.encode(0, 1, 0, first.append.end_offset, 5, [])
    end = store.commit_log.append_replica(first.append.end_offset, bytes(data.buf))  # other bytes, same offset
    store.commit_log.set_replicated_offset(end)
    assert store.wait_dispatched(end, 10)
    assert lost.append.physical_offsets[0] == first.append.end_offset
    cut = first.append.end_offset
    assert [(r[0], r[1], r[3], r[4]) for r in kept.requests] == [("Cut", 0, 0, cut), ("Cut", 1, cut, end - cut)]
    store.shutdown()

"""Commitlog: segments, roll-over, batches, offsets."""

from pathlib import Path

from broker.store.get_message_result import GetMessageStatus
from common.message_codec import BLANK_MAGIC, SIZE_MAGIC, decode_record
from tests.store.conftest import StoreFactory


def test_segments_roll_over_and_records_never_straddle(open_store: StoreFactory, tmp_path: Path):
    store = open_store()
    seg_size = store.commit_log.mapped_file_size
    bodies = [bytes([i % 251]) * (700 + i * 37 % 900) for i in range(400)]
    results = [store.put_messages("RollT", 0, [b], [b""]) for b in bodies]
    assert all(r.ok for r in results)
    files = sorted((tmp_path / "store" / "commitlog").iterdir())
    assert len(files) > 5
    assert [f.name for f in files] == [f"{i * seg_size:020d}" for i in range(len(files))]
    for r in results:  # no record crosses a segment boundary
        start = r.physical_offset
        size = store.commit_log.record_size_at(start)
        assert start // seg_size == (start + size - 1) // seg_size
    for f in files[:-1]:  # each full segment ends with an end-of-segment marker
        raw = f.read_bytes()
        pos = 0
        while True:
            size, magic = SIZE_MAGIC.unpack_from(raw, pos)
            if magic == BLANK_MAGIC:
                assert pos + size == seg_size
                break
            pos += size
    assert store.wait_dispatched(results[-1].append.end_offset)
    got = store.get_message("RollT", 0, 0, 1000, max_total_bytes=10**9)
    assert [decode_record(m).body for m in got.messages] == bodies


def test_batch_gets_consecutive_queue_offsets_and_may_span_segments(open_store: StoreFactory):
    store = open_store()
    store.put_messages("BatchT", 2, [b"x" * 100], [b""])
    batch = [f"m{i}".encode() * 500 for i in range(64)]  # ~90 KiB: spills into the next segment
    r = store.put_messages("BatchT", 2, batch, [b""] * 64)
    assert r.ok and r.queue_offset == 1
    assert len(r.offset_msg_ids) == 64 and len(set(r.offset_msg_ids)) == 64
    store.wait_dispatched(r.append.end_offset)
    got = store.get_message("BatchT", 2, 1, 64, max_total_bytes=10**9)
    msgs = [decode_record(m) for m in got.messages]
    assert [m.queue_offset for m in msgs] == list(range(1, 65))
    assert [m.body for m in msgs] == batch
    assert [m.offset_msg_id for m in msgs] == r.offset_msg_ids
    assert len({m.physical_offset // store.commit_log.mapped_file_size for m in msgs}) == 2


def test_a_batch_that_fits_a_segment_is_never_split_over_two(open_store: StoreFactory):
    """A batch that did not fit the rest of a segment was written in two parts, the second after the next segment
    was made: a SIGKILL between them kept the first part (whole, valid records), and consumers read part of a batch
    its producer was told failed (the crash soak review: 7 of 8 messages of a batch). It goes whole into the next
    segment, as upstream; only a batch larger than a segment spans (the test above)."""
    store = open_store()
    segment = store.commit_log.mapped_file_size
    store.put_messages("SplitT", 0, [b"x" * 40_000], [b""])  # the first segment is more than half full
    batch = [b"%02d" % i * 1000 for i in range(16)]  # ~33 KiB: fits an empty segment, not the rest of this one
    r = store.put_messages("SplitT", 0, batch, [b""] * 16)
    assert r.ok and r.queue_offset == 1
    assert {o // segment for o in r.append.physical_offsets} == {1}, r.append.physical_offsets
    store.wait_dispatched(r.append.end_offset)
    got = store.get_message("SplitT", 0, 0, 64, max_total_bytes=10**9)
    assert [decode_record(m).body for m in got.messages][1:] == batch


def _crash_cut(store_dir: Path, segment_offset: int, cut_from: int, segment_size: int) -> None:
    """The segment at ``segment_offset`` as a SIGKILL during a write would leave it: zeros from ``cut_from`` (an
    offset in the log) on, and the store marked as not shut down."""
    path = store_dir / "commitlog" / f"{segment_offset:020d}"
    with open(path, "r+b") as f:
        f.seek(cut_from - segment_offset)
        f.write(bytes(segment_offset + segment_size - cut_from))
    (store_dir / "abort").touch()


def test_recovery_cuts_a_batch_whose_write_a_crash_ended_part_way(open_store: StoreFactory, tmp_path: Path):
    """A SIGKILL during a batch's one write kept the records the write had reached: whole and valid, so recovery
    kept them, and consumers read part of a batch its producer was never told was stored (the crash soak review:
    1 batch in 6 kills). Every record of an append but its last says more follow, and recovery cuts an append
    whose last record is missing."""
    store = open_store()
    first = store.put_messages("TornT", 0, [b"a" * 300] * 8, [b"k=v"] * 8)
    torn = store.put_messages("TornT", 0, [b"b" * 300] * 8, [b"k=v"] * 8)
    assert first.ok and torn.ok
    store.shutdown()
    _crash_cut(tmp_path / "store", 0, torn.append.physical_offsets[5], store.commit_log.mapped_file_size)
    store.flushed_checkpoint.write(torn.append.physical_offsets[0])  # nothing of a torn write was flushed

    store = open_store()
    assert store.commit_log.max_offset() == torn.append.physical_offsets[0]
    assert store.max_offset("TornT", 0) == 8
    got = store.get_message("TornT", 0, 0, 64, max_total_bytes=10**9)
    assert [decode_record(m).body for m in got.messages] == [b"a" * 300] * 8
    assert all(decode_record(m).sys_flag == 0 for m in got.messages)  # the mark is the store's, not shown
    again = store.put_messages("TornT", 0, [b"c"], [b""])  # the producer's retry goes where the torn batch was
    assert again.ok and again.queue_offset == 8 and again.physical_offset == torn.append.physical_offsets[0]


def test_recovery_cuts_a_batch_larger_than_a_segment_that_a_crash_left_in_one(open_store: StoreFactory,
                                                                              tmp_path: Path):
    store = open_store()
    store.put_messages("SpanT", 0, [b"x" * 100], [b""])
    batch = [f"m{i}".encode() * 500 for i in range(64)]  # ~90 KiB: written in two segments
    spanning = store.put_messages("SpanT", 0, batch, [b""] * 64)
    assert spanning.ok
    segment = store.commit_log.mapped_file_size
    assert spanning.append.physical_offsets[-1] >= segment
    store.shutdown()
    _crash_cut(tmp_path / "store", segment, segment, segment)  # killed before the second write
    store.flushed_checkpoint.write(spanning.append.physical_offsets[0])

    store = open_store()
    assert store.commit_log.max_offset() == spanning.append.physical_offsets[0]
    assert store.max_offset("SpanT", 0) == 1


def test_store_time_never_goes_backwards(open_store: StoreFactory):
    store = open_store()
    stamps = [store.put_messages("TimeT", 0, [b"a"], [b""]).append.store_timestamp for _ in range(200)]
    assert stamps == sorted(stamps)


def test_queues_are_independent(open_store: StoreFactory):
    store = open_store()
    for i in range(30):
        store.put_messages("IndepT", i % 3, [f"{i}".encode()], [b""])
    r = store.put_messages("OtherT", 0, [b"o"], [b""])
    store.wait_dispatched(r.append.end_offset)
    for q in range(3):
        got = store.get_message("IndepT", q, 0, 100)
        assert got.status is GetMessageStatus.FOUND
        assert [decode_record(m).body for m in got.messages] == [f"{i}".encode() for i in range(q, 30, 3)]
    assert store.max_offset("OtherT", 0) == 1 and store.max_offset("IndepT", 3) == 0


def test_message_id_finds_its_record(open_store: StoreFactory):
    store = open_store()
    r = store.put_messages("IdT", 0, [b"one", b"two"], [b"", b""])
    store.wait_dispatched(r.append.end_offset)
    for body, physical_offset in zip((b"one", b"two"), r.append.physical_offsets, strict=True):
        msg = store.look_message_by_offset(physical_offset)
        assert msg is not None and msg.body == body
    assert store.look_message_by_offset(r.append.physical_offsets[0] + 1) is None
    assert store.look_message_by_offset(10**12) is None


def test_flushed_offset_never_counts_an_unflushed_segment_behind_a_roll(tmp_path: Path):
    """After a roll the new last segment is empty and flushed; the one before it may hold unflushed bytes. The
    flushed offset (what SYNC_FLUSH acknowledges and the abnormal recovery starts checking from) must stop there."""
    from broker.store.mapped_file_queue import MappedFileQueue

    mfq = MappedFileQueue(tmp_path / "cl", 4096)
    first = mfq.last_writable()
    first.append(b"x" * 1000)
    mfq.flush()
    assert mfq.flushed_offset() == 1000
    first.append(b"y" * (4096 - 1000))  # filled, not flushed
    second = mfq.last_writable()
    assert second is not first and second.file_from_offset == 4096
    assert mfq.flushed_offset() == 1000, "the roll made the unflushed segment look flushed"
    second.append(b"z" * 10)
    assert mfq.flushed_offset() == 1000
    assert mfq.flush() == 4096 + 10 and mfq.flushed_offset() == 4106
    mfq.shutdown()


def test_an_append_racing_the_fsync_is_flushed_next_time(tmp_path: Path, monkeypatch):
    """``flush`` reports what was written when its fsync began; bytes appended during it (here: the rest of the
    segment) stay unflushed, and the file keeps its descriptor until they are flushed too."""
    import os

    from broker.store import mapped_file
    from broker.store.mapped_file_queue import MappedFileQueue

    mfq = MappedFileQueue(tmp_path / "cl", 4096)
    segment = mfq.last_writable()
    segment.append(b"a" * 100)
    real_fdatasync = os.fdatasync
    synced: list[int] = []

    def racing_fdatasync(fd: int) -> None:
        if not synced:
            segment.append(b"b" * (4096 - 100))  # another thread fills the segment meanwhile
        synced.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(mapped_file.os, "fdatasync", racing_fdatasync)
    assert segment.flush() == 100
    assert mfq.flushed_offset() == 100
    assert segment.flush() == 4096 and len(synced) == 2, "the racing append was marked flushed without an fsync"
    mfq.shutdown()

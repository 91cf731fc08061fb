"""Tiered storage units: file segments on every backend (s3 against moto's server process), and the RocksDB
metadata store."""

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.metadata.tiered_metadata_store import (
    FileSegmentMetadata,
    QueueMetadata,
    SegmentStatus,
    TopicMetadata,
)
from broker.tiered.provider.file_segment import FileSegmentType
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider, segment_path
from broker.tiered.provider.memory_file_segment import MemoryFileSegment
from broker.tiered.provider.posix_file_segment import PosixFileSegment
from broker.tiered.provider.s3_file_segment import S3FileSegment, s3_client

CL, CQ = FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE


@pytest.fixture(params=list(TieredBackendServiceProvider))
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> FileSegmentFactory:
    if request.param is TieredBackendServiceProvider.S3:
        return FileSegmentFactory(request.param, str(tmp_path / "tier"), request.getfixturevalue("s3_server").config())
    return FileSegmentFactory(request.param, tmp_path / "tier")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksDBTieredMetadataStore]:
    s = RocksDBTieredMetadataStore(tmp_path / "meta")
    yield s
    s.close()


def seg(topic: str, queue_id: int, file_type: FileSegmentType, base: int, size: int = 0,
        status: SegmentStatus = SegmentStatus.SEALED, **times: int) -> FileSegmentMetadata:
    return FileSegmentMetadata(segment_path("b", topic, queue_id, file_type, base), file_type, topic, queue_id, base,
                               size, status, **times)


# -- segments --------------------------------------------------------------------------------------------
def test_segment_path_names_the_queue_type_and_base_offset():
    assert segment_path("broker-a", "T", 3, CL, 4096) == "broker-a/T/3/commitlog/00000000000000004096"
    assert segment_path("broker-a", "T", 3, CQ, 0) == "broker-a/T/3/consumequeue/00000000000000000000"


def test_factory_builds_the_configured_backend(factory: FileSegmentFactory):
    s = factory.open("b/T/0/commitlog/00000000000000000000")
    kind = {TieredBackendServiceProvider.MEMORY: MemoryFileSegment,
            TieredBackendServiceProvider.POSIX: PosixFileSegment,
            TieredBackendServiceProvider.S3: S3FileSegment}[factory.provider]
    assert isinstance(s, kind)
    assert s.path == "b/T/0/commitlog/00000000000000000000"


def test_segment_write_read_and_real_size(factory: FileSegmentFactory):
    s = factory.open("b/T/0/commitlog/00000000000000000000")
    assert (s.real_size(), s.read(0, 10)) == (0, b"")  # absent
    s.write(0, b"hello")
    s.write(5, b" world")  # at the end: an append
    assert s.real_size() == 11
    assert s.read(0, 11) == b"hello world"
    assert s.read(6, 5) == b"world"
    assert s.read(6, 100) == b"world"  # short only past the end
    assert s.read(11, 5) == b"" and s.read(50, 5) == b""
    again = factory.open(s.path)  # another handle on the same object sees the same bytes
    assert (again.real_size(), again.read(0, 5)) == (11, b"hello")
    if factory.provider is TieredBackendServiceProvider.POSIX:
        assert (Path(factory.root) / s.path).read_bytes() == b"hello world"


def test_positioned_overwrite_drops_the_tail(factory: FileSegmentFactory):
    s = factory.open("b/T/0/commitlog/00000000000000000000")
    s.write(0, b"0123456789")
    s.write(4, b"ab")
    assert (s.real_size(), s.read(0, 100)) == (6, b"0123ab")
    s.write(6, b"")  # an empty write at the end changes nothing
    assert s.read(0, 100) == b"0123ab"
    s.write(0, b"")  # an empty write at 0 empties the object (a stale object is reset this way)
    assert (s.real_size(), s.read(0, 100)) == (0, b"")
    s.write(0, b"new")
    assert s.read(0, 100) == b"new"
    s.write(1, b"")  # an empty write below the end truncates there
    assert (s.real_size(), s.read(0, 100)) == (1, b"n")


def test_truncate_drops_the_tail_for_every_reader_and_never_extends(factory: FileSegmentFactory):
    s = factory.open("b/T/0/consumequeue/00000000000000000000")
    s.write(0, b"0123")
    s.write(4, b"4567")  # two chunks on S3: the cut below falls inside the first
    s.truncate(2)
    assert (s.real_size(), s.read(0, 100)) == (2, b"01")
    assert factory.open(s.path).real_size() == 2  # what a load after a restart finds
    s.truncate(5)  # past the end: nothing (a posix write there would fill the gap with zeros)
    assert (s.real_size(), s.read(0, 100)) == (2, b"01")
    s.write(2, b"ab")
    assert s.read(0, 100) == b"01ab"


def test_destroy_is_idempotent_and_objects_are_independent(factory: FileSegmentFactory):
    a = factory.open("b/T/0/commitlog/00000000000000000000")
    b = factory.open("b/T/0/commitlog/00000000000000001000")
    a.write(0, b"aaa")
    b.write(0, b"bbbb")
    a.destroy()
    assert (a.real_size(), a.read(0, 10)) == (0, b"")
    a.destroy()  # again: nothing to do, no error
    factory.open("b/T/0/consumequeue/00000000000000000000").destroy()  # never written
    assert b.read(0, 10) == b"bbbb"
    a.write(0, b"again")  # a destroyed path can be written anew
    assert a.read(0, 10) == b"again"


def test_backends_at_different_roots_do_not_share_objects(factory: FileSegmentFactory, tmp_path: Path):
    other = FileSegmentFactory(factory.provider, tmp_path / "other-tier", factory.s3)
    factory.open("b/T/0/commitlog/00000000000000000000").write(0, b"mine")
    assert other.open("b/T/0/commitlog/00000000000000000000").real_size() == 0


def test_a_run_of_segments_opened_together_reads_as_each_alone(factory: FileSegmentFactory):
    """``open_run`` (a compaction group's parts): the same bytes as opening each; on s3 from one LIST, which
    neither the run's neighbours, nor a merged object beside a part, nor other queues' objects confuse. Then
    ``destroy_run`` deletes the run and nothing beside it."""
    def path(queue: int, base: int, kind: FileSegmentType = CL) -> str:
        return segment_path("b", "T", queue, kind, base)

    run = [path(0, 1000), path(0, 2000), path(0, 3000)]  # 2000 is never written
    factory.open(path(0, 0)).write(0, b"before")
    factory.open(run[0]).write(0, b"one-")
    factory.open(run[0]).write(4, b"two")  # two chunks
    factory.open(run[2]).write(0, b"0123456789")
    factory.open(run[2]).write(4, b"ab")  # the shadowed tail must not come back
    factory.open(run[0] + ".c0a1b2c3").write(0, b"merged")  # sorts before run[0]'s own chunks
    factory.open(path(0, 4000)).write(0, b"after")
    factory.open(path(1, 1000)).write(0, b"other queue")
    factory.open(path(0, 1000, CQ)).write(0, b"other type")

    lists: list[str] = []
    if factory.provider is TieredBackendServiceProvider.S3:
        assert factory.s3 is not None
        events = s3_client(factory.s3).meta.events
        events.register("before-call.s3.ListObjectsV2", lambda **kw: lists.append("LIST"), unique_id="count-lists")
    try:
        segments = factory.open_run(run)
        got = [s.read(0, size) for s, size in zip(segments, (7, 0, 6), strict=True)]  # as compaction reads
    finally:
        if factory.provider is TieredBackendServiceProvider.S3:
            events.unregister("before-call.s3.ListObjectsV2", unique_id="count-lists")
    assert [s.path for s in segments] == run
    assert got == [b"one-two", b"", b"0123ab"] == [factory.open(p).read(0, 100) for p in run]
    if factory.provider is TieredBackendServiceProvider.S3:
        assert lists == ["LIST"]
        with pytest.raises(ValueError, match="one directory"):
            factory.open_run([run[0], path(1, 1000)])

    assert factory.destroy_run(run) == [7, 0, 6]  # the sizes they had
    assert [factory.open(p).real_size() for p in run] == [0, 0, 0]
    assert [factory.open(p).read(0, 100) for p in (path(0, 0), run[0] + ".c0a1b2c3", path(0, 4000))] == \
        [b"before", b"merged", b"after"]  # the neighbours stay


# -- metadata: topics and queues -------------------------------------------------------------------------
def test_topic_round_trip(store: RocksDBTieredMetadataStore):
    assert store.get_topic("T") is None
    store.update_topic(TopicMetadata("T", 3_600_000))
    store.update_topic(TopicMetadata("A", -1, status=1))
    assert store.get_topic("T") == TopicMetadata("T", 3_600_000, 0)
    store.update_topic(TopicMetadata("T", 60_000))  # update in place
    assert store.get_topic("T") == TopicMetadata("T", 60_000)
    assert list(store.iterate_topics()) == [TopicMetadata("A", -1, 1), TopicMetadata("T", 60_000)]


def test_queue_round_trip_and_iteration_by_topic(store: RocksDBTieredMetadataStore):
    assert store.get_queue("T", 0) is None
    queues = [QueueMetadata("T", q, q, 10 * q, update_ms=q + 1) for q in (0, 1, 256)]
    others = [QueueMetadata("TX", 0, 0, 1), QueueMetadata("S", 2, 5, 6)]  # "TX" extends "T": not one of its queues
    for m in [*queues, *others]:
        store.update_queue(m)
    assert store.get_queue("T", 256) == queues[2]
    assert list(store.iterate_queues("T")) == queues  # by queue id, 256 after 1
    assert list(store.iterate_queues("TX")) == [others[0]]
    assert list(store.iterate_queues("nope")) == []
    assert sorted((m.topic, m.queue_id) for m in store.iterate_queues()) == [("S", 2), ("T", 0), ("T", 1),
                                                                              ("T", 256), ("TX", 0)]
    store.update_queue(replace(queues[1], max_offset=99))
    assert store.get_queue("T", 1).max_offset == 99


# -- metadata: segments ----------------------------------------------------------------------------------
def test_segment_round_trip_keeps_every_field(store: RocksDBTieredMetadataStore):
    m = seg("T", 1, CQ, 28 * 5, 56, SegmentStatus.OPEN, create_ms=1, begin_ms=2, end_ms=3, seal_ms=4)
    store.update_segment(m)
    [got] = store.iterate_segments("T", 1, CQ)
    assert got == m and got is not m
    assert type(got.type) is FileSegmentType and type(got.status) is SegmentStatus
    assert got.end_offset == 28 * 7
    assert list(store.iterate_segments("T", 1, CL)) == [] and list(store.iterate_segments("T", 0, CQ)) == []


def test_segments_iterate_in_base_offset_order_per_queue_and_type(store: RocksDBTieredMetadataStore):
    bases = [1 << 33, 0, 4096, 255, 256, 1 << 20, 65536]  # byte order of the key must be numeric order
    for base in bases:
        store.update_segment(seg("T", 0, CL, base, 10))
    store.update_segment(seg("T", 0, CQ, 7, 28))
    store.update_segment(seg("T", 1, CL, 3, 1))
    store.update_segment(seg("TX", 0, CL, 1, 1))
    assert [m.base_offset for m in store.iterate_segments("T", 0, CL)] == sorted(bases)
    assert [m.base_offset for m in store.iterate_segments("T", 0, CQ)] == [7]
    assert [m.base_offset for m in store.iterate_segments("T", 1, CL)] == [3]
    assert [m.topic for m in store.iterate_segments("TX", 0, CL)] == ["TX"]


def test_update_and_delete_segment(store: RocksDBTieredMetadataStore):
    a, b = seg("T", 0, CL, 0, 10, SegmentStatus.OPEN), seg("T", 0, CL, 10, 5)
    store.update_segment(a)
    store.update_segment(b)
    store.update_segment(replace(a, size=10, status=SegmentStatus.SEALED, seal_ms=9))
    assert [(m.base_offset, m.status, m.seal_ms) for m in store.iterate_segments("T", 0, CL)] == [
        (0, SegmentStatus.SEALED, 9), (10, SegmentStatus.SEALED, 0)]
    store.delete_segment(a)
    assert list(store.iterate_segments("T", 0, CL)) == [b]


def test_delete_topic_removes_its_queues_and_segments_only(store: RocksDBTieredMetadataStore):
    for topic in ("T", "TX", "S"):
        store.update_topic(TopicMetadata(topic, -1))
        for q in (0, 1):
            store.update_queue(QueueMetadata(topic, q, 0, 1))
            for t in (CL, CQ):
                store.update_segment(seg(topic, q, t, 0, 1))
                store.update_segment(seg(topic, q, t, 100, 1))
    store.delete_topic("T")
    assert store.get_topic("T") is None
    assert list(store.iterate_queues("T")) == [] and store.get_queue("T", 1) is None
    assert all(list(store.iterate_segments("T", q, t)) == [] for q in (0, 1) for t in (CL, CQ))
    for topic in ("TX", "S"):  # untouched, "TX" included though it starts with "T"
        assert store.get_topic(topic) is not None
        assert len(list(store.iterate_queues(topic))) == 2
        assert all(len(list(store.iterate_segments(topic, q, t))) == 2 for q in (0, 1) for t in (CL, CQ))
    store.delete_topic("never-existed")  # nothing to do


def test_replace_segments_swaps_exactly_matching_records(store: RocksDBTieredMetadataStore):
    olds = [seg("T", 0, CL, 0, 100), seg("T", 0, CL, 100, 50), seg("T", 0, CL, 150, 70)]
    tail = seg("T", 0, CL, 220, 5, SegmentStatus.OPEN)
    for m in [*olds, tail]:
        store.update_segment(m)
    merged = seg("T", 0, CL, 0, 220, create_ms=5)  # compacted into the first one's key
    assert store.replace_segments([replace(m) for m in olds], merged) is True
    assert list(store.iterate_segments("T", 0, CL)) == [merged, tail]


@pytest.mark.parametrize("change", ["size", "status", "end_ms", "missing"])
def test_replace_segments_changes_nothing_unless_every_old_record_matches(store: RocksDBTieredMetadataStore,
                                                                          change: str):
    olds = [seg("T", 0, CL, 0, 100), seg("T", 0, CL, 100, 50, end_ms=7)]
    for m in olds:
        store.update_segment(m)
    stored_then = list(store.iterate_segments("T", 0, CL))
    stale = [replace(m) for m in olds]
    if change == "size":  # a later commit grew it
        stale[1].size = 40
    elif change == "status":
        stale[1].status = SegmentStatus.OPEN
    elif change == "end_ms":
        stale[1].end_ms = 8
    else:  # expired and deleted in the meantime
        store.delete_segment(olds[1])
        stored_then = stored_then[:1]
    new = seg("T", 0, CL, 50, 100)  # a key of its own: it must not appear either
    assert store.replace_segments(stale, new) is False
    assert list(store.iterate_segments("T", 0, CL)) == stored_then


def test_replace_with_an_empty_old_list_just_adds(store: RocksDBTieredMetadataStore):
    new = seg("T", 0, CQ, 0, 28)
    assert store.replace_segments([], new) is True
    assert list(store.iterate_segments("T", 0, CQ)) == [new]


def test_checkpoint_and_everything_survive_reopening(tmp_path: Path):
    store = RocksDBTieredMetadataStore(tmp_path / "meta")
    assert store.get_checkpoint() == 0
    store.set_checkpoint(123_456_789_012)
    store.update_topic(TopicMetadata("T", 5))
    store.update_queue(QueueMetadata("T", 0, 1, 2))
    store.update_segment(seg("T", 0, CL, 0, 9, SegmentStatus.OPEN))
    store.close()
    store = RocksDBTieredMetadataStore(tmp_path / "meta")
    try:
        assert store.get_checkpoint() == 123_456_789_012
        assert store.get_topic("T") == TopicMetadata("T", 5)
        assert list(store.iterate_topics()) == [TopicMetadata("T", 5)]  # the checkpoint key is no topic
        assert store.get_queue("T", 0) == QueueMetadata("T", 0, 1, 2)
        assert [m.size for m in store.iterate_segments("T", 0, CL)] == [9]
        store.set_checkpoint(0)
        assert store.get_checkpoint() == 0
    finally:
        store.close()

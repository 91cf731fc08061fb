"""Tiered storage units: FlatAppendFile on both backends, with a RocksDB metadata store."""

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.tiered.file.flat_append_file import FlatAppendFile
from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.metadata.tiered_metadata_store import FileSegmentMetadata, SegmentStatus
from broker.tiered.provider.file_segment import FileSegmentType
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider, segment_path
from tests.disk.rocksdb_refusal import rocksdb_disk_full

CL, CQ = FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE
Open = Callable[..., FlatAppendFile]


class Env:
    """A backend and a metadata store on a temp dir; ``restart`` reopens the metadata store (RocksDB) as a
    new process would, keeping the backend's objects (memory objects live as long as this process)."""

    def __init__(self, provider: TieredBackendServiceProvider, tmp_path: Path) -> None:
        self.factory = FileSegmentFactory(provider, tmp_path / "tier")
        self.meta_root = tmp_path / "meta"
        self.metadata = RocksDBTieredMetadataStore(self.meta_root)

    def open(self, file_type: FileSegmentType = CL, segment_size: int = 100, unit: int = 1,
             start_offset: int = 0) -> FlatAppendFile:
        f = FlatAppendFile(self.factory, self.metadata, "b", "T", 0, file_type, segment_size, unit)
        f.load(start_offset)
        return f

    def restart(self) -> None:
        self.metadata.close()
        self.metadata = RocksDBTieredMetadataStore(self.meta_root)

    def records(self, file_type: FileSegmentType = CL):
        return list(self.metadata.iterate_segments("T", 0, file_type))


# s3 is covered by the provider units and the acceptance suite (a server round trip per write here)
@pytest.fixture(params=[TieredBackendServiceProvider.POSIX, TieredBackendServiceProvider.MEMORY])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = Env(request.param, tmp_path)
    yield e
    e.metadata.close()


def entry(i: int, size: int) -> bytes:
    return bytes([i % 251]) * size


def append_all(f: FlatAppendFile, entries: list[bytes], t0: int = 1000) -> list[int]:
    return [f.append(e, t0 + i) for i, e in enumerate(entries)]


# -- append and commit -----------------------------------------------------------------------------------
def test_append_is_buffered_until_commit(env: Env):
    f = env.open()
    assert (f.min_offset, f.commit_offset, f.append_offset, f.buffered_bytes) == (0, 0, 0, 0)
    assert append_all(f, [b"abc", b"defgh"]) == [0, 3]
    assert (f.commit_offset, f.append_offset, f.buffered_bytes) == (0, 8, 8)
    assert f.read(0, 8) == b"" and f.segments == []  # readers see committed bytes only
    assert f.commit() == 8
    assert (f.commit_offset, f.append_offset, f.buffered_bytes) == (8, 8, 0)
    assert f.read(0, 8) == b"abcdefgh" and f.read(2, 4) == b"cdef"
    [m] = env.records()
    assert (m.path, m.base_offset, m.size, m.status) == (segment_path("b", "T", 0, CL, 0), 0, 8, SegmentStatus.OPEN)
    assert (m.begin_ms, m.end_ms) == (1000, 1001) and m.create_ms > 0
    assert env.factory.open(m.path).read(0, 100) == b"abcdefgh"
    assert f.commit() == 8  # nothing buffered: nothing changes
    assert f.total_bytes() == 8


def test_an_empty_file_starts_at_its_start_offset(env: Env):
    f = env.open(CQ, segment_size=28 * 4, unit=28, start_offset=28 * 10)
    assert (f.min_offset, f.commit_offset, f.append_offset) == (280, 280, 280)
    assert f.append(entry(0, 28), 5) == 280
    f.commit()
    assert [(m.base_offset, m.path) for m in env.records(CQ)] == [(280, segment_path("b", "T", 0, CQ, 280))]
    assert f.read(280, 28) == entry(0, 28) and f.read(0, 28) == b""


def test_an_entry_larger_than_a_segment_is_refused(env: Env):
    f = env.open(segment_size=100)
    with pytest.raises(ValueError, match="101 bytes exceed a COMMIT_LOG segment of 100 bytes"):
        f.append(b"x" * 101, 1)
    assert f.append(b"x" * 100, 1) == 0  # exactly one segment is fine


# -- rolling -----------------------------------------------------------------------------------------------
def test_roll_when_full_keeps_every_entry_in_one_segment(env: Env):
    f = env.open(segment_size=100)
    sizes = [30, 30, 30, 30, 50, 50, 1, 99, 7, 60, 45, 100, 3]
    entries = [entry(i, s) for i, s in enumerate(sizes)]
    offsets = append_all(f, entries)
    f.commit()
    assert f.commit_offset == sum(sizes)
    records = env.records()
    assert [(m.base_offset, m.size) for m in records] == [(0, 90), (90, 80), (170, 51), (221, 99), (320, 67),
                                                           (387, 45), (432, 100), (532, 3)]
    assert [m.status for m in records] == [SegmentStatus.SEALED] * 7 + [SegmentStatus.OPEN]
    assert all(m.seal_ms > 0 for m in records[:-1]) and records[-1].seal_ms == 0
    assert [m.base_offset for m in f.segments] == [m.base_offset for m in records]
    for off, e in zip(offsets, entries, strict=True):
        m = f.segment_at(off)
        assert m is not None and m.base_offset <= off and off + len(e) <= m.end_offset  # no straddling
        assert f.read(off, len(e)) == e
    for m in records:  # each object holds exactly its committed bytes
        assert env.factory.open(m.path).real_size() == m.size


def test_roll_across_several_commits_and_time_ranges(env: Env):
    f = env.open(segment_size=100)
    append_all(f, [entry(0, 60)], t0=10)
    f.commit()
    append_all(f, [entry(1, 30)], t0=20)
    f.commit()
    append_all(f, [entry(2, 30), entry(3, 40)], t0=30)  # 30 does not fit in the 10 left: a new segment
    f.commit()
    records = env.records()
    assert [(m.base_offset, m.size, m.status) for m in records] == [(0, 90, SegmentStatus.SEALED),
                                                                     (90, 70, SegmentStatus.OPEN)]
    assert [(m.begin_ms, m.end_ms) for m in records] == [(10, 20), (30, 31)]


def test_read_across_segment_boundaries(env: Env):
    f = env.open(segment_size=64)
    entries = [entry(i, 20) for i in range(20)]  # 3 per segment: 60-byte segments
    append_all(f, entries)
    f.commit()
    stream = b"".join(entries)
    assert len(f.segments) == 7
    for offset, length in [(0, 400), (50, 30), (59, 2), (60, 60), (10, 250), (119, 122), (399, 1), (395, 100)]:
        assert f.read(offset, length) == stream[offset : offset + length], (offset, length)
    assert f.read(400, 10) == b"" and f.read(1000, 10) == b""
    assert f.segment_at(400) is None and f.segment_at(59).base_offset == 0 and f.segment_at(60).base_offset == 60


# -- load --------------------------------------------------------------------------------------------------
def test_load_after_restart_resumes_exactly(env: Env):
    f = env.open(segment_size=100)
    first = [entry(i, 35) for i in range(5)]
    append_all(f, first)
    f.commit()
    before = [(m.base_offset, m.size, m.status) for m in f.segments]
    env.restart()
    g = env.open(segment_size=100)
    assert [(m.base_offset, m.size, m.status) for m in g.segments] == before
    assert (g.min_offset, g.commit_offset, g.append_offset) == (f.min_offset, f.commit_offset, f.append_offset)
    assert g.read(0, 1000) == b"".join(first)
    more = [entry(9, 35), entry(10, 35)]
    assert append_all(g, more) == [175, 210]
    g.commit()
    assert g.read(0, 1000) == b"".join(first + more)
    assert [(m.base_offset, m.size) for m in env.records()] == [(0, 70), (70, 70), (140, 70), (210, 35)]


def test_load_ignores_a_start_offset_once_segments_exist(env: Env):
    f = env.open(CQ, segment_size=280, unit=28, start_offset=56)
    append_all(f, [entry(1, 28)])
    f.commit()
    g = env.open(CQ, segment_size=280, unit=28, start_offset=0)
    assert (g.min_offset, g.commit_offset) == (56, 84)


def test_crash_after_backend_write_before_metadata_update_adopts_the_real_size(env: Env):
    f = env.open(segment_size=100)
    append_all(f, [entry(1, 30)])
    f.commit()
    [m] = env.records()
    # the process died after the backend stored a 25-byte upload but before the metadata recorded it
    env.factory.open(m.path).write(30, entry(2, 25))
    env.restart()
    g = env.open(segment_size=100)
    assert (g.commit_offset, g.append_offset) == (55, 55)
    assert [r.size for r in env.records()] == [55]  # reconciled in the metadata store too
    assert g.append(entry(3, 40), 7) == 55  # new bytes go after the adopted ones
    assert g.append(entry(4, 10), 8) == 95  # and roll as usual: 5 bytes are left
    g.commit()
    assert [(r.base_offset, r.size, r.status) for r in env.records()] == [(0, 95, SegmentStatus.SEALED),
                                                                          (95, 10, SegmentStatus.OPEN)]
    assert g.read(0, 105) == entry(1, 30) + entry(2, 25) + entry(3, 40) + entry(4, 10)


class RefusingMetadata:
    """The metadata store refuses its next ``times`` writes of a segment's record after bytes went in (not the
    record of a new, empty segment), as RocksDB on a full disk does (a bare Exception carrying RocksDB's
    status)."""

    def __init__(self, env: Env, monkeypatch: pytest.MonkeyPatch, times: int) -> None:
        self.left = times
        update = env.metadata.update_segment

        def refusing(m: FileSegmentMetadata) -> None:
            if self.left > 0 and m.size > 0:
                self.left -= 1
                raise rocksdb_disk_full("tiered_metadata/000004.log")
            update(m)

        monkeypatch.setattr(env.metadata, "update_segment", refusing)


@pytest.mark.parametrize("refused", [1, 2])
def test_a_commit_whose_record_the_metadata_store_refused_writes_its_bytes_once(env: Env, monkeypatch, refused: int):
    """The bytes reached the backend and their segment's record did not (a full local disk under an S3 tier): the
    commit fails, and the next one neither writes those bytes again nor loses them; its record catches up, and a
    restart finds exactly what was appended. (Written again, the bytes would sit where the next appends' units
    point: the tier would serve other records there.) Two refusals: the retry's first write, of the record left
    behind, is refused too."""
    f = env.open(segment_size=100)
    first = [entry(1, 30), entry(2, 30)]
    append_all(f, first)
    refusing = RefusingMetadata(env, monkeypatch, refused)
    with pytest.raises(Exception, match="No space left on device"):
        f.commit()
    more = [entry(3, 30), entry(4, 30)]  # the fourth rolls into a new segment
    append_all(f, more, t0=2000)
    for _retry in range(refused):  # the upload thread's retries: the last one goes through
        try:
            f.commit()
            break
        except Exception as exc:
            assert "No space left on device" in str(exc)
    assert refusing.left == 0
    stream = b"".join(first + more)
    assert (f.commit_offset, f.append_offset) == (120, 120)
    assert f.read(0, 1000) == stream
    assert [(r.base_offset, r.size) for r in env.records()] == [(0, 90), (90, 30)]
    env.restart()
    g = env.open(segment_size=100)
    assert (g.commit_offset, g.append_offset) == (120, 120) and g.read(0, 1000) == stream


def test_a_seal_the_metadata_store_refused_leaves_the_segment_open_until_a_retry_seals_it(env: Env, monkeypatch):
    """Sealed in its record first, then in memory: a refused seal is retried, never two open segments."""
    f = env.open(segment_size=100)
    append_all(f, [entry(1, 60)])
    f.commit()
    append_all(f, [entry(2, 50)], t0=2000)  # no room: the first segment is sealed, a second opened
    RefusingMetadata(env, monkeypatch, 1)
    with pytest.raises(Exception, match="No space left on device"):
        f.commit()
    assert [m.status for m in f.segments] == [SegmentStatus.OPEN]
    f.commit()
    expected = [(0, 60, SegmentStatus.SEALED), (60, 50, SegmentStatus.OPEN)]
    assert [(r.base_offset, r.size, r.status) for r in env.records()] == expected
    env.restart()
    g = env.open(segment_size=100)
    assert [(m.base_offset, m.size, m.status) for m in g.segments] == expected
    assert g.read(0, 1000) == entry(1, 60) + entry(2, 50)


class Killed(BaseException):
    """The process dies here."""


# (segment, first upload, next entry) in units: the adopted bytes fill the segment, or leave less room than the
# next entry (a run of units is not split to fill a segment): either way it is sealed with no write of its own
@pytest.mark.parametrize("units", [(2, 2, 1), (4, 2, 3)], ids=["full", "no-room-for-the-next"])
def test_bytes_adopted_after_a_crash_never_date_their_segment_before_the_restart(env: Env,
                                                                                units: tuple[int, int, int]):
    """A new segment's record is written (no bytes, no times) before its first upload; a crash after the upload but
    before the record says so leaves the bytes with no store time. The restart adopts them with its own time:
    dated 0, the segment would look 56 years old once sealed and the tier's expiry would drop it, unread."""
    unit = 28
    segment_units, uploaded, following = units
    f = env.open(CQ, segment_size=unit * segment_units, unit=unit)
    created = env.metadata.update_segment

    def dies_after_the_upload(m) -> None:  # the record's creation goes through, the size update does not
        if m.size > 0:
            raise Killed
        created(m)

    env.metadata.update_segment = dies_after_the_upload  # type: ignore[method-assign]
    append_all(f, [entry(i, unit) for i in range(uploaded)], t0=5_000)
    with pytest.raises(Killed):
        f.commit()
    env.restart()
    restarted_ms = int(time.time() * 1000)
    g = env.open(CQ, segment_size=unit * segment_units, unit=unit)
    assert g.commit_offset == uploaded * unit  # the upload's bytes are adopted
    append_all(g, [entry(9, unit * following)], t0=9_000)
    g.commit()  # no room for it in the adopted segment: sealed, and the next one opened
    first, second = env.records(CQ)
    assert (first.status, second.status) == (SegmentStatus.SEALED, SegmentStatus.OPEN)
    assert first.end_ms >= restarted_ms and first.begin_ms >= restarted_ms, first
    assert g.read(0, 100 * unit) == b"".join(entry(i, unit) for i in range(uploaded)) + entry(9, unit * following)


def test_a_segment_sealed_undated_before_this_was_fixed_is_dated_at_load(env: Env):
    f = env.open(segment_size=100)
    append_all(f, [entry(1, 60), entry(2, 60)])  # [0,60) sealed, [60,120) open
    f.commit()
    sealed = env.records()[0]
    sealed.begin_ms = sealed.end_ms = 0  # what a broker adopting a crash's bytes used to leave
    env.metadata.update_segment(sealed)
    env.restart()
    loaded_ms = int(time.time() * 1000)
    env.open(segment_size=100)
    first, second = env.records()
    assert first.end_ms >= loaded_ms and first.begin_ms >= loaded_ms, first
    assert (second.begin_ms, second.end_ms) == (1001, 1001)  # dated ones keep their times


def test_crash_mid_upload_of_a_unit_file_cuts_the_torn_unit(env: Env):
    unit = 28
    f = env.open(CQ, segment_size=unit * 10, unit=unit)
    append_all(f, [entry(i, unit) for i in range(3)])
    f.commit()
    [m] = env.records(CQ)
    env.factory.open(m.path).write(3 * unit, entry(7, unit) + entry(8, unit)[:13])  # one whole unit, one torn
    env.restart()
    g = env.open(CQ, segment_size=unit * 10, unit=unit)
    assert g.commit_offset == 4 * unit  # the whole unit stays, the torn part does not count
    assert [r.size for r in env.records(CQ)] == [4 * unit]
    assert g.read(3 * unit, 100) == entry(7, unit)
    g.append(entry(9, unit), 1)
    g.commit()
    assert g.read(0, 1000) == b"".join(entry(i, unit) for i in (0, 1, 2, 7, 9))
    assert env.factory.open(m.path).real_size() == 5 * unit  # the torn bytes were overwritten, not kept


def units_over_three_segments(env: Env) -> FlatAppendFile:
    unit = 28
    f = env.open(CQ, segment_size=unit * 4, unit=unit)
    append_all(f, [entry(i, unit) for i in range(10)])  # segments of 4, 4 and 2 units
    f.commit()
    return f


@pytest.mark.parametrize("cut", [6, 8])  # inside the second segment; at its end (the third one goes whole)
def test_a_cut_is_made_in_the_backend_too_and_a_restart_keeps_it(env: Env, cut: int):
    """Cut in the records only, the objects kept the units: a load after a crash took the last object's bytes back
    as a crash's unrecorded tail, serving the units of records the local commitlog had lost."""
    unit = 28
    f = units_over_three_segments(env)
    f.cut_to(cut * unit)
    assert f.commit_offset == cut * unit
    env.restart()
    g = env.open(CQ, segment_size=unit * 4, unit=unit)
    assert g.commit_offset == cut * unit
    assert g.read(0, 1000) == b"".join(entry(i, unit) for i in range(cut))
    g.append(entry(99, unit), 1)
    g.commit()
    assert g.read(0, 1000) == b"".join(entry(i, unit) for i in range(cut)) + entry(99, unit)


def test_a_crash_between_the_backend_cut_and_its_records_serves_nothing_past_the_cut(env: Env, monkeypatch):
    unit = 28
    f = units_over_three_segments(env)

    def crash(*_: object) -> None:
        raise KeyboardInterrupt("the process died")

    monkeypatch.setattr(env.metadata, "update_segment", crash)
    monkeypatch.setattr(env.metadata, "delete_segment", crash)
    with pytest.raises(KeyboardInterrupt):
        f.cut_to(6 * unit)
    monkeypatch.undo()
    assert [r.size for r in env.records(CQ)] == [4 * unit, 4 * unit, 2 * unit]  # the records as they were
    env.restart()
    g = env.open(CQ, segment_size=unit * 4, unit=unit)
    assert g.commit_offset == 6 * unit  # the shorter object ends the stream; the later record goes
    assert g.read(0, 1000) == b"".join(entry(i, unit) for i in range(6))


def test_a_stale_object_without_a_record_is_reset_when_its_segment_opens(env: Env):
    # a crash after the backend created the next segment's object but before its record was written
    env.factory.open(segment_path("b", "T", 0, CL, 0)).write(0, b"stale bytes")
    f = env.open(segment_size=100)
    assert f.commit_offset == 0
    append_all(f, [b"fresh"])
    f.commit()
    assert f.read(0, 100) == b"fresh"
    assert env.factory.open(segment_path("b", "T", 0, CL, 0)).real_size() == 5


# -- expiry ------------------------------------------------------------------------------------------------
def fill_segments(env: Env) -> FlatAppendFile:
    f = env.open(segment_size=100)
    append_all(f, [entry(i, 50) for i in range(7)])  # segments [0,100) [100,200) [200,300) and open [300,350)
    f.commit()
    return f


def test_expire_before_marks_expired_sealed_segments(env: Env):
    f = fill_segments(env)
    paths = [m.path for m in f.segments]
    gone = f.expire_before(250, delete=False)  # [200,300) ends after 250: it stays
    assert [m.base_offset for m in gone] == [0, 100]
    assert (f.min_offset, f.commit_offset) == (100 * 2, 350)
    assert f.read(0, 50) == b"" and f.read(200, 50) == entry(4, 50)
    assert [(m.base_offset, m.status) for m in env.records()] == [
        (0, SegmentStatus.EXPIRED), (100, SegmentStatus.EXPIRED), (200, SegmentStatus.SEALED),
        (300, SegmentStatus.OPEN)]
    assert [env.factory.open(p).real_size() for p in paths[:2]] == [100, 100]  # the cleanup job deletes them
    assert f.expire_before(250, delete=False) == []  # idempotent
    env.restart()
    g = env.open(segment_size=100)
    assert (g.min_offset, g.commit_offset, [m.base_offset for m in g.segments]) == (200, 350, [200, 300])
    assert g.append(entry(9, 10), 1) == 350


def test_expire_before_with_delete_removes_objects_and_records(env: Env):
    f = fill_segments(env)
    paths = [m.path for m in f.segments]
    gone = f.expire_before(10_000, delete=True)  # the open segment never expires
    assert [m.base_offset for m in gone] == [0, 100, 200]
    assert [(m.base_offset, m.status) for m in env.records()] == [(300, SegmentStatus.OPEN)]
    assert [env.factory.open(p).real_size() for p in paths] == [0, 0, 0, 50]
    assert (f.min_offset, f.commit_offset, f.read(300, 50)) == (300, 350, entry(6, 50))
    env.restart()
    g = env.open(segment_size=100)
    assert (g.min_offset, g.commit_offset) == (300, 350)
    append_all(g, [entry(10, 60)])
    g.commit()
    assert [(m.base_offset, m.size) for m in env.records()] == [(300, 50), (350, 60)]


@pytest.mark.parametrize("dies_at", ["destroy", "delete_segment"])
def test_a_crash_while_expired_segments_are_deleted_loses_none_of_the_segments_after_them(env: Env, monkeypatch,
                                                                                        dies_at: str):
    """The process dies between removing an expired segment's object and its record (or while removing the
    object). A sealed record whose object is gone reads at the restart as bytes lost mid-stream, and everything
    after it is cut: the record says EXPIRED before the object goes, so the restart skips it instead."""
    f = fill_segments(env)
    def die(*_: object) -> None:
        raise Killed()

    if dies_at == "destroy":
        monkeypatch.setattr(type(env.factory.open(f.segments[0].path)), "destroy", die)
    else:
        monkeypatch.setattr(env.metadata, "delete_segment", die)
    with pytest.raises(Killed):
        f.expire_before(150, delete=True)  # [0,100) goes; [100,200) ends after 150 and stays
    monkeypatch.undo()
    env.restart()
    g = env.open(segment_size=100)
    assert (g.min_offset, g.commit_offset) == (100, 350)
    assert g.read(100, 250) == b"".join(entry(i, 50) for i in range(2, 7))
    assert g.expire_before(150, delete=True) == []  # nothing more is due: the deletion the crash cut is finished
    assert [(m.base_offset, m.status) for m in env.records()] == [(100, SegmentStatus.SEALED),
                                                                   (200, SegmentStatus.SEALED),
                                                                   (300, SegmentStatus.OPEN)]
    assert env.factory.open(segment_path("b", "T", 0, CL, 0)).real_size() == 0


@pytest.mark.parametrize("delete", [False, True], ids=["mark", "delete"])
def test_an_expiry_the_metadata_store_refuses_part_way_serves_what_is_still_recorded_sealed(env: Env, monkeypatch,
                                                                                          delete: bool):
    """The second EXPIRED record is refused (a full disk): the segment recorded EXPIRED before it is gone, the
    refused one and those after it are served as their records say (SEALED), and the next pass expires them."""
    f = fill_segments(env)
    update = env.metadata.update_segment
    writes = itertools.count(1)

    def second_refused(m: FileSegmentMetadata) -> None:
        if next(writes) == 2:
            raise rocksdb_disk_full("tiered_metadata/000004.log")
        update(m)

    monkeypatch.setattr(env.metadata, "update_segment", second_refused)
    with pytest.raises(Exception, match="No space left"):
        f.expire_before(10_000, delete=delete)
    assert [m.base_offset for m in f.segments] == [100, 200, 300]
    assert (f.min_offset, f.read(100, 250)) == (100, b"".join(entry(i, 50) for i in range(2, 7)))
    assert [(m.base_offset, m.status) for m in env.records()][-3:] == [
        (100, SegmentStatus.SEALED), (200, SegmentStatus.SEALED), (300, SegmentStatus.OPEN)]
    monkeypatch.undo()
    assert [m.base_offset for m in f.expire_before(10_000, delete=delete)] == [100, 200]
    assert [m.base_offset for m in f.segments] == [300]
    expired = [m.base_offset for m in env.records() if m.status is SegmentStatus.EXPIRED]
    assert expired == ([] if delete else [0, 100, 200])


def test_a_deletion_the_metadata_store_refuses_is_done_by_the_next_pass(env: Env, monkeypatch):
    """Recorded EXPIRED, its object gone, its record's deletion refused (a full disk): not served, and the next
    pass deletes the record, without waiting for a restart."""
    f = fill_segments(env)

    def refused(_m: FileSegmentMetadata) -> None:
        raise rocksdb_disk_full("tiered_metadata/000004.log")

    monkeypatch.setattr(env.metadata, "delete_segment", refused)
    with pytest.raises(Exception, match="No space left"):
        f.expire_before(150, delete=True)  # [0,100) goes
    assert (env.records()[0].base_offset, env.records()[0].status) == (0, SegmentStatus.EXPIRED)
    assert [m.base_offset for m in f.segments] == [100, 200, 300]
    monkeypatch.undo()
    assert f.expire_before(150, delete=True) == []  # nothing more is due, and the refused deletion is done
    assert [m.base_offset for m in env.records()] == [100, 200, 300]


def test_expire_before_the_first_segment_end_does_nothing(env: Env):
    f = fill_segments(env)
    assert f.expire_before(99, delete=True) == []
    assert f.min_offset == 0 and len(env.records()) == 4


@pytest.mark.parametrize("provider", [TieredBackendServiceProvider.POSIX, TieredBackendServiceProvider.MEMORY])
def test_every_listable_backend_lists_what_was_written_under_a_prefix(provider: TieredBackendServiceProvider,
                                                                      tmp_path: Path):
    factory = FileSegmentFactory(provider, tmp_path / "tier")
    for path in ("b1/T/0/a", "b1/T/1/b", "b2/T/0/c"):
        factory.open(path).write(0, b"x")
    gone = factory.open("b1/T/0/d")
    gone.write(0, b"y")
    gone.destroy()
    listed = factory.list_objects("b1")
    assert sorted(listed) == ["b1/T/0/a", "b1/T/1/b"] and all(t > 0 for t in listed.values())


def test_a_replacement_whose_merged_object_is_gone_or_short_is_refused(env: Env):
    """The compaction's swap checked only the records: a merged object another run's garbage collection had deleted
    was swapped in, and readers skipped the messages of the records that named it. Now refused (the job withdraws)
    unless the object holds the parts' bytes."""
    f = env.open(segment_size=10)
    append_all(f, [entry(i, 10) for i in range(3)])  # three segments: two sealed, the last open
    f.commit()
    old = [s for s in f.segments if s.status is SegmentStatus.SEALED]
    assert len(old) == 2
    merged = FileSegmentMetadata(old[0].path + ".c000000000001", CL, "T", 0, 0, 20, SegmentStatus.SEALED)
    assert f.replace(old, merged) is False  # never written (was True)
    env.factory.open(merged.path).write(0, entry(0, 10))
    assert f.replace(old, merged) is False  # cut short
    env.factory.open(merged.path).write(10, entry(1, 10))
    assert f.replace(old, merged) is True
    assert f.segments[0].path == merged.path


def test_a_deleted_topic_takes_the_objects_expired_for_the_cleanup_job_with_it(env: Env):
    """Segments expired at runtime for the cleanup job (tieredStoreDeleteFileEnable=false) stayed in the tier for
    good when their topic was deleted: the deletion took only what the file still read, then dropped every record,
    so the cleanup job never heard of them again (a restart did not remove them either)."""
    f = fill_segments(env)
    paths = [m.path for m in f.segments]
    assert [m.base_offset for m in f.expire_before(250, delete=False)] == [0, 100]
    f.destroy_objects()
    assert [env.factory.open(p).real_size() for p in paths] == [0, 0, 0, 0]

"""Tiered storage units: the read-ahead cache (issue 18) and flat files reading through it, on the memory
backend with its reads counted, and on S3 (moto's server) through the flat file store's default."""

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.tiered.file.flat_append_file import FlatAppendFile
from broker.tiered.file.flat_file_store import FlatFileStore
from broker.tiered.file.read_ahead_cache import ReadAhead, ReadAheadCache
from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.provider.file_segment import FileSegment, FileSegmentType
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider

CL = FileSegmentType.COMMIT_LOG


class CountingSegment(FileSegment):
    def __init__(self, inner: FileSegment, reads: list[tuple[str, int, int]]) -> None:
        super().__init__(inner.path)
        self.inner, self.reads = inner, reads

    def real_size(self) -> int:
        return self.inner.real_size()

    def write(self, position: int, data: bytes) -> None:
        self.inner.write(position, data)

    def read(self, position: int, length: int) -> bytes:
        self.reads.append((self.path, position, length))
        return self.inner.read(position, length)

    def destroy(self) -> None:
        self.inner.destroy()


class CountingFactory(FileSegmentFactory):
    def __init__(self, root: str) -> None:
        super().__init__(TieredBackendServiceProvider.MEMORY, root)
        self.reads: list[tuple[str, int, int]] = []

    def open(self, path: str) -> FileSegment:
        return CountingSegment(super().open(path), self.reads)


@pytest.fixture
def factory() -> Iterator[CountingFactory]:
    f = CountingFactory(f"read-ahead-{uuid.uuid4().hex}")
    yield f


@pytest.fixture
def metadata(tmp_path: Path) -> Iterator[RocksDBTieredMetadataStore]:
    m = RocksDBTieredMetadataStore(tmp_path / "meta")
    yield m
    m.close()


def open_file(factory: FileSegmentFactory, metadata: RocksDBTieredMetadataStore, cache: ReadAheadCache,
              block: int = 16, segment_size: int = 40) -> FlatAppendFile:
    f = FlatAppendFile(factory, metadata, "b", "T", 0, CL, segment_size, read_ahead=ReadAhead(cache, block))
    f.load(0)
    return f


def data(n: int, seed: int = 0) -> bytes:
    return bytes((seed + i) % 251 for i in range(n))


# -- the cache -------------------------------------------------------------------------------------------
def test_cache_is_bounded_least_recently_used_out():
    cache = ReadAheadCache(10)
    cache.put(("a",), b"1234")
    cache.put(("b",), b"5678")
    assert cache.get(("a",)) == b"1234"  # a is now the most recent
    cache.put(("c",), b"90")
    assert cache.size == 10 and len(cache) == 3
    cache.put(("d",), b"xy")  # over: the least recently used (b) goes
    assert cache.get(("b",)) is None and cache.get(("a",)) == b"1234" and cache.size == 8
    cache.put(("a",), b"z")  # replaced: its old size is given back
    assert cache.size == 5
    cache.put(("big",), b"x" * 11)  # larger than the whole cache: not kept, nothing evicted for it
    assert cache.get(("big",)) is None and len(cache) == 3
    with pytest.raises(ValueError):
        ReadAhead(cache, 0)


# -- flat files reading ahead ----------------------------------------------------------------------------
def test_reads_are_served_from_blocks(factory: CountingFactory, metadata: RocksDBTieredMetadataStore):
    f = open_file(factory, metadata, ReadAheadCache(1 << 20))
    payload = [data(10, i) for i in range(8)]  # two segments of four entries
    for p in payload:
        f.append(p, 1)
    f.commit()
    stream = b"".join(payload)
    assert [m.size for m in f.segments] == [40, 40]
    factory.reads.clear()
    got = b"".join(f.read(o, 4) for o in range(0, 80, 4))  # small sequential reads
    assert got == stream
    # one backend read per 16-byte block of each segment (clipped to the segment), not one per call
    first, second = (m.path for m in f.segments)
    assert factory.reads == [(first, 0, 16), (first, 16, 16), (first, 32, 8),
                             (second, 0, 16), (second, 16, 16), (second, 32, 8)]
    factory.reads.clear()
    assert f.read(5, 70) == stream[5:75] and f.read(0, 200) == stream  # across blocks and segments, short at end
    assert factory.reads == []


def test_a_growing_segment_fetches_only_what_was_committed_since(factory: CountingFactory,
                                                               metadata: RocksDBTieredMetadataStore):
    f = open_file(factory, metadata, ReadAheadCache(1 << 20), block=32, segment_size=100)
    f.append(data(10), 1)
    f.commit()
    assert f.read(0, 10) == data(10)
    f.append(data(10, 7), 2)
    f.commit()
    factory.reads.clear()
    assert f.read(0, 20) == data(10) + data(10, 7)
    assert [(pos, n) for _, pos, n in factory.reads] == [(10, 10)]  # only the new bytes
    assert f.read(10, 10) == data(10, 7) and len(factory.reads) == 1


def test_forgotten_bytes_are_not_served_from_the_cache(factory: CountingFactory,
                                                       metadata: RocksDBTieredMetadataStore):
    f = open_file(factory, metadata, ReadAheadCache(1 << 20), block=32, segment_size=100)
    f.append(b"a" * 20, 1)
    f.commit()
    assert f.read(0, 20) == b"a" * 20
    f.cut_to(10)  # the consume queue after its commitlog lost bytes: uploaded again, different bytes
    f.append(b"b" * 10, 2)
    f.commit()
    assert f.read(0, 20) == b"a" * 10 + b"b" * 10


def test_no_cache_room_still_reads(factory: CountingFactory, metadata: RocksDBTieredMetadataStore):
    f = open_file(factory, metadata, ReadAheadCache(8), block=16)
    f.append(data(30), 1)
    f.commit()
    assert f.read(3, 20) == data(30)[3:23]


# -- the flat file store: S3 reads ahead by default, the others do not -----------------------------------
def test_store_reads_ahead_on_s3_only(s3_server, tmp_path: Path, metadata: RocksDBTieredMetadataStore):
    posix = FlatFileStore(FileSegmentFactory(TieredBackendServiceProvider.POSIX, tmp_path / "tier"), metadata, "b",
                          1 << 20, 28 * 100)
    assert posix.read_ahead_cache is None
    s3 = FlatFileStore(FileSegmentFactory(TieredBackendServiceProvider.S3, "tier", s3_server.config()), metadata,
                       "b", 1 << 20, 28 * 100)
    assert s3.read_ahead_cache is not None
    flat = s3.get_or_create("T", 0, 0)
    record = bytearray(b"r" * 100)
    for run in range(3):  # three group commits: three chunks in each segment's S3 object
        flat.append_run(record * 50, [(run * 50 + i, 100, 0, 1000 + i) for i in range(50)])
        flat.commit()
    got = []
    offset = 0
    while offset < 150:
        messages, _, offset = flat.messages(offset, 7, 1 << 20, None)
        got += messages
    assert len(got) == 150 and all(len(m) == 100 for m in got)
    assert s3.read_ahead_cache.hits > s3.read_ahead_cache.misses


def test_a_reader_past_the_middle_of_a_block_has_the_next_one_fetched(factory: CountingFactory,
                                                                       metadata: RocksDBTieredMetadataStore):
    cache = ReadAheadCache(1 << 20)
    f = open_file(factory, metadata, cache, block=16, segment_size=100)
    f.append(data(40), 1)
    f.commit()
    factory.reads.clear()
    assert f.read(0, 4) == data(40)[:4]  # the block read: nothing ahead yet (maybe a read at a random place)
    assert f.read(4, 6) == data(40)[4:10]  # read again: block 16 in the background
    deadline = time.monotonic() + 5
    while len(factory.reads) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [(pos, n) for _, pos, n in factory.reads] == [(0, 16), (16, 16)]
    assert f.read(10, 20) == data(40)[10:30]  # served from the fetched block: 16 is not read again
    # This read went past block 16's middle, so block 32's read-ahead may already have landed (a busy machine).
    reads = [(pos, n) for _, pos, n in factory.reads]
    assert reads[:2] == [(0, 16), (16, 16)] and reads[2:] in ([], [(32, 8)]), reads
    cache.shutdown()
    assert f.read(30, 10) == data(40)[30:] and len(factory.reads) == 3  # still reads, nothing ahead
    cache.prefetch(("x",), lambda: None)
    assert not cache.holds(("x",), 0)

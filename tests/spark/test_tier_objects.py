"""The compaction's verification of a merged object, and the driver's calls on many objects (no Spark needed)."""

import threading
import time
from pathlib import Path

import pytest

from broker.tiered.provider.file_segment import FileSegmentType
from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider, segment_path
from broker.tiered.provider.s3_file_segment import s3_client
from common.message_codec import encode_record
from spark_jobs.tier_objects import (
    OBJECT_CALLS_IN_FLIGHT,
    RETIRED,
    UNCOMMITTED_MERGED_S,
    CorruptObjectError,
    Tier,
    TierLocation,
    delete_objects,
    garbage,
    merged_name,
    object_size,
    on_each_object,
    read_object,
    read_run,
    retire,
    verify,
    write_object,
)


def _records(base: int, n: int, topic: bytes = b"T", queue_id: int = 0) -> bytes:
    """As an older version uploaded them: each one's physical offset is its tiered position."""
    out, pos = [], base
    for i in range(n):
        r = encode_record(topic, queue_id, b"body-%d" % i, b"KEYS\x01k\x02", queue_offset=i, physical_offset=pos)
        out.append(r)
        pos += len(r)
    return b"".join(out)


def _kept_records(n: int, topic: bytes = b"T", queue_id: int = 0) -> bytes:
    """As the tier holds them now: each keeps its local commitlog offset (other queues' records between them)."""
    return b"".join(encode_record(topic, queue_id, b"body-%d" % i, b"", queue_offset=i,
                                  physical_offset=10**6 + 5000 * i) for i in range(n))


def test_verify_counts_records_of_an_intact_object():
    data = _records(4096, 50)
    assert verify(data, 0, 4096, len(data)) == 50
    assert verify(data, 0, 4096, len(data), ("T", 0)) == 50


def test_verify_takes_records_that_keep_their_commitlog_offsets_and_refuses_another_queue_s():
    """A tiered record keeps its commitlog offset (its message id): that field says nothing of where it sits in the
    tier (before, a merge of such records was refused: 'no valid record'). What makes an object the queue's is its
    records' topic and queue id."""
    data = _kept_records(20) + _records(7000, 5)  # an older version's records merged with today's
    assert verify(data, 0, 4096, len(data), ("T", 0)) == 25
    for other in (("T", 1), ("TX", 0), ("U", 0)):
        with pytest.raises(CorruptObjectError):
            verify(data, 0, 4096, len(data), other)
    with pytest.raises(CorruptObjectError):
        verify(data + _kept_records(1, b"T", 3), 0, 0, len(data) + len(_kept_records(1, b"T", 3)), ("T", 0))


# size, magic, queue id, the topic, the body's end (the physical offset field is not one: a record keeps its
# commitlog offset there, which says nothing of its place in the object)
@pytest.mark.parametrize("where", [0, 4, 15, 91, 95, -1])
def test_verify_refuses_a_flipped_byte(where: int):
    data = bytearray(_records(0, 5))
    data[where] ^= 0x40
    with pytest.raises(CorruptObjectError):
        verify(bytes(data), 0, 0, len(data), ("T", 0))


def test_verify_refuses_a_short_object_and_torn_units():
    data = _records(0, 3)
    with pytest.raises(CorruptObjectError):
        verify(data[:-1], 0, 0, len(data))
    with pytest.raises(CorruptObjectError):
        verify(data[:-1], 0, 0, len(data) - 1)
    with pytest.raises(CorruptObjectError):
        verify(b"x" * 30, 1, 0, 30)
    assert verify(b"x" * 56, 1, 0, 56) == 2


def test_on_each_object_overlaps_calls_and_keeps_the_paths_order():
    lock = threading.Lock()
    running = [0, 0]  # now, most at once

    def call(tier: str, path: str) -> str:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(0.02)  # a round trip to an object store
        with lock:
            running[0] -= 1
        return f"{tier}:{path}"

    paths = [f"p{i}" for i in range(40)]
    assert on_each_object(call, "root", paths) == [f"root:{p}" for p in paths]
    assert 1 < running[1] <= OBJECT_CALLS_IN_FLIGHT


def test_on_each_object_raises_only_once_every_call_ended():
    ended: list[str] = []

    def call(_: str, path: str) -> None:
        if path == "p0":
            raise OSError("the store refused p0")
        time.sleep(0.05)
        ended.append(path)

    with pytest.raises(OSError, match="refused p0"):
        on_each_object(call, "root", [f"p{i}" for i in range(5)])
    assert sorted(ended) == ["p1", "p2", "p3", "p4"]  # none left running behind the failure


@pytest.mark.parametrize("backend", ["posix", "s3"])
def test_read_run_reads_each_part_up_to_its_recorded_size(backend: str, tmp_path: Path,
                                                         request: pytest.FixtureRequest):
    """A compaction group's parts: each up to the size its record gives (a longer object is cut there, a
    shorter one comes back short for verify to refuse), in the parts' order."""
    tier: Tier = str(tmp_path)
    if backend == "s3":
        config = request.getfixturevalue("s3_server").config()
        tier = TierLocation(TieredBackendServiceProvider.S3, "tier", config)
    paths = [segment_path("b", "T", 0, FileSegmentType.COMMIT_LOG, base) for base in range(0, 4000, 100)]
    objects = [b"%03d" % i + b"x" * 10 for i in range(len(paths))]
    for path, data in zip(paths, objects, strict=True):
        write_object(tier, path, data)
    sizes = [3 if i % 2 else 13 for i in range(len(paths))]
    sizes[-1] = 20  # recorded longer than the object holds
    assert read_run(tier, list(zip(paths, sizes, strict=True))) == \
        [data[:size] for data, size in zip(objects, sizes, strict=True)]


@pytest.mark.parametrize("backend", ["posix", "s3"])
def test_delete_objects_frees_objects_and_markers_and_keeps_their_neighbours(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest):
    """Garbage of two queues' directories goes with its markers; neighbours and their markers stay; a path
    already gone frees nothing. On s3 it takes a listing and one batch delete a directory, not a request a
    chunk."""
    tier: Tier = str(tmp_path)
    if backend == "s3":
        tier = TierLocation(TieredBackendServiceProvider.S3, "tier", request.getfixturevalue("s3_server").config())

    def path(queue: int, base: int) -> str:
        return segment_path("b", "T", queue, FileSegmentType.COMMIT_LOG, base)

    garbage = [path(q, base) for q in (0, 1) for base in range(0, 1000, 100)]
    kept = [path(0, 5000), path(1, 50), path(2, 0)]
    for p in garbage + kept:
        write_object(tier, p, p.encode())
        retire(tier, p)
    gone = path(0, 7000)  # never written: deleted before a crash
    requests: list[str] = []
    if backend == "s3":
        events = s3_client(tier.s3).meta.events
        events.register("before-call.s3", lambda model, **kw: requests.append(model.name), unique_id="count")
    try:
        freed = delete_objects(tier, [*garbage, gone])
    finally:
        if backend == "s3":
            events.unregister("before-call.s3", unique_id="count")
    assert freed == sum(len(p) for p in garbage)

    def exists(p: str) -> bool:
        return (tmp_path / p).exists() if backend == "posix" else object_size(tier, p) > 0

    assert not [p for p in [*garbage, gone] if exists(p) or exists(p + RETIRED)]
    assert [read_object(tier, p) for p in kept] == [p.encode() for p in kept]
    assert all(exists(p + RETIRED) for p in kept)
    if backend == "s3":
        assert sorted(requests) == ["DeleteObjects"] * 2 + ["ListObjectsV2"] * 2, requests


@pytest.mark.parametrize("backend", ["posix", "s3"])
def test_an_unreferenced_merged_object_never_retired_is_left_for_hours(backend: str, tmp_path: Path,
                                                                       request: pytest.FixtureRequest):
    """Another compaction run's merged object, written and not committed yet, looks like garbage: deleted after the
    grace period, a run started meanwhile took it from the run about to swap it in (records of a gone object, their
    messages skipped by readers). Left for UNCOMMITTED_MERGED_S; a plain unreferenced object, or a retired one, goes
    after the grace period as before."""
    tier: Tier = str(tmp_path)
    if backend == "s3":
        tier = TierLocation(TieredBackendServiceProvider.S3, "tier", request.getfixturevalue("s3_server").config())
    part = segment_path("b", "T", 0, FileSegmentType.COMMIT_LOG, 0)
    merged, plain = merged_name(part), segment_path("b", "T", 0, FileSegmentType.COMMIT_LOG, 100)
    for p in (merged, plain):
        write_object(tier, p, b"x" * 10)
    grace = 30.0
    soon = time.time() + grace + 5
    assert garbage(tier, "b", set(), grace, now=soon) == [plain]  # was [merged, plain]
    assert sorted(garbage(tier, "b", set(), grace, now=soon + UNCOMMITTED_MERGED_S)) == sorted([merged, plain])

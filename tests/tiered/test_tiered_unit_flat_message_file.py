"""Tiered storage units: FlatMessageFile (a queue's tiered commitlog and consume queue) on both backends."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.store.consume_queue.consume_queue_store import BoundaryType
from broker.tiered.file.flat_message_file import UNIT, FlatMessageFile, record_queue_offset
from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.metadata.tiered_metadata_store import SegmentStatus
from broker.tiered.provider.file_segment import FileSegmentType
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider
from common.message_codec import decode_record, encode_record

TOPIC = "TierT"
CL_SIZE = 1024
CQ_SIZE = UNIT * 8


class Env:
    def __init__(self, provider: TieredBackendServiceProvider, tmp_path: Path) -> None:
        self.factory = FileSegmentFactory(provider, tmp_path / "tier")
        self.meta_root = tmp_path / "meta"
        self.metadata = RocksDBTieredMetadataStore(self.meta_root)

    def open(self, first_queue_offset: int = 0, cl_size: int = CL_SIZE, cq_size: int = CQ_SIZE) -> FlatMessageFile:
        flat = FlatMessageFile(self.factory, self.metadata, "b", TOPIC, 0, cl_size, cq_size)
        flat.load(first_queue_offset)
        return flat

    def restart(self) -> None:
        self.metadata.close()
        self.metadata = RocksDBTieredMetadataStore(self.meta_root)


# s3 is covered by the provider units and the acceptance suite (a server round trip per write here)
@pytest.fixture(params=[TieredBackendServiceProvider.POSIX, TieredBackendServiceProvider.MEMORY])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = Env(request.param, tmp_path)
    yield e
    e.metadata.close()


def record(q: int, store_time: int, body_size: int = 0) -> bytes:
    """A record as the local commitlog holds it (its commitlog offset, ``local_offset(q)``, is far from the tier's
    position)."""
    body = f"message-{q}|".encode() + bytes(range(256)) * (body_size // 256) + b"z" * (body_size % 256)
    return encode_record(TOPIC.encode(), 0, body, b"KEYS\x01k" + str(q).encode() + b"\x02", queue_offset=q,
                         physical_offset=local_offset(q), store_timestamp=store_time, born_timestamp=store_time - 1)


def local_offset(q: int) -> int:
    return 1_000_000 + 997 * q


def add(flat: FlatMessageFile, first: int, count: int, t0: int = 1_000, step: int = 10, body_size: int = 40,
        tags=lambda q: q % 3) -> dict[int, bytes]:
    out = {}
    for q in range(first, first + count):
        out[q] = record(q, t0 + step * q, body_size + (q * 37) % 90)
        flat.append(bytearray(out[q]), q, tags(q), t0 + step * q)
    return out


def check_messages(flat: FlatMessageFile, originals: dict[int, bytes], start: int, count: int) -> None:
    msgs, total, next_offset = flat.messages(start, count, 1 << 30, None)
    assert next_offset == start + len(msgs) and len(msgs) == count
    assert total == sum(len(m) for m in msgs)
    for q, raw in zip(range(start, start + count), msgs, strict=True):
        [(_, size, _, store_time)] = flat.units(q, 1)
        assert size == len(originals[q])
        assert raw == originals[q]  # as the local commitlog has it: its commitlog offset (its id) too
        m = decode_record(raw, verify_crc=True)
        assert (m.queue_offset, m.physical_offset, m.store_timestamp) == (q, local_offset(q), store_time)
        assert m.body.startswith(f"message-{q}|".encode())


# -- append, commit, messages ----------------------------------------------------------------------------
def test_messages_are_the_records_as_the_local_commitlog_has_them(env: Env):
    flat = env.open()
    originals = add(flat, 0, 30)
    assert (flat.min_offset, flat.max_offset, flat.dispatch_offset) == (0, 0, 30)
    assert flat.messages(0, 10, 1 << 20, None) == ([], 0, 0)  # nothing committed yet
    flat.commit()
    assert (flat.min_offset, flat.max_offset, flat.dispatch_offset) == (0, 30, 30)
    assert len(flat.commit_log.segments) > 1 and len(flat.consume_queue.segments) == 4  # both rolled
    check_messages(flat, originals, 0, 30)
    check_messages(flat, originals, 7, 9)
    check_messages(flat, originals, 29, 1)
    positions = [u[0] for u in flat.units(0, 30)]
    assert positions == sorted(positions) and positions[0] == 0  # this queue's records back to back
    assert flat.messages(30, 5, 1 << 20, None) == ([], 0, 30)
    queue = env.metadata.get_queue(TOPIC, 0)
    assert (queue.min_offset, queue.max_offset) == (0, 30) and queue.update_ms > 0
    assert flat.segment_count() == len(flat.commit_log.segments) + len(flat.consume_queue.segments)
    assert flat.total_bytes() == sum(map(len, originals.values())) + 30 * UNIT


def test_messages_respect_count_and_byte_limits(env: Env):
    flat = env.open()
    originals = add(flat, 0, 10)
    flat.commit()
    sizes = [len(originals[q]) for q in range(10)]
    msgs, total, next_offset = flat.messages(2, 10, sizes[2] + sizes[3], None)
    assert (len(msgs), total, next_offset) == (2, sizes[2] + sizes[3], 4)
    msgs, total, next_offset = flat.messages(2, 10, 1, None)  # the first message always goes, however big
    assert (len(msgs), next_offset) == (1, 3)
    assert flat.messages(5, 3, 1 << 20, None)[2] == 8


def test_appending_out_of_order_is_refused(env: Env):
    flat = env.open(first_queue_offset=5)
    with pytest.raises(AssertionError):
        flat.append(bytearray(record(4, 1)), 4, 0, 1)
    add(flat, 5, 1)
    with pytest.raises(AssertionError):
        flat.append(bytearray(record(7, 1)), 7, 0, 1)


def test_a_queue_starting_above_zero(env: Env):
    flat = env.open(first_queue_offset=1000)
    originals = add(flat, 1000, 12)
    flat.commit()
    assert (flat.min_offset, flat.max_offset) == (1000, 1012)
    check_messages(flat, originals, 1000, 12)
    assert flat.units(0, 5) == [] and flat.messages(0, 3, 1 << 20, None)[0] == []


def test_tags_filtering_skips_but_advances(env: Env):
    flat = env.open()
    originals = add(flat, 0, 20, tags=lambda q: 100 + q % 3)
    flat.commit()
    msgs, total, next_offset = flat.messages(0, 20, 1 << 20, {101})
    assert [decode_record(m).queue_offset for m in msgs] == [q for q in range(20) if q % 3 == 1]
    assert next_offset == 20 and total == sum(len(originals[q]) for q in range(20) if q % 3 == 1)
    for m in msgs:
        q = decode_record(m).queue_offset
        assert m == originals[q]
    msgs, _, next_offset = flat.messages(0, 20, 1 << 20, {100, 102})
    assert [decode_record(m).queue_offset for m in msgs] == [q for q in range(20) if q % 3 != 1]
    assert flat.messages(0, 6, 1 << 20, {999}) == ([], 0, 6)  # none match: the scanned range is skipped


def test_reload_after_restart_serves_the_same_messages(env: Env):
    flat = env.open()
    originals = add(flat, 0, 25)
    flat.commit()
    env.restart()
    again = env.open(0)
    assert (again.min_offset, again.max_offset, again.dispatch_offset) == (0, 25, 25)
    check_messages(again, originals, 0, 25)
    originals |= add(again, 25, 5)
    again.commit()
    check_messages(again, originals, 0, 30)


# -- offset by time ----------------------------------------------------------------------------------------
def brute_lower(times: dict[int, int], t: int, hi: int) -> int:
    return next((q for q in sorted(times) if times[q] >= t), hi)


def brute_upper(times: dict[int, int], t: int, lo: int) -> int:
    return max((q for q in times if times[q] <= t), default=lo)


def test_offset_by_time_matches_brute_force_with_ties(env: Env):
    flat = env.open(first_queue_offset=5, cq_size=UNIT * 4)
    stamps = [100, 100, 105, 105, 105, 110, 120, 120, 130, 130, 131, 140, 140, 140, 140, 150]
    times = {}
    for i, t in enumerate(stamps):
        q = 5 + i
        times[q] = t
        flat.append(bytearray(record(q, t)), q, 0, t)
    flat.commit()
    lo, hi = 5, 5 + len(stamps)
    assert (flat.min_offset, flat.max_offset) == (lo, hi)
    for t in range(90, 160):
        assert flat.offset_by_time(t, BoundaryType.LOWER) == brute_lower(times, t, hi), t
        assert flat.offset_by_time(t, BoundaryType.UPPER) == brute_upper(times, t, lo), t
    assert flat.offset_by_time(105, BoundaryType.LOWER) == 7 and flat.offset_by_time(105, BoundaryType.UPPER) == 9


def test_offset_by_time_of_an_empty_file(env: Env):
    flat = env.open(first_queue_offset=3)
    assert flat.offset_by_time(1, BoundaryType.LOWER) == 3 and flat.offset_by_time(1, BoundaryType.UPPER) == 3


# -- expiry ------------------------------------------------------------------------------------------------
def expired_setup(env: Env) -> tuple[FlatMessageFile, dict[int, bytes]]:
    flat = env.open(cl_size=512, cq_size=UNIT * 4)
    originals = add(flat, 0, 30, t0=10_000, step=1_000, body_size=60)
    flat.commit()
    return flat, originals


def assert_consistent(flat: FlatMessageFile) -> None:
    """Every unit served points into a live commitlog segment."""
    for position, size, _, _ in flat.units(flat.min_offset, flat.max_offset - flat.min_offset):
        seg = flat.commit_log.segment_at(position)
        assert seg is not None and position + size <= seg.end_offset


@pytest.mark.parametrize("delete", [False, True])
def test_expire_moves_the_consume_queue_first_then_the_commitlog(env: Env, delete: bool):
    flat, originals = expired_setup(env)
    cq_segments = list(flat.consume_queue.segments)  # 4 units (store times 1 s apart) each
    cutoff = cq_segments[2].end_ms + 1  # the first three end before it: they go; the fourth does not
    assert cutoff == 10_000 + 1_000 * 11 + 1
    cl_before = [(m.base_offset, m.end_offset, m.status) for m in flat.commit_log.segments]
    n = flat.expire(cutoff, delete)
    assert flat.min_offset == 12 == cq_segments[2].end_offset // UNIT
    first_position = flat.units(12, 1)[0][0]
    cl_gone = [end for _, end, status in cl_before if end <= first_position and status is SegmentStatus.SEALED]
    assert cl_gone and n == 3 + len(cl_gone)
    assert flat.commit_log.min_offset == cl_gone[-1] <= first_position
    assert_consistent(flat)
    check_messages(flat, originals, 12, 18)
    assert flat.messages(0, 5, 1 << 20, None)[0] == []
    queue = env.metadata.get_queue(TOPIC, 0)
    assert (queue.min_offset, queue.max_offset) == (12, 30)
    statuses = {m.base_offset: m.status for m in env.metadata.iterate_segments(TOPIC, 0, FileSegmentType.CONSUME_QUEUE)}
    if delete:
        assert min(statuses) == 12 * UNIT
    else:
        assert [statuses[m.base_offset] for m in cq_segments[:3]] == [SegmentStatus.EXPIRED] * 3
    assert flat.expire(cutoff, delete) == 0  # nothing more is old enough
    env.restart()
    again = env.open(queue.min_offset)
    assert (again.min_offset, again.max_offset, again.commit_log.min_offset) == (12, 30, flat.commit_log.min_offset)
    check_messages(again, originals, 12, 18)


def test_a_read_from_below_the_minimum_expiry_moved_counts_on_from_what_it_read(env: Env):
    """The caller saw the offset in the tier, then expiry moved the minimum past it: the next offset counted from
    the asked offset, not from the first unit read, so it fell short and those messages came twice (or, with the
    whole request expired, made no progress)."""
    flat, _ = expired_setup(env)
    flat.expire(list(flat.consume_queue.segments)[2].end_ms + 1, False)
    assert flat.min_offset == 12
    records, _, next_offset = flat.messages(9, 10, 1 << 20, None)
    assert [record_queue_offset(r) for r in records] == list(range(12, 19)) and next_offset == 19
    assert flat.messages(0, 5, 1 << 20, None) == ([], 0, 12)


def test_expire_keeps_the_open_segments_and_nothing_young(env: Env):
    flat, originals = expired_setup(env)
    assert flat.expire(10_000, delete=True) == 0  # everything is at or after the cutoff
    assert flat.min_offset == 0
    flat.expire(10**15, delete=True)  # everything is old: only the open segments stay
    assert [m.status for m in flat.consume_queue.segments] == [SegmentStatus.OPEN]
    assert flat.min_offset == flat.consume_queue.segments[0].base_offset // UNIT
    assert_consistent(flat)
    check_messages(flat, originals, flat.min_offset, 30 - flat.min_offset)


# -- crashes between the two commits -----------------------------------------------------------------------
def test_crash_between_commitlog_and_consume_queue_commit(env: Env):
    flat = env.open()
    originals = add(flat, 0, 6)
    flat.commit()
    add(flat, 6, 4)  # uploaded to the commitlog only, then the process died
    flat.commit_log.commit()
    orphan_end = flat.commit_log.commit_offset
    env.restart()
    again = env.open(0)
    assert (again.max_offset, again.dispatch_offset) == (6, 6)
    assert again.commit_log.commit_offset == orphan_end  # the unreferenced bytes stay
    assert all(p + s <= orphan_end for p, s, _, _ in again.units(0, 100))  # no unit points past the commitlog
    check_messages(again, originals, 0, 6)
    # the dispatcher replays queue offsets 6.. (with whatever store time the local store has)
    replayed = add(again, 6, 4, t0=2_000)
    again.commit()
    originals |= replayed
    assert again.max_offset == 10
    assert again.units(6, 1)[0][0] == orphan_end  # after the unreferenced bytes
    check_messages(again, originals, 0, 10)
    assert again.commit_log.commit_offset == orphan_end + sum(len(replayed[q]) for q in range(6, 10))
    env.restart()
    check_messages(env.open(0), originals, 0, 10)  # and it loads again


def test_crash_after_consume_queue_upload_before_its_metadata(env: Env):
    flat = env.open()
    originals = add(flat, 0, 5)
    flat.commit()
    units = flat.consume_queue.read(0, 5 * UNIT)
    originals |= add(flat, 5, 2)
    flat.commit_log.commit()  # commitlog complete; the consume queue's bytes reach the backend, its record not
    last = flat.consume_queue.segments[-1]
    cq_tail = [flat.consume_queue._buffer[i][0] for i in range(2)]
    env.factory.open(last.path).write(last.size, b"".join(cq_tail))
    env.restart()
    again = env.open(0)
    assert again.max_offset == 7 and again.consume_queue.read(0, 5 * UNIT) == units
    check_messages(again, originals, 0, 7)
    originals |= add(again, 7, 1)
    again.commit()
    check_messages(again, originals, 0, 8)

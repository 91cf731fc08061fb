"""Crash recovery of the message store: SIGKILLed writers, torn tails, corrupt records, stale consume queues.

The writer is ``tests.store.crash_child`` in a subprocess: it appends under SYNC_FLUSH and reports every
acknowledged message as ``queue_id queue_offset sha256(body)`` in an ack file, so after a SIGKILL the test
knows exactly what the store promised to keep. Every test runs against both consume queue store types
(``store_type`` fixture): files, and RocksDB with its WAL off (a unit is durable only once RocksDB flushed).
"""

import hashlib
import itertools
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker.store.checkpoint import OffsetCheckpoint
from broker.store.config import StoreType
from broker.store.consume_queue.rocksdb_consume_queue_store import OFFSET, UNIT, open_db, read_durable_checkpoint
from broker.store.get_message_result import GetMessageStatus
from broker.store.message_store import MessageStore
from broker.store.put_message_result import PutMessageStatus
from common.message_codec import (
    BATCH_CONTINUES,
    BLANK_MAGIC,
    BLANK_MIN_LENGTH,
    MESSAGE_MAGIC,
    OFFSET_BATCH_MARK,
    check_record,
    decode_record,
)
from common.message_properties import encode_properties, tags_code
from tests.store.crash_child import (
    COMMIT_LOG_SEGMENT,
    CONSUME_QUEUE_SEGMENT,
    QUEUES,
    TOPIC,
    open_ack_file,
    store_config,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
CQ_UNIT = struct.Struct(">qiq")
START_TIMEOUT_S = 20.0
ROCKSDB = StoreType.DEFAULT_ROCKSDB
ROCKSDB_DIR = "consumequeue_rocksdb"

Acks = dict[tuple[int, int], str]  # (queue id, queue offset) -> sha256 of the body
LogRecord = tuple[int, int, int, int]  # physical offset, size, tags code, store time


# -- helpers -------------------------------------------------------------------------------------------
@contextmanager
def opened_store(store_dir: Path, store_type: str) -> Iterator[MessageStore]:
    """The store as the child opens it (SYNC_FLUSH, tiny segments), started; shut down cleanly at the end."""
    store = MessageStore(store_config(str(store_dir), store_type=store_type))
    store.start()
    try:
        yield store
    finally:
        store.shutdown()


class Child:
    """A running ``crash_child``; its stderr goes to a file so a failure can show it."""

    def __init__(self, store_dir: Path, ack_file: Path, log_file: Path, store_type: str, *args: str) -> None:
        self.log_file = log_file
        with open(log_file, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.store.crash_child", str(store_dir), str(ack_file),
                 "--store-type", store_type, *args],
                cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
            )
        self._buffer = b""

    def stderr_tail(self) -> str:
        return self.log_file.read_text(errors="replace")[-3000:]

    def wait_line(self, expected: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Read stdout lines until ``expected`` arrives; fail on EOF or at the deadline."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while True:
            lines = self._buffer.split(b"\n")
            for i, line in enumerate(lines[:-1]):
                if line.decode(errors="replace").strip() == expected:
                    self._buffer = b"\n".join(lines[i + 1 :])
                    return
            left = deadline - time.monotonic()
            assert left > 0, f"child printed no {expected!r} within {timeout_s}s; stderr:\n{self.stderr_tail()}"
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 4096)
                assert chunk, (f"child exited (rc={self.proc.wait()}) before {expected!r}; "
                               f"stderr:\n{self.stderr_tail()}")
                self._buffer += chunk

    def kill(self) -> None:
        """SIGKILL; the child must still have been running (it never exits on its own)."""
        rc = self.proc.poll()
        assert rc is None, f"child died on its own with rc={rc}; stderr:\n{self.stderr_tail()}"
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=10) == -signal.SIGKILL
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def read_acks(ack_file: Path) -> Acks:
    """Every whole line of the ack file; a (queue, offset) acknowledged twice is a lost message."""
    acks: Acks = {}
    if not ack_file.exists():
        return acks
    lines = ack_file.read_bytes().split(b"\n")[:-1]  # a cut last line was never fully reported
    for line in lines:
        qid, offset, digest = line.decode().split()
        key = (int(qid), int(offset))
        assert key not in acks, f"queue {key[0]} offset {key[1]} was acknowledged twice: the first one is lost"
        acks[key] = digest
    return acks


def count_ack_lines(ack_file: Path) -> int:
    try:
        return ack_file.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def expected_max_offsets(acks: Acks) -> dict[int, int]:
    out = dict.fromkeys(range(QUEUES), 0)
    for qid, offset in acks:
        out[qid] = max(out[qid], offset + 1)
    return out


def read_one(store: MessageStore, qid: int, offset: int):
    result = store.get_message(TOPIC, qid, offset, 1)
    assert result.status is GetMessageStatus.FOUND, f"queue {qid} offset {offset}: {result.status}"
    assert len(result.messages) == 1, f"queue {qid} offset {offset}: {len(result.messages)} records"
    msg = decode_record(result.messages[0])
    assert (msg.topic, msg.queue_id, msg.queue_offset) == (TOPIC, qid, offset), f"wrong record for {qid}/{offset}"
    return msg


def commit_log_records(store: MessageStore) -> dict[tuple[int, int], LogRecord]:
    """Walk the commitlog files from the first record to the recovered end: (queue, offset) -> commitlog
    offset, size, tags code and store time of every record (each must be whole and pass its CRC)."""
    records: dict[tuple[int, int], LogRecord] = {}
    root = Path(store.config.store_path_root_dir) / "commitlog"
    end = store.commit_log.max_offset()
    for segment in sorted(root.iterdir()):
        base = int(segment.name)
        if base >= end:
            break
        data = segment.read_bytes()
        pos = 0
        while base + pos < end and (size := check_record(data, pos, len(data), base + pos, verify_crc=True)) > 0:
            msg = decode_record(data, pos)
            key = (msg.queue_id, msg.queue_offset)
            assert msg.topic == TOPIC and key not in records, f"queue {key[0]} offset {key[1]} is in the log twice"
            records[key] = (base + pos, size, tags_code(msg.tags), msg.store_timestamp)
            pos += size
        assert base + pos == min(end, base + len(data)) or size == 0, f"bad record at {base + pos} below the end {end}"
    return records


def verify_store(store: MessageStore, acks: Acks) -> dict[int, int]:
    """Every acknowledged message reads back at its offset with its bytes; every queue reads back whole
    and contiguous from min to max; the queues index exactly the records of the recovered commitlog.
    Returns each queue's max offset."""
    for (qid, offset), digest in sorted(acks.items()):
        msg = read_one(store, qid, offset)
        assert hashlib.sha256(msg.body).hexdigest() == digest, f"queue {qid} offset {offset}: body differs"
    served: dict[tuple[int, int], int] = {}
    max_offsets = {}
    for qid, highest_acked in expected_max_offsets(acks).items():
        lo, hi = store.min_offset(TOPIC, qid), store.max_offset(TOPIC, qid)
        assert lo == 0, f"queue {qid}: min offset {lo}, nothing was expired"
        assert hi >= highest_acked, f"queue {qid}: max offset {hi} < highest acknowledged + 1 = {highest_acked}"
        offset = lo
        while offset < hi:
            result = store.get_message(TOPIC, qid, offset, 32)
            assert result.status is GetMessageStatus.FOUND, f"queue {qid} offset {offset} of {hi}: {result.status}"
            for raw in result.messages:
                msg = decode_record(raw)  # verifies the CRC
                assert (msg.topic, msg.queue_id, msg.queue_offset) == (TOPIC, qid, offset), (
                    f"queue {qid}: record at offset {offset} says {msg.topic}/{msg.queue_id}/{msg.queue_offset}")
                served[(qid, offset)] = msg.physical_offset
                offset += 1
            assert result.next_begin_offset == offset
        overflow = store.get_message(TOPIC, qid, hi, 1)
        assert overflow.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE)
        max_offsets[qid] = hi
    in_log = commit_log_records(store)
    missing = sorted(in_log.keys() - served.keys())[:5]
    assert not missing, f"records in the commitlog that no queue serves (queue, offset): {missing}"
    assert served == {key: record[0] for key, record in in_log.items()}, (
        "the queues point at other records than the commitlog holds")
    check_units(store, in_log)
    return max_offsets


def check_units(store: MessageStore, in_log: dict[tuple[int, int], LogRecord]) -> None:
    """The consume queue itself, unit by unit, against the commitlog walk: each queue's units from min to
    max are exactly its records in order (physical offset, size, tags code; RocksDB: and store time)."""
    cqs = store.consume_queue_store
    indexed: set[tuple[int, int]] = set()
    for qid in range(QUEUES):
        lo, hi = cqs.min_offset(TOPIC, qid), cqs.max_offset(TOPIC, qid)
        units = []
        while batch := cqs.read_units(TOPIC, qid, lo + len(units), 64):
            units.extend(batch)
        assert lo + len(units) == hi, f"queue {qid}: {len(units)} units between {lo} and {hi}"
        for offset, unit in enumerate(units, lo):
            assert (qid, offset) in in_log, f"queue {qid} offset {offset}: a unit but no record in the commitlog"
            assert tuple(unit) == in_log[(qid, offset)][:3], f"queue {qid} offset {offset}: {unit}"
            indexed.add((qid, offset))
        if store.config.store_type == ROCKSDB:
            times = cqs.store_times(TOPIC, qid, lo, hi - lo)
            assert times == [in_log[(qid, o)][3] for o in range(lo, hi)], f"queue {qid}: store times differ"
    assert indexed == in_log.keys(), f"records without a unit: {sorted(in_log.keys() - indexed)[:5]}"


def put_and_read_back(store: MessageStore, qid: int, expected_offset: int, expected_physical: int | None = None):
    body = os.urandom(777)
    result = store.put_messages(TOPIC, qid, [body], [encode_properties({"KEYS": "after-recovery", "TAGS": "T"})])
    assert result.status is PutMessageStatus.PUT_OK, result
    assert result.queue_offset == expected_offset, f"new put went to {result.queue_offset}, not {expected_offset}"
    if expected_physical is not None:
        assert result.physical_offset == where_a_record_lands(expected_physical, result.append.end_offset
                                                              - result.physical_offset)
    assert store.wait_dispatched(result.append.end_offset, 10.0)
    assert store.max_offset(TOPIC, qid) == expected_offset + 1
    assert read_one(store, qid, expected_offset).body == body
    return body


def where_a_record_lands(free_from: int, size: int) -> int:
    """Where the commitlog puts a record of ``size`` bytes when its segment is free from ``free_from`` on: there,
    or at the next segment when the rest of this one (less room for the blank end marker) is too small."""
    segment_end = (free_from // COMMIT_LOG_SEGMENT + 1) * COMMIT_LOG_SEGMENT
    return free_from if free_from + size <= segment_end - BLANK_MIN_LENGTH else segment_end


def run_child_to_count(store_dir: Path, ack_file: Path, log_file: Path, store_type: str, count: int, *args: str,
                       settled: Callable[[], bool] | None = None) -> Acks:
    """A child appends ``count`` acknowledged messages, waits for their dispatch (and until ``settled``
    holds), then is SIGKILLed."""
    child = Child(store_dir, ack_file, log_file, store_type, "--count", str(count), *args)
    try:
        child.wait_line("ready")
        child.wait_line("done")
        deadline = time.monotonic() + START_TIMEOUT_S
        while settled is not None and not settled():
            assert time.monotonic() < deadline, f"child never settled; stderr:\n{child.stderr_tail()}"
            time.sleep(0.01)
        child.kill()
    finally:
        child.close()
    assert (store_dir / "abort").exists(), "a killed store keeps its abort marker"
    acks = read_acks(ack_file)
    assert len(acks) >= count
    return acks


def last_record(store_dir: Path) -> tuple[Path, int, int]:
    """The last commitlog segment file, the position and the size of the last record in it."""
    segment = sorted((store_dir / "commitlog").iterdir())[-1]
    data = segment.read_bytes()
    base = int(segment.name)
    pos, last = 0, None
    while (size := check_record(data, pos, len(data), base + pos, verify_crc=True)) > 0:
        last = (pos, size)
        pos += size
    assert last is not None, f"no record in {segment.name}"
    return segment, *last


def last_append_start(segment: Path) -> tuple[int, int]:
    """The queue offset and commitlog offset of the first record of the segment's last append (a record whose body a
    test corrupted counts: its header says whether it began an append of its own, as a one-message put does)."""
    data = segment.read_bytes()
    base = int(segment.name)
    pos, start, more = 0, 0, False
    while (size := check_record(data, pos, len(data), base + pos, verify_crc=False)) > 0:
        if not more:
            start = pos
        more = bool(data[pos + OFFSET_BATCH_MARK] & BATCH_CONTINUES)
        pos += size
    return decode_record(data, start, verify_crc=False).queue_offset, base + start


def cq_checkpoint(store_dir: Path, store_type: str) -> int:
    """The consume queue's checkpoint as on disk (for RocksDB: what RocksDB flushed, read read-only)."""
    if store_type != ROCKSDB:
        return OffsetCheckpoint(store_dir / "consumequeue" / ".checkpoint").read() or 0
    if not (store_dir / ROCKSDB_DIR / "CURRENT").exists():
        return 0
    try:
        return read_durable_checkpoint(store_dir / ROCKSDB_DIR) or 0
    except Exception:  # the child's RocksDB changed its files while we opened it: not settled yet
        return 0


def lowest_checkpoint(store_dir: Path, store_type: str) -> int:
    paths = [store_dir / "checkpoint" / "commitlog_flushed", store_dir / "index" / ".checkpoint"]
    return min([cq_checkpoint(store_dir, store_type), *(OffsetCheckpoint(p).read() or 0 for p in paths)])


def cq_unit(store_dir: Path, store_type: str, qid: int, offset: int) -> tuple[int, int, int]:
    """The unit as on disk (the store is not running)."""
    if store_type == ROCKSDB:
        db = open_db(store_dir / ROCKSDB_DIR, read_only=True)
        try:
            raw = db.get(b"U" + TOPIC.encode() + b"\x00" + struct.pack(">I", qid) + OFFSET.pack(offset))
        finally:
            db.close()
        assert raw is not None, f"RocksDB has no unit for queue {qid} offset {offset}"
        return UNIT.unpack(raw)[:3]
    at = offset * CQ_UNIT.size
    start = at - at % CONSUME_QUEUE_SEGMENT
    path = store_dir / "consumequeue" / TOPIC / str(qid) / f"{start:020d}"
    with open(path, "rb") as f:
        f.seek(at - start)
        return CQ_UNIT.unpack(f.read(CQ_UNIT.size))


def last_acked(acks: Acks, store_dir: Path) -> tuple[int, int, Path, int, int]:
    """The last message of the commitlog, checked to be an acknowledged one: (qid, offset, segment, pos, size)."""
    segment, pos, size = last_record(store_dir)
    msg = decode_record(segment.read_bytes()[pos : pos + size])
    assert (msg.queue_id, msg.queue_offset) in acks
    assert msg.queue_offset + 1 == expected_max_offsets(acks)[msg.queue_id]
    assert msg.physical_offset == int(segment.name) + pos
    return msg.queue_id, msg.queue_offset, segment, pos, size


# -- tests ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("left", "kept"), [(b"0 1 aa\n1 2 b", b"0 1 aa\n"), (b"1 2 b", b""),
                                            (b"0 1 aa\n", b"0 1 aa\n")])
def test_a_child_drops_the_report_line_a_sigkill_cut_short(tmp_path: Path, left: bytes, kept: bytes) -> None:
    """A SIGKILL can cut a report's write short; the next child's lines must not be glued to the cut one."""
    ack_file = tmp_path / "acks"
    ack_file.write_bytes(left)
    fd = open_ack_file(str(ack_file))
    os.write(fd, b"2 3 cc\n")
    os.close(fd)
    assert ack_file.read_bytes() == kept + b"2 3 cc\n"


@pytest.mark.slow
def test_sigkill_cycles_lose_no_acknowledged_message(tmp_path: Path, store_type: str) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    print(f"seed={seed}")  # shown with a failure
    store_dir, ack_file = tmp_path / "store", tmp_path / "acks"
    cycles = 12
    totals: list[int] = []
    for cycle in range(cycles):
        where = f"seed={seed} cycle={cycle}"
        before = count_ack_lines(ack_file)
        interval = rng.choice((50, 200, 1000))  # how far the checkpoints run ahead of the crash
        child = Child(store_dir, ack_file, tmp_path / f"child-{cycle}.log", store_type,
                      "--checkpoint-interval-ms", str(interval))
        try:
            child.wait_line("ready")
            kill_at = time.monotonic() + rng.uniform(0.05, 0.6)
            deadline = time.monotonic() + START_TIMEOUT_S
            while count_ack_lines(ack_file) <= before:  # appends continue after every restart
                assert time.monotonic() < deadline, f"{where}: no acknowledged put; stderr:\n{child.stderr_tail()}"
                assert child.proc.poll() is None, f"{where}: child died; stderr:\n{child.stderr_tail()}"
                time.sleep(0.005)
            time.sleep(max(0.0, kill_at - time.monotonic()))
            child.kill()
        finally:
            child.close()
        acks = read_acks(ack_file)
        assert len(acks) > before, where
        totals.append(len(acks))
        print(f"cycle={cycle} checkpoint_interval_ms={interval} acked={len(acks)} "
              f"commitlog_segments={len(list((store_dir / 'commitlog').iterdir()))}")
        if cycle % 2 == 0:
            # Recover the store itself and shut it down cleanly: the next child starts normally.
            with opened_store(store_dir, store_type) as store:
                verify_store(store, acks)
            assert not (store_dir / "abort").exists()
        else:
            # Recover a copy: the next child starts on the killed store (abnormal recovery).
            copy = tmp_path / "copy"
            shutil.copytree(store_dir, copy)
            try:
                with opened_store(copy, store_type) as store:
                    verify_store(store, acks)
            finally:
                shutil.rmtree(copy)
            assert (store_dir / "abort").exists()
    assert all(a < b for a, b in itertools.pairwise(totals)), totals
    # The last cycle left the store killed: recovering the store itself holds everything too.
    with opened_store(store_dir, store_type) as store:
        verify_store(store, read_acks(ack_file))


def test_torn_tail_is_truncated(tmp_path: Path, store_type: str) -> None:
    store_dir, ack_file = tmp_path / "store", tmp_path / "acks"
    acks = run_child_to_count(store_dir, ack_file, tmp_path / "child.log", store_type, 300)
    max_before = expected_max_offsets(acks)
    segment, pos, size = last_record(store_dir)
    end = pos + size
    garbage = bytearray(random.Random(7).randbytes(min(4096, segment.stat().st_size - end)))
    garbage = bytearray(b or 0x5A for b in garbage)  # non-zero: it must not look like unwritten space
    assert len(garbage) >= 8
    assert struct.unpack_from(">I", garbage, 4)[0] not in (MESSAGE_MAGIC, BLANK_MAGIC)
    with open(segment, "r+b") as f:
        f.seek(end)
        assert f.read(len(garbage)) == bytes(len(garbage)), "the tail after the last record was not empty"
        f.seek(end)
        f.write(garbage)

    with opened_store(store_dir, store_type) as store:
        assert verify_store(store, acks) == max_before
        assert store.commit_log.max_offset() == int(segment.name) + end
        with open(segment, "rb") as f:
            f.seek(end)
            assert f.read(len(garbage)) == bytes(len(garbage)), "the torn tail was not cut off"
        qid = 2
        body = put_and_read_back(store, qid, max_before[qid], expected_physical=int(segment.name) + end)
    acks[(qid, max_before[qid])] = hashlib.sha256(body).hexdigest()
    with opened_store(store_dir, store_type) as store:  # normal recovery of the repaired log
        verify_store(store, acks)
        assert store.max_offset(TOPIC, qid) == max_before[qid] + 1


class CorruptRecordServedError(AssertionError):
    """The recovered store still serves the corrupted record (set-up failures stay plain assertion errors)."""


def check_corrupt_last_record_is_not_served(tmp_path: Path, store_type: str, checkpoints_caught_up: bool) -> None:
    store_dir, ack_file = tmp_path / "store", tmp_path / "acks"
    if checkpoints_caught_up:  # every checkpoint has passed the last record when the crash comes
        def settled() -> bool:
            segment, pos, size = last_record(store_dir)
            return lowest_checkpoint(store_dir, store_type) >= int(segment.name) + pos + size

        acks = run_child_to_count(store_dir, ack_file, tmp_path / "child.log", store_type, 300,
                                  "--checkpoint-interval-ms", "50", settled=settled)
    else:  # checkpoints held back: the crash left the tail of the log to be checked on recovery
        acks = run_child_to_count(store_dir, ack_file, tmp_path / "child.log", store_type, 300,
                                  "--checkpoint-interval-ms", "3600000")
    qid, offset, segment, pos, size = last_acked(acks, store_dir)
    physical = int(segment.name) + pos
    assert (lowest_checkpoint(store_dir, store_type) > physical) == checkpoints_caught_up
    if checkpoints_caught_up:  # the unit is on disk (RocksDB: flushed), recovery has to take it back
        assert cq_unit(store_dir, store_type, qid, offset)[:2] == (physical, size)
    with open(segment, "r+b") as f:
        f.seek(pos + size - 5)  # the body is the last part of a record
        byte = f.read(1)
        f.seek(pos + size - 5)
        f.write(bytes([byte[0] ^ 0xFF]))

    del acks[(qid, offset)]
    if not checkpoints_caught_up:
        # Nothing says the append was on disk whole (the flushed checkpoint lags): recovery cannot tell its corrupt
        # last record from a write a crash ended part-way, and cuts the whole append.
        offset, physical = last_append_start(segment)
        for gone in range(offset, max(o for q, o in acks if q == qid) + 1):
            del acks[(qid, gone)]
    with opened_store(store_dir, store_type) as store:
        try:
            result = store.get_message(TOPIC, qid, offset, 1)
            assert result.status is GetMessageStatus.OFFSET_OVERFLOW_ONE, result.status
            assert not result.messages
        except AssertionError as exc:
            raise CorruptRecordServedError(f"queue {qid} offset {offset}: {exc}") from exc
        assert store.look_message_by_offset(physical) is None
        max_offsets = verify_store(store, acks)
        assert max_offsets == expected_max_offsets(acks)
        assert max_offsets[qid] == offset
        put_and_read_back(store, qid, offset, expected_physical=physical)


def test_corrupt_record_is_never_served(tmp_path: Path, store_type: str) -> None:
    check_corrupt_last_record_is_not_served(tmp_path, store_type, checkpoints_caught_up=False)


def test_corrupt_record_covered_by_checkpoints_is_never_served(tmp_path: Path, store_type: str) -> None:
    check_corrupt_last_record_is_not_served(tmp_path, store_type, checkpoints_caught_up=True)


def test_consume_queue_past_end_is_truncated(tmp_path: Path, store_type: str) -> None:
    store_dir, ack_file = tmp_path / "store", tmp_path / "acks"
    if store_type == ROCKSDB:
        # WAL off: a unit reaches the disk only with a RocksDB flush, and the checkpoint flushed in the same
        # batch covers it. So: wait until RocksDB holds the last unit, then lose its record.
        def settled() -> bool:
            segment, pos, size = last_record(store_dir)
            return cq_checkpoint(store_dir, store_type) >= int(segment.name) + pos + size

        acks = run_child_to_count(store_dir, ack_file, tmp_path / "child.log", store_type, 300,
                                  "--checkpoint-interval-ms", "50", settled=settled)
    else:
        acks = run_child_to_count(store_dir, ack_file, tmp_path / "child.log", store_type, 300,
                                  "--checkpoint-interval-ms", "3600000")
    qid, offset, segment, pos, size = last_acked(acks, store_dir)
    physical = int(segment.name) + pos
    if store_type == ROCKSDB:
        assert cq_checkpoint(store_dir, store_type) >= physical + size
    else:
        assert lowest_checkpoint(store_dir, store_type) <= physical
    assert cq_unit(store_dir, store_type, qid, offset)[:2] == (physical, size), (
        "the consume queue has no unit for the record")
    last = offset
    offset, physical = last_append_start(segment)
    with open(segment, "r+b") as f:  # the last append never reached the disk
        f.seek(physical - int(segment.name))
        f.write(bytes(pos + size - (physical - int(segment.name))))

    for gone in range(offset, last + 1):
        del acks[(qid, gone)]
    with opened_store(store_dir, store_type) as store:
        assert store.max_offset(TOPIC, qid) == offset, "the unit past the commitlog end was kept"
        assert store.get_message(TOPIC, qid, offset, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert verify_store(store, acks) == expected_max_offsets(acks)
        assert store.commit_log.max_offset() == physical
        put_and_read_back(store, qid, offset, expected_physical=physical)


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_queues_whose_messages_all_expired_keep_their_offsets_across_a_sigkill(tmp_path: Path, store_type: str,
                                                                               flush: str) -> None:
    """Queues 1-3 lose every message to expiry while their consume queue was never flushed (for RocksDB: only
    in the memtable, the WAL is off). After the SIGKILL no replay can rebuild their max offsets: they must
    still be where they were, or new messages would take offsets consumers have already seen."""
    store_dir, ack_file = tmp_path / "store", tmp_path / "acks"
    acks = run_child_to_count(store_dir, ack_file, tmp_path / "child.log", store_type, 200,
                              "--checkpoint-interval-ms", "3600000", "--expire", "--flush-disk-type", flush)
    expected = expected_max_offsets(acks)
    with opened_store(store_dir, store_type) as store:
        commit_log_min = store.commit_log.min_offset()
        assert commit_log_min > 0
        in_log = commit_log_records(store)
        assert {qid for qid, _ in in_log} == {0}, "queues 1-3 still have messages in the commitlog"
        for qid in range(QUEUES):
            assert store.max_offset(TOPIC, qid) == expected[qid], f"queue {qid} does not continue where it was"
        for qid in range(1, QUEUES):
            assert store.min_offset(TOPIC, qid) == expected[qid], f"queue {qid}: its expired units are served"
        surviving = sorted(offset for qid, offset in in_log)
        assert surviving[-1] + 1 == expected[0] and store.min_offset(TOPIC, 0) <= surviving[0]
        for offset in surviving:
            assert hashlib.sha256(read_one(store, 0, offset).body).hexdigest() == acks[(0, offset)]
        for qid in range(QUEUES):
            put_and_read_back(store, qid, expected[qid])

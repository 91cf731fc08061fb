"""Disk pressure: upstream's three levels (expired segments at any hour above diskMaxUsedSpaceRatio, the oldest
even if unexpired above diskSpaceCleanForciblyRatio, writes refused above diskSpaceWarningLevelRatio), and a
full disk giving errors, not crashes or lost data, on the dispatch and shutdown paths.

The disk is steered: ``measure_disk_usage`` is replaced by a disk whose capacity and used bytes the test sets
(the daemon test in ``tests/disk/`` fills a real file system)."""

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.broker_config import ConfigError, load_broker_config
from broker.store import disk_usage_watcher, mapped_file
from broker.store.checkpoint import CheckpointNotWritten, OffsetCheckpoint
from broker.store.config import FlushDiskType, MessageStoreConfig
from broker.store.consume_queue.file_consume_queue import UNIT, FileConsumeQueue
from broker.store.disk_usage_watcher import MIN_CHECK_STEP, USAGE_FILE_ENV, DiskUsage, measure_disk_usage
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.store.get_message_result import GetMessageStatus
from broker.store.index.index_file import ENTRY_SIZE, HEADER_SIZE, RESERVE_STEP, IndexFile
from broker.store.message_store import MessageStore
from broker.store.put_message_result import PutMessageStatus
from broker.store.recovery import ABORT_FILE
from tests.disk.tmpfs import fill_file_system, remove_filler, try_mount_tmpfs, unmount
from tests.store.conftest import StoreFactory, store_config

TOPIC = "DiskT"
MIB = 1 << 20


@dataclass
class SteeredDisk:
    capacity: int = 100 * MIB
    used: int = 10 * MIB
    growth: Callable[[], int] = lambda: 0  # bytes written since the test set ``used``

    def set_percent(self, percent: float) -> None:
        self.used = int(self.capacity * percent / 100)

    def measure(self, path: Path) -> DiskUsage:
        return DiskUsage(path, self.used + self.growth(), self.capacity)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> SteeredDisk:
    steered = SteeredDisk()
    monkeypatch.setattr(disk_usage_watcher, "measure_disk_usage", steered.measure)
    return steered


def _fill(store: MessageStore, n: int, size: int = 600) -> list[bytes]:
    bodies = [f"{i:06d}".encode() * (size // 6) for i in range(n)]
    result = None
    for body in bodies:
        result = store.put_messages(TOPIC, 0, [body], [b""])
        assert result.ok, result.error
    assert result is not None and store.wait_dispatched(result.append.end_offset)
    return bodies


def _read_all(store: MessageStore) -> list[bytes]:
    lo = store.min_offset(TOPIC, 0)
    result = store.get_message(TOPIC, 0, lo, 10_000, max_total_bytes=1 << 30)
    assert result.status in (GetMessageStatus.FOUND, GetMessageStatus.NO_MESSAGE), result.status
    return [bytes(m) for m in result.messages]


def _segments(store: MessageStore) -> list[Path]:
    return sorted((Path(store.config.store_path_root_dir) / "commitlog").iterdir())


def _age(path: Path, hours: float) -> None:
    t = time.time() - hours * 3600
    os.utime(path, (t, t))


def _not_now() -> str:
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"


# -- configuration ---------------------------------------------------------------------------------
def test_levels_default_to_upstreams_and_must_ascend(tmp_path: Path) -> None:
    config = MessageStoreConfig(str(tmp_path))
    assert (config.disk_max_used_space_ratio, config.disk_space_clean_forcibly_ratio,
            config.disk_space_warning_level_ratio, config.clean_file_forcibly_enable) == (75, 85, 90, True)
    with pytest.raises(ValueError, match=r"diskSpaceCleanForciblyRatio=70 is below diskMaxUsedSpaceRatio=75"):
        MessageStoreConfig(str(tmp_path), disk_space_clean_forcibly_ratio=70)
    with pytest.raises(ValueError, match=r"diskSpaceWarningLevelRatio=80 is below diskSpaceCleanForciblyRatio=85"):
        MessageStoreConfig(str(tmp_path), disk_space_warning_level_ratio=80)
    MessageStoreConfig(str(tmp_path), disk_max_used_space_ratio=90, disk_space_clean_forcibly_ratio=90,
                       disk_space_warning_level_ratio=90)  # equal levels are fine


def test_broker_conf_names_the_key_of_a_bad_level(tmp_path: Path) -> None:
    conf = load_broker_config(f"storePathRootDir={tmp_path}\ndiskSpaceWarningLevelRatio=80\n")
    with pytest.raises(ConfigError, match="diskSpaceWarningLevelRatio=80 is below diskSpaceCleanForciblyRatio=85"):
        conf.store_config("127.0.0.1:10911")
    with pytest.raises(ConfigError, match=r"diskSpaceCleanForciblyRatio: 100 is outside 10\.\.99"):
        load_broker_config("diskSpaceCleanForciblyRatio=100\n")
    conf = load_broker_config("diskSpaceCleanForciblyRatio=88\ndiskSpaceWarningLevelRatio=95\n"
                              "cleanFileForciblyEnable=false\n")
    store = conf.store_config("127.0.0.1:10911")
    assert (store.disk_space_clean_forcibly_ratio, store.disk_space_warning_level_ratio,
            store.clean_file_forcibly_enable) == (88, 95, False)
    assert not conf.unknown_keys


def test_usage_is_df_style_and_a_test_can_steer_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = measure_disk_usage(tmp_path / "not" / "made" / "yet")  # measured at the nearest existing parent
    st = os.statvfs(tmp_path)
    assert real.capacity_bytes == (st.f_blocks - st.f_bfree + st.f_bavail) * st.f_frsize
    assert 0 < real.used_percent < 100
    usage_file = tmp_path / "usage"
    usage_file.write_text("93.5")
    monkeypatch.setenv(USAGE_FILE_ENV, str(usage_file))
    assert measure_disk_usage(tmp_path).used_percent == pytest.approx(93.5, abs=0.01)
    usage_file.write_text("not a number")  # an unreadable steer falls back to the real disk
    assert measure_disk_usage(tmp_path).used_percent == pytest.approx(real.used_percent, abs=1)


# -- the three levels ------------------------------------------------------------------------------
def test_above_max_ratio_only_expired_segments_go_and_at_any_hour(open_store: StoreFactory,
                                                                  disk: SteeredDisk) -> None:
    store = open_store(file_reserved_time_hours=1, delete_when=_not_now())
    _fill(store, 500)
    segments = _segments(store)
    assert len(segments) >= 5
    for seg in segments[:2]:
        _age(seg, 2)
    disk.set_percent(70)
    assert store.delete_expired_files(ignore_delete_when=False) == 0  # not the hour, disk not crowded
    disk.set_percent(80)
    assert store.delete_expired_files(ignore_delete_when=False) == 2  # crowded: expired ones go now
    assert store.commit_log.min_offset() == int(segments[2].name)
    assert store.delete_expired_files(ignore_delete_when=False) == 0  # the rest is unexpired: kept
    assert store.running_flags.writeable


def test_above_forcibly_ratio_the_oldest_go_until_it_is_not(open_store: StoreFactory, disk: SteeredDisk) -> None:
    # Mappings stay open for a minute: deleted segments' space is not back yet and must count as freed.
    store = open_store(file_reserved_time_hours=1000, delete_when=_not_now(), destroy_mapped_file_grace_ms=60_000)
    _fill(store, 500)
    segment = store.commit_log.mapped_file_size
    disk.capacity = 40 * segment
    disk.set_percent(87)  # 2% (0.8 segment) above diskSpaceCleanForciblyRatio=85
    before = store.commit_log.min_offset()
    assert store.delete_expired_files(ignore_delete_when=False) == 1
    assert store.commit_log.min_offset() == before + segment
    assert store.delete_expired_files(ignore_delete_when=False) == 0  # still mapped: counted as freed
    lo = store.min_offset(TOPIC, 0)  # reads go on from the new min offset
    assert store.get_message(TOPIC, 0, lo, 1).status is GetMessageStatus.FOUND


def test_forced_deletion_never_takes_the_written_segment(open_store: StoreFactory, disk: SteeredDisk) -> None:
    store = open_store(file_reserved_time_hours=1000, delete_when=_not_now())
    _fill(store, 300)
    disk.set_percent(99)
    while store.delete_expired_files(ignore_delete_when=False):
        pass
    assert len(_segments(store)) == 1  # the segment being written stays
    assert not store.running_flags.writeable  # and 99% refuses writes
    assert store.get_message(TOPIC, 0, store.min_offset(TOPIC, 0), 1).status is GetMessageStatus.FOUND


def test_forced_deletion_off_keeps_unexpired_segments(open_store: StoreFactory, disk: SteeredDisk) -> None:
    store = open_store(file_reserved_time_hours=1000, delete_when=_not_now(), clean_file_forcibly_enable=False)
    bodies = _fill(store, 300)
    disk.set_percent(99)
    assert store.delete_expired_files(ignore_delete_when=False) == 0
    assert [b[-600:] for b in _read_all(store)] == bodies


class KeepingDispatcher(CommitLogDispatcher):
    """A dispatcher whose state only a replay rebuilds (as the KV store), durable up to ``durable``."""

    name = "keeping"
    keeps_commit_log = True

    def __init__(self) -> None:
        self.durable = 0

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        pass

    def checkpoint(self) -> int:
        return self.durable


def test_forced_deletion_honours_dispatchers_that_keep_the_commit_log(tmp_path: Path, disk: SteeredDisk) -> None:
    store = MessageStore(store_config(tmp_path / "store", file_reserved_time_hours=1000, delete_when=_not_now()))
    keeping = KeepingDispatcher()
    store.register_dispatcher(keeping)
    store.start()
    try:
        _fill(store, 300)
        keeping.durable = int(_segments(store)[2].name)  # durable below the third segment only
        disk.set_percent(99)
        while store.delete_expired_files(ignore_delete_when=False):
            pass
        assert store.commit_log.min_offset() == keeping.durable
    finally:
        store.shutdown()


def test_writes_are_refused_above_the_warning_level_and_taken_again_below(
        open_store: StoreFactory, disk: SteeredDisk, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, file_reserved_time_hours=1000,
                       delete_when=_not_now(), clean_file_forcibly_enable=False)
    bodies = _fill(store, 20)
    caplog.set_level(logging.INFO, logger=disk_usage_watcher.__name__)
    disk.set_percent(91.3)
    store.disk_watcher.check()
    store.disk_watcher.check()
    refused = store.put_messages(TOPIC, 0, [b"refused"], [b""])
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    root = store.config.store_path_root_dir
    assert refused.error == (f"disk full: {root} is 91.3% used, above diskSpaceWarningLevelRatio=90; writes refused "
                             "until usage falls below it")
    assert [b[-600:] for b in _read_all(store)] == bodies  # reads go on
    disk.set_percent(89)
    store.disk_watcher.check()
    assert store.put_messages(TOPIC, 0, [b"taken again"], [b""]).ok
    messages = [r.getMessage() for r in caplog.records if r.name == disk_usage_watcher.__name__]
    assert sum("disk_full_writes_refused" in m for m in messages) == 1
    assert sum("disk_space_ok_writes_accepted" in m for m in messages) == 1


def test_the_write_path_measures_before_the_level_is_passed(open_store: StoreFactory, disk: SteeredDisk) -> None:
    """The disk fills as the commitlog grows, and only the write path measures: writes stop within
    MIN_CHECK_STEP (plus one message) of the level."""
    store = open_store(file_reserved_time_hours=1000, delete_when=_not_now(), clean_file_forcibly_enable=False,
                       mapped_file_size_commit_log=1 << 20)
    store.disk_watcher.shutdown()  # no periodic measurement
    store.clean_service.shutdown()
    disk.capacity = 64 * MIB
    disk.used = disk.capacity * 90 // 100 - 3 * MIB  # 3 MiB below the level
    start = store.commit_log.max_offset()
    disk.growth = lambda: store.commit_log.max_offset() - start
    store.disk_watcher.check()
    body = b"x" * 4096
    for _ in range(10_000):
        result = store.put_messages(TOPIC, 0, [body], [b""])
        if not result.ok:
            break
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk full" in result.error
    grown = store.commit_log.max_offset() - start
    assert 3 * MIB < grown <= 3 * MIB + MIN_CHECK_STEP + 2 * len(body)


# -- a full disk on the dispatch, write and shutdown paths ------------------------------------------
def _enospc(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_enospc_in_dispatch_fail_stops_keeps_reads_and_a_restart_recovers(
        open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    bodies = _fill(store, 30)
    monkeypatch.setattr(store.consume_queue_store, "dispatch", _enospc)
    late = store.put_messages(TOPIC, 0, [b"late" * 150], [b""])
    assert late.ok  # acknowledged once fsynced: dispatch follows
    assert not store.wait_dispatched(late.append.end_offset, 5)
    refused = store.put_messages(TOPIC, 0, [b"refused"], [b""])
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "No space left on device" in refused.error and "restart" in refused.error
    assert [b[-600:] for b in _read_all(store)] == bodies  # what was dispatched is served
    store.shutdown()
    assert (Path(store.config.store_path_root_dir) / ABORT_FILE).exists()  # not a clean stop
    monkeypatch.undo()

    reopened = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert [b[-600:] for b in _read_all(reopened)] == [*bodies, b"late" * 150]
    assert reopened.put_messages(TOPIC, 0, [b"again"], [b""]).ok


def test_enospc_in_the_commit_log_refuses_with_the_reason(open_store: StoreFactory,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store()
    bodies = _fill(store, 10)
    monkeypatch.setattr(store.commit_log, "append_batch", _enospc)
    refused = store.put_messages(TOPIC, 0, [b"x"], [b""])
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "writing the commitlog failed" in refused.error and "No space left on device" in refused.error
    assert [b[-600:] for b in _read_all(store)] == bodies


def test_enospc_before_anything_is_written_refuses_that_write_only(open_store: StoreFactory,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch the commitlog refused before writing any of it leaves the log as it was: no fail-stop, and the
    next write (once there is room) takes the next queue offset."""
    store = open_store()
    bodies = _fill(store, 10)
    segment = store.commit_log.mapped_file_queue.last_writable()
    monkeypatch.setattr(segment, "append", _enospc)
    refused = store.put_messages(TOPIC, 0, [b"x"], [b""])
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "nothing appended" in refused.error
    assert store.running_flags.fail_stop_reason is None
    monkeypatch.undo()
    accepted = store.put_messages(TOPIC, 0, [b"y" * 600], [b""])
    assert accepted.ok and accepted.queue_offset == len(bodies)
    assert accepted.append is not None and store.wait_dispatched(accepted.append.end_offset)
    assert [b[-600:] for b in _read_all(store)] == [*bodies, b"y" * 600]


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
@pytest.mark.parametrize("stop", ["shutdown", "crash"])
def test_a_batch_the_disk_took_part_of_is_refused_and_never_comes_back(open_store: StoreFactory,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       stop: str, flush: FlushDiskType) -> None:
    """A nearly full disk took two whole records of a three-record batch, then said ENOSPC: the batch is refused
    as "nothing appended", and must stay so. Left past the write position, those two records are whole and valid,
    and recovery would take them (a refused send, or a refused KV put, stored after all)."""
    store = open_store(flush_disk_type=flush)
    bodies = _fill(store, 10)
    real_pwrite = mapped_file.pwrite_holding_gil
    record_size = len(store.commit_log.read_record(0) or b"")

    def two_of_three(fd: int, data: bytes, pos: int) -> int:
        if len(data) < 3 * record_size:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, bytes(data)[: 2 * record_size], pos)

    monkeypatch.setattr(mapped_file, "pwrite_holding_gil", two_of_three)
    refused = store.put_messages(TOPIC, 0, [b"r" * 600] * 3, [b""] * 3)
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "nothing appended" in refused.error
    monkeypatch.undo()
    end = store.commit_log.max_offset()
    segment = store.commit_log.mapped_file_queue.last_writable()
    assert segment.read(segment.wrote_position, 2 * record_size) == bytes(2 * record_size)  # nothing left there
    store.shutdown()
    if stop == "crash":  # the restart recovers as after a crash: a scan of the records past the checkpoint
        (Path(store.config.store_path_root_dir) / ABORT_FILE).touch()
    reopened = open_store(flush_disk_type=flush)
    assert reopened.commit_log.max_offset() == end
    assert [b[-600:] for b in _read_all(reopened)] == bodies


def test_shutdown_that_cannot_write_carries_on_and_is_not_clean(
        open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    bodies = _fill(store, 50)
    monkeypatch.setattr(OffsetCheckpoint, "write", _enospc)
    store.shutdown()  # does not raise
    root = Path(store.config.store_path_root_dir)
    assert (root / ABORT_FILE).exists(), "a stop whose checkpoints are not on disk was marked clean"
    assert "shutdown_step_failed step=flushed_checkpoint" in caplog.text
    assert "Traceback" not in caplog.text
    monkeypatch.undo()

    caplog.clear()
    with caplog.at_level(logging.INFO):
        reopened = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert "mode=abnormal" in caplog.text
    assert [b[-600:] for b in _read_all(reopened)] == bodies


# -- files that must say ENOSPC rather than SIGBUS or leave garbage ----------------------------------
def test_a_short_write_raises_and_leaves_no_partial_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cq = FileConsumeQueue(TOPIC, 0, tmp_path / "cq", 20 * 100)
    cq.load()
    cq.put_units(0, b"".join(UNIT.pack(1000 + i, 100, 7) for i in range(10)))
    real_pwrite = mapped_file.pwrite_holding_gil
    calls: list[int] = []

    def short_then_full(fd: int, data: bytes, pos: int) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_pwrite(fd, bytes(data)[:7], pos)  # the disk took 7 bytes of the unit
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(mapped_file, "pwrite_holding_gil", short_then_full)
    with pytest.raises(OSError) as raised:
        cq.put_units(10, UNIT.pack(2000, 100, 7))
    assert raised.value.errno == errno.ENOSPC and len(calls) == 2
    monkeypatch.undo()
    cq.shutdown()
    reloaded = FileConsumeQueue(TOPIC, 0, tmp_path / "cq", 20 * 100)
    reloaded.load()
    assert reloaded.max_offset() == 10
    reloaded.put_units(10, UNIT.pack(2000, 100, 7))
    assert reloaded.read_units(10, 1)[0][0] == 2000  # (physical offset)
    reloaded.shutdown()


def test_index_blocks_are_allocated_before_they_are_written(tmp_path: Path) -> None:
    index = IndexFile(tmp_path / "idx", 1024, 200_000)
    entries_at = HEADER_SIZE + 1024 * 4
    assert os.stat(index.path).st_blocks * 512 >= entries_at  # header and slots at creation
    n = 2 * RESERVE_STEP // ENTRY_SIZE
    assert index.put_batch(list(range(n)), list(range(n)), [1_000] * n) == n
    assert os.stat(index.path).st_blocks * 512 >= entries_at + (n + 1) * ENTRY_SIZE
    index.close()


def test_index_on_a_full_disk_says_enospc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = IndexFile(tmp_path / "idx", 1024, 200_000)
    monkeypatch.setattr(os, "posix_fallocate", _enospc)
    n = RESERVE_STEP // ENTRY_SIZE + 10  # past the first reserved step
    with pytest.raises(OSError):
        index.put_batch(list(range(n)), list(range(n)), [1_000] * n)
    assert index.index_count == 1  # nothing written
    with pytest.raises(OSError):
        IndexFile(tmp_path / "idx2", 1024, 200_000)
    assert not (tmp_path / "idx2").exists()  # a file that could not be allocated is removed
    index.close()


@pytest.fixture
def usage_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "disk-usage"
    path.write_text("50")
    monkeypatch.setenv(USAGE_FILE_ENV, str(path))
    yield path


def test_the_watcher_thread_takes_writes_again_once_space_is_back(open_store: StoreFactory, usage_file: Path) -> None:
    store = open_store(clean_file_forcibly_enable=False)
    assert store.put_messages(TOPIC, 0, [b"one"], [b""]).ok
    usage_file.write_text("95")
    deadline = time.monotonic() + 5
    while store.running_flags.writeable and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.put_messages(TOPIC, 0, [b"two"], [b""]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    usage_file.write_text("60")
    deadline = time.monotonic() + 5
    while not store.running_flags.writeable and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.put_messages(TOPIC, 0, [b"three"], [b""]).ok


class TinyDisk:
    """``root`` on an 8 MiB tmpfs where this process may mount one; elsewhere a full disk is simulated by the
    consume queue's writes failing with ENOSPC (the path is picked at run time)."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        self.real = try_mount_tmpfs(root, "8m")

    def fill(self) -> None:
        if self.real:
            fill_file_system(self.root)
        else:
            self.monkeypatch.setattr(FileConsumeQueue, "put_units", _enospc)

    def make_room(self) -> None:
        if self.real:
            remove_filler(self.root)
        else:
            self.monkeypatch.undo()

    def unmount(self) -> None:
        if self.real:
            unmount(self.root)


@pytest.fixture
def tiny_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TinyDisk]:
    root = tmp_path / "tiny"
    root.mkdir()
    disk = TinyDisk(root, monkeypatch)
    try:
        yield disk
    finally:
        disk.unmount()


def test_a_full_disk_under_dispatch_loses_no_acknowledged_message(tiny_disk: TinyDisk) -> None:
    """The commitlog takes a record into a page it already has, the consume queue of a new queue then cannot
    get one: the store fail-stops instead of crashing or dropping the acknowledged message."""
    config = store_config(tiny_disk.root / "store", flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store = MessageStore(config)
    store.start()
    store.disk_watcher.shutdown()  # measure only when told: the disk is filled behind the store's back
    bodies = _fill(store, 20, size=60)
    while store.commit_log.max_offset() % 4096 > 2048:  # leave room in the commitlog's last page
        bodies += _fill(store, 1, size=60)
    tiny_disk.fill()
    acked = store.put_messages(TOPIC, 1, [b"to a new queue"], [b""])
    assert acked.ok, acked.error
    assert not store.wait_dispatched(acked.append.end_offset, 5)
    assert store.reput.failed
    refused = store.put_messages(TOPIC, 0, [b"refused"], [b""])
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "No space left on device" in refused.error
    assert [b[-60:] for b in _read_all(store)] == bodies  # reads go on
    store.shutdown()  # on the full disk: carries on, not clean
    assert (tiny_disk.root / "store" / ABORT_FILE).exists()

    tiny_disk.make_room()
    reopened = MessageStore(config)
    reopened.start()
    try:
        assert [b[-60:] for b in _read_all(reopened)] == bodies
        got = reopened.get_message(TOPIC, 1, 0, 10)
        assert [bytes(m)[-14:] for m in got.messages] == [b"to a new queue"]
        assert reopened.put_messages(TOPIC, 1, [b"again"], [b""]).ok
    finally:
        reopened.shutdown()


def test_a_checkpoint_the_full_disk_refuses_stays_behind_without_a_fail_stop(tmp_path: Path) -> None:
    """The consume queue flushed its units; only its checkpoint (a small file replaced atomically, so the one before
    still holds) found no room: the store keeps taking writes, and the next pass after room writes it. A failed
    flush of the units themselves still fail-stops (test_enospc_in_dispatch_fail_stops_...)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    assert try_mount_tmpfs(disk, "8m"), f"cannot mount a tmpfs on {disk} (uid {os.geteuid()}: needs root)"
    store = MessageStore(store_config(disk / "store", flush_disk_type=FlushDiskType.SYNC_FLUSH))
    store.start()
    try:
        store.disk_watcher.shutdown()  # the disk is filled behind the store's back
        store.dispatcher_flush.shutdown()  # its passes run here, one at a time
        _fill(store, 20, size=60)
        cq_store = store.consume_queue_store
        before = cq_store.checkpoint()
        fill_file_system(disk)
        with pytest.raises(CheckpointNotWritten) as held:
            store.dispatcher_flush.run_once()
        assert held.value.errno == errno.ENOSPC
        assert store.running_flags.writeable, store.running_flags.fail_stop_reason
        assert cq_store.checkpoint() == before < store.reput.reput_from_offset
        remove_filler(disk)
        store.dispatcher_flush.run_once()
        assert cq_store.checkpoint() == store.reput.reput_from_offset
        assert store.put_messages(TOPIC, 0, [b"after"], [b""]).ok
    finally:
        store.shutdown()
        unmount(disk)

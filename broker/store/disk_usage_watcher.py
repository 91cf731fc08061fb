"""Disk pressure: how full the store's disk is, and the write refusal above ``diskSpaceWarningLevelRatio``.

Which disk: the file system of ``storePathRootDir`` (the consume queue, index, metadata, KV state and tiered
metadata live under it, so they share it) and that of ``<root>/commitlog`` if it is another mount; the fuller
one counts. Usage is what ``df`` shows: used / (used + available to us), so blocks reserved for root count as
unavailable (upstream's ``getDiskPartitionSpaceUsedPercent`` does the same).

When: every second on the watcher's thread (this catches other writers of the disk, and space coming back), and
from the write path as soon as the commitlog has grown, since the last measurement, by half the room that was
then left below the warning level (at least 1 MiB). So between two measurements the commitlog adds at most
max(room / 2, 1 MiB) plus the batches already in flight (at most maxMessageSize each): writes stop before the
level is passed by more than that, whatever the write rate. A posix tier on the same disk writes each commitlog
byte a second time (``copies``): the step is then halved, so the disk gains no more between two measurements. The
consume queue and index add a few percent of what the commitlog does, and the headroom above the level (10% of
the disk by default) absorbs that and what other processes write within a second. A measurement is two statvfs
calls (microseconds).

Test hook: ``PYROCKETMQ_DISK_USAGE_FILE`` names a file holding a percent (e.g. ``95``). While the variable is
set, every watched disk reads as that full; the file is read again at each measurement, so a test steers a
running broker. Unset in production.
"""

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.store.config import MessageStoreConfig
from broker.store.periodic_service import PeriodicService
from broker.store.running_flags import RunningFlags

log = logging.getLogger(__name__)

USAGE_FILE_ENV = "PYROCKETMQ_DISK_USAGE_FILE"
CHECK_INTERVAL_S = 1.0
MIN_CHECK_STEP = 1 << 20  # bytes of commitlog between two measurements from the write path, at least


@dataclass(frozen=True, slots=True)
class DiskUsage:
    path: Path
    used_bytes: int
    capacity_bytes: int  # used + available to this process

    @property
    def used_percent(self) -> float:
        return self.percent_after_freeing(0)

    def percent_after_freeing(self, freed: int) -> float:
        """Usage once ``freed`` more bytes are released (deleted segments still mapped)."""
        if self.capacity_bytes <= 0:
            return 0.0
        return 100.0 * max(0, self.used_bytes - freed) / self.capacity_bytes

    def room_below(self, percent: int) -> int:
        """Bytes that can still be written before usage passes ``percent``."""
        return max(0, self.capacity_bytes * percent // 100 - self.used_bytes)


def _existing(path: Path) -> Path:
    """``path``, or its nearest existing parent."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def same_file_system(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` (or, where missing, their nearest existing parents) are on one file system."""
    return os.stat(_existing(a)).st_dev == os.stat(_existing(b)).st_dev


def measure_disk_usage(path: Path) -> DiskUsage:
    """The usage of the file system holding ``path`` (or its nearest existing parent)."""
    path = _existing(path)
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    capacity = used + st.f_bavail * st.f_frsize
    steered = _steered_percent()
    if steered is not None:
        used = int(capacity * steered / 100)
    return DiskUsage(path, used, capacity)


def _steered_percent() -> float | None:
    """The percent a test wrote into ``PYROCKETMQ_DISK_USAGE_FILE``; None when unset or unreadable."""
    name = os.environ.get(USAGE_FILE_ENV)
    if not name:
        return None
    try:
        return float(Path(name).read_text())
    except (OSError, ValueError):
        return None


class DiskUsageWatcher(PeriodicService):
    """Measures the store's disk and sets or clears the disk-full refusal in the running flags; logs each change
    of state once (WARN when writes stop, INFO when they are taken again)."""

    def __init__(self, config: MessageStoreConfig, running_flags: RunningFlags, commit_log_dir: Path,
                 written_offset: Callable[[], int], interval_s: float = CHECK_INTERVAL_S) -> None:
        super().__init__("disk-usage-watcher", interval_s)
        self.paths = (Path(config.store_path_root_dir), commit_log_dir)
        self.config = config
        self.running_flags = running_flags
        self.written_offset = written_offset
        self.latest: DiskUsage | None = None
        self._next_check_offset = 0
        self._lock = threading.Lock()
        self._pressure_listeners: list[Callable[[], None]] = []
        self.copies = 1  # how many times the watched disks get each commitlog byte (2 with a posix tier on them)

    def on_pressure(self, listener: Callable[[], None]) -> None:
        """Called from the watcher's own pass while the disk is fuller than diskSpaceCleanForciblyRatio (the
        clean service wakes up rather than waiting for its interval)."""
        self._pressure_listeners.append(listener)

    def run_once(self) -> DiskUsage:
        usage = self.check()
        if usage.used_percent > self.config.disk_space_clean_forcibly_ratio:
            for listener in self._pressure_listeners:
                listener()
        return usage

    def after_append(self, end_offset: int) -> None:
        """The write path's hook: measure now once the commitlog passed the offset the last measurement set."""
        if end_offset >= self._next_check_offset and not self._lock.locked():
            self.check()

    def check(self) -> DiskUsage:
        """Measure now and refuse or take writes accordingly; returns the fullest watched disk's usage."""
        with self._lock:
            usage = self._fullest()
            self.latest = usage
            room = usage.room_below(self.config.disk_space_warning_level_ratio)
            self._next_check_offset = self.written_offset() + max(room // 2, MIN_CHECK_STEP) // self.copies
            self._apply(usage)
        return usage

    def _fullest(self) -> DiskUsage:
        seen: set[int] = set()
        usages: list[DiskUsage] = []
        for path in self.paths:
            usage = measure_disk_usage(path)
            device = os.stat(usage.path).st_dev
            if device not in seen:
                seen.add(device)
                usages.append(usage)
        return max(usages, key=lambda u: u.used_percent)

    def _apply(self, usage: DiskUsage) -> None:
        level = self.config.disk_space_warning_level_ratio
        was_refusing = self.running_flags.disk_full_reason is not None
        if usage.used_percent > level:
            self.running_flags.set_disk_full(
                f"disk full: {usage.path} is {usage.used_percent:.1f}% used, above diskSpaceWarningLevelRatio="
                f"{level}; writes refused until usage falls below it")
            if not was_refusing:
                log.warning("disk_full_writes_refused path=%s used_percent=%.1f free_bytes=%d "
                            "level=diskSpaceWarningLevelRatio=%d", usage.path, usage.used_percent,
                            usage.capacity_bytes - usage.used_bytes, level)
        elif was_refusing:
            self.running_flags.set_disk_full(None)
            log.info("disk_space_ok_writes_accepted path=%s used_percent=%.1f level=diskSpaceWarningLevelRatio=%d",
                     usage.path, usage.used_percent, level)

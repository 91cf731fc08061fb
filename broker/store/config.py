"""Message store settings. Broker config keys map onto these (``mappedFileSizeCommitLog`` etc.)."""

from dataclasses import dataclass
from enum import StrEnum

GIB = 1024**3
MIB = 1024**2


# StrEnum: a member prints as its broker.conf spelling (logs, runtime info, generated broker.conf files).
class FlushDiskType(StrEnum):
    """``flushDiskType``."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class StoreType(StrEnum):
    """``storeType``: where the consume queue and the broker's metadata live."""

    DEFAULT = "default"  # consume queue files, metadata JSON files under config/
    DEFAULT_ROCKSDB = "defaultRocksDB"  # both in RocksDB


@dataclass
class MessageStoreConfig:
    store_path_root_dir: str
    store_host: str = "127.0.0.1:10911"
    mapped_file_size_commit_log: int = GIB
    # 300,000 units of 20 bytes per consume queue file, as RocketMQ.
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log_ms: int = 500
    flush_interval_consume_queue_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    max_message_size: int = 4 * MIB
    file_reserved_time_hours: float = 72
    delete_when: str = "04"  # hours of the day, ';'-separated, when expired files may be deleted
    # Disk pressure, percent of the store's disk in use (upstream's three levels; README "Disk usage"):
    disk_max_used_space_ratio: int = 75  # above it, expired files go at any hour, not only at deleteWhen
    disk_space_clean_forcibly_ratio: int = 85  # above it, the oldest files go even if unexpired
    disk_space_warning_level_ratio: int = 90  # above it, writes are refused
    clean_file_forcibly_enable: bool = True  # false: unexpired files are never deleted, writes refused instead
    clean_resource_interval_ms: int = 10_000
    # Closing a removed segment's mapping waits this long so in-flight reads finish first.
    destroy_mapped_file_grace_ms: int = 30_000
    message_index_enable: bool = True
    store_type: StoreType = StoreType.DEFAULT
    max_hash_slot_num: int = 500_000
    max_index_num: int = 2_000_000

    def __post_init__(self) -> None:
        if self.mapped_file_size_commit_log < 4096:
            raise ValueError(f"mappedFileSizeCommitLog={self.mapped_file_size_commit_log} is below 4096")
        if self.mapped_file_size_consume_queue % 20 or self.mapped_file_size_consume_queue <= 0:
            raise ValueError("mappedFileSizeConsumeQueue must be a positive multiple of 20")
        if not 10 <= self.disk_max_used_space_ratio <= 95:
            raise ValueError(f"diskMaxUsedSpaceRatio={self.disk_max_used_space_ratio} is outside 10..95")
        self._check_disk_levels()
        # parsed once (broker.conf): a plain string here would compare unequal to every member by identity
        for value, kind in ((self.store_type, StoreType), (self.flush_disk_type, FlushDiskType)):
            if not isinstance(value, kind):
                raise TypeError(f"{kind.__name__} member expected, got {value!r}")
        if self.max_message_size <= 0:
            raise ValueError(f"maxMessageSize={self.max_message_size} must be positive")

    def _check_disk_levels(self) -> None:
        """diskMaxUsedSpaceRatio <= diskSpaceCleanForciblyRatio <= diskSpaceWarningLevelRatio, each in 10..99."""
        levels = (("diskSpaceCleanForciblyRatio", self.disk_space_clean_forcibly_ratio),
                  ("diskSpaceWarningLevelRatio", self.disk_space_warning_level_ratio))
        below_key, below = "diskMaxUsedSpaceRatio", self.disk_max_used_space_ratio
        for key, value in levels:
            if not 10 <= value <= 99:
                raise ValueError(f"{key}={value} is outside 10..99")
            if value < below:
                raise ValueError(f"{key}={value} is below {below_key}={below} (diskMaxUsedSpaceRatio <= "
                                 "diskSpaceCleanForciblyRatio <= diskSpaceWarningLevelRatio)")
            below_key, below = key, value

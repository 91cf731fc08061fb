"""Message store settings. Broker config keys map onto these (``mappedFileSizeCommitLog`` etc.)."""

from dataclasses import dataclass
from enum import Enum

GIB = 1024**3
MIB = 1024**2


class FlushDiskType(Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


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
    disk_max_used_space_ratio: int = 75  # percent: above it, delete the oldest files at once
    clean_resource_interval_ms: int = 10_000
    # Closing a removed segment's mapping waits this long so in-flight reads finish first.
    destroy_mapped_file_grace_ms: int = 30_000
    message_index_enable: bool = True
    store_type: str = "default"  # "defaultRocksDB": the consume queue lives in RocksDB
    max_hash_slot_num: int = 500_000
    max_index_num: int = 2_000_000

    def __post_init__(self) -> None:
        if self.mapped_file_size_commit_log < 4096:
            raise ValueError(f"mappedFileSizeCommitLog={self.mapped_file_size_commit_log} is below 4096")
        if self.mapped_file_size_consume_queue % 20 or self.mapped_file_size_consume_queue <= 0:
            raise ValueError("mappedFileSizeConsumeQueue must be a positive multiple of 20")
        if not 10 <= self.disk_max_used_space_ratio <= 95:
            raise ValueError(f"diskMaxUsedSpaceRatio={self.disk_max_used_space_ratio} is outside 10..95")
        if self.store_type not in ("default", "defaultRocksDB"):
            raise ValueError(f"storeType={self.store_type} is not default or defaultRocksDB")
        if self.max_message_size <= 0:
            raise ValueError(f"maxMessageSize={self.max_message_size} must be positive")

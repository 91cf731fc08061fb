"""Tiered storage wiring: backend, metadata, flat files, the upload dispatcher, the read facade, expiry."""

import logging
import time
from collections.abc import Callable
from pathlib import Path

from broker.store.disk_usage_watcher import same_file_system
from broker.store.message_store import MessageStore
from broker.store.periodic_service import PeriodicService
from broker.tiered.dispatcher.tiered_dispatcher import SHUTDOWN_WAIT_S, GroupCommitPolicy, TieredDispatcher
from broker.tiered.fetcher.tiered_message_store import TieredMessageStore
from broker.tiered.file.flat_file_store import FlatFileStore
from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.metadata.tiered_metadata_store import FileSegmentMetadata, SegmentStatus
from broker.tiered.provider.file_segment import FileSegmentType, is_backend_error
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider
from broker.tiered.provider.s3_file_segment import S3Config, ensure_bucket
from common.storage_refusal import is_storage_failure

log = logging.getLogger(__name__)

HOUR_MS = 3600 * 1000


def _never() -> None:
    return None


def _disk_full_now(local: MessageStore) -> Callable[[], str | None]:
    """The store's disk-full refusal, measured at the call (the tier's own writes count at once)."""
    watcher, flags = local.disk_watcher, local.running_flags

    def disk_full() -> str | None:
        watcher.check()
        return flags.disk_full_reason

    return disk_full


class TieredStore:
    def __init__(self, config, local: MessageStore) -> None:  # config: BrokerConfig
        root = Path(config.store_path_root_dir)
        self.s3: S3Config | None = None
        if config.tiered_backend_service_provider is TieredBackendServiceProvider.S3:
            self.s3 = S3Config(config.tiered_store_s3_bucket, config.tiered_store_s3_endpoint,
                               config.tiered_store_s3_region, config.tiered_store_s3_access_key,
                               config.tiered_store_s3_secret_key)
            if ensure_bucket(self.s3):  # fails here (the broker does not start) if the server cannot be used
                log.info("tiered_s3_bucket_created bucket=%s endpoint=%s", self.s3.bucket, self.s3.endpoint)
            # the key prefix in the bucket, where a posix tier has its directory
            self.backend_root: Path | str = config.tiered_store_s3_prefix.strip("/")
        else:
            self.backend_root = Path(config.tiered_store_file_path or root / "tiered")
        self.factory = FileSegmentFactory(config.tiered_backend_service_provider, self.backend_root, self.s3)
        self.metadata = RocksDBTieredMetadataStore(root / "tiered_metadata")
        self.flat_files = FlatFileStore(self.factory, self.metadata, config.broker_name,
                                        config.tiered_store_commit_log_max_size,
                                        config.tiered_store_consume_queue_max_size)
        policy = GroupCommitPolicy(config.tiered_store_group_commit_count, config.tiered_store_group_commit_size,
                                   config.tiered_store_group_commit_age / 1000)
        # A posix tier on the store's own disk writes each commitlog byte there a second time: the disk watcher
        # measures twice as often, and uploads wait while it refuses writes (the copy would take the headroom the
        # store keeps, and uploading frees nothing there). Measured before each queue's upload.
        shares_disk = (config.tiered_backend_service_provider is TieredBackendServiceProvider.POSIX
                       and same_file_system(Path(self.backend_root), root))
        if shares_disk:
            local.disk_watcher.copies += 1
        self.dispatcher = TieredDispatcher(self.flat_files, self.metadata, local.commit_log.read_at, policy,
                                           local.max_offset, _disk_full_now(local) if shares_disk else _never)
        local.register_dispatcher(self.dispatcher)  # before the local store starts: recovery replays into it
        self.store = TieredMessageStore(local, self.flat_files, config.tiered_storage_level)
        self.reserve_ms = int(config.tiered_store_file_reserved_time * HOUR_MS)
        self.delete_expired = config.tiered_store_delete_file_enable
        self.clean_service = TieredCleanService(self, config.clean_resource_interval / 1000)

    def start(self) -> None:
        """After the local store started (its recovery loaded the flat files and rebuilt the local queues)."""
        self.dispatcher.reconcile_after_recovery()
        self.dispatcher.start()
        self.clean_service.start()
        log.info("tiered_started backend=%s root=%s%s level=%s queues=%d", self.factory.provider, self.backend_root,
                 f" s3={self.s3!r}" if self.s3 else "", self.store.level, len(self.flat_files.files))

    def shutdown(self) -> None:
        """Before the local store shuts down: the last uploads read its commitlog."""
        waited_until = time.monotonic() + SHUTDOWN_WAIT_S  # both passes end (or are waited for) together
        self.dispatcher.request_stop()
        self.clean_service.shutdown()
        self.dispatcher.shutdown(wait_s=max(0.5, waited_until - time.monotonic()))
        self.flat_files.shutdown()

    def close(self) -> None:
        """After the local store shut down (its final flush stored the dispatcher's checkpoint)."""
        self.metadata.close()

    def expire(self, now_ms: int | None = None, delete: bool | None = None) -> int:
        """Mark (or delete) what is past each topic's reserve time; returns segments expired."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        n = 0
        for (topic, _), flat in list(self.flat_files.files.items()):
            meta = self.metadata.get_topic(topic)
            reserve = meta.reserve_time_ms if meta is not None and meta.reserve_time_ms >= 0 else self.reserve_ms
            n += flat.expire(now_ms - reserve, self.delete_expired if delete is None else delete)
        return n


    # -- for the Spark jobs ----------------------------------------------------------------------------
    def segments(self, topic: str | None = None) -> list[FileSegmentMetadata]:
        """Every segment record (readable and expired) of ``topic`` or of all topics."""
        out: list[FileSegmentMetadata] = []
        for (t, queue_id), _ in sorted(self.flat_files.files.items()):
            if topic is None or t == topic:
                for file_type in FileSegmentType:
                    out += self.metadata.iterate_segments(t, queue_id, file_type)
        return out

    def replace_segments(self, old: list[FileSegmentMetadata], merged: FileSegmentMetadata) -> bool:
        flat = self.flat_files.get(merged.topic, merged.queue_id)
        if flat is None:
            return False
        target = flat.commit_log if merged.type is FileSegmentType.COMMIT_LOG else flat.consume_queue
        return target.replace(old, merged)

    def mark_expired(self, now_ms: int | None = None) -> list[FileSegmentMetadata]:
        """Expire what is due (marking only; objects stay) and answer every segment marked expired."""
        self.expire(now_ms, delete=False)
        return [m for m in self.segments() if m.status is SegmentStatus.EXPIRED]

    def drop_segments(self, segments: list[FileSegmentMetadata]) -> int:
        """Drop the records of expired segments whose objects are gone; others are left alone."""
        stored = {(m.path, m.base_offset): m for m in self.segments() if m.status is SegmentStatus.EXPIRED}
        dropped = 0
        for m in segments:
            if (m.path, m.base_offset) in stored:
                self.metadata.delete_segment(stored[(m.path, m.base_offset)])
                dropped += 1
        return dropped


class TieredCleanService(PeriodicService):
    @staticmethod
    def is_environmental(exc: BaseException) -> bool:
        """An object store that is down is not a bug either (nor the tier's metadata, RocksDB, on a full disk)."""
        return is_storage_failure(exc) or is_backend_error(exc)

    def __init__(self, tiered: TieredStore, interval_s: float) -> None:
        super().__init__("tiered-clean", interval_s)
        self.tiered = tiered

    def run_once(self) -> int:
        return self.tiered.expire()

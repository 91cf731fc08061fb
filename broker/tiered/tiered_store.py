"""Tiered storage wiring: backend, metadata, flat files, the upload dispatcher, the read facade, expiry."""

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from broker.store.disk_usage_watcher import same_file_system
from broker.store.message_store import MessageStore
from broker.store.periodic_service import PeriodicService
from broker.tiered.dispatcher.local_log import LocalLog
from broker.tiered.dispatcher.tiered_dispatcher import SHUTDOWN_WAIT_S, GroupCommitPolicy, TieredDispatcher
from broker.tiered.fetcher.tiered_message_store import TieredMessageStore
from broker.tiered.file.flat_append_file import LoadMode
from broker.tiered.file.flat_file_store import FlatFileStore
from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.metadata.tiered_metadata_store import FileSegmentMetadata, SegmentStatus
from broker.tiered.provider.file_segment import FileSegmentType, is_backend_error
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider
from broker.tiered.provider.posix_file_segment import check_posix_root
from broker.tiered.provider.s3_file_segment import S3Config, ensure_bucket
from broker.tiered.replica.tier_id import ensure_tier_id, read_tier_id
from broker.tiered.replica.tier_role import MasterTier, TierRole
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
    def __init__(self, config, local: MessageStore, role: TierRole = TierRole.MASTER) -> None:  # config: BrokerConfig
        """``role``: WAITING for a controller-mode broker, which is a replica until it is elected."""
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
            check_posix_root(self.backend_root)  # the same: a directory it cannot write refuses the start
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
        self.dispatcher = TieredDispatcher(self.flat_files, self.metadata, LocalLog(local), policy,
                                           _disk_full_now(local) if shares_disk else _never,
                                           LoadMode.RECOVER if role is TierRole.MASTER else LoadMode.FOLLOW)
        local.register_dispatcher(self.dispatcher)  # before the local store starts: recovery replays into it
        self.store = TieredMessageStore(local, self.flat_files, config.tiered_storage_level)
        self.local = local
        self.broker_name = config.broker_name
        self.role = role  # WAITING until start() (as master) or the master's first copy (as a replica)
        self._role_lock = threading.Lock()
        self.tier_id = ""  # the backend's, once this broker wrote or found it as master
        self._uploading = False
        self._id_lock = threading.Lock()
        self._copied_version = ""
        self.reserve_ms = int(config.tiered_store_file_reserved_time * HOUR_MS)
        self.delete_expired = config.tiered_store_delete_file_enable
        self.clean_service = TieredCleanService(self, config.clean_resource_interval / 1000)

    def start(self) -> None:
        """As the broker becomes master, after the local store started (its recovery loaded the flat files and
        rebuilt the local queues) and, if it was a replica, dispatched everything it copied. What reads the
        backend first runs in the upload thread (not on the caller's, the event loop), retried while it fails."""
        with self._role_lock:
            prepare = self._take_over if self.role is TierRole.SHARED else self._prepare_master
            self.role = TierRole.MASTER
            if not self._uploading:
                self._start_uploads(prepare)

    def _start_uploads(self, prepare: Callable[[], None]) -> None:
        self._uploading = True
        self.dispatcher.start(prepare)
        self.clean_service.start()
        log.info("tiered_started backend=%s root=%s%s level=%s queues=%d role=%s", self.factory.provider,
                 self.backend_root, f" s3={self.s3!r}" if self.s3 else "", self.store.level,
                 len(self.flat_files.files), self.role.value)

    def _prepare_master(self) -> None:
        self._prepare_own()
        self._ensure_tier_id()

    def _prepare_own(self) -> None:
        """This broker's own tier: checked against the backend as after a crash (unless its start did so)."""
        if self.dispatcher.load_mode is not LoadMode.RECOVER:
            self.flat_files.load(LoadMode.RECOVER)
        self.dispatcher.reconcile_after_recovery()

    def _ensure_tier_id(self) -> str:
        """The backend's id, written by this master when there is none (one writer at a time: a replica that read
        an id this broker then overwrote would take a shared backend for its own)."""
        with self._id_lock:
            if not self.tier_id:
                self.tier_id = ensure_tier_id(self.factory, self.broker_name)
            return self.tier_id

    def _take_over(self) -> None:
        """A promoted replica that shared its master's backend: its last copy of the master's records, fitted to
        what the master did after it (see ``replica/tier_role.py``); the tier forgets what this log never had."""
        self.flat_files.load(LoadMode.TAKE_OVER)
        self.dispatcher.truncate_dirty(self.local.commit_log.max_offset())
        self.dispatcher.reconcile_after_recovery()
        self._ensure_tier_id()
        log.warning("tiered_taken_over queues=%d checkpoint=%d", len(self.flat_files.files),
                    self.dispatcher.current_checkpoint())

    # -- controller mode: a replica's tier follows its master's (replica/tier_role.py) --------------------
    def copy_for_replica(self, since: str = "") -> MasterTier:
        """This master's tier for a replica: the backend's id ("" until this broker, master, found or wrote it)
        and the metadata (what changed since the replica's copy of version ``since``, when known)."""
        if self.role is not TierRole.MASTER or not self.dispatcher.prepared:
            return MasterTier("", self.metadata.copy())
        return MasterTier(self._ensure_tier_id(), self.metadata.copy(since))  # a promoted replica had its own

    def copied_version(self) -> str:
        """The version of the master's metadata this replica installed last ("": none since its start)."""
        return self._copied_version

    def follows_master(self) -> bool:
        """Whether this replica still wants its master's tier (not once it uploads to its own backend)."""
        return self.role in (TierRole.WAITING, TierRole.SHARED)

    def follow_master(self, master: MasterTier | None) -> None:
        """A copy of the master's tier (None: the master has no tiered storage). Backend errors are raised: the
        caller tries again with the next copy."""
        with self._role_lock:
            if not self.follows_master():
                return
            if master is not None and not master.tier_id:
                return  # the master has not written its backend's id yet: not known whether it is shared
            mine = read_tier_id(self.factory, self.broker_name) if master is not None else ""
            if master is None or master.tier_id != mine:
                log.info("tiered_replica_uploads_own broker=%s reason=%s", self.broker_name,
                         "the master's tiered storage is off" if master is None else "its backend is not the master's")
                self.role = TierRole.OWN
                self._start_uploads(self._prepare_own)
                return
            changed = self.metadata.install(master.copy)
            self._copied_version = master.copy.version
            self.dispatcher.follow(master.copy.checkpoint, master.copy.uploaded_end)
            self.flat_files.reload(changed, LoadMode.FOLLOW)  # reads follow the master's records
            if self.role is TierRole.WAITING:
                log.info("tiered_replica_follows_master broker=%s checkpoint=%d: the master uploads for both",
                         self.broker_name, master.copy.checkpoint)
                self.role = TierRole.SHARED

    def shutdown(self) -> None:
        """Before the local store shuts down: the last uploads read its commitlog."""
        waited_until = time.monotonic() + SHUTDOWN_WAIT_S  # both passes end (or are waited for) together
        self.dispatcher.request_stop()
        self.clean_service.shutdown()
        self.dispatcher.shutdown(wait_s=max(0.5, waited_until - time.monotonic()),
                                 final_upload=self.role in (TierRole.MASTER, TierRole.OWN))
        self.flat_files.shutdown()

    def close(self) -> None:
        """After the local store shut down (its final flush stored the dispatcher's checkpoint)."""
        self.metadata.close()

    def expire(self, now_ms: int | None = None, delete: bool | None = None) -> int:
        """Mark (or delete) what is past each topic's reserve time; returns segments expired."""
        if not self.dispatcher.prepared:  # a promoted replica's tier is not taken over yet
            return 0
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
        replaced = target.replace(old, merged)
        self.metadata.sync()  # the job deletes the old parts once answered: a crash must not bring back their records
        return replaced

    def mark_expired(self, now_ms: int | None = None) -> list[FileSegmentMetadata]:
        """Expire what is due (marking only; objects stay) and answer every segment marked expired, durably: the
        job deletes their objects once answered (marks lost in a machine crash left records of deleted objects, and
        the load then cut every later segment of the queue, unexpired ones too)."""
        self.expire(now_ms, delete=False)
        self.metadata.sync()
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

"""Uploads messages to the tier: the tiered member of the commitlog's dispatch chain.

``dispatch`` (a reput pass, only ever below the confirm offset) just queues each record's position per queue.
An upload thread group-commits a queue when it has ``group_commit_count`` records, ``group_commit_bytes``
bytes, or its oldest one waited ``group_commit_age_s``: it reads the records from the local commitlog,
appends them to the queue's flat files and commits commitlog then consume queue.

A backend that fails (see ``provider/file_segment.py``) is retried with a growing pause, logged once while it
lasts and once when it is back; the stop does not wait for it (the restart uploads from the checkpoint).
Uploads also wait while ``paused`` gives a reason (a posix tier on the store's own disk, while that disk is full:
a second copy would take the headroom the store keeps), logged the same way.

Checkpoint: the commitlog offset of the oldest record not yet committed to the tier (or the dispatched end),
stored in the metadata store by ``flush``. Local commitlog segments do not expire above it, and after a crash
the chain replays from it; records whose queue offset the tier already has are skipped.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.tiered.file.flat_append_file import LoadMode
from broker.tiered.file.flat_file_store import FlatFileStore, QueueKey
from broker.tiered.file.flat_message_file import UNIT
from broker.tiered.metadata.tiered_metadata_store import TieredMetadataStore
from broker.tiered.provider.file_segment import is_backend_error
from common.kv_shard import KV_TOPIC
from common.storage_refusal import is_rocksdb_io_error
from common.timer_topic import TIMER_TOPIC

log = logging.getLogger(__name__)

ReadAt = Callable[[int, int], bytes]
# The KV store's ops and pending delayed messages: their state lives in RocksDB (the timer's holds copies of its
# records), replaying them from a tier is not a use.
NOT_TIERED = (KV_TOPIC, TIMER_TOPIC)
MAX_RUN_BYTES = 4 * 1024 * 1024  # one local read and one tier append per run of contiguous records
RETRY_MIN_S, RETRY_MAX_S = 0.5, 10.0  # the pause after a failed upload pass, doubled while they keep failing
PAUSED_CHECK_S = 0.5  # how often paused uploads look whether they may go on
SHUTDOWN_WAIT_S = 10.0  # the stop waits this long for a pass in progress; what is left is uploaded after restart


@dataclass(slots=True)
class GroupCommitPolicy:
    count: int = 2048
    bytes: int = 8 * 1024 * 1024
    age_s: float = 0.5


class _Pending:
    __slots__ = ("bytes", "requests", "since")

    def __init__(self) -> None:
        self.requests: list[DispatchRequest] = []
        self.bytes = 0
        self.since = time.monotonic()


class TieredDispatcher(CommitLogDispatcher):
    name = "tiered"
    keeps_commit_log = True  # a local segment expires only once the tier has its messages

    def __init__(self, flat_files: FlatFileStore, metadata: TieredMetadataStore, read_at: ReadAt,
                 policy: GroupCommitPolicy, local_max_offset: Callable[[str, int], int],
                 paused: Callable[[], str | None] = lambda: None, load_mode: LoadMode = LoadMode.RECOVER) -> None:
        """``load_mode``: how the store's start loads the flat files (FOLLOW while it is not known whose backend
        this is: a controller-mode replica's may be its master's, which a recovery's checks would misread)."""
        self.flat_files = flat_files
        self.load_mode = load_mode
        self.paused = paused  # why uploads must wait now, or None
        self._local_max_offset = local_max_offset
        self.metadata = metadata
        self._read_at = read_at
        self.policy = policy
        self._pending: dict[QueueKey, _Pending] = {}
        self._inflight: dict[QueueKey, int] = {}  # queue -> physical offset of its oldest record being uploaded
        # Deleted topics whose flat files go at the start of the next upload pass, with the local commitlog offset
        # dispatch stood at: the checkpoint stays below it until then, so a crash replays the deletion.
        self._deletions: list[tuple[str, int]] = []
        self._dispatched = 0
        self._checkpoint = 0
        self._uploaded_end = 0  # local commitlog offset after the newest record the tier holds (stored)
        self._reconcile = False
        self._lock = threading.Lock()
        self._wakeup = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._prepare: Callable[[], None] | None = None  # what runs before the first pass, until it did
        self._failing_since: float | None = None  # monotonic time of the first failed pass in a row
        self._failed_passes = 0
        self._paused_since: float | None = None  # monotonic time uploads began to wait for ``paused``
        self.uploaded_messages = 0
        self.uploaded_bytes = 0

    # -- chain -----------------------------------------------------------------------------------------
    def load(self) -> None:
        self.flat_files.load(self.load_mode)
        self._checkpoint = self._dispatched = self.metadata.get_checkpoint()
        self._uploaded_end = self.metadata.get_uploaded_end()
        log.info("tiered_loaded queues=%d checkpoint=%d", len(self.flat_files.files), self._checkpoint)

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        full = False
        with self._lock:
            pending = self._pending
            for r in requests:
                if r[0] in NOT_TIERED:
                    continue
                key = (r[0], r[1])
                p = pending.get(key)
                if p is None:
                    p = pending[key] = _Pending()
                p.requests.append(r)
                p.bytes += r[4]
                full = full or len(p.requests) >= self.policy.count or p.bytes >= self.policy.bytes
            self._dispatched = max(self._dispatched, end_offset)
        if full:
            self._wakeup.set()

    def topic_deleted(self, topic: str) -> None:
        """Its records waiting for upload are dropped now, and its flat files go at the start of the next pass,
        before any record of a topic made again under the name is uploaded (its queue offsets start at 0 again,
        which the old flat files would take for records they hold)."""
        with self._lock:
            for key in [k for k in self._pending if k[0] == topic]:
                del self._pending[key]
            self._deletions.append((topic, self._dispatched))
        self._wakeup.set()

    def checkpoint(self) -> int:
        return self._checkpoint

    def follow(self, master_checkpoint: int, master_uploaded_end: int) -> None:
        """A replica sharing its master's backend, which uploads for both (``broker/tiered/replica/``): what the
        master's copied records say the tier holds (below its checkpoint) is dropped here, so this uploader keeps
        in memory, and the local commitlog keeps on disk, only what the master has not uploaded yet: what this
        replica must upload if it is promoted."""
        with self._lock:
            for key, p in list(self._pending.items()):
                requests = p.requests
                keep = next((i for i, r in enumerate(requests) if r[3] >= master_checkpoint), len(requests))
                if keep == len(requests):
                    del self._pending[key]
                elif keep:
                    p.bytes -= sum(r[4] for r in requests[:keep])
                    del requests[:keep]
            # the master's checkpoint stays below a deletion until its upload pass did it
            self._deletions = [(topic, at) for topic, at in self._deletions if at >= master_checkpoint]
            self._uploaded_end = master_uploaded_end

    def truncate_dirty(self, commit_log_end: int) -> None:
        """The local commitlog lost its tail (an OS crash under ASYNC_FLUSH) and the tier may hold records
        from it, whose queue offsets new messages will reuse: once the replay rebuilt the local queues
        (:meth:`reconcile_after_recovery`), the tier forgets what it holds past each local queue's end."""
        if commit_log_end < self._uploaded_end:
            log.warning("tiered_ahead_of_commitlog uploaded_end=%d commitlog_end=%d", self._uploaded_end,
                        commit_log_end)
            self._reconcile = True
        self._checkpoint = min(self._checkpoint, commit_log_end)

    def reconcile_after_recovery(self) -> None:
        if not self._reconcile:
            return
        for (topic, queue_id), flat in self.flat_files.files.items():
            local_max = self._local_max_offset(topic, queue_id)
            if flat.max_offset > local_max >= flat.min_offset:
                log.warning("tiered_truncated topic=%s queue=%d tier_max=%d local_max=%d", topic, queue_id,
                            flat.max_offset, local_max)
                flat.consume_queue.cut_to(local_max * UNIT)
        self._reconcile = False

    def current_checkpoint(self) -> int:
        with self._lock:
            firsts = [p.requests[0][3] for p in self._pending.values() if p.requests]
            return min([self._dispatched, *firsts, *self._inflight.values(), *(at for _, at in self._deletions)])

    def flush(self) -> None:
        checkpoint = self.current_checkpoint()
        if checkpoint != self._checkpoint:
            self.metadata.set_checkpoint(checkpoint)
            self._checkpoint = checkpoint

    # -- upload thread ---------------------------------------------------------------------------------
    def start(self, prepare: Callable[[], None] = lambda: None) -> None:
        """``prepare``: what the upload thread does before its first pass (it reads the backend), retried as a
        failed pass is; no upload before it succeeded."""
        self._prepare = prepare
        self._thread = threading.Thread(target=self._run, name="tiered-upload", daemon=True)
        self._thread.start()

    @property
    def prepared(self) -> bool:
        return self._thread is not None and self._prepare is None

    def _run(self) -> None:
        pause = 0.0
        while not self._stopped.is_set():
            self._wakeup.wait(min(0.05, self.policy.age_s))
            self._wakeup.clear()
            if self._held():
                self._stopped.wait(PAUSED_CHECK_S)
                continue
            try:
                if self._prepare is not None:
                    self._prepare()
                    self._prepare = None
                self.upload_due()
            except Exception as exc:
                pause = min(RETRY_MAX_S, max(RETRY_MIN_S, pause * 2))
                self._failed(exc, pause)
                self._stopped.wait(pause)  # not cut short by new records: they wait for the backend anyway
                continue
            pause = 0.0
            if self._failing_since is not None:
                log.info("tiered_upload_resumed after_s=%.1f failed_passes=%d", time.monotonic() - self._failing_since,
                         self._failed_passes)
                self._failing_since, self._failed_passes = None, 0

    def _no_final_upload(self) -> str | None:
        """Why the stop does not upload what is left (the restart does, from the checkpoint), or None."""
        if self._thread is not None and self._thread.is_alive():
            return "an upload pass is still running"
        if self._failing_since is not None:
            return "the backend is failing"
        if self._prepare is not None:
            return "the upload thread never prepared its first pass"
        paused = self.paused()
        return f"uploads are paused ({paused})" if paused is not None else None

    def _held(self) -> bool:
        """Whether uploads wait for ``paused`` now; logs when they begin to and when they go on."""
        reason = self.paused()
        if reason is None:
            if self._paused_since is not None:
                log.info("tiered_upload_resumed after_s=%.1f: no longer paused", time.monotonic() - self._paused_since)
                self._paused_since = None
            return False
        if self._paused_since is None:
            self._paused_since = time.monotonic()
            log.warning("tiered_upload_paused pending_records=%d checkpoint=%d reason=%r: local segments are kept "
                        "until uploaded", self.pending_records(), self.current_checkpoint(), reason)
        return True

    def _failed(self, exc: Exception, pause: float) -> None:
        self._failed_passes += 1
        if self._failing_since is not None:  # once while it lasts
            return
        self._failing_since = time.monotonic()
        if is_rocksdb_io_error(exc):  # the tier's metadata, on the broker's own disk (a full disk, say)
            log.warning("tiered_upload_refused pending_records=%d checkpoint=%d error=%r: the tier's metadata store "
                        "refused a write; retried with pauses up to %g s (local segments are kept until uploaded)",
                        self.pending_records(), self.current_checkpoint(), exc, RETRY_MAX_S)
        elif is_backend_error(exc):
            log.warning("tiered_upload_refused pending_records=%d checkpoint=%d error=%r: the backend failed; "
                        "retried with pauses up to %g s (local segments are kept until uploaded)",
                        self.pending_records(), self.current_checkpoint(), exc, RETRY_MAX_S)
        else:
            log.exception("tiered_upload_failed pending_records=%d retry_in_s=%g", self.pending_records(), pause)

    def pending_records(self) -> int:
        with self._lock:
            return sum(len(p.requests) for p in self._pending.values())

    def upload_due(self, force: bool = False) -> int:
        """Commit every queue whose group is due (all with ``force``); returns records uploaded."""
        now = time.monotonic()
        policy = self.policy
        with self._lock:
            deletions = list(self._deletions)  # taken with the records: those of a topic made again come after
            due = [k for k, p in self._pending.items() if p.requests and (
                force or len(p.requests) >= policy.count or p.bytes >= policy.bytes or now - p.since >= policy.age_s)]
            taken = {}
            for key in due:
                p = self._pending.pop(key)
                taken[key] = p.requests
                self._inflight[key] = p.requests[0][3]
        try:
            self._delete_topics(deletions)
        except BaseException:
            self._back_in_line(taken, list(taken))
            raise
        done = 0
        keys = list(taken)
        for i, key in enumerate(keys):
            if i and self.paused() is not None:  # paused during the pass: the rest waits
                self._back_in_line(taken, keys[i:])
                break
            try:
                done += self._upload(key, taken[key])
            except BaseException:
                self._back_in_line(taken, keys[i:])  # this queue and the ones not tried yet
                raise
            with self._lock:
                del self._inflight[key]
        return done

    def _delete_topics(self, deletions: list[tuple[str, int]]) -> None:
        for topic, at in deletions:
            queues = self.flat_files.delete_topic(topic)
            with self._lock:
                self._deletions.remove((topic, at))
            log.info("tiered_topic_deleted topic=%s queues=%d", topic, queues)

    def _back_in_line(self, taken: dict[QueueKey, list[DispatchRequest]], keys: list[QueueKey]) -> None:
        """Requests taken for upload wait again (those already appended are skipped, then committed)."""
        with self._lock:
            for key in keys:
                requests = taken[key]
                p = self._pending.setdefault(key, _Pending())
                p.requests[:0] = requests
                p.bytes += sum(r[4] for r in requests)
                del self._inflight[key]

    def _upload(self, key: QueueKey, requests: list[DispatchRequest]) -> int:
        topic, queue_id = key
        flat = self.flat_files.get_or_create(topic, queue_id, requests[0][2])
        max_run = min(MAX_RUN_BYTES, flat.commit_log.segment_size)
        appended = 0
        size = 0
        run: list[tuple[int, int, int, int]] = []  # units of records contiguous in the local commitlog
        run_start = run_end = 0
        held_end = 0  # local commitlog offset after the newest of these records the flat file holds
        for _, _, queue_offset, physical, record_size, tags_code, store_time, _ in requests:
            expected = flat.dispatch_offset + len(run)
            if queue_offset < expected:  # already in the tier (a replay after restart, a retried pass)
                held_end = physical + record_size
                continue
            if queue_offset > expected:
                log.error("tiered_gap topic=%s queue=%d expected=%d got=%d: messages missing from the tier",
                          topic, queue_id, expected, queue_offset)
                break
            if run and (physical != run_end or run_end - run_start + record_size > max_run):
                self._append_run(flat, run_start, run_end, run)
                run = []
            if not run:
                run_start = run_end = physical
            run.append((queue_offset, record_size, tags_code, store_time))
            run_end += record_size
            appended += 1
            size += record_size
        if run:
            self._append_run(flat, run_start, run_end, run)
        if appended:  # after the skipped ones (queue offsets ascend): the last appended ends the held records
            held_end = run_end
        if appended or flat.uncommitted:
            # Stored before the tier shows them (recovery compares it with the local end), and taken as stored only
            # once it is: a retry after a refused write stores it again, for the records appended before.
            if held_end > self._uploaded_end:
                self.metadata.set_uploaded_end(held_end)
                self._uploaded_end = held_end
            flat.commit()
            self.uploaded_messages += appended
            self.uploaded_bytes += size
        return appended

    def _append_run(self, flat, start: int, end: int, units: list[tuple[int, int, int, int]]) -> None:
        flat.append_run(bytearray(self._read_at(start, end - start)), units)

    def request_stop(self) -> None:
        """No pass after the one running (if any): :meth:`shutdown` then waits for it and uploads the rest."""
        self._stopped.set()
        self._wakeup.set()

    def shutdown(self, wait_s: float = SHUTDOWN_WAIT_S, final_upload: bool = True) -> None:
        """``final_upload=False``: a replica that leaves uploads to its master (``replica/tier_role.py``)."""
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout=wait_s)
        why = self._no_final_upload() if final_upload else None
        if why is not None:  # not waited for again
            log.warning("tiered_final_upload_skipped pending_records=%d checkpoint=%d reason=%s: uploaded after the "
                        "restart, from the checkpoint", self.pending_records(), self.current_checkpoint(), why)
        elif final_upload:
            self.upload_due(force=True)
        self.flush()

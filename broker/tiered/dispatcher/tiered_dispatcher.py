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

Memory: at most ``max_pending`` requests are kept (waiting or being uploaded). Past that (a backend down for
long, uploads paused) dispatch keeps only where it stopped keeping them, which holds the checkpoint there, and
the upload thread re-reads those records from the local commitlog as room comes back (``_refill``).

A queue's records the tier lacks below what dispatch brings (its backend lost bytes, and the load cut the
units pointing at them) are read again from the local consume queue and commitlog (``_fill_gap``); when they
expired there too, the queue's tier restarts after them (``FlatMessageFile.rebase``), logged at ERROR.

A record no tiered commitlog segment holds (a record never straddles segments; the broker refuses a
``tieredStoreCommitLogMaxSize`` below the largest record it takes, but older records may be larger) blocks its
queue alone: what came before it is uploaded, its later records are not kept (they would hold the checkpoint, and
with it every local segment, for good) and expire locally; the other queues go on (``_block``).
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.store.dispatch.topic_deletion import TOPIC_DELETION_TOPIC, deleted_topic
from broker.tiered.dispatcher.local_log import LocalLog
from broker.tiered.file.flat_append_file import LoadMode
from broker.tiered.file.flat_file_store import FlatFileStore, QueueKey
from broker.tiered.file.flat_message_file import FlatMessageFile
from broker.tiered.metadata.tiered_metadata_store import TieredMetadataStore
from broker.tiered.provider.file_segment import is_backend_error
from common.kv_shard import KV_TOPIC
from common.storage_refusal import is_rocksdb_io_error
from common.timer_topic import TIMER_TOPIC

log = logging.getLogger(__name__)

# The KV store's ops and pending delayed messages: their state lives in RocksDB (the timer's holds copies of its
# records), replaying them from a tier is not a use.
NOT_TIERED = (KV_TOPIC, TIMER_TOPIC)
MAX_RUN_BYTES = 4 * 1024 * 1024  # one local read and one tier append per run of contiguous records
RETRY_MIN_S, RETRY_MAX_S = 0.5, 10.0  # the pause after a failed upload pass, doubled while they keep failing
PAUSED_CHECK_S = 0.5  # how often paused uploads look whether they may go on
SHUTDOWN_WAIT_S = 10.0  # the stop waits this long for a pass in progress; what is left is uploaded after restart
FILL_BATCH = 1024  # local consume-queue units read at a time when filling a queue's gap
MAX_REREAD_RECORDS = 4096  # records re-read from the local commitlog at a time (one lock hold to keep them)


@dataclass(slots=True)
class GroupCommitPolicy:
    count: int = 2048
    bytes: int = 8 * 1024 * 1024
    age_s: float = 0.5
    # requests kept in memory (~370 B each with their properties); past it they are re-read from the commitlog
    max_pending: int = 256 * 1024


class RecordTooLarge(Exception):
    """A queue's record that no tiered commitlog segment holds: the queue's tier, one unbroken run of its records,
    cannot go past it."""

    def __init__(self, queue_offset: int, size: int, segment_size: int) -> None:
        super().__init__(f"record at queue offset {queue_offset} of {size} bytes exceeds a tiered commitlog segment "
                         f"of {segment_size} bytes")
        self.queue_offset, self.size, self.segment_size = queue_offset, size, segment_size


class _Pending:
    __slots__ = ("bytes", "requests", "since")

    def __init__(self) -> None:
        self.requests: list[DispatchRequest] = []
        self.bytes = 0
        self.since = time.monotonic()


class _Runs:
    """Records appended to one queue's flat file, gathered into runs contiguous in the local commitlog: one
    local read and one tier append a run."""

    __slots__ = ("appended", "bytes", "counted", "end", "flat", "held_end", "max_record", "max_run", "read_at", "start",
                 "units")

    def __init__(self, flat: FlatMessageFile, read_at: Callable[[int, int], bytes]) -> None:
        self.flat = flat
        self.read_at = read_at
        self.max_record = flat.commit_log.segment_size  # a record never straddles segments
        self.max_run = min(MAX_RUN_BYTES, self.max_record)
        self.units: list[tuple[int, int, int, int]] = []  # of the run being gathered
        self.start = self.end = 0  # its local commitlog span
        self.appended = self.bytes = 0
        self.counted = (0, 0)  # (appended, bytes) already in the uploader's totals
        self.held_end = 0  # local commitlog offset after the newest record appended

    @property
    def next_offset(self) -> int:
        """The queue offset the flat file takes next."""
        return self.flat.dispatch_offset + len(self.units)

    def add(self, queue_offset: int, physical: int, size: int, tags_code: int, store_time: int) -> None:
        """The record at ``next_offset``; RecordTooLarge (those before it appended) if no segment holds it."""
        if size > self.max_record:
            self.flush()
            raise RecordTooLarge(queue_offset, size, self.max_record)
        if self.units and (physical != self.end or self.end - self.start + size > self.max_run):
            self.flush()
        if not self.units:
            self.start = self.end = physical
        self.units.append((queue_offset, size, tags_code, store_time))
        self.end += size
        self.appended += 1
        self.bytes += size
        self.held_end = max(self.held_end, self.end)

    def flush(self) -> None:
        if self.units:
            self.flat.append_run(self.read_at(self.start, self.end - self.start), self.units)
            self.units = []


class TieredDispatcher(CommitLogDispatcher):
    name = "tiered"
    keeps_commit_log = True  # a local segment expires only once the tier has its messages
    recovers_from_refused_flush = True  # its RocksDB metadata reopens at its next write
    takes_holes = False  # a hole reads to its gap filling as records the tier lost, expired locally: dropped older ones

    def __init__(self, flat_files: FlatFileStore, metadata: TieredMetadataStore, local: LocalLog,
                 policy: GroupCommitPolicy, paused: Callable[[], str | None] = lambda: None,
                 load_mode: LoadMode = LoadMode.RECOVER) -> None:
        """``load_mode``: how the store's start loads the flat files (FOLLOW while it is not known whose backend
        this is: a controller-mode replica's may be its master's, which a recovery's checks would misread)."""
        self.flat_files = flat_files
        self.load_mode = load_mode
        self.paused = paused  # why uploads must wait now, or None
        self.local = local
        self.metadata = metadata
        self.policy = policy
        self._pending: dict[QueueKey, _Pending] = {}
        self._kept = 0  # requests in memory: waiting, or taken by an upload pass
        # Set while dispatch keeps no requests (``max_pending`` reached): the commitlog offset of the first one not
        # kept. The upload thread re-reads from it (the checkpoint stays at or below it).
        self._resume_from: int | None = None
        self._inflight: dict[QueueKey, int] = {}  # queue -> physical offset of its oldest record being uploaded
        self._blocked: dict[QueueKey, int] = {}  # queue -> offset of its record no segment holds (see _block)
        # Deleted topics whose flat files go at the start of the next upload pass, with the local commitlog offset
        # dispatch stood at: the checkpoint stays below it until then, so a crash replays the deletion.
        self._deletions: list[tuple[str, int]] = []
        self._dispatched = 0
        self._checkpoint = 0
        self._uploaded_end = 0  # local commitlog offset after the newest record the tier holds (stored)
        # A cut is due (the local commitlog lost a tail the tier had): to each queue's end as of this commitlog end
        self._reconcile_end: int | None = None
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
        self._reconcile_end = self.metadata.get_reconcile_end()  # a cut an earlier start left undone
        log.info("tiered_loaded queues=%d checkpoint=%d reconcile_end=%s", len(self.flat_files.files),
                 self._checkpoint, self._reconcile_end)

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        full = False
        with self._lock:
            if self._resume_from is None:
                full = self._keep(requests)
                if self._kept > self.policy.max_pending:
                    self._resume_from = max(self._dispatched, end_offset)
                    log.warning("tiered_pending_capped kept=%d resume_from=%d: later records are re-read from the "
                                "local commitlog as uploads catch up", self._kept, self._resume_from)
            self._dispatched = max(self._dispatched, end_offset)
        if full:
            self._wakeup.set()

    def _keep(self, requests: list[DispatchRequest]) -> bool:
        """Under the lock: ``requests`` wait for upload. Whether a queue's group became due by size."""
        full = False
        pending = self._pending
        blocked = self._blocked
        kept = 0
        for r in requests:
            if r[0] in NOT_TIERED:
                continue
            key = (r[0], r[1])
            if blocked and key in blocked:
                continue
            p = pending.get(key)
            if p is None:
                p = pending[key] = _Pending()
            p.requests.append(r)
            p.bytes += r[4]
            kept += 1
            full = full or len(p.requests) >= self.policy.count or p.bytes >= self.policy.bytes
        self._kept += kept
        return full

    def _drop_pending(self, key: QueueKey, count: int | None = None) -> None:
        """Under the lock: the first ``count`` (all) requests of ``key`` waiting for upload are not uploaded."""
        p = self._pending[key]
        if count is None or count >= len(p.requests):
            del self._pending[key]
            self._kept -= len(p.requests)
        elif count:
            p.bytes -= sum(r[4] for r in p.requests[:count])
            del p.requests[:count]
            self._kept -= count

    def topic_deleted(self, topic: str, at_offset: int) -> None:
        """Its records waiting for upload are dropped now, and its flat files go at the start of the next pass,
        before any record of a topic made again under the name is uploaded (its queue offsets start at 0 again,
        which the old flat files would take for records they hold)."""
        with self._lock:
            self._topic_deleted(topic, self._dispatched)
        self._wakeup.set()

    def _topic_deleted(self, topic: str, at: int) -> None:
        """Under the lock: ``at`` is the commitlog offset of the deletion (or dispatch's, past it)."""
        for key in [k for k in self._pending if k[0] == topic]:
            self._drop_pending(key)
        for key in [k for k in self._blocked if k[0] == topic]:  # its flat files go: a topic made again starts anew
            del self._blocked[key]
            log.info("tiered_queue_unblocked topic=%s queue=%d reason=topic_deleted", *key)
        self._deletions.append((topic, at))
        self.flat_files.hide_topic(topic)

    def checkpoint(self) -> int:
        """The stored checkpoint, or lower while the uploader holds older records: after a restart the replay starts
        at the lowest checkpoint of all and hands it records below the stored one again, and the next flush stores
        that lower value. Expiry (which reads this) deleted the segments between meanwhile, and the next recovery
        found the tier's checkpoint below the commitlog's first record."""
        return min(self._checkpoint, self.current_checkpoint())

    def follow(self, master_checkpoint: int, master_uploaded_end: int) -> None:
        """A replica sharing its master's backend, which uploads for both (``broker/tiered/replica/``): what the
        master's copied records say the tier holds (below its checkpoint) is dropped here, so this uploader keeps
        in memory, and the local commitlog keeps on disk, only what the master has not uploaded yet: what this
        replica must upload if it is promoted. A cut its own recovery found due is dropped: the master owns the
        tier it follows (a take-over cuts to this replica's end of then), and made then, long after, it cut what
        the master wrote since (the metadata copy's install already drops the stored one)."""
        if self._reconcile_end is not None:
            log.info("tiered_cut_dropped reconcile_end=%d: following the master's tier", self._reconcile_end)
            self._reconcile_end = None
            self.metadata.set_reconcile_end(None)
        with self._lock:
            for key, p in list(self._pending.items()):
                requests = p.requests
                self._drop_pending(key, next((i for i, r in enumerate(requests) if r[3] >= master_checkpoint),
                                             len(requests)))
            if self._resume_from is not None and self._resume_from < master_checkpoint:
                # what the master uploaded is not re-read; past this replica's dispatch, nothing is left to re-read
                self._resume_from = master_checkpoint if master_checkpoint < self._dispatched else None
            # the master's checkpoint stays below a deletion until its upload pass did it
            done = [(topic, at) for topic, at in self._deletions if at < master_checkpoint]
            self._deletions = [(topic, at) for topic, at in self._deletions if at >= master_checkpoint]
            for topic in {t for t, _ in done} - {t for t, _ in self._deletions}:
                self.flat_files.show_topic(topic)
            self._uploaded_end = master_uploaded_end

    def truncate_dirty(self, commit_log_end: int) -> None:
        """The local commitlog lost its tail (an OS crash under ASYNC_FLUSH) and the tier may hold records
        from it, whose queue offsets new messages will reuse: once the replay rebuilt the local queues
        (:meth:`reconcile_after_recovery`), the tier forgets what it holds past each local queue's end."""
        if commit_log_end < self._uploaded_end or self._reconcile_end is not None:
            end = min(commit_log_end, self._reconcile_end if self._reconcile_end is not None else commit_log_end)
            log.warning("tiered_ahead_of_commitlog uploaded_end=%d commitlog_end=%d cut_to=%d earlier_cut_due=%s",
                        self._uploaded_end, commit_log_end, end, self._reconcile_end is not None)
            self._reconcile_end = end
            self.metadata.set_reconcile_end(end)  # before any send takes the commitlog past the uploaded end
        if commit_log_end < self._checkpoint:
            # Stored at once: the log grows past the old value with other records, and a later recovery replaying
            # from it (the lowest checkpoint) started inside one and fail-stopped the broker at every start. The
            # flush stores only a checkpoint that moved from this one.
            self._checkpoint = commit_log_end
            self.metadata.set_checkpoint(commit_log_end)
        self._dispatched = min(self._dispatched, commit_log_end)  # (what it says was dispatched is gone)

    def reconcile_after_recovery(self) -> None:
        """After the flat files' load and the local replay, before the first upload pass. Each queue's end is taken
        as of the recovered commitlog end: sends accepted since (the broker serves before this runs, and the
        backend may fail it for a while) must not make the cut fall short."""
        end = self._reconcile_end
        if end is not None:
            for (topic, queue_id), flat in self.flat_files.files.items():
                local_max = self.local.queue_end_at(topic, queue_id, end)
                if flat.max_offset > local_max >= flat.min_offset:
                    log.warning("tiered_truncated topic=%s queue=%d tier_max=%d local_max=%d", topic, queue_id,
                                flat.max_offset, local_max)
                    flat.cut_to(local_max)
            self.metadata.set_reconcile_end(None)
            self._reconcile_end = None
        self._catch_up()

    def _catch_up(self) -> None:
        """Queues whose tier lacks records below what waits for upload (the load cut units whose commitlog bytes
        the backend lost): those records are below the checkpoint, so no replay brings them, and a queue that
        gets no new message would never have them uploaded before they expire locally."""
        with self._lock:
            deleted = {topic for topic, _ in self._deletions}
            firsts = {key: p.requests[0][2] for key, p in self._pending.items() if p.requests}
            # records from here on come as requests (dispatched later, or re-read): their upload fills the gap
            coming = self._dispatched if self._resume_from is None else self._resume_from
        for key, flat in list(self.flat_files.files.items()):
            if key[0] in deleted:
                continue
            until = firsts.get(key)
            if until is None:
                until = self.local.max_offset(*key)
                last = self.local.units(*key, until - 1, 1) if flat.dispatch_offset < until else []
                if last and last[0][0] >= coming:
                    continue
            if flat.dispatch_offset < until:
                runs = _Runs(flat, self.local.read_at)
                try:
                    self._fill_gap(runs, until)
                    runs.flush()
                except RecordTooLarge as exc:
                    self._block(key, exc)
                self._commit(runs, 0)

    def current_checkpoint(self) -> int:
        with self._lock:
            firsts = [p.requests[0][3] for p in self._pending.values() if p.requests]
            resume = [] if self._resume_from is None else [self._resume_from]
            return min([self._dispatched, *firsts, *self._inflight.values(), *(at for _, at in self._deletions),
                        *resume])

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
        self._refill()
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
                self._kept -= len(taken[key])
        return done

    def _refill(self) -> None:
        """Records dispatch did not keep (``max_pending`` reached), re-read from the local commitlog while there is
        room, in commitlog order (a topic deletion among them is done again where it stands, as in a replay)."""
        with self._lock:
            if self._resume_from is None or self._kept > self.policy.max_pending // 2:
                return
            end = self._dispatched
        while True:
            with self._lock:
                start, room = self._resume_from, self.policy.max_pending - self._kept
                if start is not None and start >= self._dispatched:
                    self._resumed()
                    return
            if start is None or room <= 0 or start >= end:
                return
            requests, next_offset = self.local.records(start, end, min(room, MAX_REREAD_RECORDS))
            with self._lock:
                if self._resume_from != start:  # moved by ``follow`` meanwhile: read again from there
                    continue
                if requests and requests[0][0] == TOPIC_DELETION_TOPIC:
                    self._topic_deleted(deleted_topic(requests[0]), requests[0][3])
                else:
                    self._keep(requests)
                self._resume_from = next_offset
                if next_offset >= self._dispatched:  # caught up: dispatch keeps its requests again
                    self._resumed()

    def _resumed(self) -> None:
        """Under the lock: every record dispatched is kept (or uploaded); dispatch keeps them again."""
        self._resume_from = None
        log.info("tiered_pending_resumed kept=%d: dispatch keeps records again", self._kept)

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
                del self._inflight[key]  # still kept: counted in ``_kept`` as they were

    def _upload(self, key: QueueKey, requests: list[DispatchRequest]) -> int:
        topic, queue_id = key
        runs = _Runs(self.flat_files.get_or_create(topic, queue_id, requests[0][2]), self.local.read_at)
        held_end = 0  # local commitlog offset after the newest of these records the flat file holds
        try:
            for _, _, queue_offset, physical, record_size, tags_code, store_time, _ in requests:
                expected = runs.next_offset
                if queue_offset < expected:  # already in the tier (a replay after restart, a retried pass)
                    held_end = physical + record_size
                    continue
                if queue_offset > expected:  # the tier lost them; below the checkpoint: no replay brings them
                    self._fill_gap(runs, queue_offset)
                runs.add(queue_offset, physical, record_size, tags_code, store_time)
            runs.flush()
        except RecordTooLarge as exc:  # this queue alone: what came before the record is committed below
            self._block(key, exc)
        return self._commit(runs, held_end)

    def _block(self, key: QueueKey, exc: RecordTooLarge) -> None:
        """The queue uploads nothing from ``exc``'s record on. Its later records are not kept: waiting for good, they
        would hold the checkpoint, and with it every local segment of every topic; they expire locally instead. A
        restart tries the queue's records still local again (``_catch_up``)."""
        with self._lock:
            known = self._blocked.get(key) == exc.queue_offset
            self._blocked[key] = exc.queue_offset
            if key in self._pending:
                self._drop_pending(key)
        if not known:  # once a state
            log.error("tiered_queue_blocked topic=%s queue=%d offset=%d size=%d segment_size=%d: no tiered commitlog "
                      "segment holds this record (tieredStoreCommitLogMaxSize); the queue's tier stops before it and "
                      "its later messages expire locally without being uploaded; other queues go on", key[0], key[1],
                      exc.queue_offset, exc.size, exc.segment_size)

    def _commit(self, runs: _Runs, held_end: int) -> int:
        """Commit what ``runs`` appended (and what a refused commit left); returns the records appended."""
        flat = runs.flat
        if runs.appended or flat.uncommitted:
            # Stored before the tier shows them (recovery compares it with the local end), and taken as stored only
            # once it is: a retry after a refused write stores it again, for the records appended before.
            held_end = max(held_end, runs.held_end)
            if held_end > self._uploaded_end:
                self.metadata.set_uploaded_end(held_end)
                self._uploaded_end = held_end
            flat.commit()
            self.uploaded_messages += runs.appended - runs.counted[0]
            self.uploaded_bytes += runs.bytes - runs.counted[1]
            runs.counted = (runs.appended, runs.bytes)
        return runs.appended

    def _fill_gap(self, runs: _Runs, until: int) -> None:
        """The queue's records from the flat file's end to ``until``, which the tier lacks (lost by its backend),
        appended from the local store. Those expired there too are lost: the flat file restarts after them."""
        flat = runs.flat
        start = runs.next_offset
        held = self.local.first_held(flat.topic, flat.queue_id, start, until)
        if held > start:
            runs.flush()  # a rebase takes a flat file with nothing buffered
            if flat.uncommitted:
                flat.commit()
            log.error("tiered_gap_lost topic=%s queue=%d from=%d to=%d unserved_from=%d: the tier lost them and "
                      "they expired locally; the queue's tier restarts at %d (what it held before is expired)",
                      flat.topic, flat.queue_id, start, held, flat.min_offset, held)
            flat.rebase(held)
        if held < until:
            log.warning("tiered_gap_filled topic=%s queue=%d from=%d to=%d: lost by the tier, uploaded again from "
                        "the local store", flat.topic, flat.queue_id, held, until)
        offset = held
        while offset < until:
            units = self.local.units(flat.topic, flat.queue_id, offset, min(until - offset, FILL_BATCH))
            assert units, f"{flat.topic}:{flat.queue_id}: local queue offset {offset} below {until} not found"
            for physical, size, tags_code, store_time in units:
                runs.add(offset, physical, size, tags_code, store_time)
                offset += 1
            runs.flush()
            if flat.commit_log.buffered_bytes >= self.policy.bytes:  # a long gap: not all of it in memory at once
                self._commit(runs, 0)
        assert runs.next_offset == until, f"{flat.topic}:{flat.queue_id}: gap filled to {runs.next_offset}, not {until}"

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

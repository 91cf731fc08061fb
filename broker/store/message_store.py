"""The message store: commitlog, dispatch chain (consume queue, index, and whatever registers),
flush, recovery, expiry, and the read API. Pure storage: no network here."""

import logging
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from pathlib import Path

from broker.store.checkpoint import OffsetCheckpoint
from broker.store.commit_log import CommitLog, NotAdmitted, NothingAppended
from broker.store.config import FlushDiskType, MessageStoreConfig, StoreType
from broker.store.consume_queue.consume_queue_store import BoundaryType, ConsumeQueueStore
from broker.store.consume_queue.file_consume_queue_store import FileConsumeQueueStore
from broker.store.disk_usage_watcher import DiskUsageWatcher
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.reput_service import ReputMessageService
from broker.store.dispatch.topic_deletion import topic_deletion_batch
from broker.store.flush_service import FlushService, GroupCommitService, PeriodicFlushService
from broker.store.get_message_result import GetMessageResult, GetMessageStatus
from broker.store.index.index_service import IndexService
from broker.store.mapped_file import MappedFile
from broker.store.message_store_reader import MessageStoreReader
from broker.store.put_message_result import PutMessageResult, PutMessageStatus
from broker.store.record_identity import DamagedRecordLog, record_intact, run_intact
from broker.store.recovery import mark_clean_shutdown, recover
from broker.store.running_flags import RunningFlags
from broker.store.store_services import CleanCommitLogService, DispatcherFlushService, PageReleaseService
from common.message import MessageExt
from common.message_codec import decode_record
from common.message_id import encode_host
from common.message_properties import MAX_PROPERTIES_SIZE
from common.shutdown_steps import ShutdownStep, run_shutdown_steps
from common.topic_validator import InvalidTopicError, validate_topic
from common.wire_batch import WireBatch

log = logging.getLogger(__name__)

QUERY_MAX_BYTES = 64 * 1024 * 1024  # records one query by key answers at most (always one)
MAX_SCAN_UNITS = 16_000  # units a filtered read may skip before it answers


def _illegal(why: str, status: PutMessageStatus = PutMessageStatus.MESSAGE_ILLEGAL) -> PutMessageResult:
    return PutMessageResult(status, why)


DELETE_TOPIC_DISPATCH_WAIT_S = 10.0  # how long deleteTopic waits for its deletion record to be dispatched


class MessageStore(MessageStoreReader):
    def __init__(self, config: MessageStoreConfig, consume_queue_store: ConsumeQueueStore | None = None) -> None:
        self.config = config
        root = Path(config.store_path_root_dir)
        grace_s = config.destroy_mapped_file_grace_ms / 1000
        self.commit_log = CommitLog(root / "commitlog", config.mapped_file_size_commit_log, grace_s)
        self.commit_log.confirm_follows_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._switched_from: Path | None = None  # the file consume queue a new RocksDB one replaces
        self.consume_queue_store = consume_queue_store or self._consume_queue_store(root)
        self.dispatchers: list[CommitLogDispatcher] = [self.consume_queue_store]
        self.index_service: IndexService | None = None
        if config.message_index_enable:
            self.index_service = IndexService(root / "index", config.max_hash_slot_num, config.max_index_num)
            self.dispatchers.append(self.index_service)
        self.flushed_checkpoint = OffsetCheckpoint(root / "checkpoint" / "commitlog_flushed")
        # Controller mode: the confirm offset survives a restart (what lies above it may be cut on rejoining).
        self.keeps_confirm_checkpoint = False
        self.confirm_checkpoint = OffsetCheckpoint(root / "checkpoint" / "confirm_offset")
        self.running_flags = RunningFlags()
        self.damaged_records = DamagedRecordLog()  # reads that skip a damaged record name it once
        self.reput = ReputMessageService(self.commit_log, self.dispatchers, self.running_flags)
        self.flush_service: FlushService = (
            GroupCommitService(self.commit_log, self.running_flags)
            if self.commit_log.confirm_follows_flush
            else PeriodicFlushService(self.commit_log, self.running_flags, config.flush_interval_commit_log_ms)
        )
        self.dispatcher_flush = DispatcherFlushService(
            self.commit_log, self.dispatchers, self.flushed_checkpoint, self.running_flags,
            config.flush_interval_consume_queue_ms)
        self.disk_watcher = DiskUsageWatcher(config, self.running_flags, self.commit_log.mapped_file_queue.store_dir,
                                             self.commit_log.max_offset)
        self.clean_service = CleanCommitLogService(config, self.commit_log, self._replay_start,
                                                   self.consume_queue_store.prepare_expiry,
                                                   self.correct_min_offsets, self.disk_watcher)
        self.disk_watcher.on_pressure(self.clean_service.wake)
        self.page_release = PageReleaseService(self.commit_log)
        self.store_host = encode_host(config.store_host)
        self._running = False

    def _consume_queue_store(self, root: Path) -> ConsumeQueueStore:
        if self.config.store_type is StoreType.DEFAULT_ROCKSDB:
            from broker.store.consume_queue.rocksdb_consume_queue_store import RocksDBConsumeQueueStore
            from broker.store.consume_queue.store_type_switch import needs_carry_over

            # switched from storeType=default: the file queues' offsets are carried over (carry_over_file_queues)
            self._switched_from = root / "consumequeue" if needs_carry_over(root / "consumequeue") else None
            return RocksDBConsumeQueueStore(root / "consumequeue_rocksdb", self.commit_log.store_timestamp_at,
                                            commit_min=self.commit_log.min_offset)
        return FileConsumeQueueStore(root / "consumequeue", self.config.mapped_file_size_consume_queue,
                                     self.commit_log.store_timestamp_at)

    def carry_over_file_queues(self) -> None:
        """At the first start after a switch to ``defaultRocksDB`` (loaded, before the replay): the file consume
        queue's queues whose records all expired keep their offsets (``store_type_switch.py``)."""
        if self._switched_from is None:
            return
        from broker.store.consume_queue.rocksdb_consume_queue_store import RocksDBConsumeQueueStore
        from broker.store.consume_queue.store_type_switch import expired_queue_ends, mark_carried_over

        assert isinstance(self.consume_queue_store, RocksDBConsumeQueueStore)
        ends = expired_queue_ends(self._switched_from, self.config.mapped_file_size_consume_queue,
                                  self.commit_log.min_offset())
        carried = self.consume_queue_store.carry_over(ends)
        mark_carried_over(self._switched_from)
        log.warning("consume_queue_carried_over from=%s queues=%d why='storeType switched to defaultRocksDB: queues "
                    "whose records expired keep their offsets; the others are rebuilt from the commitlog'",
                    self._switched_from, carried)
        self._switched_from = None

    def _replay_start(self, disk_pressure: bool = False) -> int:
        """Commitlog below this may expire: dispatched, and durable in every dispatcher that keeps it (under disk
        pressure, every one that holds then)."""
        return min([self.reput.reput_from_offset, *(d.checkpoint() for d in self.dispatchers if d.keeps_commit_log
                                                    and (d.holds_under_disk_pressure or not disk_pressure))])

    # -- lifecycle ---------------------------------------------------------------------------------
    def register_dispatcher(self, dispatcher: CommitLogDispatcher) -> None:
        """Add a dispatcher to the chain (KV applier, tiered uploader); only before ``start``."""
        assert not self._running, "register dispatchers before start"
        self.dispatchers.append(dispatcher)

    def start(self) -> None:
        recover(self)
        self.disk_watcher.check()  # a disk already too full refuses the very first write
        for service in (self.flush_service, self.reput, self.dispatcher_flush, self.clean_service,
                        self.disk_watcher, self.page_release):
            service.start()
        self._running = True

    def shutdown(self) -> None:
        if not self._running:
            return
        self._running = False
        failed_steps = run_shutdown_steps(self._shutdown_steps(), log)
        clean = not failed_steps and self.running_flags.fail_stop_reason is None
        if clean:
            mark_clean_shutdown(Path(self.config.store_path_root_dir))
        # After a fail-stop, or a step that could not write (a full disk), the next start is an abnormal one: it
        # checks every record past the flushed checkpoint and replays the dispatch chain from its checkpoints.
        log.info("store_shutdown commitlog_end=%d clean=%s failed_steps=%s", self.commit_log.max_offset(), clean,
                 ",".join(failed_steps) or "none")

    def _shutdown_steps(self) -> Iterator[ShutdownStep]:
        # After a fail-stop (also one during these steps) nothing more is flushed or checkpointed (a retried fsync
        # proves nothing): the next start recovers from the commitlog and the checkpoints as they were.
        yield "clean_service", self.clean_service.shutdown
        yield "page_release", self.page_release.shutdown
        yield "disk_watcher", self.disk_watcher.shutdown
        yield "commitlog_flush", self.flush_service.shutdown  # in SYNC_FLUSH that also confirms the tail
        yield "last_reput", self.reput.do_reput
        yield "reput", self.reput.shutdown
        yield "dispatcher_flush_service", self.dispatcher_flush.shutdown
        if self.running_flags.fail_stop_reason is None:
            for dispatcher in self.dispatchers:
                yield f"flush_{dispatcher.name}", dispatcher.flush
            yield "flushed_checkpoint", lambda: self.flushed_checkpoint.write(self.commit_log.flushed_offset())
            if self.keeps_confirm_checkpoint:
                yield "confirm_checkpoint", self.write_confirm_checkpoint
        yield "consume_queue", self.consume_queue_store.shutdown
        if self.index_service:
            yield "index", self.index_service.shutdown
        yield "commitlog", lambda: self.commit_log.shutdown(flush=self.running_flags.fail_stop_reason is None)

    # -- write -------------------------------------------------------------------------------------
    def put_messages(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        *,
        born_timestamp: int | None = None,
        born_host: str = "127.0.0.1:0",
        flag: int = 0,
        sys_flag: int = 0,
        body_limit: int | None = None,
        wait_flushed: bool = True,
        admit: Callable[[], bool] | None = None,
    ) -> PutMessageResult:
        """Append a batch to one queue (a single message is a batch of one). Properties are in wire form.
        ``body_limit`` replaces maxMessageSize (system records with their own limits); ``wait_flushed=False``
        returns before a SYNC_FLUSH fsync (for callers that wait for dispatch, which follows the fsync);
        ``admit``: asked under the commitlog's lock right before the append (``CommitLog.append_batch``), e.g.
        whether the topic still exists; NOT_ADMITTED when it says no."""
        error = self._check(topic, queue_id, bodies, properties, body_limit or self.config.max_message_size)
        if error is not None:
            return error
        batch = WireBatch.of(
            topic.encode(), queue_id, bodies, properties,
            born_timestamp=born_timestamp if born_timestamp is not None else int(time.time() * 1000),
            born_host=encode_host(born_host), store_host=self.store_host, flag=flag, sys_flag=sys_flag,
        )
        return self._append(batch, wait_flushed, admit=admit)

    def put_wire_batch(self, batch: WireBatch, *, wait_flushed: bool = True,
                       admit: Callable[[], bool] | None = None) -> PutMessageResult:
        """Append records the producer encoded (checked by ``WireBatch.parse``) as they came; ``admit`` as for
        ``put_messages``."""
        error = self._check_running()
        if error is None:
            error = self._check_sizes(batch.topic.decode(), batch.queue_id, batch.max_body,
                                      batch.max_properties, self.config.max_message_size)
        return error or self._append(batch, wait_flushed, admit=admit)

    def wait_flushed(self, offset: int) -> PutMessageStatus:
        """After puts with ``wait_flushed=False``, one wait for them all (SYNC_FLUSH; at once otherwise): PUT_OK once
        the commitlog is flushed past ``offset``, FLUSH_DISK_TIMEOUT after ``syncFlushTimeout`` (stored, not yet on
        disk), SERVICE_NOT_AVAILABLE when the fsync failed (the store fail-stopped: what was put may be lost)."""
        if self.flush_service.wait_flushed(offset, self.config.sync_flush_timeout_ms / 1000):
            return PutMessageStatus.PUT_OK
        if self.running_flags.fail_stop_reason is not None:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        return PutMessageStatus.FLUSH_DISK_TIMEOUT

    def _append(self, batch: WireBatch, wait_flushed: bool, restart_queues_of: str | None = None,
                admit: Callable[[], bool] | None = None) -> PutMessageResult:
        if max(batch.sizes) > self.commit_log.max_record_size():
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    f"record of {max(batch.sizes)} bytes exceeds the commitlog segment size")
        try:
            append = self.commit_log.append_batch(batch, restart_queues_of, admit)
        except OSError as exc:
            return self._append_failed(exc)
        except NotAdmitted as exc:
            return PutMessageResult(PutMessageStatus.NOT_ADMITTED, str(exc))
        try:  # the record is in the log: a failed measurement must not turn it into an error (and a duplicate)
            self.disk_watcher.after_append(append.end_offset)
        except OSError:
            log.exception("disk_usage_check_failed")
        self.flush_service.request()
        timeout_s = self.config.sync_flush_timeout_ms / 1000
        if wait_flushed and not self.flush_service.wait_flushed(append.end_offset, timeout_s):
            refusal = self.unflushed_refusal()
            if refusal is not None:
                return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, refusal)
            return PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, append=append, store_host=self.store_host)
        return PutMessageResult(PutMessageStatus.PUT_OK, append=append, store_host=self.store_host)

    def unflushed_refusal(self) -> str | None:
        """Why a write whose flush did not come must be refused: the fsync failed (never acknowledge what may not
        be on disk). None when the flush was only slow (a stored result: FLUSH_DISK_TIMEOUT). A disk-full refusal
        set meanwhile is no reason: the record is stored and will be flushed."""
        if self.running_flags.fail_stop_reason is None:
            return None
        return self.running_flags.write_refusal() or self.running_flags.fail_stop_reason

    def _append_failed(self, exc: OSError) -> PutMessageResult:
        """The commitlog refused bytes (a disk filled faster than the watcher measured, or an I/O error). If none
        of the batch was written the log is as it was: refuse this write and measure the disk again. If part of
        it was, stop taking writes (that part was never acknowledged; a restart recovers what is there)."""
        if not isinstance(exc, NothingAppended):
            self.running_flags.fail_stop(f"writing the commitlog failed part-way through a batch: {exc}")
        self.disk_watcher.check()
        reason = self.running_flags.write_refusal() or f"the commitlog refused the write: {exc}"
        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, reason)

    def _check(self, topic: str, queue_id: int, bodies: Sequence[bytes],
               properties: Sequence[bytes], body_limit: int) -> PutMessageResult | None:
        error = self._check_running()
        if error is not None:
            return error
        if not bodies:
            return _illegal("batch is empty")
        if len(bodies) != len(properties):
            return _illegal(f"{len(bodies)} bodies but {len(properties)} property blocks")
        body_sizes = list(map(len, bodies))
        if min(body_sizes) == 0:
            return _illegal("message body is empty")
        return self._check_sizes(topic, queue_id, max(body_sizes), max(map(len, properties)), body_limit)

    def _check_running(self) -> PutMessageResult | None:
        if not self._running:
            return _illegal("message store is not running", PutMessageStatus.SERVICE_NOT_AVAILABLE)
        refusal = self.running_flags.write_refusal()
        if refusal is not None:
            return _illegal(refusal, PutMessageStatus.SERVICE_NOT_AVAILABLE)
        return None

    @staticmethod
    def _check_sizes(topic: str, queue_id: int, max_body: int, max_properties: int,
                     body_limit: int) -> PutMessageResult | None:
        try:
            validate_topic(topic)
        except InvalidTopicError as exc:
            return _illegal(str(exc))
        if queue_id < 0:
            return _illegal(f"queue id {queue_id} is negative")
        if max_body > body_limit:
            return _illegal(f"message body of {max_body} bytes exceeds maxMessageSize {body_limit}")
        if max_properties > MAX_PROPERTIES_SIZE:
            return _illegal(f"properties of {max_properties} bytes exceed {MAX_PROPERTIES_SIZE}",
                            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
        return None

    # -- read --------------------------------------------------------------------------------------
    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int = 4 * 1024 * 1024, tags_codes: set[int] | None = None,
                    runs: bool = False) -> GetMessageResult:
        """Up to ``max_msg_nums`` records (or ``max_total_bytes``) of a queue from ``offset``; with
        ``tags_codes``, only messages whose tag hash is in it; ``runs``: records that follow one another in the
        commitlog come as one item of ``messages`` (one copy for a pull that sends them on as they are)."""
        cqs = self.consume_queue_store
        min_offset = cqs.min_offset(topic, queue_id)
        max_offset = cqs.max_offset(topic, queue_id)
        status = None
        if max_offset == min_offset:
            status, next_offset = GetMessageStatus.NO_MESSAGE, max_offset
        elif offset < min_offset:
            status, next_offset = GetMessageStatus.OFFSET_TOO_SMALL, min_offset
        elif offset == max_offset:
            status, next_offset = GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
        elif offset > max_offset:  # to the end; to the start if the offset may be of a deleted queue of the name
            status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
            next_offset = min_offset if cqs.deleted_ends.reached(topic, queue_id, offset) else max_offset
        if status is not None:
            return GetMessageResult(status, next_offset, min_offset, max_offset)
        messages, total, next_offset = self._read_queue(topic, queue_id, offset, max_msg_nums, max_total_bytes,
                                                        tags_codes, runs)
        status = GetMessageStatus.FOUND if messages else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, next_offset, min_offset, max_offset, messages, total)

    def _read_queue(self, topic: str, queue_id: int, offset: int, max_nums: int, max_bytes: int,
                    tags_codes: set[int] | None, runs: bool) -> tuple[list[bytes], int, int]:
        spans: list[tuple[MappedFile, int, int]] = []  # what to copy out: a record each, or (runs) a stretch
        run_segment: MappedFile | None = None  # the open span, kept in locals: extending it is the hot step
        run_start = run_end = 0
        total = count = scanned = 0
        commit_min = self.commit_log.min_offset()
        find = self.commit_log.mapped_file_queue.find
        segment = None
        full = False
        while not full and count < max_nums and scanned < MAX_SCAN_UNITS:
            units = self.consume_queue_store.read_units(topic, queue_id, offset, max(max_nums - count, 32))
            if not units:
                break
            if runs and tags_codes is None and not count:
                run = _contiguous_run(units[:max_nums], commit_min, max_bytes, find)
                # The common case: the records a pull wants lie back to back in one segment (else, or with one
                # damaged among them, unit by unit below, which skips it).
                if run is not None and run_intact(run[0].mm, run[1], units, run[3], queue_id, offset):
                    segment, start, end, taken = run
                    return [segment.mm[start:end]], end - start, offset + taken
            for physical_offset, size, tags_code in units:
                filtered_out = tags_codes is not None and tags_code not in tags_codes
                if size <= 0 or physical_offset < commit_min or filtered_out:
                    offset += 1
                    scanned += 1
                    continue
                if count and total + size > max_bytes:
                    full = True
                    break
                if segment is None or not segment.file_from_offset <= physical_offset < segment.end_offset:
                    segment = find(physical_offset)
                    if segment is None:
                        offset += 1
                        continue
                pos = physical_offset - segment.file_from_offset
                if not record_intact(segment.mm, pos, physical_offset, size, queue_id, offset):
                    if offset < self.consume_queue_store.min_offset(topic, queue_id):
                        break  # expiry moved the queue's start under this read (its units start later): no damage
                    self.damaged_records.skipped(topic, queue_id, offset, physical_offset, size)
                    offset += 1
                    scanned += 1
                    continue
                if runs and run_segment is segment and run_end == pos:
                    run_end = pos + size
                else:
                    if run_segment is not None:
                        spans.append((run_segment, run_start, run_end))
                    run_segment, run_start, run_end = segment, pos, pos + size
                total += size
                offset += 1
                scanned += 1
                count += 1
                if count >= max_nums:
                    break
        if run_segment is not None:
            spans.append((run_segment, run_start, run_end))
        return _copied(spans), total, offset

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.consume_queue_store.min_offset(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.consume_queue_store.max_offset(topic, queue_id)

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        return max(self.commit_log.next_queue_offset(topic, queue_id), self.max_offset(topic, queue_id))

    def last_store_timestamp(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's newest message; 0 for an empty queue."""
        return self.store_timestamp_of(topic, queue_id, self.max_offset(topic, queue_id) - 1)

    def store_timestamp_of(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the queue's message at ``offset``; 0 when the queue no longer (or not yet) holds it."""
        if not self.min_offset(topic, queue_id) <= offset < self.max_offset(topic, queue_id):
            return 0
        units = self.consume_queue_store.read_units(topic, queue_id, offset, 1)
        return max(0, self.commit_log.store_timestamp_at(units[0][0])) if units else 0

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int,
                       boundary: BoundaryType = BoundaryType.LOWER) -> int:
        return self.consume_queue_store.offset_by_time(topic, queue_id, timestamp, boundary)

    def select_one_message_by_offset(self, physical_offset: int) -> bytes | None:
        return self.commit_log.read_record(physical_offset)

    def look_message_by_offset(self, physical_offset: int) -> MessageExt | None:
        raw = self.select_one_message_by_offset(physical_offset)
        return decode_record(raw) if raw is not None else None

    def query_message_records(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                              end_ms: int = 2**62) -> list[bytes]:
        """Records of ``topic`` whose message key or unique key is ``key``, stored in [begin_ms, end_ms]: up to
        ``max_num``, within ``QUERY_MAX_BYTES`` (always one): 64 matches of 4 MiB passed gRPC's 256 MiB answer
        limit, and held 1.2 GiB of the broker's memory, to fail."""
        if self.index_service is None:
            return []
        found: list[bytes] = []
        seen: set[int] = set()
        total = 0
        for physical_offset in self.index_service.lookup(topic, key, max_num * 2, begin_ms, end_ms):
            if physical_offset in seen:
                continue
            seen.add(physical_offset)
            raw = self.commit_log.read_record(physical_offset)
            if raw is None:
                continue
            msg = decode_record(raw)  # the index holds hashes: check the message really matches
            if msg.topic != topic or not begin_ms <= msg.store_timestamp <= end_ms:
                continue
            if key in msg.keys or msg.unique_key == key:
                total += len(raw)
                if found and total > QUERY_MAX_BYTES:
                    break
                found.append(raw)
                if len(found) >= max_num:
                    break
        return found

    def query_message(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                      end_ms: int = 2**62) -> list[MessageExt]:
        return [decode_record(r) for r in self.query_message_records(topic, key, max_num, begin_ms, end_ms)]

    def delete_topic(self, topic: str, timeout_s: float = DELETE_TOPIC_DISPATCH_WAIT_S) -> str | None:
        """Append a deletion record of the topic (``topic_deletion.py``): where dispatch reaches it, the topic's
        consume queues go, and the topic's next message (a topic made again under the name) gets queue offset 0.
        Waits for that dispatch: None once done, else why not (the commitlog refused the record, or it is not
        dispatched within ``timeout_s``: replicas or the disk behind; it will be, and a retry deletes nothing more)."""
        batch = topic_deletion_batch(topic, int(time.time() * 1000), self.store_host)
        put = self._check_running() or self._append(batch, wait_flushed=False, restart_queues_of=topic)
        if put.append is None:
            return f"the commitlog refused the deletion record: {put.error}"
        if not self.wait_dispatched(put.append.end_offset, timeout_s):
            return (f"the deletion record (commitlog offset {put.append.physical_offsets[0]}) is not dispatched "
                    f"within {timeout_s:g} s (replicas or the disk behind); the topic goes once it is")
        return None

    def wait_dispatched(self, offset: int, timeout_s: float = 5.0) -> bool:
        """Block until the dispatch chain has passed ``offset`` (e.g. a put's end offset)."""
        return self.reput.wait_dispatched(offset, timeout_s)

    # -- replication -------------------------------------------------------------------------------
    def write_confirm_checkpoint(self) -> None:
        """Behind the true confirm offset is safe (a restart shows less until the group confirms again)."""
        self.confirm_checkpoint.write(self.commit_log.confirm_offset)

    def truncate_diverged_tail(self, end: int) -> None:
        """A replica's log past ``end`` is not its master's (written by an old master, never acknowledged): cut it.
        Refused (ValueError) when dispatch already went past ``end``: that data was visible, and cutting it would
        need every derived store rebuilt; an operator decides."""
        if end >= self.commit_log.max_offset():
            return
        shown = max(self.reput.reput_from_offset, self.commit_log.confirm_offset)
        if end < shown:
            raise ValueError(f"the master's log diverges at {end}, below what this replica confirmed or dispatched "
                             f"({shown}): refusing to cut visible data (after an unclean election, empty this "
                             "replica's store to copy the log afresh)")
        cut = self.commit_log.max_offset() - end
        # The checkpoint first: a crash mid-cut must not leave recovery scanning from a segment the cut deletes.
        self.flushed_checkpoint.write(min(end, self.commit_log.flushed_offset()))
        self.commit_log.truncate_tail(end)
        self.flush_service.on_truncated(end)
        for dispatcher in self.dispatchers:
            dispatcher.truncate_dirty(end)
        log.warning("commitlog_truncated end=%d bytes_cut=%d reason=diverged_from_master", end, cut)

    def cut_partial_record(self) -> int:
        """A replica about to be promoted: cut what it holds of an append its master sent only in part
        (``CommitLog.cut_partial_record``); returns the log's end."""
        self.flushed_checkpoint.write(min(self.reput.reput_from_offset, self.commit_log.flushed_offset()))
        end = self.commit_log.cut_partial_record(self.reput.reput_from_offset)
        self.flush_service.on_truncated(end)
        return end

    def start_replica_at(self, offset: int, segment_size: int | None = None) -> None:
        """This empty store becomes the copy of a master's log that begins at ``offset`` (its older segments
        expired), in a segment of ``segment_size`` bytes (the master's there): the commitlog starts there, and so
        do recovery's scan and the reput (each queue's first unit is then its first record's queue offset)."""
        self.reput.start_from(offset)  # first: the confirm offset moving to ``offset`` must not look like expiry
        self.commit_log.start_empty_at(offset, segment_size)
        self.flushed_checkpoint.write(offset)
        log.warning("commitlog_started_at offset=%d reason=copy_of_master_whose_older_segments_expired", offset)

    # -- expiry ------------------------------------------------------------------------------------
    def delete_expired_files(self, ignore_delete_when: bool = True) -> int:
        """Run one expiry pass now (normally the clean service's timer does); returns segments deleted."""
        return self.clean_service.run_once(ignore_delete_when=ignore_delete_when)

    def correct_min_offsets(self, commit_log_min_offset: int) -> None:
        """What follows the commitlog's min moving (expiry, and again at start: a crash may have lost the moves)."""
        self.consume_queue_store.correct_min_offset(commit_log_min_offset)
        if self.index_service:
            self.index_service.delete_expired(commit_log_min_offset)


def _contiguous_run(units: Sequence[tuple[int, int, int]], commit_min: int, max_bytes: int,
                    find: Callable[[int], MappedFile | None]) -> tuple[MappedFile, int, int, int] | None:
    """Where ``units`` (physical offset, size, tags code) are records that follow one another in one commitlog
    segment, all readable: (segment, start, end, records taken) for as many as ``max_bytes`` holds (at least one),
    found with C-level passes instead of a step per unit. None otherwise: the caller reads unit by unit."""
    physical, sizes, _tags = zip(*units, strict=True)
    first = physical[0]
    if first < commit_min or min(sizes) <= 0:
        return None
    starts = list(accumulate(sizes, initial=first))  # where each record starts if they are back to back; then the end
    if starts[:-1] != list(physical):
        return None
    taken = max(1, bisect_right(starts, first + max_bytes) - 1)  # whole records within max_bytes
    segment = find(first)
    if segment is None or physical[taken - 1] >= segment.end_offset:  # (find: the segment holding ``first``)
        return None
    start = first - segment.file_from_offset
    return segment, start, start + starts[taken] - first, taken


def _copied(spans: list[tuple[MappedFile, int, int]]) -> list[bytes]:
    """The stored bytes of each span, copied out of its segment (one copy: a pull sends them on as they are)."""
    return [segment.mm[start:end] for segment, start, end in spans]

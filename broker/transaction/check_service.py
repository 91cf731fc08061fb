"""The transaction check service (upstream's TransactionalMessageCheckService): asks a producer about each half
message nobody ended, and gives up on one after ``transactionCheckMax`` checks.

One thread. Each pass reads what is new in the op queue and the half queue into the :class:`TransactionTable`
(from the progress offsets after a restart), then, for the half messages due:

- a check: one op message ``c`` naming them all is stored and read back (so the check counts, and survives a
  restart, before it is sent), then each goes to one live producer of its group over its ``ProducerSession``;
  the producer answers with EndTransaction. No producer online: the check counts all the same (as upstream), so a
  group that is gone for good does not keep a half message forever.
- a discard (checked ``transactionCheckMax`` times, due again): a copy goes to ``TRANS_CHECK_MAX_TIME_TOPIC``, then
  an op message ``d`` (DISCARD) ends it. One whose commit stored its real message but not its op (the op write was
  refused) is ended by an op ``d`` (COMMIT) instead: the message is visible already, and nothing else ends it.

and, in a ``finally``, moves the progress offsets (consumer offsets of ``CID_RMQ_SYS_TRANS`` on the half and op
queues) only past what ended with its op message durable: flushed, and replicated where sends wait for that.

Why not upstream's re-append. Upstream stores a checked half message again at the end of the half queue with
TRANSACTION_CHECK_TIMES raised, then moves its half offset past the old copy. Each check then gives the
transaction a new commitlog offset, so a producer's late end and its answer to a check name different copies
(an extra check, or a second commit of the same message), and a crash before the offset is saved leaves two live
copies, each checked and copied again. Here the half message is written once and its commitlog offset is the
transaction's id for good; a check is a small op message. The cost: an unresolved half message holds the half
offset back until it ends, at most ``transactionCheckMax`` x ``transactionCheckInterval`` (7.5 min by default), so
a restart re-reads at most that much of both queues; its commitlog segment must outlive that: the commitlog is
held from the lowest half message not ended, or not read yet (``half_message_hold.py``).

Half messages lost all the same (a disk past diskSpaceCleanForciblyRatio passes that hold) are said at ERROR
(``transaction_half_lost``) and counted (``halves_lost``): one found gone when checked or discarded is ended without
a check or a copy; ones whose records went before they were read are named by their half queue offsets.

SIGKILL-safe: everything is a commitlog record (half, op, committed and discarded messages), read back through
the consume queues, which recovery rebuilds; the progress offsets only ever lag. A restart resumes from them:
ends and check counts of every half message at or after the half offset come back from the op queue (the op
offset never passes an op naming one), and an unresolved half message is checked again
``transactionCheckInterval`` after its last check (by the op message's store time: the broker's clock).
"""

import logging
import threading
import time
from collections.abc import Callable

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.consumer_group_processor import ensure_group_topic
from broker.store.get_message_result import GetMessageStatus
from broker.store.message_store import MessageStore
from broker.store.periodic_service import FailedPassLog
from broker.store.put_message_result import PutMessageResult
from broker.transaction.end_transaction_processor import put_op, refusal_of
from broker.transaction.half_message import check_record, discard_record, producer_group, real_target
from broker.transaction.op_message import OpKind, OpMessage, Outcome, decode_op
from broker.transaction.producer_manager import ProducerManager
from broker.transaction.transaction_table import EndDecision, HalfEntry, TransactionTable
from common.message import MessageExt
from common.message_codec import CorruptRecordError, decode_record
from common.response_code import ResponseCode
from common.transaction_id import TransactionId
from common.transaction_topic import (
    HALF_QUEUE_ID,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    OP_QUEUE_ID,
    SYSTEM_GROUP,
    TRANS_CHECK_MAX_TIME_TOPIC,
)
from common.wire_batch import WireBatch
from proto import transaction_pb2

log = logging.getLogger(__name__)

Clock = Callable[[], int]
READ_BATCH = 256
CHECK_BATCH = 1024  # half messages checked or discarded per pass (one op message each way)
MIN_PAUSE_MS = 50
# After a start (or a promotion), a group with no producer session yet is not checked (nor is the check counted) for
# this long: its producers reconnect within a heartbeat or two, or, from a master that hung, once their sessions'
# routes are asked afresh (every 10 s: client/producer_sessions.py). Checked at once, every half due while the broker
# was down used up a check no producer could answer, and those on their last check were discarded with their
# producers alive.
PRODUCER_RECONNECT_GRACE_S = 25.0
RECONNECT_POLL_MS = 500
DISPATCH_WAIT_S = 5.0


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _ends_below(status: GetMessageStatus, offset: int, max_offset: int) -> bool:
    """Whether the queue ends below ``offset`` (an empty queue answers NO_MESSAGE, not an overflow)."""
    return status in (GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.NO_MESSAGE) and offset > max_offset


class TransactionalMessageCheckService(threading.Thread):
    def __init__(self, *, table: TransactionTable, store: MessageStore, offsets: ConsumerOffsetManager,
                 topics: TopicConfigManager, producers: ProducerManager, broker_name: str,
                 on_topics_changed: Callable[[], None], clock_ms: Clock = wall_clock_ms) -> None:
        super().__init__(name="transaction-check", daemon=True)
        self.table = table
        self.store = store
        self.offsets = offsets
        self.topics = topics
        self.producers = producers
        self.broker_name = broker_name
        self.on_topics_changed = on_topics_changed
        self.clock_ms = clock_ms
        self.checks_sent = 0
        self.checks_unsent = 0  # counted, but no producer of the group was online
        self.discarded = 0
        self.commits_finished = 0  # commits whose op write had failed, ended by their discard as COMMIT
        self.halves_lost = 0  # half messages whose records expired before their transactions ended
        # Half messages whose copy to the discard topic is stored and whose REMOVE op is not yet (refused): their
        # retry writes only the op, not a second copy. (After a crash between the two the copy is made again.)
        self._discard_copied: set[int] = set()
        self._committed = (-1, -1)  # the (half, op) progress last committed
        self._stopped = threading.Event()
        self._backoff = False  # a write was refused: wait a whole interval before the next pass
        self._loaded_at = 0.0  # monotonic time the table was loaded
        self._waiting_for_producers = False  # the last pass left checks for groups not reconnected yet
        self._waiting_said = False  # (logged once a start)
        self._failures = FailedPassLog(log, "transaction_check_failed")

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        if not self._load():
            return
        while not self._stopped.is_set():
            try:
                self.check_once()
                self._failures.succeeded()
            except Exception as exc:
                self._failures.failed(exc)
                self._backoff = True
            finally:
                self.commit_progress()  # whatever the pass did that is durable, even if it failed part-way
            self._sleep()

    def _load(self) -> bool:
        """Read both queues from the progress offsets to where the commitlog ended at start (recovery may still be
        dispatching it), then take ends. False if stopped first."""
        self.table.read_through = 0  # nothing read yet: the commitlog is held whole until the first read
        half, op = self._start_progress()
        target = self.store.commit_log.confirm_offset
        started = time.monotonic()
        while not self.store.wait_dispatched(target, 1.0):
            if self._stopped.is_set():
                return False
            if time.monotonic() - started > DISPATCH_WAIT_S:
                log.warning("transaction_load_waiting dispatched_below=%d target=%d",
                            self.store.reput.reput_from_offset, target)
                started = time.monotonic()
        self.read_log()
        self._loaded_at = time.monotonic()
        self.table.ready.set()
        log.info("transaction_loaded pending=%d half_progress=%d op_progress=%d half_read=%d op_read=%d",
                 self.table.pending, half, op, self.table.half_read, self.table.op_read)
        return True

    def _start_progress(self) -> tuple[int, int]:
        """The committed progress offsets, each lowered to where its queue ends now: a promoted slave's (or a
        slave restarted as master) were copied from its master and may be ahead of the log it replicated. Taken as
        they are, new half and op messages would take offsets below them: never read, and their ends answered
        "ended long ago". Queue ends from ``next_queue_offset``: complete before dispatch catches up, and a message
        put after this only takes an offset at or past them."""
        committed = (max(self.offsets.query_offset(SYSTEM_GROUP, HALF_TOPIC, HALF_QUEUE_ID), 0),
                     max(self.offsets.query_offset(SYSTEM_GROUP, OP_HALF_TOPIC, OP_QUEUE_ID), 0))
        ends = (self.store.next_queue_offset(HALF_TOPIC, HALF_QUEUE_ID),
                self.store.next_queue_offset(OP_HALF_TOPIC, OP_QUEUE_ID))
        half, op = min(committed[0], ends[0]), min(committed[1], ends[1])
        for topic, was, now in ((HALF_TOPIC, committed[0], half), (OP_HALF_TOPIC, committed[1], op)):
            if now < was:
                log.warning("transaction_progress_lowered topic=%s from=%d to=%d reason=ahead_of_queue_at_start",
                            topic, was, now)
        self.table.start_at(half, op)
        self._committed = committed  # a lowered progress is committed by the first pass, else nothing until it moves
        return half, op

    def _sleep(self) -> None:
        """Until the next half message known is due, and at least every min(interval, timeout) to see new ones (so
        a first check comes between transactionTimeOut and twice that after the send)."""
        table, now = self.table, self.clock_ms()
        wake = now + (table.interval_ms if self._backoff else min(table.interval_ms, table.timeout_ms))
        if self._waiting_for_producers:
            wake = min(wake, now + RECONNECT_POLL_MS)
        next_due = None if self._backoff or self._waiting_for_producers else table.next_due_ms()
        if next_due is not None:
            wake = min(wake, max(next_due, now + MIN_PAUSE_MS))
        self._backoff = self._waiting_for_producers = False
        self._stopped.wait(max(wake - now, MIN_PAUSE_MS) / 1000)

    def shutdown(self) -> None:
        """Stop; a second call (the broker stops checks before its server's grace, and again before the store
        closes) waits again for a pass still writing, and logs nothing more."""
        first = not self._stopped.is_set()
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=10)
        if not first:
            return
        log.info("transaction_check_stopped checks=%d unsent=%d discarded=%d pending=%d", self.checks_sent,
                 self.checks_unsent, self.discarded, self.table.pending)

    # -- one pass ----------------------------------------------------------------------------------
    def check_once(self) -> None:
        self.read_log()
        due = self.table.due(self.clock_ms(), CHECK_BATCH)
        if due.discards:
            self._discard(due.discards)
        if due.checks:
            self._check(due.checks)

    def commit_progress(self) -> None:
        """Commit (H, O), H first (see ``transaction_table.py``)."""
        try:
            commit_log = self.store.commit_log
            half, op = self.table.progress(min(commit_log.flushed_offset(), commit_log.confirm_offset))
            if half != self._committed[0]:
                self.offsets.commit_offset(SYSTEM_GROUP, HALF_TOPIC, HALF_QUEUE_ID, half)
                self._committed = (half, self._committed[1])
            if op != self._committed[1]:
                self.offsets.commit_offset(SYSTEM_GROUP, OP_HALF_TOPIC, OP_QUEUE_ID, op)
                self._committed = (half, op)
        except Exception as exc:  # a full disk under RocksDB metadata: the offsets stay behind, which is safe
            log.warning("transaction_progress_not_committed error=%r", exc)

    def read_log(self) -> None:
        """What is new in the op and half queues, into the table."""
        table = self.table
        dispatched = self.store.reput.reput_from_offset  # every half message stored below it is in its queue now
        self._read(OP_HALF_TOPIC, OP_QUEUE_ID, table.op_read, self._on_op, table.skip_ops, table.lower_op_to)
        if self._read(HALF_TOPIC, HALF_QUEUE_ID, table.half_read, self._on_half, self._skip_halves,
                      table.lower_half_to):
            table.read_through = dispatched

    def _read(self, topic: str, queue_id: int, offset: int, on_record: Callable[[MessageExt, int], None],
              skip: Callable[[int], object], lower_to: Callable[[int], bool]) -> bool:
        """True once the queue was read to its end (False: stopped first)."""
        while not self._stopped.is_set():
            result = self.store.get_message(topic, queue_id, offset, READ_BATCH)
            if _ends_below(result.status, offset, result.max_offset):
                # The queue was cut (or deleted) under the table: new messages take the offsets from its end, so
                # reading and progress go back there (once: the next read starts at the end).
                if lower_to(result.max_offset):
                    log.error("transaction_progress_lowered topic=%s from=%d to=%d reason=queue_ends_below",
                              topic, offset, result.max_offset)
                return True
            if result.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.NO_MESSAGE) \
                    and result.next_begin_offset > offset:  # NO_MESSAGE: every message it had expired
                log.warning("transaction_queue_expired topic=%s from=%d to=%d", topic, offset, result.next_begin_offset)
            elif result.status not in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE):
                return True  # caught up
            for raw in result.messages:
                try:
                    msg = decode_record(raw)
                except CorruptRecordError as exc:
                    log.error("transaction_record_corrupt topic=%s error=%s", topic, exc)
                    continue
                on_record(msg, len(raw))
            if result.next_begin_offset <= offset:
                return True
            offset = result.next_begin_offset
            skip(offset)
        return False

    def _stamp(self, msg: MessageExt) -> int:
        """A record's store time for the checks' schedule, never later than now: after the broker's clock stepped
        back, records are stamped with the time before the step (the commitlog keeps store times monotonic), and
        a transaction opened then was first checked that much later (an hour for an hour's step)."""
        return min(msg.store_timestamp, self.clock_ms())

    def _on_half(self, msg: MessageExt, size: int) -> None:
        first = self.table.half_read
        lost = self.table.add_half(HalfEntry(msg.queue_offset, msg.physical_offset, self._stamp(msg),
                                             producer_group(msg)))
        self._lost_unread(first, msg.queue_offset, lost)

    def _skip_halves(self, next_offset: int) -> None:
        first = self.table.half_read
        self._lost_unread(first, next_offset, self.table.skip_halves(next_offset))

    def _lost_unread(self, first: int, end: int, lost: int) -> None:
        """``lost`` half messages between half queue offsets ``first`` and ``end`` went before they were read."""
        if lost:
            self.halves_lost += lost
            log.error("transaction_half_lost half_queue_offsets=%d-%d count=%d commitlog_min=%d reason='their "
                      "commitlog segments were deleted before the check service read them (forced cleanup past "
                      "diskSpaceCleanForciblyRatio)' action=none: they can be neither checked nor committed",
                      first, end - 1, lost, self.store.commit_log.min_offset())

    def _on_op(self, msg: MessageExt, size: int) -> None:
        op = decode_op(msg)
        if op is None:
            log.warning("transaction_op_unknown op_offset=%d tags=%s", msg.queue_offset, msg.tags)
        self.table.add_op(msg.queue_offset, op, self._stamp(msg), msg.physical_offset + size)

    def _half_message(self, entry: HalfEntry) -> MessageExt | None:
        raw = self.store.select_one_message_by_offset(entry.commit_log_offset)
        if raw is None:
            return None
        try:
            msg = decode_record(raw)
        except CorruptRecordError:
            return None
        return msg if msg.topic == HALF_TOPIC and msg.queue_offset == entry.queue_offset else None

    def _tx(self, entry: HalfEntry) -> str:
        return TransactionId(self.broker_name, entry.commit_log_offset, entry.queue_offset).encode()

    # -- checks ------------------------------------------------------------------------------------
    def _check(self, entries: list[HalfEntry]) -> None:
        entries = self._reconnected(entries)
        found: list[tuple[HalfEntry, MessageExt]] = []
        gone: list[HalfEntry] = []
        for entry in entries:
            msg = self._half_message(entry)
            if msg is None:
                gone.append(entry)
            else:
                found.append((entry, msg))
        if gone:  # its commitlog segment was deleted: it can be neither checked nor committed (said as lost)
            self._discard(gone)
        if not found:
            return
        result = put_op(self.store, OpMessage(OpKind.CHECK, tuple(e.queue_offset for e, _ in found)))
        refusal = refusal_of(result, "recording transaction checks")
        if refusal is not None:
            log.warning("transaction_check_not_recorded count=%d reason=%r", len(found), refusal.remark)
            self._backoff = True
            return
        assert result.append is not None
        if not self.store.wait_dispatched(result.append.end_offset, DISPATCH_WAIT_S):
            log.warning("transaction_check_not_dispatched count=%d: sent at a later pass", len(found))
            return
        self.read_log()  # the check counts before it is sent
        for entry, msg in found:
            self._send_check(entry, msg)

    def _reconnected(self, entries: list[HalfEntry]) -> list[HalfEntry]:
        """``entries`` less, within PRODUCER_RECONNECT_GRACE_S of the load, those of groups without a producer
        session yet (left due: checked once one reconnects, or after the grace as any group without producers)."""
        if time.monotonic() - self._loaded_at >= PRODUCER_RECONNECT_GRACE_S:
            return entries
        online = {g: bool(self.producers.client_ids(g)) for g in {e.producer_group for e in entries}}
        waiting = [g for g, live in online.items() if not live]
        if not waiting:
            return entries
        if not self._waiting_said:
            self._waiting_said = True
            log.info("transaction_check_waiting_for_producers groups=%d first=%s grace_s=%.0f", len(waiting),
                     waiting[0], PRODUCER_RECONNECT_GRACE_S)
        self._waiting_for_producers = True
        return [e for e in entries if online[e.producer_group]]

    def _send_check(self, entry: HalfEntry, msg: MessageExt) -> None:
        tx = self._tx(entry)
        times = self.table.check_count(entry.queue_offset)
        target = real_target(msg)
        if target is None:
            log.error("transaction_half_without_target tx=%s: discarded after its checks", tx)
            return
        request = transaction_pb2.TransactionCheckRequest(
            producer_group=entry.producer_group, transaction_id=tx, commit_log_offset=entry.commit_log_offset,
            queue_offset=entry.queue_offset, msg_id=msg.unique_key or "", record=check_record(msg, *target, tx, times),
            check_times=times, broker_name=self.broker_name)
        client = self.producers.send_check(entry.producer_group, request)
        if client is None:
            self.checks_unsent += 1
            log.warning("transaction_check_no_producer tx=%s group=%s check_times=%d", tx, entry.producer_group, times)
            return
        self.checks_sent += 1
        log.info("transaction_check_sent tx=%s group=%s client=%s check_times=%d", tx, entry.producer_group, client,
                 times)

    # -- discards ----------------------------------------------------------------------------------
    def _discard(self, entries: list[HalfEntry]) -> None:
        claims = [(e, self.table.begin_end(e.queue_offset, Outcome.DISCARD)) for e in entries]
        proceed = [(e, claim.real_written) for e, claim in claims if claim.decision is EndDecision.PROCEED]
        half_committed = [e for e, real_written in proceed if real_written]
        if half_committed:
            self._finish_commits(half_committed)
        claimed = [e for e, real_written in proceed if not real_written]
        if not claimed:
            return
        copying: list[tuple[HalfEntry, MessageExt]] = []
        lost: set[int] = set()  # gone from the commitlog: nothing to copy
        for entry in claimed:
            if entry.queue_offset not in self._discard_copied:
                msg = self._half_message(entry)
                if msg is None:
                    lost.add(entry.queue_offset)
                else:
                    copying.append((entry, msg))
        try:
            if copying:
                ensure_group_topic(self.topics, TRANS_CHECK_MAX_TIME_TOPIC, self.on_topics_changed)
            for entry, msg in copying:
                self._copy_discarded(entry, msg)
            result = self._put_removal(claimed, Outcome.DISCARD, "recording discarded transactions")
        except Exception as exc:
            for entry in claimed:
                self.table.abort_end(entry.queue_offset)
            log.warning("transaction_discard_failed count=%d reason=%s", len(claimed), exc)
            self._backoff = True
            return
        assert result.append is not None
        for entry in claimed:
            self._discard_copied.discard(entry.queue_offset)
            times = self.table.check_count(entry.queue_offset)
            self.table.finish_end(entry.queue_offset, Outcome.DISCARD, result.append.end_offset)
            if entry.queue_offset in lost:
                log.error("transaction_half_lost tx=%s group=%s commit_log_offset=%d check_times=%d commitlog_min=%d "
                          "reason='its commitlog segment was deleted before the transaction ended (forced cleanup "
                          "past diskSpaceCleanForciblyRatio)' action=ended_without_check_or_copy", self._tx(entry),
                          entry.producer_group, entry.commit_log_offset, times, self.store.commit_log.min_offset())
            else:
                log.warning("transaction_discarded tx=%s group=%s check_times=%d topic=%s", self._tx(entry),
                            entry.producer_group, times, TRANS_CHECK_MAX_TIME_TOPIC)
        self.discarded += len(claimed) - len(lost)
        self.halves_lost += len(lost)

    def _copy_discarded(self, entry: HalfEntry, msg: MessageExt) -> None:
        """The half message's copy into TRANS_CHECK_MAX_TIME_TOPIC, put alone: one the store refuses for good (it
        breaks a rule of the write, as a body over a maxMessageSize lowered since) is logged and left out, and the
        transaction is discarded all the same; in one batch with the others it held back every discard at every
        pass. A refusal that may pass (a full disk) is raised: the pass's discards are tried again later."""
        record = discard_record(msg, self.table.check_count(entry.queue_offset), self.store.store_host)
        copied = self.store.put_wire_batch(WireBatch.of_records(TRANS_CHECK_MAX_TIME_TOPIC.encode(), 0, [record]),
                                           wait_flushed=False)
        refusal = refusal_of(copied, "moving a half message to " + TRANS_CHECK_MAX_TIME_TOPIC)
        if refusal is not None and refusal.code != ResponseCode.MESSAGE_ILLEGAL:
            raise refusal
        if refusal is not None:
            log.error("transaction_discard_copy_refused tx=%s group=%s error=%r action=discarded_without_copy",
                      self._tx(entry), entry.producer_group, refusal.remark)
        self._discard_copied.add(entry.queue_offset)

    def _finish_commits(self, entries: list[HalfEntry]) -> None:
        """End as COMMIT the claimed half messages whose real message a commit stored before its op write failed:
        only the op is written. Refused, they stay claimable and the next pass waits an interval (no spinning)."""
        try:
            result = self._put_removal(entries, Outcome.COMMIT, "finishing commits whose op write had failed")
        except Exception as exc:
            for entry in entries:
                self.table.abort_end(entry.queue_offset, real_written=True)
            log.warning("transaction_commit_not_finished count=%d reason=%s", len(entries), exc)
            self._backoff = True
            return
        assert result.append is not None
        for entry in entries:
            self.table.finish_end(entry.queue_offset, Outcome.COMMIT, result.append.end_offset)
            log.warning("transaction_ended tx=%s outcome=COMMIT group=%s from_check=discard reason='its real message "
                        "was stored, its op write had failed'", self._tx(entry), entry.producer_group)
        self.commits_finished += len(entries)

    def _put_removal(self, entries: list[HalfEntry], outcome: Outcome, what: str) -> PutMessageResult:
        """The op that ends ``entries`` as ``outcome``, stored; a refusal raised."""
        result = put_op(self.store, OpMessage(OpKind.REMOVE, tuple(e.queue_offset for e in entries), outcome))
        refusal = refusal_of(result, what)
        if refusal is not None:
            raise refusal
        return result

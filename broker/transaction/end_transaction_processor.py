"""EndTransaction: commit or roll back one half message.

Commit puts the real message (its real topic and queue, the transaction's properties removed, the same unique key)
and then an op message ``d`` (COMMIT) naming the half message; rollback puts only the op message (ROLLBACK). The op
message comes last, in one commitlog after the real message, so once it is durable so is the commit: the check
service never moves its progress past a half message before that (``transaction_table.py``). A crash between the
two puts leaves a committed message without its op: the half message is checked again and, answered COMMIT, put
again (at-least-once, as upstream). Within one broker process a repeated end is answered from memory instead, so
a producer's commit racing its answer to a check stores the message once.

Blocks until the puts are stored (SYNC_FLUSH: one fsync wait, for the op, which covers the real message before
it): call it off the event loop.
"""

import logging
from collections.abc import Callable

from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.request_checks import checked_group
from broker.store.message_store import MessageStore
from broker.store.put_message_result import PutMessageResult, PutMessageStatus
from broker.transaction.half_message import committed_record, producer_group, real_target
from broker.transaction.op_message import OpKind, OpMessage, Outcome
from broker.transaction.transaction_table import EndDecision, TransactionTable
from common.acl import PUB, check_topic
from common.message import MessageExt
from common.message_codec import CorruptRecordError, decode_record
from common.refusal import Refusal
from common.request_error import RequestError, require
from common.response_code import ResponseCode
from common.transaction_id import InvalidTransactionId, TransactionId
from common.transaction_topic import HALF_TOPIC, OP_HALF_TOPIC, OP_QUEUE_ID
from common.wire_batch import WireBatch
from proto import transaction_pb2

log = logging.getLogger(__name__)

END_WAIT_S = 5.0  # an end waits this long for another end of the same half message being written
OUTCOMES = {transaction_pb2.TRANSACTION_COMMIT: Outcome.COMMIT, transaction_pb2.TRANSACTION_ROLLBACK: Outcome.ROLLBACK}
ILLEGAL = (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
END_METHOD = "/rmq.TransactionService/EndTransaction"


def put_op(store: MessageStore, op: OpMessage, wait_flushed: bool = True) -> PutMessageResult:
    body, props = op.encode()
    return store.put_messages(OP_HALF_TOPIC, OP_QUEUE_ID, [body], [props], wait_flushed=wait_flushed)


def refusal_of(result: PutMessageResult, what: str) -> Refusal | None:
    """None when ``result`` stored the record (FLUSH_DISK_TIMEOUT included: stored, not yet on disk)."""
    if result.append is not None and result.status in (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT):
        return None
    code = ResponseCode.MESSAGE_ILLEGAL if result.status in ILLEGAL else ResponseCode.SERVICE_NOT_AVAILABLE
    return Refusal(code, f"{what}: {result.error or result.status.value}")


def _real_topic(msg: MessageExt) -> str:
    """The topic a half message commits to; without one, the half topic (the broker's own: Super users only)."""
    target = real_target(msg)
    return target[0] if target is not None else HALF_TOPIC


class EndTransactionProcessor:
    def __init__(self, broker_name: str, store: MessageStore, topics: TopicConfigManager,
                 table: TransactionTable, deleted_at: Callable[[str], int] = lambda _topic: -1,
                 not_master: Callable[[], str | None] = lambda: None) -> None:
        self.broker_name = broker_name
        # A replica that is not its group's master refuses at once (it waited 5 s for a table it never loads, then
        # said "busy": a check's answer sent to a deposed master after a failover timed out at every try)
        self.not_master = not_master
        self.store = store  # the local store: ends write there
        self.topics = topics
        self.table = table
        # The commitlog offset of a topic's latest deleteTopic (-1: none), as the timer store notes them: a half
        # message stored before it is the deleted topic's, never committed into a topic made again under the name.
        self.deleted_at = deleted_at
        self.committed = 0
        self.rolled_back = 0

    def end(self, request: transaction_pb2.EndTransactionRequest) -> transaction_pb2.EndTransactionResponse:
        group = checked_group(request.producer_group, "producer")
        if (why := self.not_master()) is not None:
            raise Refusal(ResponseCode.NO_PERMISSION, f"{why}: end the transaction at its group's master")
        if request.resolution == transaction_pb2.TRANSACTION_UNKNOWN:
            return transaction_pb2.EndTransactionResponse(
                code=ResponseCode.SUCCESS, remark="TRANSACTION_UNKNOWN: nothing written; the broker checks it again")
        outcome = OUTCOMES.get(request.resolution)
        require(outcome is not None, f"resolution {request.resolution} is not TRANSACTION_COMMIT, TRANSACTION_ROLLBACK "
                "or TRANSACTION_UNKNOWN")
        assert outcome is not None
        offset = self._commit_log_offset(request)
        msg = self._half_message(offset)
        # The request names no topic: the half message's real topic is what the caller needs Pub on (checked
        # before anything about the message is said back).
        check_topic(_real_topic(msg), PUB, END_METHOD)
        self._check_owner(msg, offset, group, request.msg_id)
        tx = TransactionId(self.broker_name, msg.physical_offset, msg.queue_offset)
        topic_gone = outcome is Outcome.COMMIT and msg.physical_offset < self.deleted_at(_real_topic(msg))
        if topic_gone:  # ended as a rollback (not checked again), and the caller told why
            outcome = Outcome.ROLLBACK
        claim = self.table.begin_end(msg.queue_offset, outcome, END_WAIT_S)
        if claim.decision is EndDecision.ALREADY:
            return transaction_pb2.EndTransactionResponse(code=ResponseCode.SUCCESS,
                                                          remark=f"transaction {tx} had ended: {claim.outcome}")
        if claim.decision is not EndDecision.PROCEED:
            code = ResponseCode.SYSTEM_BUSY if claim.decision is EndDecision.BUSY else ResponseCode.INVALID_PARAMETER
            raise Refusal(code, self._why_not(tx, outcome, claim.decision, claim.outcome))
        real_written = claim.real_written
        try:
            timed_out = False
            if outcome is Outcome.COMMIT and not real_written:
                timed_out |= self._put_real(msg, tx)
                real_written = True
            result = put_op(self.store, OpMessage(OpKind.REMOVE, (msg.queue_offset,), outcome))
            refusal = refusal_of(result, f"writing the end of transaction {tx}")
            if refusal is not None:
                raise refusal
            timed_out |= result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        except BaseException:
            self.table.abort_end(msg.queue_offset, real_written=real_written and outcome is Outcome.COMMIT)
            raise
        assert result.append is not None
        self.table.finish_end(msg.queue_offset, outcome, result.append.end_offset)
        if outcome is Outcome.COMMIT:
            self.committed += 1
        else:
            self.rolled_back += 1
        log.info("transaction_ended tx=%s outcome=%s group=%s msg_id=%s from_check=%s client=%s", tx, outcome.value,
                 group, msg.unique_key or "", request.from_check, request.client_id or "-")
        if topic_gone:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"cannot commit transaction {tx}: topic {_real_topic(msg)} "
                          "was deleted after its half message was stored (a topic made again under the name is "
                          "another topic); the transaction is rolled back")
        code = ResponseCode.FLUSH_DISK_TIMEOUT if timed_out else ResponseCode.SUCCESS
        return transaction_pb2.EndTransactionResponse(code=code, remark=f"transaction {tx}: {outcome.value}")

    def _commit_log_offset(self, request: transaction_pb2.EndTransactionRequest) -> int:
        if not request.transaction_id:
            require(request.commit_log_offset >= 0, f"commit_log_offset {request.commit_log_offset} is negative")
            return request.commit_log_offset
        try:
            tx = TransactionId.decode(request.transaction_id)
        except InvalidTransactionId as exc:
            raise RequestError(str(exc)) from None
        if tx.broker_name != self.broker_name:
            raise Refusal(ResponseCode.INVALID_PARAMETER, f"transaction {tx} is broker {tx.broker_name}'s, not "
                          f"{self.broker_name}'s: end it there")
        return tx.commit_log_offset

    def _half_message(self, offset: int) -> MessageExt:
        raw = self.store.select_one_message_by_offset(offset)
        msg = None
        if raw is not None:
            try:
                msg = decode_record(raw)
            except CorruptRecordError:
                msg = None
        if raw is None and offset < (commit_log_min := self.store.commit_log.min_offset()):
            # Segments holding half messages still needed go only past diskSpaceCleanForciblyRatio
            # (half_message_hold.py); the check service says it as transaction_half_lost.
            raise Refusal(ResponseCode.INVALID_PARAMETER, f"no half message at commitlog offset {offset} of broker "
                          f"{self.broker_name}: it was lost to commitlog expiry (the commitlog now starts at "
                          f"{commit_log_min}) before the transaction ended")
        if msg is None or msg.topic != HALF_TOPIC:
            raise Refusal(ResponseCode.INVALID_PARAMETER, f"no half message at commitlog offset {offset} of broker "
                          f"{self.broker_name} (expired, or not a transaction's)")
        return msg

    @staticmethod
    def _check_owner(msg: MessageExt, offset: int, group: str, msg_id: str) -> None:
        owner = producer_group(msg)
        if owner != group:
            raise Refusal(ResponseCode.INVALID_PARAMETER, f"the half message at commitlog offset {offset} is producer "
                          f"group {owner}'s, not {group}'s")
        if msg_id and msg.unique_key and msg_id != msg.unique_key:
            raise Refusal(ResponseCode.INVALID_PARAMETER, f"the half message at commitlog offset {offset} is message "
                          f"{msg.unique_key}, not {msg_id}")

    def _put_real(self, msg: MessageExt, tx: TransactionId) -> bool:
        """Store the committed message (not waiting for its flush: the op's wait covers it); True if it was not
        flushed in time (SYNC_FLUSH)."""
        target = real_target(msg)
        if target is None:
            raise Refusal(ResponseCode.MESSAGE_ILLEGAL,
                          f"half message of transaction {tx} lacks REAL_TOPIC or REAL_QID")
        topic, queue_id = target
        if not self._queue_exists(topic, queue_id):
            raise self._no_queue(tx, topic, queue_id)
        raw_topic = topic.encode()
        record = committed_record(msg, topic, queue_id, self.store.store_host)
        # Asked again under the commitlog's lock, where deleteTopic's deletion record appends: a delete right after
        # the check above must not leave the message at the start of a topic made again under the name.
        result = self.store.put_wire_batch(WireBatch.of_records(raw_topic, queue_id, [record]), wait_flushed=False,
                                           admit=lambda: self._queue_exists(topic, queue_id))
        if result.status is PutMessageStatus.NOT_ADMITTED:
            raise self._no_queue(tx, topic, queue_id)
        refusal = refusal_of(result, f"committing transaction {tx}")
        if refusal is not None:
            raise refusal
        return result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT

    def _queue_exists(self, topic: str, queue_id: int) -> bool:
        config = self.topics.select(topic)
        return config is not None and 0 <= queue_id < max(config.read_queue_nums, config.write_queue_nums)

    @staticmethod
    def _no_queue(tx: TransactionId, topic: str, queue_id: int) -> Refusal:
        return Refusal(ResponseCode.TOPIC_NOT_EXIST, f"cannot commit transaction {tx}: queue {queue_id} of topic "
                       f"{topic} no longer exists on this broker")

    @staticmethod
    def _why_not(tx: TransactionId, outcome: Outcome, decision: EndDecision, had: Outcome | None) -> str:
        if decision is EndDecision.CONFLICT:
            return f"cannot {outcome.value.lower()} transaction {tx}: it ended earlier with {had}"
        if decision is EndDecision.BUSY:
            return (f"transaction {tx} is being ended by another call, or the broker is still reading its transactions "
                    "(just started, or not a master); try again")
        return (f"transaction {tx} ended long ago (the broker's checks passed it): its outcome is no longer kept, "
                f"so it cannot be ended again with {outcome.value}")

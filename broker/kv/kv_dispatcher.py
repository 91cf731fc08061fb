"""Applies KV records to the state store in commitlog order (the KV member of the dispatch chain).

Put and delete overwrite; compare-and-set is decided here, against the state as of its place in the
commitlog (a key the partition never saw takes the base carried in the record), so replaying the commitlog
decides it the same way. A record below the applied offset was applied before a restart and is skipped.
"""

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from broker.kv import kv_record
from broker.kv.kv_record import DELETED, KvOp, check_format, present, value_of
from broker.kv.kv_state_store import KvStateStore, StateWrites
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import PHYSICAL_OFFSET, SIZE, TOPIC, DispatchRequest
from common.kv_shard import KV_TOPIC
from common.message_codec import HEADER_SIZE

log = logging.getLogger(__name__)

MAX_KEPT_OUTCOMES = 65_536  # CAS outcomes nobody collected (replayed ones) are dropped oldest first
MAX_SPAN_BYTES = 8 << 20  # the most a dispatch's KV records are read in one piece (other records may lie between)
_KV_TOPIC_LEN = len(KV_TOPIC.encode())
_PUT, _DELETE = KvOp.PUT, KvOp.DELETE  # an enum member read per op costs more than the test

ApplyListener = Callable[[int], None]
ReadAt = Callable[[int, int], bytes]


@dataclass(slots=True, frozen=True)
class CasOutcome:
    applied: bool
    current: bytes | None  # raw state after the op


class KvCommitLogDispatcher(CommitLogDispatcher):
    name = "kv"
    keeps_commit_log = True  # unflushed state is rebuilt only by replaying the commitlog

    def __init__(self, state: KvStateStore, read_at: ReadAt) -> None:
        self.state = state
        self._read_at = read_at
        self._applied = 0  # commitlog offset after the last record looked at
        self._durable = 0
        self._stored = 0  # the applied offset as written in the state store
        self._outcomes: OrderedDict[int, CasOutcome] = OrderedDict()
        self._outcomes_lock = threading.Lock()
        self._apply_lock = threading.Lock()  # dispatch (a reput pass) and flush (flush thread) both write state
        self.apply_listeners: list[ApplyListener] = []
        self.applied_ops = 0

    @property
    def applied_offset(self) -> int:
        return self._applied

    def load(self) -> None:
        self._applied = self._durable = self._stored = self.state.load()
        log.info("kv_loaded applied=%d", self._applied)

    def checkpoint(self) -> int:
        return self._durable

    def copied(self, applied_offset: int) -> None:
        """The state store holds a copy of a master's state as of ``applied_offset`` (durable; 0: being copied):
        records below it are skipped, as after a restart."""
        with self._apply_lock:
            self._applied = self._durable = self._stored = applied_offset

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        with self._apply_lock:
            self._dispatch(requests, end_offset)
        for listener in self.apply_listeners:
            listener(end_offset)

    def _dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        if end_offset <= self._applied:
            return  # re-dispatch of what was applied before a restart
        applied_from = self._applied
        records = [r for r in requests if r[TOPIC] == KV_TOPIC and r[PHYSICAL_OFFSET] >= applied_from]
        if records:
            self._apply(records, end_offset)
        self._applied = end_offset

    def _apply(self, records: list[DispatchRequest], end_offset: int) -> None:
        read = self._reader(records[0][PHYSICAL_OFFSET], records[-1][PHYSICAL_OFFSET] + records[-1][SIZE],
                            sum(r[SIZE] for r in records))
        writes: StateWrites = {}
        for _, queue_id, _, physical, size, _, _, props in records:
            op, key = kv_record.op_and_key(props)
            body = read(physical + HEADER_SIZE + _KV_TOPIC_LEN + len(props), physical + size)
            check_format(body)
            if op is _PUT:
                writes[(queue_id, key)] = body  # its raw state as it is (kv_record: a body is a present state)
            elif op is _DELETE:
                writes[(queue_id, key)] = DELETED
            else:
                self._compare_and_set(writes, queue_id, physical, kv_record.decode_cas(key, body))
        self.state.apply(writes, end_offset)
        self._stored = end_offset
        self.applied_ops += len(records)

    def _reader(self, start: int, end: int, wanted: int) -> Callable[[int, int], bytes]:
        """``read(a, b)``: commitlog bytes ``a..b`` within ``start..end``, of records ``wanted`` bytes in all. One read
        of the whole span instead of a segment lookup and a read per op, when it lies in one segment, is not large,
        and is mostly those records (a KV batch parsed or appended together; not two puts far apart between other
        topics' messages, which would copy everything between them)."""
        if end - start <= min(MAX_SPAN_BYTES, 2 * wanted):
            span = self._read_at(start, end - start)
            if len(span) == end - start:  # else it runs into the next segment
                return lambda a, b: span[a - start : b - start]
        return lambda a, b: self._read_at(a, b - a)

    def _compare_and_set(self, writes: StateWrites, partition: int, physical: int, record: kv_record.KvRecord,
                         ) -> None:
        """Decided against the state as of the record's place in the commitlog; the outcome is kept for its writer."""
        slot = (partition, record.key)
        current = writes.get(slot)
        if current is None:
            current = self.state.get(partition, [record.key])[0]
        if current is None:
            current = record.base
        value = value_of(current)
        ok = value is None if record.expected is None else value == record.expected
        if ok:
            current = writes[slot] = present(record.value)
        with self._outcomes_lock:
            self._outcomes[physical] = CasOutcome(ok, current)
            if len(self._outcomes) > MAX_KEPT_OUTCOMES:
                self._outcomes.popitem(last=False)

    def take_outcome(self, physical_offset: int) -> CasOutcome | None:
        with self._outcomes_lock:
            return self._outcomes.pop(physical_offset, None)

    def flush(self) -> None:
        with self._apply_lock:
            if self._applied > self._stored:  # records since the last KV op were other topics': move the mark
                self.state.apply({}, self._applied)
                self._stored = self._applied
        self._durable = self.state.flush()

    def truncate_dirty(self, commit_log_end: int) -> None:
        """Only after a machine crash with ASYNC_FLUSH, the state made durable past what the commitlog had on disk
        (it is flushed on its own clock, and RocksDB flushes full memtables on its own): the ops applied from the
        lost tail cannot be undone (they were acknowledged: the state keeps them), but the records appended from
        the end on are new ones and must apply. Left at the old applied offset, they were skipped as applied
        before, each answered as applied, for good."""
        if self._applied > commit_log_end:
            log.error("kv_applied_past_commitlog_end applied=%d commitlog_end=%d action='the ops of the lost tail "
                      "stay applied; the applied offset goes back to the end, so new records apply'",
                      self._applied, commit_log_end)
            self.state.rewind(commit_log_end)
            self._applied = self._durable = self._stored = commit_log_end

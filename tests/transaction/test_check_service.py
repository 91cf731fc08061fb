"""The check service and EndTransaction over a real message store in this process, with the check service's clock
injected (passes run by hand, not by its thread): checks and their counts, the discard, the progress offsets, a
restart of the store in the middle, and the answers EndTransaction gives."""

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.store.config import MessageStoreConfig
from broker.store.message_store import MessageStore
from broker.transaction import check_service
from broker.transaction.check_service import TransactionalMessageCheckService
from broker.transaction.end_transaction_processor import EndTransactionProcessor
from broker.transaction.half_message import half_properties
from broker.transaction.transaction_table import TransactionTable
from common.message import MessageExt
from common.message_codec import decode_record
from common.message_properties import encode_properties
from common.refusal import Refusal
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.topic_config import TopicConfig
from common.transaction_id import TransactionId
from common.transaction_topic import HALF_TOPIC, OP_HALF_TOPIC, SYSTEM_GROUP, TRANS_CHECK_MAX_TIME_TOPIC
from proto import transaction_pb2
from tests.cluster import wait_until

TIMEOUT, INTERVAL, CHECK_MAX = 60_000, 60_000, 3  # far beyond the test's own run time: only the injected clock moves
BROKER = "broker-t"
TOPIC = "TxTopic"


class FakeProducers:
    """A producer of every group is online and takes every check (but for the groups in ``offline``)."""

    def __init__(self) -> None:
        self.checks: list[transaction_pb2.TransactionCheckRequest] = []
        self.offline: set[str] = set()

    def client_ids(self, group: str) -> list[str]:
        return [] if group in self.offline else ["client-1"]

    def send_check(self, group: str, check: transaction_pb2.TransactionCheckRequest) -> str | None:
        if group in self.offline:
            return None
        self.checks.append(check)
        return "client-1"


class Broker:
    """A store, its metadata and its transactions, as the broker wires them; ``restart`` closes and reopens it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.now = int(time.time() * 1000)
        self.producers = FakeProducers()
        self.announced = 0
        self._open()

    def _open(self) -> None:
        self.store = MessageStore(MessageStoreConfig(str(self.root), mapped_file_size_commit_log=1 << 20,
                                                     flush_interval_commit_log_ms=10, destroy_mapped_file_grace_ms=0))
        self.topics = TopicConfigManager(self.root / "config")
        self.offsets = ConsumerOffsetManager(self.root / "config")
        self.topics.load()
        self.offsets.load()
        self.store.start()
        self.topics.update(TopicConfig(TOPIC, 1, 1))
        self.table = TransactionTable(TIMEOUT, INTERVAL, CHECK_MAX)
        self.processor = EndTransactionProcessor(BROKER, self.store, self.topics, self.table)
        self.service = TransactionalMessageCheckService(
            table=self.table, store=self.store, offsets=self.offsets, topics=self.topics,
            producers=self.producers, broker_name=BROKER,  # type: ignore[arg-type]
            on_topics_changed=self._announce, clock_ms=lambda: self.now)
        assert self.service._load()

    def _announce(self) -> None:
        self.announced += 1

    def restart(self) -> None:
        self.offsets.persist()
        self.store.shutdown()
        self._open()

    def close(self) -> None:
        self.store.shutdown()

    def send_half(self, body: bytes, group: str = "pg") -> TransactionId:
        props = encode_properties({"UNIQ_KEY": body.hex(), "TRAN_MSG": "true", "PGROUP": group, "KEYS": "k"})
        half_props = half_properties([props], TOPIC, 0, static=False)
        assert half_props is not None
        result = self.store.put_messages(HALF_TOPIC, 0, [body], half_props)
        assert result.ok and self.store.wait_dispatched(result.append.end_offset)
        return TransactionId(BROKER, result.physical_offset, result.queue_offset)

    def end(self, tx: TransactionId, resolution: int, group: str = "pg") -> transaction_pb2.EndTransactionResponse:
        return self.processor.end(transaction_pb2.EndTransactionRequest(
            producer_group=group, transaction_id=tx.encode(), resolution=resolution))

    def pass_at(self, now: int) -> None:
        self.now = now
        self.service.check_once()

    def messages(self, topic: str) -> list[MessageExt]:
        assert self.store.wait_dispatched(self.store.commit_log.max_offset())
        result = self.store.get_message(topic, 0, 0, 100)
        return [decode_record(r) for r in result.messages]

    def committed_progress(self) -> tuple[int, int]:
        return (self.offsets.query_offset(SYSTEM_GROUP, HALF_TOPIC, 0),
                self.offsets.query_offset(SYSTEM_GROUP, OP_HALF_TOPIC, 0))

    def progress_reaches(self, expected: tuple[int, int]) -> bool:
        self.service.read_log()  # as the next pass would
        self.service.commit_progress()  # the commitlog's flush (every 10 ms here) decides how far
        return self.committed_progress() == expected


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "store")
    yield b
    b.close()


def test_checked_each_interval_then_discarded(broker: Broker):
    tx = broker.send_half(b"open")
    start = broker.now
    broker.pass_at(start + TIMEOUT - 1000)
    assert broker.producers.checks == []
    for n in range(1, CHECK_MAX + 1):
        broker.pass_at(start + TIMEOUT + (n - 1) * INTERVAL + 1000)
        assert len(broker.producers.checks) == n
        check = broker.producers.checks[-1]
        assert (check.transaction_id, check.check_times, check.producer_group) == (tx.encode(), n, "pg")
        msg = decode_record(check.record)  # the message as sent: its real topic, its properties, the id
        assert (msg.topic, msg.body, msg.queue_id, msg.physical_offset) == (TOPIC, b"open", 0, tx.commit_log_offset)
        assert msg.properties["__transactionId__"] == tx.encode()
        assert msg.properties["TRANSACTION_CHECK_TIMES"] == str(n)
        assert "REAL_TOPIC" not in msg.properties and msg.properties["TRAN_MSG"] == "true"
    broker.pass_at(start + TIMEOUT + CHECK_MAX * INTERVAL + 1000)
    assert len(broker.producers.checks) == CHECK_MAX
    [moved] = broker.messages(TRANS_CHECK_MAX_TIME_TOPIC)
    assert (moved.body, moved.properties["TRANSACTION_CHECK_TIMES"], moved.properties["REAL_TOPIC"]) == (
        b"open", str(CHECK_MAX), TOPIC)
    assert broker.topics.select(TRANS_CHECK_MAX_TIME_TOPIC) is not None and broker.announced == 1
    assert broker.messages(TOPIC) == []
    # 3 check ops and the discard op passed: both offsets move to the end
    wait_until(lambda: broker.progress_reaches((1, CHECK_MAX + 1)), what="progress past the discarded half message")
    # a discarded transaction may still be rolled back (nothing to do), not committed
    assert broker.end(tx, transaction_pb2.TRANSACTION_ROLLBACK).code == ResponseCode.SUCCESS
    with pytest.raises(Refusal, match="ended earlier with DISCARD"):
        broker.end(tx, transaction_pb2.TRANSACTION_COMMIT)


def test_a_transaction_opened_after_the_clock_stepped_back_is_checked_on_time(broker: Broker):
    """The commitlog stamps records with the time before a backward step until the clock passes it again: counted
    from that stamp, the first check came an hour late after an hour's step, and each later one too."""
    start = broker.now
    broker.store.commit_log._last_store_timestamp = start + 3_600_000  # stored before the clock stepped back 1 h
    broker.send_half(b"after the step")
    broker.pass_at(start)  # read at once, as the service's passes read what was stored since the last one
    broker.pass_at(start + TIMEOUT + 1000)
    assert len(broker.producers.checks) == 1
    broker.pass_at(start + TIMEOUT + INTERVAL + 2000)
    assert len(broker.producers.checks) == 2


def test_commit_stores_the_real_message_once(broker: Broker):
    tx = broker.send_half(b"order-1")
    assert broker.end(tx, transaction_pb2.TRANSACTION_COMMIT).code == ResponseCode.SUCCESS
    [real] = broker.messages(TOPIC)
    assert (real.body, real.unique_key, real.keys) == (b"order-1", b"order-1".hex(), ["k"])
    assert {"TRAN_MSG", "REAL_TOPIC", "REAL_QID"}.isdisjoint(real.properties)
    assert real.sys_flag & 0xC == 0x8  # TRANSACTION_COMMIT_TYPE, as upstream
    again = broker.end(tx, transaction_pb2.TRANSACTION_COMMIT)  # a retry, or a check answered late
    assert again.code == ResponseCode.SUCCESS and "had ended: COMMIT" in again.remark
    assert len(broker.messages(TOPIC)) == 1
    with pytest.raises(Refusal, match="ended earlier with COMMIT"):
        broker.end(tx, transaction_pb2.TRANSACTION_ROLLBACK)
    broker.pass_at(broker.now + TIMEOUT + 1)
    assert broker.producers.checks == []
    wait_until(lambda: broker.progress_reaches((1, 1)), what="progress past the committed half message")


def test_rollback_writes_only_the_op(broker: Broker):
    tx = broker.send_half(b"dropped")
    assert broker.end(tx, transaction_pb2.TRANSACTION_ROLLBACK).code == ResponseCode.SUCCESS
    assert broker.messages(TOPIC) == []
    [op] = broker.messages(OP_HALF_TOPIC)
    assert (op.tags, op.body, op.properties["TRAN_OUTCOME"]) == ("d", b"0", "ROLLBACK")
    broker.pass_at(broker.now + TIMEOUT + 1)
    assert broker.producers.checks == []


def test_a_restart_goes_on_with_the_check_count_and_the_ends(broker: Broker):
    open_tx = broker.send_half(b"open")
    done_tx = broker.send_half(b"done")
    start = broker.now
    broker.pass_at(start + TIMEOUT + 1000)
    broker.pass_at(start + TIMEOUT + INTERVAL + 1000)
    assert [c.check_times for c in broker.producers.checks] == [1, 1, 2, 2]
    assert broker.end(done_tx, transaction_pb2.TRANSACTION_COMMIT).code == ResponseCode.SUCCESS
    broker.restart()
    assert broker.table.check_count(open_tx.queue_offset) == 2
    again = broker.end(done_tx, transaction_pb2.TRANSACTION_COMMIT)  # answered from the op queue read back
    assert again.code == ResponseCode.SUCCESS and "had ended" in again.remark
    broker.producers.checks.clear()
    broker.pass_at(start + TIMEOUT + 2 * INTERVAL + 1000)
    assert [(c.transaction_id, c.check_times) for c in broker.producers.checks] == [(open_tx.encode(), 3)]
    assert [m.body for m in broker.messages(TOPIC)] == [b"done"]


def test_after_a_start_a_group_is_checked_once_a_producer_of_it_reconnects(broker: Broker,
                                                                            monkeypatch: pytest.MonkeyPatch):
    """Right after a start no producer has reconnected yet: every half due while the broker was down used up a check
    nobody could answer, and those on their last check were discarded with their producers alive (the timers
    review: 0 of 200 committed). Within the grace a group without a producer is left due, its check not counted."""
    tx = broker.send_half(b"open")
    broker.restart()
    broker.producers.offline.add("pg")
    broker.pass_at(broker.now + TIMEOUT + 1000)
    assert broker.producers.checks == [] and broker.table.check_count(tx.queue_offset) == 0
    broker.producers.offline.clear()  # its producer reconnected
    broker.pass_at(broker.now + 1)
    assert [(c.transaction_id, c.check_times) for c in broker.producers.checks] == [(tx.encode(), 1)]
    monkeypatch.setattr(check_service, "PRODUCER_RECONNECT_GRACE_S", 0.0)  # after the grace: counted, as upstream
    broker.producers.offline.add("pg")
    broker.pass_at(broker.now + INTERVAL + 1)
    assert broker.table.check_count(tx.queue_offset) == 2 and broker.service.checks_unsent == 1


def test_end_refusals(broker: Broker):
    tx = broker.send_half(b"x")
    with pytest.raises(Refusal, match="producer group pg's, not other's") as wrong_group:
        broker.end(tx, transaction_pb2.TRANSACTION_COMMIT, group="other")
    assert wrong_group.value.code == ResponseCode.INVALID_PARAMETER
    with pytest.raises(Refusal, match="is broker broker-z's"):
        broker.end(TransactionId("broker-z", tx.commit_log_offset, tx.queue_offset), transaction_pb2.TRANSACTION_COMMIT)
    with pytest.raises(Refusal, match="no half message at commitlog offset 1"):
        broker.end(TransactionId(BROKER, 1, 0), transaction_pb2.TRANSACTION_COMMIT)
    with pytest.raises(RequestError, match="not one this cluster issued"):
        broker.processor.end(transaction_pb2.EndTransactionRequest(producer_group="pg", transaction_id="v1|x",
                                                             resolution=transaction_pb2.TRANSACTION_COMMIT))
    with pytest.raises(RequestError, match="resolution 9"):
        broker.processor.end(transaction_pb2.EndTransactionRequest(producer_group="pg", transaction_id=tx.encode(),
                                                             resolution=9))
    unknown = broker.end(tx, transaction_pb2.TRANSACTION_UNKNOWN)
    assert unknown.code == ResponseCode.SUCCESS and broker.messages(OP_HALF_TOPIC) == []
    # upstream's way: the commitlog offset alone
    by_offset = broker.processor.end(transaction_pb2.EndTransactionRequest(
        producer_group="pg", commit_log_offset=tx.commit_log_offset, resolution=transaction_pb2.TRANSACTION_COMMIT))
    assert by_offset.code == ResponseCode.SUCCESS and [m.body for m in broker.messages(TOPIC)] == [b"x"]


def test_a_half_message_is_sent_alone_with_its_group_and_undelayed():
    plain = encode_properties({"UNIQ_KEY": "a"})
    half = encode_properties({"TRAN_MSG": "true", "PGROUP": "pg"})
    assert half_properties([plain, plain], TOPIC, 0, static=False) is None
    with pytest.raises(RequestError, match="sent alone"):
        half_properties([half, plain], TOPIC, 0, static=False)
    with pytest.raises(RequestError, match="PGROUP"):
        half_properties([encode_properties({"TRAN_MSG": "true"})], TOPIC, 0, static=False)
    with pytest.raises(RequestError, match="cannot be delayed"):
        half_properties([encode_properties({"TRAN_MSG": "true", "PGROUP": "pg", "DELAY": "3"})], TOPIC, 0, False)
    with pytest.raises(RequestError, match="static topic"):
        half_properties([half], TOPIC, 0, static=True)
    [routed] = half_properties([half], TOPIC, 5, static=False) or []
    assert routed.endswith(b"REAL_TOPIC\x01TxTopic\x02REAL_QID\x015\x02")


def test_transaction_id_round_trip():
    tx = TransactionId("broker-a", 123456789012, 42)
    assert TransactionId.decode(tx.encode()) == tx
    for bad in ("", "tx1|broker-a|1", "tx1||1|2", "tx1|b|-1|2", "v1|b|1|2", "tx1|b|1|x"):
        with pytest.raises(ValueError):
            TransactionId.decode(bad)


def test_a_commit_whose_op_write_failed_is_not_stored_twice_by_its_retry(broker: Broker, monkeypatch):
    from broker.store.put_message_result import PutMessageResult, PutMessageStatus
    from broker.transaction import end_transaction_processor

    tx = broker.send_half(b"once")
    real_put_op = end_transaction_processor.put_op
    monkeypatch.setattr(end_transaction_processor, "put_op", lambda *a, **k: PutMessageResult(
        PutMessageStatus.SERVICE_NOT_AVAILABLE, "disk full (injected)"))
    with pytest.raises(Refusal, match="disk full") as refused:
        broker.end(tx, transaction_pb2.TRANSACTION_COMMIT)
    assert refused.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert [m.body for m in broker.messages(TOPIC)] == [b"once"]  # stored; its op is not
    with pytest.raises(Refusal, match="ended earlier with COMMIT"):  # half committed: only a commit may finish it
        broker.end(tx, transaction_pb2.TRANSACTION_ROLLBACK)
    monkeypatch.setattr(end_transaction_processor, "put_op", real_put_op)
    assert broker.end(tx, transaction_pb2.TRANSACTION_COMMIT).code == ResponseCode.SUCCESS
    assert [m.body for m in broker.messages(TOPIC)] == [b"once"]
    assert [op.properties["TRAN_OUTCOME"] for op in broker.messages(OP_HALF_TOPIC)] == ["COMMIT"]


def test_a_discard_whose_op_write_was_refused_is_copied_once(broker: Broker, monkeypatch):
    """The copy to the discard topic is stored, then the REMOVE op is refused (the disk filled in between): the
    retry writes the op alone, not a second copy."""
    from broker.store.put_message_result import PutMessageResult, PutMessageStatus
    from broker.transaction import check_service
    from broker.transaction.op_message import OpKind

    broker.send_half(b"open")
    start = broker.now
    for n in range(1, CHECK_MAX + 1):
        broker.pass_at(start + TIMEOUT + (n - 1) * INTERVAL + 1000)
    real_put_op = check_service.put_op

    def refusing_remove(store, op, *args, **kwargs):
        if op.kind is OpKind.REMOVE:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, "disk full (injected)")
        return real_put_op(store, op, *args, **kwargs)

    monkeypatch.setattr(check_service, "put_op", refusing_remove)
    discard_at = start + TIMEOUT + CHECK_MAX * INTERVAL + 1000
    broker.pass_at(discard_at)
    assert [m.body for m in broker.messages(TRANS_CHECK_MAX_TIME_TOPIC)] == [b"open"] and broker.service.discarded == 0
    monkeypatch.setattr(check_service, "put_op", real_put_op)
    broker.pass_at(discard_at + INTERVAL)  # after the refusal's back-off
    assert broker.service.discarded == 1
    assert [m.body for m in broker.messages(TRANS_CHECK_MAX_TIME_TOPIC)] == [b"open"]  # one copy


def test_a_commit_whose_op_write_failed_is_ended_as_commit_by_its_discard(broker: Broker, monkeypatch):
    """The real message is stored, the op refused, and nobody answers the checks: when due for the discard only the
    COMMIT op is written (the message is visible already); refused, the service waits an interval, not spinning."""
    from broker.store.put_message_result import PutMessageResult, PutMessageStatus
    from broker.transaction import check_service, end_transaction_processor
    from broker.transaction.op_message import OpKind

    tx = broker.send_half(b"half committed")
    start = broker.now

    def refused(*args: object, **kwargs: object) -> PutMessageResult:
        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, "disk full (injected)")

    monkeypatch.setattr(end_transaction_processor, "put_op", refused)
    with pytest.raises(Refusal, match="disk full"):
        broker.end(tx, transaction_pb2.TRANSACTION_COMMIT)
    monkeypatch.undo()
    for n in range(1, CHECK_MAX + 1):  # the producer answers none of them
        broker.pass_at(start + TIMEOUT + (n - 1) * INTERVAL + 1000)
    discard_at = start + TIMEOUT + CHECK_MAX * INTERVAL + 1000
    real_put_op = check_service.put_op

    def refusing_remove(store, op, *args, **kwargs):
        if op.kind is OpKind.REMOVE:
            return refused()
        return real_put_op(store, op, *args, **kwargs)

    monkeypatch.setattr(check_service, "put_op", refusing_remove)
    broker.pass_at(discard_at)
    assert broker.table.pending == 1
    waits: list[float] = []
    monkeypatch.setattr(broker.service._stopped, "wait", waits.append)
    broker.service._sleep()
    assert waits == [INTERVAL / 1000]  # backs off a whole interval, though the transaction is due
    monkeypatch.setattr(check_service, "put_op", real_put_op)
    broker.pass_at(discard_at + INTERVAL)
    assert broker.table.pending == 0 and broker.table.next_due_ms() is None
    assert broker.messages(TRANS_CHECK_MAX_TIME_TOPIC) == [] and broker.service.discarded == 0
    assert broker.service.commits_finished == 1
    assert [m.body for m in broker.messages(TOPIC)] == [b"half committed"]  # stored once
    assert [op.properties["TRAN_OUTCOME"] for op in broker.messages(OP_HALF_TOPIC) if op.tags == "d"] == ["COMMIT"]
    wait_until(lambda: broker.progress_reaches((1, CHECK_MAX + 1)), what="progress past the finished commit")
    again = broker.end(tx, transaction_pb2.TRANSACTION_COMMIT)  # the producer's late retry
    assert again.code == ResponseCode.SUCCESS and "had ended: COMMIT" in again.remark


def test_a_commit_racing_the_delete_of_its_topic_stores_nothing(broker: Broker, monkeypatch):
    """deleteTopic lands between the commit's check of the topic and its put: the put, admitted under the
    commitlog's lock, is refused as for a topic that does not exist, so the topic made again under the name does
    not start with the committed message."""
    tx = broker.send_half(b"late")
    select, deleted = broker.topics.select, []

    def select_then_deleted(topic: str) -> TopicConfig | None:
        config = select(topic)
        if topic == TOPIC and not deleted:  # the commit's check saw the topic; deleteTopic lands right after it
            deleted.append(broker.store.delete_topic(TOPIC))
            broker.topics.delete(TOPIC)
        return config

    monkeypatch.setattr(broker.topics, "select", select_then_deleted)
    with pytest.raises(Refusal, match=f"topic {TOPIC} no longer exists") as refused:
        broker.end(tx, transaction_pb2.TRANSACTION_COMMIT)
    assert refused.value.code == ResponseCode.TOPIC_NOT_EXIST and deleted == [None]
    broker.service.read_log()
    assert broker.table.pending == 1 and broker.messages(OP_HALF_TOPIC) == []  # left to its checks
    broker.topics.update(TopicConfig(TOPIC, 1, 1))  # made again: its first message has queue offset 0
    assert broker.store.put_messages(TOPIC, 0, [b"new"], [b""]).queue_offset == 0
    assert [(m.queue_offset, m.body) for m in broker.messages(TOPIC)] == [(0, b"new")]


def test_progress_copied_ahead_of_the_queues_is_lowered_at_load(broker: Broker, caplog):
    """A slave restarted as master (or promoted) starts with the progress offsets it copied from its master, ahead
    of the log it replicated (asynchronous replication lost the tail): lowered to the queues' ends, a transaction
    begun after the failover is read and can be committed (taken as they were, its half message took an offset
    below them and its commit was refused as "ended long ago": the message was lost)."""
    tx = broker.send_half(b"replicated")
    assert broker.end(tx, transaction_pb2.TRANSACTION_COMMIT).code == ResponseCode.SUCCESS
    wait_until(lambda: broker.progress_reaches((1, 1)), what="progress past the replicated transaction")
    for topic in (HALF_TOPIC, OP_HALF_TOPIC):  # the master's progress, 3 transactions this log never got
        broker.offsets.commit_offset(SYSTEM_GROUP, topic, 0, 4)
    with caplog.at_level(logging.WARNING, logger="broker.transaction.check_service"):
        broker.restart()
    assert (broker.table.half_progress, broker.table.op_progress) == (1, 1)
    assert sorted(r.getMessage() for r in caplog.records if "transaction_progress_lowered" in r.getMessage()) == [
        f"transaction_progress_lowered topic={topic} from=4 to=1 reason=ahead_of_queue_at_start"
        for topic in sorted((HALF_TOPIC, OP_HALF_TOPIC))]
    after = broker.send_half(b"after failover")
    assert after.queue_offset == 1
    assert broker.end(after, transaction_pb2.TRANSACTION_COMMIT).code == ResponseCode.SUCCESS
    assert [m.body for m in broker.messages(TOPIC)] == [b"replicated", b"after failover"]
    # the lowered progress is committed, then moves past the new transaction as usual
    wait_until(lambda: broker.progress_reaches((2, 2)), what="progress past the transaction after the failover")


def test_queues_found_ending_below_the_reading_offsets_are_read_from_their_ends(broker: Broker, caplog):
    """The table reads past both queues' ends (as if they were cut under it): each pass used to log it and read
    nothing, and a new half message below the progress was refused as "ended long ago". Lowered once, logged
    once, and what comes next is read."""
    tx = broker.send_half(b"first")
    assert broker.end(tx, transaction_pb2.TRANSACTION_COMMIT).code == ResponseCode.SUCCESS
    assert broker.store.wait_dispatched(broker.store.commit_log.max_offset())
    broker.pass_at(broker.now)
    broker.table.start_at(5, 5)
    with caplog.at_level(logging.WARNING, logger="broker.transaction.check_service"):
        broker.pass_at(broker.now)
        broker.pass_at(broker.now)
    assert (broker.table.half_read, broker.table.op_read) == (1, 1)
    assert sorted(r.getMessage() for r in caplog.records if "transaction_progress_lowered" in r.getMessage()) == [
        f"transaction_progress_lowered topic={topic} from=5 to=1 reason=queue_ends_below"
        for topic in sorted((HALF_TOPIC, OP_HALF_TOPIC))]
    after = broker.send_half(b"second")
    assert broker.end(after, transaction_pb2.TRANSACTION_COMMIT).code == ResponseCode.SUCCESS
    broker.pass_at(broker.now)
    wait_until(lambda: broker.progress_reaches((2, 2)), what="progress past the transaction read again")

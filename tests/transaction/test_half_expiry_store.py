"""The hold on commitlog expiry below half messages still needed, over a real message store in this process (passes
of the check service and of the expiry run by hand, segments "expired" as soon as written): it holds at the lowest
pending half message and at where the check service's reading stands, moves when they end, holds nothing where
the check service does not run, and yields to a disk past diskSpaceCleanForciblyRatio; the half messages then lost
are said and counted, read or not."""

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.store.config import MessageStoreConfig
from broker.store.disk_usage_watcher import DiskUsage
from broker.store.message_store import MessageStore
from broker.transaction.check_service import TransactionalMessageCheckService
from broker.transaction.end_transaction_processor import EndTransactionProcessor
from broker.transaction.half_message import half_properties
from broker.transaction.half_message_hold import HalfMessageHold
from broker.transaction.transaction_table import TransactionTable
from common.message_properties import encode_properties
from common.refusal import Refusal
from common.response_code import ResponseCode
from common.topic_config import TopicConfig
from common.transaction_id import TransactionId
from common.transaction_topic import HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from proto import transaction_pb2
from tests.transaction.test_check_service import BROKER, CHECK_MAX, INTERVAL, TIMEOUT, TOPIC, FakeProducers

SEGMENT = 64 * 1024


class Broker:
    def __init__(self, root: Path) -> None:
        self.now = int(time.time() * 1000)
        self.producers = FakeProducers()
        self.store = MessageStore(MessageStoreConfig(
            str(root), mapped_file_size_commit_log=SEGMENT, flush_interval_commit_log_ms=10,
            destroy_mapped_file_grace_ms=0, file_reserved_time_hours=0))  # every segment "expired" at once
        self.table = TransactionTable(TIMEOUT, INTERVAL, CHECK_MAX)
        self.store.register_dispatcher(HalfMessageHold(self.table, self.store.commit_log.max_offset))
        self.topics = TopicConfigManager(root / "config")
        self.offsets = ConsumerOffsetManager(root / "config")
        self.topics.load()
        self.offsets.load()
        self.store.start()
        self.topics.update(TopicConfig(TOPIC, 1, 1))
        self.processor = EndTransactionProcessor(BROKER, self.store, self.topics, self.table)
        self.service = TransactionalMessageCheckService(
            table=self.table, store=self.store, offsets=self.offsets, topics=self.topics,
            producers=self.producers, broker_name=BROKER,  # type: ignore[arg-type]
            on_topics_changed=lambda: None, clock_ms=lambda: self.now)

    def send_half(self, body: bytes) -> TransactionId:
        props = encode_properties({"UNIQ_KEY": body.hex(), "TRAN_MSG": "true", "PGROUP": "pg"})
        half_props = half_properties([props], TOPIC, 0, static=False)
        assert half_props is not None
        result = self.store.put_messages(HALF_TOPIC, 0, [body], half_props)
        assert result.ok and result.append is not None and self.store.wait_dispatched(result.append.end_offset)
        return TransactionId(BROKER, result.physical_offset, result.queue_offset)

    def fill(self, segments: int) -> None:
        for _ in range(segments * 16 + 1):
            assert self.store.put_messages("Filler", 0, [b"f" * 4000], [b""]).ok
        assert self.store.wait_dispatched(self.store.commit_log.max_offset())

    def expire(self, disk_percent: float = 50) -> int:
        """Expiry passes (on a disk that full) until one deletes nothing; the commitlog's min offset then."""
        clean = self.store.clean_service
        clean.disk_watcher.check = lambda: DiskUsage(Path("/"), int(disk_percent * 10), 1000)  # type: ignore
        while clean.run_once(ignore_delete_when=True):
            pass
        return self.store.commit_log.min_offset()

    def end(self, tx: TransactionId, resolution: int) -> transaction_pb2.EndTransactionResponse:
        return self.processor.end(transaction_pb2.EndTransactionRequest(
            producer_group="pg", transaction_id=tx.encode(), resolution=resolution))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "store")
    yield b
    b.store.shutdown()


def test_no_hold_where_the_check_service_does_not_run(broker: Broker):
    broker.send_half(b"on-a-slave")
    broker.fill(3)
    assert broker.expire() > 0 and broker.table.read_through is None  # a slave's commitlog expires as before


def test_held_at_unread_and_pending_half_messages_until_they_end(broker: Broker):
    assert broker.service._load()
    broker.fill(2)
    broker.service.check_once()  # reading stands past the filler
    first = broker.send_half(b"first")
    broker.fill(1)
    second = broker.send_half(b"second")  # in a later segment
    broker.fill(3)
    # Not read yet: held where reading stood (before the first half message).
    assert 0 < broker.expire() <= first.commit_log_offset
    broker.service.check_once()  # read: both pending
    assert broker.table.pending == 2
    assert 0 < broker.expire() <= first.commit_log_offset
    assert broker.end(first, transaction_pb2.TRANSACTION_COMMIT).code == ResponseCode.SUCCESS
    assert first.commit_log_offset < broker.expire() <= second.commit_log_offset
    assert broker.end(second, transaction_pb2.TRANSACTION_ROLLBACK).code == ResponseCode.SUCCESS
    broker.fill(1)
    broker.service.check_once()
    assert broker.expire() > second.commit_log_offset
    assert broker.service.halves_lost == 0


def test_forced_cleanup_passes_the_hold_and_unread_losses_are_said(broker: Broker, caplog):
    assert broker.service._load()
    broker.fill(1)
    lost = [broker.send_half(b"lost-%d" % i) for i in range(2)]
    ended = broker.send_half(b"rolled-back")
    # ended before the service read it: not lost
    assert broker.end(ended, transaction_pb2.TRANSACTION_ROLLBACK).code == ResponseCode.SUCCESS
    broker.fill(3)
    assert broker.expire() <= lost[0].commit_log_offset
    assert broker.expire(disk_percent=87) > ended.commit_log_offset  # diskSpaceCleanForciblyRatio=85 passed
    with caplog.at_level(logging.ERROR, logger="broker.transaction.check_service"):
        broker.service.check_once()
    assert broker.service.halves_lost == 2 and broker.table.pending == 0  # the rolled back one is not lost
    [record] = [r for r in caplog.records if "transaction_half_lost" in r.getMessage()]
    assert record.levelno == logging.ERROR and "half_queue_offsets=0-2 count=2" in record.getMessage()
    with pytest.raises(Refusal, match="lost to commitlog expiry"):
        broker.end(lost[0], transaction_pb2.TRANSACTION_COMMIT)


def test_a_pending_half_message_lost_to_forced_cleanup_is_ended_without_a_copy(broker: Broker, caplog):
    assert broker.service._load()
    broker.fill(1)
    tx = broker.send_half(b"pending")
    broker.fill(3)
    broker.service.check_once()
    assert broker.table.pending == 1
    assert broker.expire(disk_percent=87) > tx.commit_log_offset
    with caplog.at_level(logging.WARNING, logger="broker.transaction.check_service"):
        broker.now = int(time.time() * 1000) + TIMEOUT + 1
        broker.service.check_once()  # due for its first check: gone
    assert broker.producers.checks == [] and broker.table.pending == 0
    assert (broker.service.halves_lost, broker.service.discarded) == (1, 0)
    [record] = [r for r in caplog.records if "transaction_" in r.getMessage()]
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith(f"transaction_half_lost tx={tx.encode()} ")
    assert TRANS_CHECK_MAX_TIME_TOPIC not in record.getMessage()
    assert broker.topics.select(TRANS_CHECK_MAX_TIME_TOPIC) is None  # no copy was made
    with pytest.raises(Refusal, match="lost to commitlog expiry"):
        broker.end(tx, transaction_pb2.TRANSACTION_COMMIT)

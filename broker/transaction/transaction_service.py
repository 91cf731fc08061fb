"""The broker's transactions, wired: the table both sides share, the producers' sessions, EndTransaction's
processor (built with the other processors), the check service (a master's: started with the timer's delivery,
stopped before the store shuts down) and the hold on the commitlog's expiry below half messages still needed
(registered with the store before it starts)."""

from collections.abc import Callable
from dataclasses import dataclass

from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.store.message_store import MessageStore
from broker.transaction.check_service import TransactionalMessageCheckService
from broker.transaction.end_transaction_processor import EndTransactionProcessor
from broker.transaction.half_message_hold import HalfMessageHold
from broker.transaction.producer_manager import ProducerManager
from broker.transaction.transaction_table import TransactionTable
from common.transaction_topic import HALF_QUEUE_ID, HALF_TOPIC


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """broker.conf's transactionTimeOut, transactionCheckInterval, transactionCheckMax (ms, ms, count)."""

    timeout_ms: int = 6000
    check_interval_ms: int = 30_000
    check_max: int = 15


class TransactionService:
    def __init__(self, broker_name: str, config: TransactionConfig, producer_expiry_ms: int) -> None:
        self.broker_name = broker_name
        self.table = TransactionTable(config.timeout_ms, config.check_interval_ms, config.check_max)
        self.producers = ProducerManager(producer_expiry_ms)
        self.end_processor: EndTransactionProcessor | None = None
        self.check_service: TransactionalMessageCheckService | None = None

    def processor(self, store: MessageStore, topics: TopicConfigManager,
                  deleted_at: Callable[[str], int] = lambda _topic: -1,
                  not_master: Callable[[], str | None] = lambda: None) -> EndTransactionProcessor:
        """``deleted_at(topic)``: the commitlog offset of the topic's latest deletion (-1: none); ``not_master()``:
        why this broker does not end transactions now (a replica that is not its group's master), or None."""
        self.end_processor = EndTransactionProcessor(self.broker_name, store, topics, self.table, deleted_at,
                                                     not_master)
        return self.end_processor

    def half_hold(self, store: MessageStore) -> HalfMessageHold:
        """The store's hold on expiry below the half messages still needed: register it before the store starts."""
        return HalfMessageHold(self.table, store.commit_log.max_offset)

    def start(self, store: MessageStore, offsets: ConsumerOffsetManager, topics: TopicConfigManager,
              on_topics_changed: Callable[[], None]) -> None:
        """After ``store.start()``, on a master: load, then check. Ends are taken once loaded."""
        if self.check_service is not None:
            return
        self.check_service = TransactionalMessageCheckService(
            table=self.table, store=store, offsets=offsets, topics=topics, producers=self.producers,
            broker_name=self.broker_name, on_topics_changed=on_topics_changed)
        self.check_service.start()

    def shutdown(self) -> None:
        """Before the message store shuts down: no put after it; the progress as of the last pass stays."""
        if self.check_service is not None:
            self.check_service.shutdown()

    def runtime_info(self) -> dict[str, str]:
        """What ``GetBrokerRuntimeInfo`` shows of transactions."""
        end, check, table = self.end_processor, self.check_service, self.table
        pending = table.pending if check is None else table.pending_counting_unread(
            check.store.max_offset(HALF_TOPIC, HALF_QUEUE_ID))  # (not only what the last pass read)
        return {
            "transactionHalfPending": str(pending),
            "transactionCommitted": str((end.committed if end is not None else 0)
                                        + (check.commits_finished if check is not None else 0)),
            "transactionRolledBack": str(end.rolled_back if end is not None else 0),
            "transactionChecks": str(check.checks_sent if check is not None else 0),
            "transactionChecksUnsent": str(check.checks_unsent if check is not None else 0),
            "transactionDiscarded": str(check.discarded if check is not None else 0),
            "transactionHalfLost": str(check.halves_lost if check is not None else 0),
            "transactionHalfProgress": str(table.half_progress),
            "transactionOpProgress": str(table.op_progress),
            # Where the check service has read the half queue to: its lag behind the queue's end
            "transactionHalfRead": str(table.half_read),
        }

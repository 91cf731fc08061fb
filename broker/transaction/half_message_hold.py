"""The commitlog is kept from the lowest half message a transaction may still need: one whose transaction has not
ended (a commit reads it to store the real message, a check to show it to the producer), or one the check service
has not read yet. Without this a pending half message whose segment passed ``fileReservedTime`` was gone: its
commit was refused and the checker never asked.

A dispatcher that keeps the commitlog, as the KV store (``MessageStore._replay_start``), applying nothing: its
checkpoint is :meth:`TransactionTable.hold_offset`. The hold is bounded: a transaction ends within
``transactionTimeOut`` + ``transactionCheckMax`` x ``transactionCheckInterval`` (its discard), and reading is never
more than a pass behind. Where the check service does not run (a slave; recovery, before it loaded) it holds
nothing: its checkpoint is then the commitlog's end, which moves neither the replay start nor expiry. It yields to
a disk past diskSpaceCleanForciblyRatio, as the hold of a disabled KV store does (``kv_disabled_hold.py``): the
half messages it passes are lost, said and counted by the check service (``transaction_half_lost``,
``transactionHalfLost``)."""

from collections.abc import Callable

from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.transaction.transaction_table import TransactionTable


class HalfMessageHold(CommitLogDispatcher):
    name = "transaction-halves"
    keeps_commit_log = True
    holds_under_disk_pressure = False  # a full disk would stop every write, transactions' own ends included

    def __init__(self, table: TransactionTable, commit_log_end: Callable[[], int]) -> None:
        self._table = table
        self._commit_log_end = commit_log_end

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        pass  # the check service reads the half queue itself

    def checkpoint(self) -> int:
        held = self._table.hold_offset()
        return self._commit_log_end() if held is None else held

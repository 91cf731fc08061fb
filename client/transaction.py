"""Transactional messages, the producer's side (upstream's model).

```python
def checker(msg: MessageExt) -> TransactionResolution:  # the broker asks about a transaction nobody ended
    return TransactionResolution.COMMIT if order_saved(msg.keys[0]) else TransactionResolution.ROLLBACK

with Producer(namesrv, group="orders", transaction_checker=checker) as producer:
    tx = producer.begin_transaction()
    tx.send(Message("Orders", b"...", keys=["order-1"]))   # a half message: stored, invisible to consumers
    save_order()                                              # the local transaction
    tx.commit()                                               # or tx.rollback()
```

``tx.send`` stores a half message on a broker; ``commit`` makes it an ordinary message of its topic, ``rollback``
drops it. When neither comes (the producer died, an end was lost), the broker asks a producer of the group, through
``transaction_checker``, ``transactionTimeOut`` after the send and then every ``transactionCheckInterval``, up to
``transactionCheckMax`` times. A transaction may hold several messages (each its own half message, all ended
together); ``with producer.begin_transaction() as tx:`` commits at the end of the block, or rolls back if it raises.
A ``commit`` (``rollback``) that failed for some messages may be called again: it retries those.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING

import grpc

from client.errors import MQClientError
from client.grpc_errors import business_error, rpc_error
from client.results import SendResult
from common.message import Message, MessageExt
from common.refusal import says_not_master
from common.response_code import NOT_REPLICATED_CODES, ResponseCode
from common.transaction_id import TransactionId
from common.transaction_topic import PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_PREPARED
from proto import transaction_pb2, transaction_pb2_grpc

if TYPE_CHECKING:
    from client.client_instance import ClientInstance
    from client.producer import Producer

log = logging.getLogger(__name__)

END_ATTEMPTS = 3
END_RETRY_PAUSE_S = 0.3
RETRYABLE_STATUS = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


class TransactionResolution(Enum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"  # not decided yet: the broker asks again later


TransactionChecker = Callable[[MessageExt], TransactionResolution]
RESOLUTIONS = {TransactionResolution.COMMIT: transaction_pb2.TRANSACTION_COMMIT,
               TransactionResolution.ROLLBACK: transaction_pb2.TRANSACTION_ROLLBACK}


@dataclass(frozen=True, slots=True)
class HalfMessage:
    """A half message this producer sent: its topic (its broker's route) and its transaction id."""

    topic: str
    transaction_id: TransactionId
    msg_id: str


def end_transaction(client: "ClientInstance", group: str, half: HalfMessage, resolution: TransactionResolution, *,
                    timeout_s: float, from_check: bool = False, client_id: str = "", addr: str | None = None) -> None:
    """EndTransaction at the master of the half message's broker (``addr`` when given: a check's broker, asked
    first), retried while the broker is unreachable, busy (it may be restarting) or not its group's master any more,
    at the master the route names (a check's answer went to the broker that asked, every try: after a failover the
    old master never took it, and the new one discarded transactions the checker committed). Raises
    MQClientError."""
    request = transaction_pb2.EndTransactionRequest(
        producer_group=group, transaction_id=half.transaction_id.encode(), msg_id=half.msg_id,
        resolution=RESOLUTIONS[resolution], from_check=from_check, client_id=client_id)
    what = f"{resolution.value.lower()} of transaction {half.transaction_id}"
    error: MQClientError | None = None
    for attempt in range(END_ATTEMPTS):
        if attempt:
            time.sleep(END_RETRY_PAUSE_S)
            client.invalidate_route(half.topic)
        target = addr if addr and not attempt else client.master_addr(half.topic, half.transaction_id.broker_name,
                                                                       for_publish=True)
        try:
            response = client.stub(transaction_pb2_grpc.TransactionServiceStub, target).EndTransaction(
                request, timeout=timeout_s)
        except grpc.RpcError as exc:
            error = rpc_error(what, target, exc)
            if exc.code() not in RETRYABLE_STATUS:
                raise error from None
            client.report_failure(target, exc.code())
            continue
        client.report_answer(target)
        if response.code == ResponseCode.FLUSH_DISK_TIMEOUT:
            log.warning("transaction_end_flush_timeout tx=%s: stored, but not yet on disk", half.transaction_id)
            return
        if response.code in NOT_REPLICATED_CODES:
            # Ended on the master, its slave not confirming yet (a SYNC_MASTER's): raised, an application undid
            # a commit whose message is delivered all the same. Should the master fail before its slave has the
            # end, the new master checks the transaction again.
            log.warning("transaction_end_not_replicated tx=%s resolution=%s: ended on the master, not yet on its "
                        "slave (%s)", half.transaction_id, resolution.value, response.remark)
            return
        if response.code == ResponseCode.SUCCESS:
            return
        error = business_error(what, target, response.code, response.remark)
        if response.code not in (ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE) and not (
                response.code == ResponseCode.NO_PERMISSION and says_not_master(response.remark)):
            raise error
    assert error is not None
    raise error


class Transaction:
    """One transaction of a producer: its half messages, ended together by :meth:`commit` or :meth:`rollback`."""

    def __init__(self, producer: "Producer") -> None:
        self._producer = producer
        self._halves: list[HalfMessage] = []
        self._unended: list[HalfMessage] = []  # those no end succeeded for yet
        self._ended: TransactionResolution | None = None  # the resolution decided (some ends may have failed)

    @property
    def transaction_ids(self) -> list[str]:
        return [h.transaction_id.encode() for h in self._halves]

    def send(self, msg: Message) -> SendResult:
        """Store ``msg`` as a half message: consumers see it only once the transaction commits. Its
        ``SendResult.queue_offset`` is -1 (it has no place in its queue until then)."""
        if self._ended is not None:
            raise MQClientError(f"transaction {self.transaction_ids} already ended ({self._ended.value})")
        if not isinstance(msg, Message):
            raise MQClientError(f"a send takes a Message, not {type(msg).__name__}")
        if msg.delay_level or msg.deliver_at_ms:
            raise MQClientError("a transactional message cannot be delayed (delay_level / deliver_at_ms): its commit "
                                "delivers it")
        group = self._producer.group
        half = replace(msg, properties={**msg.properties, PROPERTY_TRANSACTION_PREPARED: "true",
                                        PROPERTY_PRODUCER_GROUP: group})
        result = self._producer._send_half(half)
        if not result.physical_offsets:
            raise MQClientError(f"the half message of topic {msg.topic} was stored without an offset")
        tx = TransactionId(result.queue.broker_name, result.physical_offsets[0], result.queue_offset)
        self._halves.append(HalfMessage(msg.topic, tx, result.msg_id))
        self._unended.append(self._halves[-1])
        log.debug("transaction_half_sent tx=%s topic=%s msg_id=%s", tx, msg.topic, result.msg_id)
        return replace(result, queue_offset=-1)

    def commit(self) -> None:
        self._end(TransactionResolution.COMMIT)

    def rollback(self) -> None:
        self._end(TransactionResolution.ROLLBACK)

    def _end(self, resolution: TransactionResolution) -> None:
        if self._ended is not None and self._ended is not resolution:
            raise MQClientError(f"transaction {self.transaction_ids} already ended ({self._ended.value})")
        # Decided even if some ends fail: some may have ended, so the other resolution is refused from now on.
        self._ended = resolution
        producer = self._producer
        failures: list[str] = []
        unended: list[HalfMessage] = []
        for half in self._unended:  # a repeated call retries only those that failed
            try:
                end_transaction(producer.client, producer.group, half, resolution, timeout_s=producer.send_timeout_s)
            except MQClientError as exc:
                failures.append(str(exc))
                unended.append(half)
        self._unended = unended
        if failures:
            # The half messages not ended stay on their brokers, which ask transaction_checker about them.
            raise MQClientError(f"{resolution.value.lower()} failed for {len(failures)} of {len(self._halves)} "
                                f"messages (the broker will check them, or call {resolution.value.lower()} again): "
                                f"{'; '.join(failures)}")

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._ended is not None:
            return
        if exc_type is None:
            self.commit()
        else:
            try:
                self.rollback()
            except MQClientError as error:  # the block's own exception is what the caller needs to see
                log.warning("transaction_rollback_failed error=%s", error)

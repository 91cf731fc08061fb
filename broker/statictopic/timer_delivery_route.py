"""Delayed messages of a static topic whose logic queue moved while they waited (timer x static topics).

A delayed message waits in the timer of the broker that led its logic queue when it was sent, recorded with that
broker's physical queue. Once the logic queue has moved, a put into that physical queue would land behind the
closed link of the chain, where the logic queue's consumers, already reading the new leader, never look: the
message is sent to the leader now instead, addressed by logic queue as a client sends (or, when this broker leads
the logic queue again on another physical queue, put there). The message's logic queue is recorded when it is
sent (REAL_LOGIC_QID; a timer stored before that is looked up by its physical queue in this broker's chains), and
its leader is this broker's chain's last link, or, once this broker dropped the chain (it no longer leads it),
what the name servers' route says. A forward the leader does not take (it is down, or the queue is moving again)
keeps the messages pending here, tried again a second later."""

import grpc

from broker.out.peer_brokers import PeerBrokerError, PeerBrokers
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.timer.delivery_route import LEADER_BY_ROUTE, DeliveryTarget, Forwarded
from common.response_code import ResponseCode, code_name
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from proto import broker_pb2

STORED = (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT)  # the leader has them (as a send answers)
MAX_FORWARD_MESSAGES = 1024


class StaticTopicDeliveryRoute:
    def __init__(self, broker_name: str, mapping_manager: TopicQueueMappingManager, peers: PeerBrokers,
                 max_forward_bytes: int) -> None:
        self.broker_name = broker_name
        self.mapping_manager = mapping_manager
        self.peers = peers
        self.max_forward_bytes = max_forward_bytes  # a send's limit (maxMessageSize): each forward stays below it

    def target(self, topic: str, queue_id: int, logic_queue_id: int | None) -> DeliveryTarget:
        detail = self.mapping_manager.get(topic)
        logic = logic_queue_id
        if logic is None and detail is not None:
            logic = _logic_queue_of(detail, queue_id)
        if logic is None:  # a normal topic (or no link of a chain here): the queue itself
            return DeliveryTarget(queue_id)
        leader = detail.leader(logic) if detail is not None else None
        if leader is None:  # this broker dropped the chain: it led the queue once, no longer
            return DeliveryTarget(logic, LEADER_BY_ROUTE)
        if leader.bname == self.broker_name:
            return DeliveryTarget(leader.queue_id)
        return DeliveryTarget(logic, leader.bname)

    def forward(self, target: DeliveryTarget, topic: str, records: list[bytes]) -> Forwarded:
        """A chunk the leader refuses for good (a body over its maxMessageSize) is sent again a record at a time:
        only those it refuses alone are dropped (the chunk was held and retried every second, for ever)."""
        assert target.broker is not None, "a forward names the leader"
        taken = dropped = 0
        broker, why = target.broker, ""
        try:
            broker = broker or self.peers.logic_queue_leader(topic, target.queue_id)
            for chunk in _chunks(records, self.max_forward_bytes):
                error = self._send(broker, topic, target.queue_id, chunk)
                if error is None:
                    taken += len(chunk)
                    continue
                if not isinstance(error, _RefusedForGood):
                    return Forwarded(taken, broker, error, dropped, why)
                for record in chunk:  # each alone: only those refused alone are dropped
                    alone = error if len(chunk) == 1 else self._send(broker, topic, target.queue_id, [record])
                    if alone is not None and not isinstance(alone, _RefusedForGood):
                        return Forwarded(taken, broker, alone, dropped, why)
                    taken += 1
                    if alone is not None:
                        dropped, why = dropped + 1, alone
        except PeerBrokerError as exc:
            return Forwarded(taken, broker, exc.remark, dropped, why)
        return Forwarded(taken, broker, None, dropped, why)

    def _send(self, broker: str, topic: str, logic_queue_id: int, chunk: list[bytes]) -> str | None:
        """None when the leader stored the records; else why not (a ``_RefusedForGood`` when it never will)."""
        request = broker_pb2.SendMessageRequest(topic=topic, queue_id=logic_queue_id, addressing=broker_pb2.LOGIC,
                                                records=b"".join(chunk))
        try:
            response = self.peers.call(broker, "SendMessage", request)
        except PeerBrokerError as exc:
            if exc.status is grpc.StatusCode.INVALID_ARGUMENT:  # its limits: sent again, it refuses again
                return _RefusedForGood(exc.remark)
            raise
        if response.code in STORED:
            return None
        return f"broker {broker} answered {code_name(response.code)}: {response.remark}"


class _RefusedForGood(str):
    """Why a leader refused records it will never take (a body over its maxMessageSize)."""


def _logic_queue_of(detail: TopicQueueMappingDetail, queue_id: int) -> int | None:
    """The logic queue whose chain holds physical queue ``queue_id`` of this broker (the newest link, should a
    queue have been reused)."""
    found: tuple[int, int] | None = None  # (gen, logic queue)
    for logic, items in detail.hosted_queues.items():
        for item in items:
            if item.bname == detail.bname and item.queue_id == queue_id and (found is None or item.gen > found[0]):
                found = (item.gen, logic)
    return found[1] if found is not None else None


def _chunks(records: list[bytes], max_bytes: int) -> list[list[bytes]]:
    """Consecutive runs of at most MAX_FORWARD_MESSAGES records and ``max_bytes`` bytes (at least one each)."""
    chunks: list[list[bytes]] = []
    size = 0
    for record in records:
        if not chunks or len(chunks[-1]) == MAX_FORWARD_MESSAGES or size + len(record) > max_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(record)
        size += len(record)
    return chunks

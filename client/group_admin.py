"""Administration of consumer groups: their members as the brokers see them, and offsets reset by time."""

from dataclasses import dataclass

import grpc

from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.grpc_errors import business_error, rpc_error
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from proto import consumer_pb2, consumer_pb2_grpc

MODEL_NAMES = {consumer_pb2.CLUSTERING: "CLUSTERING", consumer_pb2.BROADCASTING: "BROADCASTING"}
TYPE_NAMES = {consumer_pb2.CONSUME_PASSIVELY: "PUSH", consumer_pb2.CONSUME_ACTIVELY: "PULL"}


@dataclass(frozen=True, slots=True)
class GroupMember:
    client_id: str
    addr: str
    consume_type: str
    message_model: str
    orderly: bool
    subscriptions: tuple[tuple[str, str], ...]
    queues: tuple[MessageQueue, ...]
    last_heartbeat_ms: int


class GroupAdmin:
    def __init__(self, client: ClientInstance) -> None:
        self.client = client

    def _stub(self, addr: str) -> consumer_pb2_grpc.ConsumerServiceStub:
        return self.client.stub(consumer_pb2_grpc.ConsumerServiceStub, addr)

    def connection(self, group: str, broker_addrs: list[str]) -> list[GroupMember]:
        """The group's members over all brokers (a member's queues are what it last reported to each)."""
        merged: dict[str, GroupMember] = {}
        for addr in broker_addrs:
            try:
                answer = self._stub(addr).GetConsumerConnection(consumer_pb2.ConsumerListRequest(group=group),
                                                                timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                raise rpc_error(f"members of {group}", addr, exc) from None
            for m in answer.members:
                queues = {MessageQueue(q.topic, q.broker_name, q.queue_id) for q in m.queues}
                old = merged.get(m.client_id)
                if old is not None:
                    queues |= set(old.queues)
                merged[m.client_id] = GroupMember(
                    m.client_id, m.addr, TYPE_NAMES.get(m.consume_type, "?"), MODEL_NAMES.get(m.message_model, "?"),
                    m.orderly, tuple((s.topic, s.expression) for s in m.subscriptions), tuple(sorted(queues)),
                    max(m.last_heartbeat_ms, old.last_heartbeat_ms if old else 0))
        return [merged[cid] for cid in sorted(merged)]

    def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int,
                             broker_addrs: list[str]) -> dict[MessageQueue, int]:
        """Set the group's committed offsets on every queue of ``topic`` to the first message stored at or after
        ``timestamp_ms``; running members restart those queues there."""
        offsets: dict[MessageQueue, int] = {}
        request = consumer_pb2.ResetOffsetRequest(group=group, topic=topic, timestamp=timestamp_ms)
        for addr in broker_addrs:
            try:
                answer = self._stub(addr).ResetOffsetByTime(request, timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                raise rpc_error(f"reset offsets of {group} on {topic}", addr, exc) from None
            if answer.code != ResponseCode.SUCCESS:
                raise business_error(f"reset offsets of {group} on {topic}", addr, answer.code, answer.remark)
            for q in answer.offsets:
                offsets[MessageQueue(q.queue.topic, q.queue.broker_name, q.queue.queue_id)] = q.offset
        if not offsets:
            raise MQClientError(f"topic {topic} has no queues to reset")
        return offsets

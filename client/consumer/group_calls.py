"""The consumer-group calls a push consumer makes to brokers: member lists, orderly leases, sending a failed
message back."""

import contextlib
import logging

import grpc

from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.grpc_errors import business_error, rpc_error
from client.static_route import is_logic_queue
from common.group_topics import retry_topic
from common.message import MessageExt
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from proto import consumer_pb2, consumer_pb2_grpc

log = logging.getLogger(__name__)


class SendBackRefused(MQClientError):
    """A broker refused the sent-back message for good (INVALID_ARGUMENT: it breaks a rule of the retry or the
    dead-letter write, as a body over a maxMessageSize lowered since it was stored): sending it again, here or
    to another broker, cannot succeed."""


def queue_ref(mq: MessageQueue) -> consumer_pb2.QueueRef:
    return consumer_pb2.QueueRef(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)


class GroupCalls:
    def __init__(self, client: ClientInstance, group: str, client_id: str) -> None:
        self.client = client
        self.group = group
        self.client_id = client_id

    def _stub(self, addr: str) -> consumer_pb2_grpc.ConsumerServiceStub:
        return self.client.stub(consumer_pb2_grpc.ConsumerServiceStub, addr)

    def broker_addrs(self, topic: str, refresh: bool = False) -> list[str]:
        """The masters serving ``topic``, sorted (every member asks the same one first)."""
        route = self.client.route(topic, refresh=refresh)
        return sorted(b.broker_addrs[0] for b in route.broker_datas if 0 in b.broker_addrs)

    def session_addrs(self, topic: str, refresh: bool = False) -> list[str]:
        """Every replica of the groups serving ``topic``, masters and slaves (upstream's consumers heartbeat to
        both): a slave that serves a group's reads while its master is down then knows the group's members."""
        route = self.client.route(topic, refresh=refresh)
        return sorted(addr for b in route.broker_datas for addr in b.broker_addrs.values())

    def member_list_addrs(self, topic: str) -> list[str]:
        """Whom to ask for the group's members: the masters (sorted: every member asks the same one first), then
        the slaves, which know them too (``session_addrs``); addresses marked down last."""
        route = self.client.route(topic)
        ranked = sorted((broker_id != 0, addr) for b in route.broker_datas for broker_id, addr in
                        b.broker_addrs.items())
        addrs = [addr for _, addr in ranked]
        is_down = self.client.down.is_down
        return [a for a in addrs if not is_down(a)] + [a for a in addrs if is_down(a)]

    def consumer_list(self, topic: str) -> list[str]:
        """The group's members as the first reachable broker of ``topic`` knows them."""
        last: grpc.RpcError | None = None
        addrs = self.member_list_addrs(topic)
        for addr in addrs:
            try:
                return list(self._stub(addr).GetConsumerList(
                    consumer_pb2.ConsumerListRequest(group=self.group), timeout=self.client.rpc_timeout_s).client_ids)
            except grpc.RpcError as exc:
                self.client.report_failure(addr, exc.code())  # asked last next time, while it stays down
                last = exc
        if last is None:
            raise MQClientError(f"no broker serves topic {topic}")
        raise rpc_error(f"member list of {self.group}", ";".join(addrs), last)

    def lock_addr(self, mq: MessageQueue) -> str:
        if is_logic_queue(mq):
            return self.client.leader_addr(mq.topic, mq.queue_id)
        return self.client.master_addr(mq.topic, mq.broker_name)

    def lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """Take or renew the leases on ``mqs`` (each at the broker that serves it); returns those held."""
        by_addr: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            try:
                by_addr.setdefault(self.lock_addr(mq), []).append(mq)
            except MQClientError as exc:
                log.warning("queue_lock_skipped queue=%s error=%s", mq, exc)
        held: set[MessageQueue] = set()
        for addr, queues in by_addr.items():
            request = consumer_pb2.LockBatchRequest(group=self.group, client_id=self.client_id,
                                                    queues=[queue_ref(mq) for mq in queues])
            try:
                response = self._stub(addr).LockBatchMQ(request, timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                log.warning("queue_lock_failed broker=%s status=%s", addr, exc.code().name)
                continue
            held.update(MessageQueue(q.topic, q.broker_name, q.queue_id) for q in response.locked)
        return held

    def unlock(self, mq: MessageQueue) -> None:
        request = consumer_pb2.LockBatchRequest(group=self.group, client_id=self.client_id, queues=[queue_ref(mq)])
        try:
            self._stub(self.lock_addr(mq)).UnlockBatchMQ(request, timeout=self.client.rpc_timeout_s)
        except (grpc.RpcError, MQClientError) as exc:  # the lease ends by itself
            log.warning("queue_unlock_failed queue=%s error=%s", mq, exc)

    def send_back(self, msg: MessageExt, original_topic: str, delay_level: int, max_reconsume_times: int) -> str:
        """Hand a failed message to the broker that stored it (else any broker of the retry topic); returns
        where it went (the retry or dead-letter topic). Raises MQClientError when no broker took it, and
        :class:`SendBackRefused` when one refused it for good."""
        request = consumer_pb2.SendMsgBackRequest(
            group=self.group, topic=original_topic, body=msg.body, properties=msg.raw_properties,
            born_timestamp=msg.born_timestamp, born_host=msg.born_host, flag=msg.flag, msg_id=msg.msg_id,
            delay_level=delay_level, max_reconsume_times=max_reconsume_times)
        addrs = [msg.store_host]
        with contextlib.suppress(MQClientError):  # no route for the retry topic yet: the message's broker only
            addrs += [a for a in self.broker_addrs(retry_topic(self.group)) if a != msg.store_host]
        failure = ""
        for addr in addrs:
            try:
                response = self._stub(addr).ConsumerSendMsgBack(request, timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                failure = str(rpc_error(f"send back {msg.msg_id}", addr, exc))
                if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:  # every broker checks the same rules
                    raise SendBackRefused(failure) from None
                continue
            if response.code == ResponseCode.SUCCESS:
                return response.topic
            failure = str(business_error(f"send back {msg.msg_id}", addr, response.code, response.remark))
        raise MQClientError(failure or f"no broker to send {msg.msg_id} back to")

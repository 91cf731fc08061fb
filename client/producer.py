"""Producer: round-robin over the topic's writable queues; on failure, retry on another broker's queue;
a ``sharding_key`` always picks the same queue."""

import logging
import os
import socket
import threading
import time
import zlib
from collections.abc import Sequence

import grpc

from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.grpc_errors import business_error, rpc_error
from client.message_encoding import new_unique_key, wire_properties
from client.results import SendResult
from common.message import Message
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from common.topic_validator import InvalidTopicError, validate_topic
from proto import broker_pb2

log = logging.getLogger(__name__)

# Outcomes worth another broker: the broker is gone, overloaded or not serving.
RETRYABLE_STATUS = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
                    grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
RETRYABLE_CODES = {ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
                   ResponseCode.NO_PERMISSION, ResponseCode.TOPIC_NOT_EXIST}


class Producer:
    def __init__(self, namesrv_addr: str | None = None, group: str = "DEFAULT_PRODUCER",
                 send_timeout_ms: int = 3000, retry_times: int = 2) -> None:
        self.group = group
        self.client = ClientInstance(namesrv_addr, send_timeout_ms / 1000)
        self.send_timeout_s = send_timeout_ms / 1000
        self.retry_times = retry_times
        self.born_host = f"{socket.gethostbyname('localhost')}:{os.getpid() % 65536}"
        self._round_robin = 0
        self._lock = threading.Lock()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    # -- API ---------------------------------------------------------------------------------------
    def send(self, msg: Message, sharding_key: str | None = None, queue: MessageQueue | None = None) -> SendResult:
        return self.send_batch([msg], sharding_key=sharding_key, queue=queue)

    def send_batch(self, msgs: Sequence[Message], sharding_key: str | None = None,
                   queue: MessageQueue | None = None) -> SendResult:
        """Send messages of one topic as one batch to one queue (consecutive queue offsets)."""
        if not msgs:
            raise MQClientError("send_batch needs at least one message")
        topic = msgs[0].topic
        try:
            validate_topic(topic)
        except InvalidTopicError as exc:
            raise MQClientError(f"cannot send: {exc}") from None
        if any(m.topic != topic for m in msgs):
            raise MQClientError("a batch must have one topic")
        bodies = [m.body for m in msgs]
        if not all(bodies):
            raise MQClientError("cannot send an empty message body")
        props = [wire_properties(m, new_unique_key()) for m in msgs]
        request = broker_pb2.SendMessageRequest(producer_group=self.group, topic=topic, bodies=bodies,
                                                properties=props, born_timestamp=int(time.time() * 1000),
                                                born_host=self.born_host, flag=msgs[0].flag)
        if queue is not None:
            return self._send_to(queue, request)
        if sharding_key is not None:
            return self._send_to(self._queue_for_key(topic, sharding_key), request)
        return self._send_with_retry(topic, request)

    # -- queue choice ------------------------------------------------------------------------------
    def _queue_for_key(self, topic: str, key: str) -> MessageQueue:
        queues = self.client.publish_queues(topic)
        if not queues:
            raise MQClientError(f"topic {topic} has no writable queue")
        return queues[zlib.crc32(key.encode()) % len(queues)]

    def _next_queue(self, topic: str, avoid_broker: str | None, refresh: bool) -> MessageQueue:
        queues = self.client.publish_queues(topic, refresh)
        if not queues:
            raise MQClientError(f"topic {topic} has no writable queue")
        with self._lock:
            self._round_robin += 1
            start = self._round_robin
        for i in range(len(queues)):
            mq = queues[(start + i) % len(queues)]
            if mq.broker_name != avoid_broker:
                return mq
        return queues[start % len(queues)]

    def _send_with_retry(self, topic: str, request: broker_pb2.SendMessageRequest) -> SendResult:
        failed_broker: str | None = None
        last: MQClientError | None = None
        for attempt in range(1 + self.retry_times):
            mq = self._next_queue(topic, failed_broker, refresh=attempt > 0)
            try:
                return self._send_to(mq, request)
            except MQClientError as exc:
                if exc.code is not None and exc.code not in RETRYABLE_CODES:
                    raise
                if exc.code is None and not getattr(exc, "retryable", False):
                    raise
                log.info("send_retry topic=%s broker=%s attempt=%d reason=%s", topic, mq.broker_name, attempt + 1, exc)
                failed_broker = mq.broker_name
                self.client.invalidate_route(topic)
                last = exc
        assert last is not None
        raise last

    def _send_to(self, mq: MessageQueue, request: broker_pb2.SendMessageRequest) -> SendResult:
        addr = self.client.master_addr(mq.topic, mq.broker_name)
        request.queue_id = mq.queue_id
        try:
            response = self.client.broker(addr).SendMessage(request, timeout=self.send_timeout_s)
        except grpc.RpcError as exc:
            err = rpc_error(f"send to {mq}", addr, exc)
            err.retryable = exc.code() in RETRYABLE_STATUS  # type: ignore[attr-defined]
            raise err from None
        if response.code == ResponseCode.FLUSH_DISK_TIMEOUT:
            log.warning("send_flush_timeout queue=%s: stored, but not yet on disk", mq)
        elif response.code != ResponseCode.SUCCESS:
            raise business_error(f"send to {mq}", addr, response.code, response.remark)
        ids = tuple(response.msg_ids)
        return SendResult(ids[0] if ids else "", MessageQueue(mq.topic, mq.broker_name, response.queue_id),
                          response.queue_offset, ids)

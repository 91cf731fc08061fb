"""Pull consumer: the application chooses queues and offsets; the broker keeps committed offsets."""

from concurrent.futures import Future

import grpc

from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.grpc_errors import business_error, rpc_error
from client.message_decoding import decode_pulled
from client.results import PullResult, PullStatus
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from proto import broker_pb2

PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class PullConsumer:
    def __init__(self, namesrv_addr: str | None = None, group: str = "DEFAULT_CONSUMER",
                 rpc_timeout_ms: int = 10_000) -> None:
        self.group = group
        self.client = ClientInstance(namesrv_addr, rpc_timeout_ms / 1000)

    def __enter__(self) -> "PullConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    def queues(self, topic: str) -> list[MessageQueue]:
        return self.client.subscribe_queues(topic, refresh=True)

    def _call(self, what: str, mq: MessageQueue, method: str, request, timeout_s: float | None = None):
        addr = self.client.master_addr(mq.topic, mq.broker_name)
        try:
            return addr, getattr(self.client.broker(addr), method)(request, timeout=timeout_s or
                                                                    self.client.rpc_timeout_s)
        except grpc.RpcError as exc:
            self.client.invalidate_route(mq.topic)
            raise rpc_error(f"{what} {mq}", addr, exc) from None

    def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, sub_expression: str = "*",
             suspend_ms: int = 0, commit_offset: int = -1) -> PullResult:
        """Messages of ``mq`` from ``offset``. With ``suspend_ms`` the broker holds an empty pull until a
        message arrives or the time is up (long polling)."""
        return self.pull_async(mq, offset, max_nums, sub_expression, suspend_ms, commit_offset).result()

    def pull_async(self, mq: MessageQueue, offset: int, max_nums: int = 32, sub_expression: str = "*",
                   suspend_ms: int = 0, commit_offset: int = -1) -> "Future[PullResult]":
        """Like :meth:`pull` but returns at once; many pulls can be in flight from one thread."""
        request = broker_pb2.PullMessageRequest(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
            max_msg_nums=max_nums, sub_expression=sub_expression, suspend_timeout_ms=suspend_ms,
            commit_offset=commit_offset)
        addr = self.client.master_addr(mq.topic, mq.broker_name)
        timeout_s = self.client.rpc_timeout_s + suspend_ms / 1000
        call = self.client.broker(addr).PullMessage.future(request, timeout=timeout_s)
        future: Future[PullResult] = Future()

        def done(call: grpc.Future) -> None:
            try:
                future.set_result(self._pull_result(mq, addr, sub_expression, call))
            except MQClientError as exc:
                future.set_exception(exc)

        call.add_done_callback(done)
        return future

    def _pull_result(self, mq: MessageQueue, addr: str, sub_expression: str, call: grpc.Future) -> PullResult:
        try:
            response = call.result()
        except grpc.RpcError as exc:
            self.client.invalidate_route(mq.topic)
            raise rpc_error(f"pull {mq}", addr, exc) from None
        status = PULL_STATUS.get(response.code)
        if status is None:
            raise business_error(f"pull {mq}", addr, response.code, response.remark)
        messages = decode_pulled(response.records, response.offset_delta, sub_expression) if response.records else []
        if status is PullStatus.FOUND and not messages:
            status = PullStatus.NO_MATCHED_MSG  # the tag hash matched but the tag itself did not
        return PullResult(status, messages, response.next_begin_offset, response.min_offset, response.max_offset)

    def commit(self, mq: MessageQueue, offset: int) -> None:
        if offset < 0:
            raise MQClientError(f"cannot commit negative offset {offset} on {mq}")
        request = broker_pb2.UpdateConsumerOffsetRequest(consumer_group=self.group, topic=mq.topic,
                                                         queue_id=mq.queue_id, commit_offset=offset)
        addr, response = self._call("commit", mq, "UpdateConsumerOffset", request)
        if response.code != ResponseCode.SUCCESS:
            raise business_error(f"commit {mq}", addr, response.code, response.remark)

    def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset on ``mq``; -1 when nothing was committed."""
        request = broker_pb2.QueryConsumerOffsetRequest(consumer_group=self.group, topic=mq.topic,
                                                        queue_id=mq.queue_id)
        addr, response = self._call("query offset of", mq, "QueryConsumerOffset", request)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        if response.code != ResponseCode.SUCCESS:
            raise business_error(f"query offset of {mq}", addr, response.code, response.remark)
        return response.offset

    def _offset(self, what: str, mq: MessageQueue, method: str, request) -> int:
        addr, response = self._call(what, mq, method, request)
        if response.code != ResponseCode.SUCCESS:
            raise business_error(f"{what} {mq}", addr, response.code, response.remark)
        return response.offset

    def min_offset(self, mq: MessageQueue) -> int:
        return self._offset("min offset of", mq, "GetMinOffset",
                            broker_pb2.QueueRequest(topic=mq.topic, queue_id=mq.queue_id))

    def max_offset(self, mq: MessageQueue) -> int:
        return self._offset("max offset of", mq, "GetMaxOffset",
                            broker_pb2.QueueRequest(topic=mq.topic, queue_id=mq.queue_id))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """Offset of the first message stored at or after ``timestamp_ms`` (max offset if none)."""
        return self._offset("search offset in", mq, "SearchOffset",
                            broker_pb2.SearchOffsetRequest(topic=mq.topic, queue_id=mq.queue_id,
                                                           timestamp=timestamp_ms))

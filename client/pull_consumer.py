"""Pull consumer: the application chooses queues and offsets; the broker keeps committed offsets.

Static topics: ``queues(topic)`` are the N logic queues ``MessageQueue(topic, "__logical_queue_broker__", i)``;
every call on one goes to the logic queue's current leader, addressed LOGIC, in logic offsets. A broker that no
longer leads the queue (NOT_LEADER_FOR_QUEUE) makes the SDK refresh the route and try once more; a pull that
drained an older link of the queue's chain ("retry now") is followed at once to the next link's offset.

Broker groups: reads (pulls, offset queries) go to the group's master; one that turns out unreachable is marked
down for a few seconds (``client/replica_health.py``) and the read goes to the group's next replica, a slave that
serves what the master had confirmed (slaveReadEnable), until the master answers again. A commit is a write: it
goes to the master only, and fails while the group has none (a push consumer keeps the offset and commits later).
"""

from concurrent.futures import Future

import grpc

from client.argument_checks import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    checked_int,
    checked_timeout_ms,
    held_s,
)
from client.callback_future import CallbackFuture
from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.grpc_errors import business_error, rpc_error
from client.message_decoding import decode_pulled
from client.results import PullResult, PullStatus
from client.static_route import is_logic_queue
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from common.topic_validator import InvalidTopicError, validate_group
from proto import broker_pb2

PULL_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
MAX_PULL_HOPS = 8  # static topics: "retry now" answers followed within one pull
READ_FAILOVERS = 2  # a read whose replica turned out unreachable asks the group's next one, this many times at most


def checked_consumer_group(group: str) -> str:
    """A consumer group name the brokers take (at most 120 chars: its %RETRY% and %DLQ% topics must be valid
    topics); refused here, before any call, with what is wrong."""
    try:
        validate_group(group)
    except InvalidTopicError as exc:
        raise MQClientError(f"consumer {exc}") from None
    return group


class PullConsumer:
    """Reads queues from offsets the application chooses; commits offsets for its group on the brokers.

    ::

        with PullConsumer("127.0.0.1:9876", group="g1") as consumer:
            for mq in consumer.queues("TopicA"):
                result = consumer.pull(mq, consumer.committed(mq) if consumer.committed(mq) >= 0 else 0, 32)
                consumer.commit(mq, result.next_begin_offset)
    """

    def __init__(self, namesrv_addr: str | None = None, group: str = "DEFAULT_CONSUMER",
                 rpc_timeout_ms: int = 10_000, use_streams: bool = True, tls_ca: str | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        """``use_streams=False`` pulls with unary calls instead of on the broker's pull stream."""
        self.group = checked_consumer_group(group)
        self.use_streams = use_streams
        self.client = ClientInstance(namesrv_addr, checked_timeout_ms("rpc_timeout_ms", rpc_timeout_ms), tls_ca=tls_ca,
                                     credentials=credentials)

    def __enter__(self) -> "PullConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    def queues(self, topic: str) -> list[MessageQueue]:
        return self.client.subscribe_queues(topic, refresh=True)

    def _target(self, mq: MessageQueue, refresh: bool = False,
                write: bool = False) -> tuple[str, broker_pb2.QueueAddressing]:
        """Address to ask about ``mq`` and how the request names it (logic queues: their leader, LOGIC). A read
        goes to the group's master or, while that is missing or marked down, to a slave; a write to the master."""
        client = self.client
        if is_logic_queue(mq):
            addr = (client.leader_addr(mq.topic, mq.queue_id, refresh=refresh) if write
                    else client.leader_read_addr(mq.topic, mq.queue_id, refresh=refresh))
            return addr, broker_pb2.LOGIC
        addr = client.master_addr(mq.topic, mq.broker_name) if write else client.read_addr(mq.topic, mq.broker_name)
        return addr, broker_pb2.ADDRESSING_UNSPECIFIED

    def _call(self, what: str, mq: MessageQueue, method: str, request, write: bool = False):
        """Unary call about ``mq``. A read whose replica turns out unreachable (marked down) asks the group's next
        replica; on a logic queue, a NOT_LEADER_FOR_QUEUE answer or an unreachable leader refreshes the route and
        tries the (new) leader once more. A write to a normal queue is tried at its master once."""
        static = is_logic_queue(mq)
        retries = 1 if static else 0 if write else READ_FAILOVERS
        tried: set[str] = set()
        failure: MQClientError | None = None
        for attempt in range(1 + retries):
            addr, addressing = self._target(mq, refresh=static and attempt > 0, write=write)
            if failure is not None and not static and addr in tried:
                break  # the group has no other replica to ask
            tried.add(addr)
            if static:
                request.addressing = addressing
            try:
                response = getattr(self.client.broker(addr), method)(request, timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                self.client.invalidate_route(mq.topic)
                failure = rpc_error(f"{what} {mq}", addr, exc)
                if self.client.report_failure(addr, exc.code()):
                    continue
                raise failure from None
            self.client.report_answer(addr)
            if attempt < retries and static and response.code == ResponseCode.NOT_LEADER_FOR_QUEUE:
                self.client.invalidate_route(mq.topic)
                continue
            return addr, response
        assert failure is not None
        raise failure

    def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, sub_expression: str = "*",
             suspend_ms: int = 0, commit_offset: int = -1) -> PullResult:
        """Messages of ``mq`` from ``offset``. With ``suspend_ms`` the broker holds an empty pull until a
        message arrives or the time is up (long polling)."""
        return self.pull_async(mq, offset, max_nums, sub_expression, suspend_ms, commit_offset).result()

    def pull_async(self, mq: MessageQueue, offset: int, max_nums: int = 32, sub_expression: str = "*",
                   suspend_ms: int = 0, commit_offset: int = -1) -> "Future[PullResult]":
        """Like :meth:`pull` but returns at once; many pulls can be in flight from one thread."""
        checked_int("offset", offset, INT64_MIN, INT64_MAX)
        checked_int("max_nums", max_nums, INT32_MIN, INT32_MAX)
        checked_int("suspend_ms", suspend_ms, 0, INT64_MAX)
        checked_int("commit_offset", commit_offset, INT64_MIN, INT64_MAX)
        request = broker_pb2.PullMessageRequest(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
            max_msg_nums=max_nums, sub_expression=sub_expression, suspend_timeout_ms=suspend_ms,
            commit_offset=commit_offset)
        future: Future[PullResult] = CallbackFuture()
        if is_logic_queue(mq):
            self._pull_static(mq, request, future, hops=0, leader_retries=1)
            return future
        self._pull_plain(mq, request, future, READ_FAILOVERS, set())
        return future

    def _pull_plain(self, mq: MessageQueue, request: broker_pb2.PullMessageRequest, future: "Future[PullResult]",
                    failovers: int, tried: set[str]) -> None:
        """Pull a normal queue at the group's read replica; one that turns out unreachable is marked down and the
        pull goes to the group's next replica at once (``failovers`` times at most), so a dead master costs a
        push consumer no pause."""
        try:
            addr = self.client.read_addr(mq.topic, mq.broker_name)
        except MQClientError as exc:
            future.set_exception(exc)
            return
        tried.add(addr)
        call = self._pull_call(addr, request)

        def done(call: Future) -> None:
            try:
                response = call.result()
            except grpc.RpcError as exc:
                self.client.invalidate_route(mq.topic)
                error = rpc_error(f"pull {mq}", addr, exc)
                if self.client.report_failure(addr, exc.code()) and failovers > 0:
                    self.client.retry_threads.retry(
                        future, lambda: self._fail_over(mq, request, future, failovers, tried, error))
                    return
                future.set_exception(error)
                return
            self.client.report_answer(addr)
            try:
                future.set_result(self._to_result(mq, addr, request.sub_expression, response))
            except MQClientError as exc:
                future.set_exception(exc)

        call.add_done_callback(done)

    def _fail_over(self, mq: MessageQueue, request: broker_pb2.PullMessageRequest, future: "Future[PullResult]",
                   failovers: int, tried: set[str], error: MQClientError) -> None:
        """After ``mq``'s replica turned out unreachable: the pull goes to the group's next replica, when a read of
        ``mq`` would now go somewhere not tried yet (a group of one has nowhere else)."""
        try:
            another = self.client.read_addr(mq.topic, mq.broker_name) not in tried
        except MQClientError:
            another = False
        if another:
            self._pull_plain(mq, request, future, failovers - 1, tried)
        else:
            future.set_exception(error)

    def _pull_call(self, addr: str, request: broker_pb2.PullMessageRequest) -> Future:
        timeout_s = self.client.rpc_timeout_s + held_s(request.suspend_timeout_ms)
        if self.use_streams:
            return self.client.pull_stream(addr).call(request, timeout_s)
        return self.client.broker(addr).PullMessage.future(request, timeout=timeout_s)

    def _pull_static(self, mq: MessageQueue, request: broker_pb2.PullMessageRequest, future: "Future[PullResult]",
                     hops: int, leader_retries: int, refresh: bool = False) -> None:
        """Pull a logic queue at its leader. NOT_LEADER_FOR_QUEUE (or an unreachable leader) refreshes the
        route and tries again ``leader_retries`` times; "retry now" (an older link drained) pulls again at
        once from ``next_begin_offset``, at most :data:`MAX_PULL_HOPS` times, then hands the caller
        NO_MATCHED_MSG with that offset to continue from."""
        try:
            addr, addressing = self._target(mq, refresh=refresh)
        except MQClientError as exc:
            future.set_exception(exc)
            return
        request.addressing = addressing
        call = self._pull_call(addr, request)

        def again(hops: int, leader_retries: int, refresh: bool) -> None:
            """The next attempt looks the route up (maybe on the name server): on the retry threads."""
            self.client.retry_threads.retry(
                future, lambda: self._pull_static(mq, request, future, hops, leader_retries, refresh))

        def done(call: Future) -> None:
            try:
                response = call.result()
            except grpc.RpcError as exc:
                self.client.invalidate_route(mq.topic)
                if self.client.report_failure(addr, exc.code()) and leader_retries > 0:
                    again(hops, leader_retries - 1, refresh=True)
                    return
                future.set_exception(rpc_error(f"pull {mq}", addr, exc))
                return
            self.client.report_answer(addr)
            if response.code == ResponseCode.NOT_LEADER_FOR_QUEUE and leader_retries > 0:
                self.client.invalidate_route(mq.topic)
                again(hops, leader_retries - 1, refresh=True)
                return
            if response.code == ResponseCode.PULL_RETRY_IMMEDIATELY and hops < MAX_PULL_HOPS:
                request.queue_offset = response.next_begin_offset
                again(hops + 1, leader_retries, refresh=False)
                return
            try:  # the logic queue's id, as the offsets are logic offsets
                future.set_result(self._to_result(mq, addr, request.sub_expression, response, mq.queue_id))
            except MQClientError as exc:
                future.set_exception(exc)

        call.add_done_callback(done)

    @staticmethod
    def _to_result(mq: MessageQueue, addr: str, sub_expression: str, response: broker_pb2.PullMessageResponse,
                   queue_id: int | None = None) -> PullResult:
        status = PULL_STATUS.get(response.code)
        if status is None:
            raise business_error(f"pull {mq}", addr, response.code, response.remark)
        messages = (decode_pulled(response.records, response.offset_delta, sub_expression, queue_id)
                    if response.records else [])
        if status is PullStatus.FOUND and not messages:
            status = PullStatus.NO_MATCHED_MSG  # the tag hash matched but the tag itself did not
        return PullResult(status, messages, response.next_begin_offset, response.min_offset, response.max_offset)

    def commit(self, mq: MessageQueue, offset: int) -> None:
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise MQClientError(f"cannot commit offset {offset!r} on {mq}: an integer >= 0")
        checked_int("offset", offset, 0, INT64_MAX)
        request = broker_pb2.UpdateConsumerOffsetRequest(consumer_group=self.group, topic=mq.topic,
                                                         queue_id=mq.queue_id, commit_offset=offset)
        addr, response = self._call("commit", mq, "UpdateConsumerOffset", request, write=True)
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
        checked_int("timestamp_ms", timestamp_ms, INT64_MIN, INT64_MAX)
        return self._offset("search offset in", mq, "SearchOffset",
                            broker_pb2.SearchOffsetRequest(topic=mq.topic, queue_id=mq.queue_id,
                                                           timestamp=timestamp_ms))

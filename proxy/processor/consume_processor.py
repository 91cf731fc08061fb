"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue (upstream's
ConsumerProcessor) over the brokers' ``rmq.PopService``: the brokers keep every group's progress and in-flight
messages, so the proxy only picks where to pop and routes each receipt handle back to the broker it names.

Where a receive pops: a normal topic's queue names its broker (the route hands out brokers' queues, and a
PushConsumer's assignment is one queue per broker), so the pop goes to that broker's master for any of its queues
(queue id -1: the broker rotates over them); when that broker has nothing to hand out right now, the topic's other
brokers are asked at once, and only when none has anything is the first one that answered long-polled, for what is
left of the client's deadline. A queue naming no broker of the route (an old route) starts at the next broker in
turn. A static topic's logic queue pops at its leader, addressed LOGIC; a leader that answers NOT_LEADER_FOR_QUEUE
(a remap moved the queue) has the route fetched again and the pop made once more at the new leader.

A broker that does not answer a pop (gone, or paused: a SIGSTOPped process keeps its connection READY, so nothing
marks it down) is skipped by the receive, and by the next ones for ``silent_broker_skip_s``, while the topic has
another broker to pop on; the other brokers' pops have ``sweep_pop_timeout_s``: so an empty receive of a topic one
of whose brokers stands still still answers MESSAGE_NOT_FOUND before the client gives up."""

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf.duration_pb2 import Duration

from client.ack_batcher import ack_outcomes
from client.replica_health import DownAddresses
from client.static_route import is_logic_queue, master_of
from common.acl import inner_metadata
from common.message import MessageExt
from common.message_codec import CorruptRecordError, decode_records
from common.message_queue import MessageQueue
from common.perm import is_readable
from common.receipt_handle import MAX_ACK_HANDLES, InvalidReceiptHandle, ReceiptHandle
from common.refusal import says_not_master
from common.response_code import ResponseCode
from common.subscription import parse_sub_expression
from proto import broker_pb2, pop_pb2
from proto.v2 import definition_pb2, service_pb2
from proxy.broker_channels import BrokerChannels
from proxy.deadline import Deadline
from proxy.message_convert import timestamp, to_v2_message
from proxy.processor.names import check_group, check_topic, tag_expression
from proxy.processor.receipt_handle_renewer import Online, ReceiptHandleRenewer, RenewRefused
from proxy.proxy_config import ProxyConfig
from proxy.topic_route_service import TopicRouteService
from proxy.v2_codes import (
    BROKER_UNAVAILABLE,
    Code,
    ProxyError,
    broker_refusal,
    from_response_code,
    ok_status,
    overall_status,
    rpc_failure,
)

log = logging.getLogger(__name__)


class _Coded(Protocol):
    code: int
    remark: str


Answer = TypeVar("Answer", bound=_Coded)

ANY_QUEUE = -1
# A client's call about a message ended with these: the broker took it off the client's hands, or refused the
# receipt handle as spent (acked already, expired, handed out again). Auto-renewing it is over.
HANDLE_SETTLED = (Code.OK, Code.INVALID_RECEIPT_HANDLE)


@dataclass(frozen=True, slots=True)
class PopTarget:
    addr: str
    queue_id: int  # ANY_QUEUE, or a static topic's logic queue
    addressing: broker_pb2.QueueAddressing


@dataclass(frozen=True, slots=True)
class ReceiveLimits:
    batch: int
    invisible_ms: int
    poll_ms: int  # as asked (capped); what is left of the client's deadline after the sweep caps it again
    deadline: Deadline


class NoAnswer(ProxyError):
    """A pop the broker did not answer (unreachable, or silent past its timeout), as opposed to one it refused."""


class ConsumeProcessor:
    def __init__(self, routes: TopicRouteService, brokers: BrokerChannels, config: ProxyConfig,
                 online: Online) -> None:
        self.routes = routes
        self.brokers = brokers
        self.config = config
        self.renewer = ReceiptHandleRenewer(self._renew, config.default_invisible_ms, config.renew_ahead_ms,
                                            config.renew_max_ms, online)
        self._turns: dict[str, itertools.count[int]] = {}  # topic -> the next broker to pop on, for "any broker"
        self._background: set[asyncio.Task[None]] = set()  # acks of filtered messages, held until done
        self._silent = DownAddresses(hold_s=config.silent_broker_skip_s)  # brokers whose last pop got no answer

    def forget_topic(self, topic: str) -> None:
        """The route cache forgot ``topic`` (deleted, or not used for long): what is kept for it goes too. Called
        on the thread that forgot it; a dict's pop is atomic, and a receive of the topic meanwhile starts over."""
        self._turns.pop(topic, None)

    # -- receive --------------------------------------------------------------------------------------------------
    async def receive_message(self, request: service_pb2.ReceiveMessageRequest, client_id: str,
                              time_remaining_s: float | None) -> AsyncIterator[service_pb2.ReceiveMessageResponse]:
        """A status, then each message, then the delivery time (the clients' order). Nothing to hand out within
        the long polling time: MESSAGE_NOT_FOUND alone."""
        group = check_group(request.group.name)
        topic = check_topic(request.message_queue.topic.name)
        expression = tag_expression(request.filter_expression)
        limits = self._limits(request, time_remaining_s)
        targets = await self._targets(topic, request.message_queue)
        pop = pop_pb2.PopMessageRequest(group=group, topic=topic, expression=expression, max_msg_nums=limits.batch,
                                        invisible_time_ms=limits.invisible_ms, client_id=client_id)
        what = f"receive from topic {topic} for group {group}"
        target, response = await self._sweep_then_park(pop, targets, limits, what)
        popped_at_ms = self.renewer.clock_ms()
        messages = self._messages(response, topic, group, expression, target, limits.invisible_ms) if target else []
        if not messages:  # nothing, or all filtered out (tags whose hash collides with a subscribed one)
            yield service_pb2.ReceiveMessageResponse(status=definition_pb2.Status(
                code=Code.MESSAGE_NOT_FOUND, message="no message to hand out now"))
            return
        handles = [m.system_properties.receipt_handle for m in messages]
        answered = False
        try:
            yield service_pb2.ReceiveMessageResponse(status=ok_status())
            for message in messages:
                yield service_pb2.ReceiveMessageResponse(message=message)
            yield service_pb2.ReceiveMessageResponse(delivery_timestamp=timestamp(int(time.time() * 1000)))
            answered = True
        finally:
            if not answered:  # the call ended first (its deadline, a cancel): the client drops what it had read
                try:
                    asyncio.get_running_loop()
                except RuntimeError:  # no loop (the generator closed at exit): their invisible time brings them
                    log.info("receive_abandoned group=%s topic=%s messages=%d released=0 reason=no_event_loop",
                             group, topic, len(handles))
                else:
                    self._in_background(self._release(group, topic, handles))
        # Renewed once handed over: a receive the client gave up on leaves its messages to come back.
        if request.auto_renew and not request.HasField("invisible_duration"):  # a PushConsumer's
            self.renewer.track(client_id, group, topic, handles, popped_at_ms, limits.invisible_ms)

    async def _sweep_then_park(self, pop: pop_pb2.PopMessageRequest, targets: list[PopTarget], limits: ReceiveLimits,
                               what: str) -> tuple[PopTarget | None, pop_pb2.PopMessageResponse]:
        """Pop at once on the first target, then on each other one (a client rotates over every broker's queues:
        without this, a receive that lands on a broker with nothing to hand out would wait out its long polling
        while another broker has messages); only when all are empty is the first one that answered long-polled,
        for what is left of the client's deadline. The refusal of the first broker that answers is the receive's;
        another's only skips it, as does a broker that does not answer (the first failure is the receive's when
        none answers)."""
        empty = pop_pb2.PopMessageResponse(code=ResponseCode.PULL_NOT_FOUND)
        first: PopTarget | None = None
        failure: NoAnswer | None = None
        for i, target in enumerate(self._answering_first(targets)):
            timeout = self._sweep_timeout(i, limits.deadline)
            if timeout <= 0:  # the client gives up before another answer could reach it
                break
            try:
                answered, response = await self._pop(pop, target, 0, timeout, what)
            except NoAnswer as exc:
                failure = failure or exc
                log.info("receive_skipped_broker addr=%s reason=%r", target.addr, exc.message)
                continue
            except ProxyError as exc:
                if first is None:
                    raise
                log.info("receive_skipped_broker addr=%s reason=%r", target.addr, exc.message)
                continue
            if first is None:  # a logic queue's new leader, when it moved: the long poll goes there too
                first = answered
            if response.popped:
                return answered, response
        if first is None:
            if failure is not None:
                raise failure
            return None, empty
        poll_ms = self._poll_left(limits)
        if poll_ms <= 0:
            return None, empty
        answered, response = await self._pop(pop, first, poll_ms, limits.deadline.cap(
            poll_ms / 1000 + self.config.rpc_timeout_s), what)
        return (answered, response) if response.popped else (None, empty)

    def _sweep_timeout(self, i: int, deadline: Deadline) -> float:
        """The first pop has a broker call's timeout (the client's deadline at most: a broker that answers at all
        answers in milliseconds); each other one is a look in passing, short, and leaves the client time for its
        answer."""
        if i == 0:
            return deadline.cap(self.config.rpc_timeout_s, margin_s=0)
        return deadline.cap(self.config.sweep_pop_timeout_s)

    def _answering_first(self, targets: list[PopTarget]) -> list[PopTarget]:
        """``targets`` without the brokers whose last pop got no answer a moment ago (all of them when every one
        is such: the receive finds out)."""
        answering = [t for t in targets if not self._silent.is_down(t.addr)]
        return answering or targets

    def _poll_left(self, limits: ReceiveLimits) -> int:
        """The long polling still to do: as asked, but answered ``long_polling_margin_ms`` before the client gives
        up, counted from now (the sweep took some of the client's time, a silent broker up to its timeout)."""
        left = limits.deadline.left_s()
        if left is None:
            return limits.poll_ms
        return max(0, min(limits.poll_ms, int(left * 1000) - self.config.long_polling_margin_ms))

    async def _pop(self, pop: pop_pb2.PopMessageRequest, target: PopTarget, poll_ms: int, timeout_s: float,
                   what: str) -> tuple[PopTarget, pop_pb2.PopMessageResponse]:
        """The target that answered (a logic queue's new leader, when the old one said it moved) and its answer."""
        response = await self._pop_at(pop, target, poll_ms, timeout_s, what)
        if response.code == ResponseCode.NOT_LEADER_FOR_QUEUE and target.addressing == broker_pb2.LOGIC:
            moved = await self.routes.moved_leader(pop.topic, target.queue_id, target.addr)
            if moved is not None:  # once: a second refusal is answered as a transient one
                target = replace(target, addr=moved)
                response = await self._pop_at(pop, target, poll_ms, timeout_s, what)
        if response.code not in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND):
            if response.code == ResponseCode.NO_PERMISSION and says_not_master(response.remark):
                self.routes.client.invalidate_route(pop.topic)  # a failover: the next receive asks the new master
            raise broker_refusal(what, response.code, response.remark)
        return target, response

    async def _pop_at(self, pop: pop_pb2.PopMessageRequest, target: PopTarget, poll_ms: int, timeout_s: float,
                      what: str) -> pop_pb2.PopMessageResponse:
        request = pop_pb2.PopMessageRequest()
        request.CopyFrom(pop)
        request.queue_id, request.addressing, request.poll_time_ms = target.queue_id, target.addressing, poll_ms
        try:
            response: pop_pb2.PopMessageResponse = await self.brokers.pop_service(target.addr).PopMessage(
                request, timeout=timeout_s, metadata=inner_metadata())
        except grpc.RpcError as exc:
            self.routes.unreachable(pop.topic, target.addr, exc)
            self._silent.mark(target.addr)
            failure = rpc_failure(what, target.addr, exc)
            raise NoAnswer(failure.code, failure.message) from None
        self._silent.clear(target.addr)
        return response

    def _limits(self, request: service_pb2.ReceiveMessageRequest, time_remaining_s: float | None) -> ReceiveLimits:
        if request.batch_size <= 0:
            raise ProxyError(Code.BAD_REQUEST, f"batch size {request.batch_size} must be positive")
        batch = min(request.batch_size, self.config.max_receive_batch)  # more is not an error: upstream caps too
        if request.HasField("invisible_duration"):
            invisible_ms = _ms(request.invisible_duration)
            if not 0 < invisible_ms <= self.config.max_invisible_ms:
                raise ProxyError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms is outside "
                                                              f"1..{self.config.max_invisible_ms} ms")
        else:  # a PushConsumer's receive (auto_renew) names none
            invisible_ms = self.config.default_invisible_ms
        poll_ms = 0
        if request.HasField("long_polling_timeout"):
            poll_ms = _ms(request.long_polling_timeout)
            if poll_ms < 0:
                raise ProxyError(Code.ILLEGAL_POLLING_TIME, f"long polling timeout {poll_ms} ms is negative")
        poll_ms = min(poll_ms, self.config.max_long_polling_ms)
        return ReceiveLimits(batch, invisible_ms, poll_ms, Deadline.after(time_remaining_s))

    async def _targets(self, topic: str, queue: definition_pb2.MessageQueue) -> list[PopTarget]:
        """Where to pop, the queue's own target first: a static topic's logic queue at its leader, then its other
        led logic queues (the Node.js client names logic queue 0 only, taking queue ids for broker ids: the others
        were never received from); a normal topic's queue on its broker (one the route no longer names: the next
        broker in turn), then the topic's others."""
        if is_logic_queue(MessageQueue(topic, queue.broker.name, queue.id)):
            own = PopTarget(await self.routes.leader_addr(topic, queue.id), queue.id, broker_pb2.LOGIC)
            return [own, *await self._other_logic_queues(topic, queue.id)]
        route = await self.routes.route(topic)
        if self.routes.static_view(route) is not None:  # the client's route predates the topic becoming static
            raise ProxyError(Code.BAD_REQUEST, f"topic {topic} is a static topic: receive from its logic queues "
                                               "(query its route again)")
        brokers = self.routes.readable_brokers(route)
        if not brokers:
            if any(is_readable(qd.perm) and qd.read_queue_nums > 0 for qd in route.queue_datas):  # a failover
                raise ProxyError(BROKER_UNAVAILABLE, f"topic {topic}: no broker with readable queues has a master "
                                                     "right now (a failover under way)")
            raise ProxyError(Code.FORBIDDEN, f"topic {topic} has no readable queue on a broker with a master")
        first = queue.broker.name
        if first not in brokers:
            turn = self._turns.setdefault(topic, itertools.count())
            first = brokers[next(turn) % len(brokers)]
        names = [first, *(name for name in brokers if name != first)]
        return [PopTarget(master, ANY_QUEUE, broker_pb2.ADDRESSING_UNSPECIFIED)
                for name in names if (master := master_of(route, name)) is not None]

    async def _other_logic_queues(self, topic: str, logic_id: int) -> list[PopTarget]:
        """The static topic's other led logic queues, from the next one on: looked at in passing, so a route or a
        leader not known now only leaves them out."""
        try:
            view = self.routes.static_view(await self.routes.route(topic))
        except ProxyError:
            return []
        if view is None:
            return []
        targets: list[PopTarget] = []
        for other in ((logic_id + i) % view.total for i in range(1, view.total)):
            if view.led(other):
                with contextlib.suppress(ProxyError):
                    targets.append(PopTarget(await self.routes.leader_addr(topic, other), other, broker_pb2.LOGIC))
        return targets

    def _messages(self, response: pop_pb2.PopMessageResponse, topic: str, group: str, expression: str,
                  target: PopTarget, invisible_ms: int) -> list[definition_pb2.Message]:
        try:
            records = decode_records(response.records)
        except CorruptRecordError as exc:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"the broker at {target.addr} answered a corrupt record: "
                                                         f"{exc}") from None
        if len(records) != len(response.popped):
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"the broker at {target.addr} answered {len(records)} "
                                                         f"records for {len(response.popped)} receipt handles")
        tags = parse_sub_expression(expression)
        out, collided = [], []
        for ext, popped in zip(records, response.popped, strict=True):
            if tags is not None and ext.tags not in tags:  # the broker filters by tag hash, which can collide
                collided.append(popped.receipt_handle)
                continue
            _as_delivered(ext, target)
            out.append(to_v2_message(ext, topic, popped.receipt_handle, popped.reconsume_times, invisible_ms))
        if collided:  # not this group's: done with them, as a consumer that skipped them would be
            self._in_background(self._ack_quietly(target.addr, group, topic, collided))
        return out

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """``work`` on the loop, held until done (the caller does not wait for it)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release(self, group: str, topic: str, handles: list[str]) -> None:
        """Messages of a receive whose call ended before its answer did: visible again at once. Left, they stayed
        invisible for the whole invisible time, and came due together to a receive that ended the same way again
        (large messages and a short long-polling time: a consumer got nothing, ever)."""
        results = await asyncio.gather(*(self._change_invisible(group, topic, handle, 0, f"release of a message of "
                                                                f"topic {topic} for group {group}", undelivered=True)
                                          for handle in handles), return_exceptions=True)
        released = sum(not isinstance(r, BaseException) and r.code == ResponseCode.SUCCESS for r in results)
        log.info("receive_abandoned group=%s topic=%s messages=%d released=%d reason=call_ended_before_its_answer",
                 group, topic, len(handles), released)

    async def _ack_quietly(self, addr: str, group: str, topic: str, handles: list[str]) -> None:
        try:
            await self.brokers.pop_service(addr).AckMessage(pop_pb2.AckMessageRequest(
                group=group, topic=topic, receipt_handles=handles), timeout=self.config.rpc_timeout_s,
                metadata=inner_metadata())
        except grpc.RpcError as exc:  # they come back after their invisible time, and are filtered again
            log.info("filtered_ack_failed group=%s topic=%s addr=%s status=%s", group, topic, addr, exc.code())

    # -- ack, change invisible duration, dead letters ---------------------------------------------------------------
    async def ack_message(self, request: service_pb2.AckMessageRequest) -> service_pb2.AckMessageResponse:
        """Each entry's handle goes to the broker it names (one call per broker); each entry gets its own status."""
        group = check_group(request.group.name)
        topic = check_topic(request.topic.name)
        if not 0 < len(request.entries) <= MAX_ACK_HANDLES:
            raise ProxyError(Code.BAD_REQUEST, f"an ack takes 1..{MAX_ACK_HANDLES} entries, not {len(request.entries)}")
        statuses: dict[int, definition_pb2.Status] = {}
        by_broker: dict[str, list[int]] = {}
        for i, entry in enumerate(request.entries):
            try:
                by_broker.setdefault(_handle(entry.receipt_handle).broker_name, []).append(i)
            except ProxyError as exc:
                statuses[i] = exc.status()
        await self._drop_unknown_brokers(topic, by_broker, statuses)
        await self._ack_by_broker(group, topic, [e.receipt_handle for e in request.entries], by_broker, statuses)
        entries = [service_pb2.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                                     status=statuses[i]) for i, e in enumerate(request.entries)]
        return service_pb2.AckMessageResponse(status=overall_status([e.status for e in entries]), entries=entries)

    async def _ack_by_broker(self, group: str, topic: str, received: list[str], by_broker: dict[str, list[int]],
                             statuses: dict[int, definition_pb2.Status]) -> None:
        """Ack each broker's entries with the broker's latest handles of them (auto-renew's translation); an entry
        is renewed no more once its status says the broker is done with it."""
        handles: dict[int, str] = {}
        try:
            for i in itertools.chain.from_iterable(by_broker.values()):
                handles[i] = await self.renewer.hold(received[i], group, topic)
            answers = await asyncio.gather(*(self._ack_on(group, topic, name, [handles[i] for i in indexes])
                                             for name, indexes in by_broker.items()))
            for indexes, answer in zip(by_broker.values(), answers, strict=True):
                statuses.update(zip(indexes, answer, strict=True))
        finally:
            for i in handles:
                done = i in statuses and statuses[i].code in HANDLE_SETTLED
                self.renewer.settle(received[i], group, topic, done=done)

    async def _drop_unknown_brokers(self, topic: str, by_broker: dict[str, list[int]],
                                    statuses: dict[int, definition_pb2.Status]) -> None:
        """Entries whose handle names a broker the topic's route does not (forged, or of another topic) are
        answered INVALID_RECEIPT_HANDLE here; no route fetch or broker call is made for each such name."""
        if not by_broker:
            return
        try:
            unknown = await self.routes.unknown_brokers(topic, by_broker)
        except ProxyError as exc:  # the topic's route: every entry's answer
            for i in itertools.chain.from_iterable(by_broker.values()):
                statuses[i] = exc.status()
            by_broker.clear()
            return
        for name in unknown:
            refused = _unknown_broker(topic, name).status()
            for i in by_broker.pop(name):
                statuses[i] = refused

    async def _ack_on(self, group: str, topic: str, broker_name: str,
                      handles: list[str]) -> list[definition_pb2.Status]:
        what = f"ack of {len(handles)} message(s) of topic {topic} for group {group}"
        request = pop_pb2.AckMessageRequest(group=group, topic=topic, receipt_handles=handles)
        try:
            response = await self._at_master(topic, broker_name, what, lambda addr: self.brokers.pop_service(
                addr).AckMessage(request, timeout=self.config.rpc_timeout_s, metadata=inner_metadata()))
        except ProxyError as exc:
            return [exc.status()] * len(handles)
        return [ok_status() if refused is None else broker_refusal(what, *refused).status()
                for refused in ack_outcomes(handles, response)]

    async def change_invisible_duration(self, request: service_pb2.ChangeInvisibleDurationRequest
                                        ) -> service_pb2.ChangeInvisibleDurationResponse:
        """The message stays invisible for the new duration from now; the answer carries its new receipt handle
        (the old one is void)."""
        group = check_group(request.group.name)
        topic = check_topic(request.topic.name)
        invisible_ms = _ms(request.invisible_duration)
        if not 0 <= invisible_ms <= self.config.max_invisible_ms:
            raise ProxyError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms is outside "
                                                          f"0..{self.config.max_invisible_ms} ms")
        what = f"change of invisible duration of a message of topic {topic} for group {group}"
        handle = await self.renewer.hold(request.receipt_handle, group, topic)
        code: int | None = None
        try:
            response = await self._change_invisible(group, topic, handle, invisible_ms, what)
            code = response.code
        finally:  # a nack: once the broker took it, the client decides from now on
            self.renewer.settle(request.receipt_handle, group, topic, done=_settled(code))
        if response.code != ResponseCode.SUCCESS:
            raise broker_refusal(what, response.code, response.remark)
        return service_pb2.ChangeInvisibleDurationResponse(status=ok_status(), receipt_handle=response.receipt_handle)

    async def _renew(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        """Auto-renew's call (``ReceiptHandleRenewer``): RenewRefused when the broker refused."""
        what = f"auto-renew of a message of topic {topic} for group {group}"
        response = await self._change_invisible(group, topic, handle, invisible_ms, what)
        if response.code != ResponseCode.SUCCESS:
            raise RenewRefused(f"{what}: {response.remark}")
        return str(response.receipt_handle)

    async def _change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int,
                                what: str, undelivered: bool = False) -> pop_pb2.ChangeInvisibleTimeResponse:
        broker_name = await self._handle_broker(topic, _handle(handle))
        request = pop_pb2.ChangeInvisibleTimeRequest(group=group, topic=topic, receipt_handle=handle,
                                                     invisible_time_ms=invisible_ms, undelivered=undelivered)
        return await self._at_master(topic, broker_name, what, lambda addr: self.brokers.pop_service(
            addr).ChangeInvisibleTime(request, timeout=self.config.rpc_timeout_s, metadata=inner_metadata()))

    async def forward_to_dead_letter_queue(self, request: service_pb2.ForwardMessageToDeadLetterQueueRequest
                                           ) -> service_pb2.ForwardMessageToDeadLetterQueueResponse:
        """A PushConsumer gave up on a message (its attempts ran out client-side): to %DLQ%<group> now."""
        group = check_group(request.group.name)
        topic = check_topic(request.topic.name)
        what = f"dead-lettering message {request.message_id[:80]!r} of topic {topic} for group {group}"
        current = await self.renewer.hold(request.receipt_handle, group, topic)
        code: int | None = None
        try:
            response = await self._forward_to_dead_letter_queue(group, topic, current, what)
            code = response.code
        finally:
            self.renewer.settle(request.receipt_handle, group, topic, done=_settled(code))
        if response.code != ResponseCode.SUCCESS:
            raise broker_refusal(what, response.code, response.remark)
        return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=ok_status())

    async def _forward_to_dead_letter_queue(self, group: str, topic: str, handle: str,
                                            what: str) -> pop_pb2.ForwardToDeadLetterQueueResponse:
        broker_name = await self._handle_broker(topic, _handle(handle))
        request = pop_pb2.ForwardToDeadLetterQueueRequest(group=group, topic=topic, receipt_handle=handle)
        return await self._at_master(topic, broker_name, what, lambda addr: self.brokers.pop_service(
            addr).ForwardToDeadLetterQueue(request, timeout=self.config.rpc_timeout_s, metadata=inner_metadata()))

    async def _handle_broker(self, topic: str, handle: ReceiptHandle) -> str:
        """The broker a receipt handle names; INVALID_RECEIPT_HANDLE when the topic is not there."""
        if await self.routes.unknown_brokers(topic, (handle.broker_name,)):
            raise _unknown_broker(topic, handle.broker_name)
        return handle.broker_name

    async def _at_master(self, topic: str, broker_name: str, what: str,
                         call: Callable[[str], Awaitable[Answer]]) -> Answer:
        """``call`` at the master of ``broker_name`` (POP state lives there), and once more at a new master after a
        failover: when the one the route named refused as not the group's master, or did not answer (the route is
        cached up to 30 s: an ack made after a failover went to the deposed or dead master, and was lost)."""
        addr = await self.routes.master_addr(topic, broker_name)
        failure: grpc.RpcError | None = None
        try:
            response = await call(addr)
        except grpc.RpcError as exc:
            self.routes.unreachable(topic, addr, exc)
            failure = exc
        else:
            if not (response.code == ResponseCode.NO_PERMISSION and says_not_master(response.remark)):
                return response
            self.routes.client.invalidate_route(topic)
        moved = await self.routes.master_addr(topic, broker_name)
        if moved == addr:  # no other master known: answered as it is
            if failure is not None:
                raise rpc_failure(what, addr, failure) from None
            return response
        log.info("pop_call_moved topic=%s broker=%s from=%s to=%s", topic, broker_name, addr, moved)
        try:
            return await call(moved)
        except grpc.RpcError as exc:
            self.routes.unreachable(topic, moved, exc)
            raise rpc_failure(what, moved, exc) from None


def _as_delivered(ext: MessageExt, target: PopTarget) -> None:
    """A static topic's record names its physical queue; clients know the logic one (its offsets are logic
    already: the broker answers LOGIC pops in logic offsets)."""
    if target.addressing == broker_pb2.LOGIC:
        ext.queue_id = target.queue_id


def _settled(code: int | None) -> bool:
    """Whether the broker's response code (None: no answer came) ends auto-renewing (:data:`HANDLE_SETTLED`)."""
    return code is not None and from_response_code(code) in HANDLE_SETTLED


def _unknown_broker(topic: str, broker_name: str) -> ProxyError:
    return ProxyError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle names broker {broker_name[:80]!r}, which topic "
                                                   f"{topic} is not on")


def _handle(text: str) -> ReceiptHandle:
    try:
        return ReceiptHandle.decode(text)
    except InvalidReceiptHandle as exc:
        raise ProxyError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None


def _ms(duration: Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000

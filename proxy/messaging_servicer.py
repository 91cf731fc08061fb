"""``apache.rocketmq.v2.MessagingService``: decode, call a processor, encode. Thin on purpose.

Every answer carries a v2 ``Status`` (code 0 is "response is illegal" to the clients): what a processor raises as
``ProxyError`` becomes the response's status, a request whose bytes do not parse gets BAD_REQUEST, and anything
else INTERNAL_SERVER_ERROR, logged once with its traceback; the daemon keeps serving. RPCs the proxy does not
serve answer NOT_IMPLEMENTED (PullMessage and offsets: the official clients never call them) or UNSUPPORTED."""

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from common.rpc_boundary import UndecodableRequest
from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from proxy.processor.assignment_processor import AssignmentProcessor
from proxy.processor.client_processor import ClientProcessor
from proxy.processor.consume_processor import ConsumeProcessor
from proxy.processor.route_processor import RouteProcessor
from proxy.processor.send_processor import SendProcessor
from proxy.processor.transaction_processor import TransactionProcessor
from proxy.proxy_acl import current_user
from proxy.telemetry_channels import TelemetryChannel, TelemetryChannels
from proxy.v2_codes import Code, ProxyError

log = logging.getLogger(__name__)

CLIENT_ID_HEADER = "x-mq-client-id"
R = TypeVar("R")
Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]


def client_id(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_HEADER:
            return value if isinstance(value, str) else value.decode(errors="replace")
    return ""


def internal_status(rpc: str, exc: Exception) -> definition_pb2.Status:
    log.exception("rpc_failed rpc=%s error=%s", rpc, type(exc).__name__)
    return definition_pb2.Status(code=Code.INTERNAL_SERVER_ERROR, message=f"{rpc} failed: {type(exc).__name__}: "
                                                                          f"{str(exc)[:500]}")


def undecodable_status(request: UndecodableRequest) -> definition_pb2.Status:
    return definition_pb2.Status(code=Code.BAD_REQUEST, message=f"the request does not parse: {request.reason}")


def refused(rpc: str, exc: ProxyError) -> definition_pb2.Status:
    log.info("rpc_refused rpc=%s code=%s reason=%r", rpc, Code.Name(exc.code), exc.message)
    return exc.status()


def unary(response_class: Callable[..., R]) -> Callable[[Handler[R]], Handler[R]]:
    """Guard a unary RPC: whatever its processor raises becomes the status of a ``response_class``."""

    def wrap(handler: Handler[R]) -> Handler[R]:
        rpc = handler.__name__

        async def guarded(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
            if isinstance(request, UndecodableRequest):
                return response_class(status=undecodable_status(request))
            try:
                return await handler(self, request, context)
            except ProxyError as exc:
                return response_class(status=refused(rpc, exc))
            except Exception as exc:
                return response_class(status=internal_status(rpc, exc))

        guarded.__name__ = rpc
        return guarded

    return wrap


class MessagingServicer(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, *, route: RouteProcessor, assignment: AssignmentProcessor, send: SendProcessor,
                 consume: ConsumeProcessor, client: ClientProcessor, transaction: TransactionProcessor,
                 channels: TelemetryChannels) -> None:
        self.route = route
        self.assignment = assignment
        self.send = send
        self.consume = consume
        self.client = client
        self.transaction = transaction
        self.channels = channels

    @unary(service_pb2.QueryRouteResponse)
    async def QueryRoute(self, request, context):
        return await self.route.query_route(request)

    @unary(service_pb2.HeartbeatResponse)
    async def Heartbeat(self, request, context):
        return await self.client.heartbeat(request)

    @unary(service_pb2.SendMessageResponse)
    async def SendMessage(self, request, context):
        return await self.send.send_message(request, client_id(context), context.time_remaining())

    @unary(service_pb2.QueryAssignmentResponse)
    async def QueryAssignment(self, request, context):
        return await self.assignment.query_assignment(request)

    async def ReceiveMessage(self, request, context) -> AsyncIterator[service_pb2.ReceiveMessageResponse]:
        if isinstance(request, UndecodableRequest):
            yield service_pb2.ReceiveMessageResponse(status=undecodable_status(request))
            return
        try:
            async for response in self.consume.receive_message(request, client_id(context), context.time_remaining()):
                yield response
        except ProxyError as exc:  # raised before the first answer: a receive answers one status when it fails
            yield service_pb2.ReceiveMessageResponse(status=refused("ReceiveMessage", exc))
        except Exception as exc:
            yield service_pb2.ReceiveMessageResponse(status=internal_status("ReceiveMessage", exc))

    @unary(service_pb2.AckMessageResponse)
    async def AckMessage(self, request, context):
        return await self.consume.ack_message(request)

    @unary(service_pb2.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(self, request, context):
        return await self.consume.forward_to_dead_letter_queue(request)

    @unary(service_pb2.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request, context):
        return await self.consume.change_invisible_duration(request)

    @unary(service_pb2.EndTransactionResponse)
    async def EndTransaction(self, request, context):
        return await self.transaction.end_transaction(request, client_id(context), context.time_remaining())

    @unary(service_pb2.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request, context):
        cid = client_id(context)
        if not self.channels.speaks_for(cid, current_user(), context.peer()):  # else anyone could stop its renewing
            raise ProxyError(Code.FORBIDDEN, f"client {cid[:80]!r} has its Telemetry stream on another connection "
                                             "or of another user: only the client itself says it terminates")
        await self.transaction.client_gone(cid)
        return await self.client.notify_client_termination(request, cid)

    async def Telemetry(self, request_iterator, context) -> AsyncIterator[service_pb2.TelemetryCommand]:
        cid = client_id(context)
        if not cid:
            yield service_pb2.TelemetryCommand(status=definition_pb2.Status(
                code=Code.CLIENT_ID_REQUIRED, message=f"a telemetry stream needs the {CLIENT_ID_HEADER} header"))
            return
        if not self.channels.may_replace(cid, current_user()):
            yield service_pb2.TelemetryCommand(status=definition_pb2.Status(
                code=Code.FORBIDDEN, message=f"client {cid[:80]!r} has its Telemetry stream here of another user: "
                                             "only that user may open it again"))
            return
        try:
            async for command in self.channels.serve(cid, request_iterator, self._on_telemetry_command,
                                                     context.peer()):
                yield command
        finally:
            if self.channels.get(cid) is None:  # not reopened meanwhile: the client is gone
                await self.transaction.client_gone(cid)

    async def _on_telemetry_command(self, channel: TelemetryChannel,
                                    command: Any) -> service_pb2.TelemetryCommand | None:
        """One command of a client's stream, answered on it: a failure is a status there, never the stream's end."""
        if isinstance(command, UndecodableRequest):
            return service_pb2.TelemetryCommand(status=undecodable_status(command))
        try:
            return await self.client.on_telemetry_command(channel, command)
        except ProxyError as exc:
            return service_pb2.TelemetryCommand(status=refused("Telemetry", exc))
        except Exception as exc:
            return service_pb2.TelemetryCommand(status=internal_status("Telemetry", exc))

    # -- not served ---------------------------------------------------------------------------------------------------
    async def PullMessage(self, request, context) -> AsyncIterator[service_pb2.PullMessageResponse]:
        if isinstance(request, UndecodableRequest):
            yield service_pb2.PullMessageResponse(status=undecodable_status(request))
            return
        yield service_pb2.PullMessageResponse(status=definition_pb2.Status(
            code=Code.NOT_IMPLEMENTED, message="PullMessage is not served: receive with a SimpleConsumer or "
                                               "PushConsumer (POP)"))

    @unary(service_pb2.UpdateOffsetResponse)
    async def UpdateOffset(self, request, context):
        raise ProxyError(Code.NOT_IMPLEMENTED, "UpdateOffset is not served (the brokers keep POP groups' progress)")

    @unary(service_pb2.GetOffsetResponse)
    async def GetOffset(self, request, context):
        raise ProxyError(Code.NOT_IMPLEMENTED, "GetOffset is not served (the brokers keep POP groups' progress)")

    @unary(service_pb2.QueryOffsetResponse)
    async def QueryOffset(self, request, context):
        raise ProxyError(Code.NOT_IMPLEMENTED, "QueryOffset is not served")

    @unary(service_pb2.RecallMessageResponse)
    async def RecallMessage(self, request, context):
        return await self.send.recall_message(request)

    @unary(service_pb2.SyncLiteSubscriptionResponse)
    async def SyncLiteSubscription(self, request, context):
        raise ProxyError(Code.UNSUPPORTED, "lite topics are not supported")

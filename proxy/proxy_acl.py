"""ACL at the proxy: v2 clients' signed calls (``Credentials(ak, sk)`` of the official RocketMQ 5 clients) checked
before they reach a processor.

The design, and why. The proxy forwards every call to the brokers on the client's behalf, and it cannot sign as
the client (it never holds a client's secret key). Of the two designs that work without the secret:

* (c) brokers trusting the inner credentials plus a forwarded ``username`` header would still leave the proxy
  unable to *authenticate* the client (checking the HMAC needs the secret), and would make every broker RPC an
  impersonation channel for whoever holds the inner credentials;
* (b) -- what this does -- the proxy asks a broker, which keeps the users and policies, with one admin-only RPC
  (``rmq.AclService/Authorize``, callable only with the inner credentials or a super user): "is this
  ``authorization`` / ``x-mq-date-time`` pair authentic, and may its user do Pub/Sub on these resources?". The
  broker runs exactly the checks it runs on its own port (:func:`common.acl.verify`, ``Authority.check``), the
  secret never leaves it, and the proxy then forwards with its inner credentials as before.

Unsigned calls are refused here without asking (the proxy parses the header with :mod:`common.acl` first). A
refusal is the v2 status UNAUTHORIZED (authentication) or FORBIDDEN (authorization) in the method's own response,
with the broker's message (which names the access key and the check that failed, never a secret). A broker that
cannot be asked is INTERNAL_SERVER_ERROR, never a pass.

Which v2 calls need what: SendMessage, EndTransaction and RecallMessage Pub on their topics; ReceiveMessage,
AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and QueryAssignment Sub on their topic and
group; the rest (QueryRoute, Heartbeat, Telemetry, NotifyClientTermination, ...) only an authentic caller. The
settings a client reports on its Telemetry stream are checked as they come (:func:`check_settings`): a producer's
publishing topics need Pub (the proxy pushes it the transaction checks of those topics, whole messages), a
consumer's group and subscribed topics Sub; refused settings are answered FORBIDDEN and not kept."""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import grpc

from client.errors import MQClientError
from common.acl import AUTH_KEY, DATE_KEY, OPEN_PREFIXES, PUB, SUB, AclError, inner_metadata, parse_authorization
from proto import acl_pb2, acl_pb2_grpc
from proto.v2 import definition_pb2, service_pb2
from proxy.broker_channels import BrokerChannels
from proxy.refusal_log import RefusalLog
from proxy.v2_codes import ProxyError

log = logging.getLogger(__name__)

Code = definition_pb2.Code
SERVICE = "/apache.rocketmq.v2.MessagingService/"
ACTIONS = {
    "SendMessage": PUB, "EndTransaction": PUB, "RecallMessage": PUB,
    "ReceiveMessage": SUB, "AckMessage": SUB, "ChangeInvisibleDuration": SUB,
    "ForwardMessageToDeadLetterQueue": SUB, "QueryAssignment": SUB,
}
BROKERS_TTL_S = 30.0


def v2_resources(request: Any) -> list[str]:
    """``Topic:T`` and ``Group:G`` a v2 request names (a send: every message's topic)."""
    out: list[str] = []
    topics: list[Any] = [getattr(request, "topic", None)]
    topics += [m.topic for m in getattr(request, "messages", ())]
    mq = getattr(request, "message_queue", None)
    if mq is not None:
        topics.append(mq.topic)
    for t in topics:
        name: Any = getattr(t, "name", None)
        if isinstance(name, str) and name:
            out.append(f"Topic:{name}")
    group: Any = getattr(getattr(request, "group", None), "name", None)
    if isinstance(group, str) and group:
        out.append(f"Group:{group}")
    return list(dict.fromkeys(out))


def settings_resources(settings: definition_pb2.Settings) -> tuple[str, list[str]]:
    """(action, resources) a client's reported settings claim: a producer's publishing topics (Pub); a consumer's
    group and subscribed topics (Sub)."""
    if settings.client_type == definition_pb2.PRODUCER:
        return PUB, list(dict.fromkeys(f"Topic:{t.name}" for t in settings.publishing.topics if t.name))
    subscription = settings.subscription
    out = [f"Group:{subscription.group.name}"] if subscription.group.name else []
    out += [f"Topic:{s.topic.name}" for s in subscription.subscriptions if s.topic.name]
    return SUB, list(dict.fromkeys(out))


_user: ContextVar[str | None] = ContextVar("proxy_acl_user", default=None)


def current_user() -> str | None:
    """The user the call being served was let in as; None with ACL off. What a client is sent later on another
    call's behalf (a transaction check over its Telemetry stream) goes only to the user that earned it."""
    return _user.get()


SettingsCheck = Callable[[definition_pb2.Settings], Awaitable[definition_pb2.Status | None]]
# Set by the interceptor for a Telemetry stream it let open (its caller's check); none: ACL off, nothing to check.
_settings_check: ContextVar[SettingsCheck | None] = ContextVar("proxy_settings_check", default=None)


def current_settings_check() -> SettingsCheck | None:
    """The check of the Telemetry stream being served (None: ACL off), kept by its channel: what the stream's
    settings earned it (transaction checks, whole messages) is asked for again before each is pushed, since the
    user's policies or account may have gone since the settings came."""
    return _settings_check.get()


async def check_settings(settings: definition_pb2.Settings) -> None:
    """ProxyError (FORBIDDEN, naming the user, permission and resource) unless the Telemetry stream's caller may
    claim ``settings``."""
    check = _settings_check.get()
    status = await check(settings) if check is not None else None
    if status is not None:
        raise ProxyError(status.code, status.message)


class BrokerAuthority:
    """Asks a master broker whether a call may proceed: a master of the call's topic first (policies may differ
    between brokers, ``createAcl -b``: the broker that serves the call decides, as it would for an SDK call), else
    any (``mqadmin`` writes users and policies to every broker of a cluster); the next one when a broker does not
    answer."""

    def __init__(self, masters: Callable[[], list[str]], brokers: BrokerChannels, timeout_s: float = 3.0,
                 topic_masters: Callable[[str], Awaitable[list[str]]] | None = None) -> None:
        self._masters = masters  # blocking (the name server): run off the event loop
        self._topic_masters = topic_masters  # a topic's masters from the proxy's route cache ([]: not known)
        self._brokers = brokers
        self._timeout_s = timeout_s
        self._addrs: list[str] = []
        self._read_at = 0.0
        self._kept = False  # the name servers did not answer the last read: the masters read before are used

    async def _addresses(self, refresh: bool) -> list[str]:
        """The masters, read again every 30 s (or when ``refresh``). While no name server answers, the masters
        read last are asked (as clients keep their routes): an outage of the name servers does not refuse calls."""
        if refresh or not self._addrs or time.monotonic() - self._read_at > BROKERS_TTL_S:
            try:
                addrs = sorted(await asyncio.to_thread(self._masters))
            except MQClientError as exc:
                if not self._addrs:
                    raise AclError(grpc.StatusCode.INTERNAL, f"cannot find a broker to check the caller's "
                                                             f"credentials with: {exc}") from None
                if not self._kept:  # once while it lasts
                    log.warning("acl_brokers_kept brokers=%s error=%s: no name server answered; the brokers read "
                                "last are asked", ",".join(self._addrs), exc)
                self._kept = True
                self._read_at = time.monotonic()  # asked for again after the TTL, not at every call
                return self._addrs
            self._addrs, self._read_at, self._kept = addrs, time.monotonic(), False
        return self._addrs

    async def ask(self, request: acl_pb2.AclAuthorizeRequest) -> acl_pb2.AclAuthorizeResponse:
        last = "no master broker is registered"
        topic = next((r.partition(":")[2] for r in request.resources if r.startswith("Topic:")), "")
        first = await self._topic_masters(topic) if topic and self._topic_masters is not None else []
        for refresh in (False, True):
            addrs = await self._addresses(refresh)
            for addr in [*first, *(a for a in addrs if a not in first)]:
                try:
                    return await acl_pb2_grpc.AclServiceStub(self._brokers.channel(addr)).Authorize(
                        request, timeout=self._timeout_s, metadata=inner_metadata())
                except grpc.RpcError as exc:
                    code = exc.code() if hasattr(exc, "code") else None
                    last = f"the broker at {addr}: {code.name if code else 'ERROR'}: " \
                           f"{exc.details() if hasattr(exc, 'details') else exc}"
                    log.warning("acl_authorize_failed addr=%s error=%s", addr, last)
        raise AclError(grpc.StatusCode.INTERNAL, f"cannot check the caller's credentials: {last}")


class ProxyAclInterceptor(grpc.aio.ServerInterceptor):
    """Checks each v2 call (each request of it; a telemetry stream once, when it opens) with ``authority``."""

    def __init__(self, authority: BrokerAuthority, authenticate: bool, authorize: bool) -> None:
        self.authority = authority
        self.authenticate = authenticate
        self.authorize = authorize
        self.refusals = RefusalLog(log)

    async def _check(self, rpc: str, metadata: dict[str, str], request: Any) -> definition_pb2.Status | None:
        """None when the call may proceed (its user recorded: :func:`current_user`), else the status to answer."""
        action = ACTIONS.get(rpc, "") if self.authorize else ""
        resources = v2_resources(request) if action and request is not None else []
        status = await self._ask(rpc, metadata, action, resources, self.authenticate)
        if status is None:
            _user.set(parse_authorization(metadata[AUTH_KEY])[0])  # (_ask refused a call without one)
        return status

    async def _check_settings(self, metadata: dict[str, str], settings: definition_pb2.Settings
                              ) -> definition_pb2.Status | None:
        action, resources = settings_resources(settings)
        if not resources:
            return None
        # Authorization only: the stream was authenticated when it opened, and its date ages while it stays open.
        return await self._ask("Telemetry", metadata, action, resources, authenticate=False)

    async def _ask(self, rpc: str, metadata: dict[str, str], action: str, resources: list[str],
                   authenticate: bool) -> definition_pb2.Status | None:
        try:
            value = metadata.get(AUTH_KEY)
            if not value:
                raise AclError(grpc.StatusCode.UNAUTHENTICATED, "authentication failed: the request is not signed "
                                                                "(no authorization metadata); pass credentials "
                                                                "(access key, secret key)")
            parse_authorization(value)  # a malformed header is refused here, without asking
            answer = await self.authority.ask(acl_pb2.AclAuthorizeRequest(
                authorization=value, date_time=metadata.get(DATE_KEY, ""), authenticate=authenticate,
                authorize=self.authorize, action=action, resources=resources, method=rpc))
        except AclError as exc:
            if exc.status is grpc.StatusCode.INTERNAL:
                return definition_pb2.Status(code=Code.INTERNAL_SERVER_ERROR, message=str(exc))
            answer = acl_pb2.AclAuthorizeResponse(status=exc.status.value[0], message=str(exc))
        if answer.status == grpc.StatusCode.OK.value[0]:
            return None
        code = Code.FORBIDDEN if answer.status == grpc.StatusCode.PERMISSION_DENIED.value[0] else Code.UNAUTHORIZED
        self.refusals.refused(rpc, Code.Name(code), answer.message)
        return definition_pb2.Status(code=code, message=answer.message)

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Any],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_PREFIXES) or not method.startswith(SERVICE):
            return handler
        rpc = method[len(SERVICE):]
        desc = service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name.get(rpc)
        if desc is None:
            return handler
        response_class = getattr(service_pb2, desc.output_type.name)
        metadata = {k: v for k, v in (handler_call_details.invocation_metadata or ()) if isinstance(v, str)}
        check = self._check
        if handler.request_streaming and handler.response_streaming:  # Telemetry: checked once, when it opens
            inner_ss = handler.stream_stream

            async def ss(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                status = await check(rpc, metadata, None)
                if status is not None:
                    yield response_class(status=status)
                    return
                if self.authorize:  # its settings, as they come (client_processor calls check_settings)
                    _settings_check.set(lambda settings: self._check_settings(metadata, settings))
                async for item in inner_ss(requests, context):
                    yield item
            return handler._replace(stream_stream=ss)
        if handler.response_streaming:  # ReceiveMessage
            inner_us = handler.unary_stream

            async def us(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                status = await check(rpc, metadata, request)
                if status is not None:
                    yield response_class(status=status)
                    return
                async for item in inner_us(request, context):
                    yield item
            return handler._replace(unary_stream=us)
        if handler.request_streaming:
            return handler  # MessagingService has none
        inner_uu = handler.unary_unary

        async def uu(request: Any, context: grpc.aio.ServicerContext) -> Any:
            status = await check(rpc, metadata, request)
            if status is not None:
                return response_class(status=status)
            return await inner_uu(request, context)
        return handler._replace(unary_unary=uu)

"""ACL (modelled on RocketMQ 5's ACL 2.0): request signing, its verification, policies, and the server check.

Signing is what the RocketMQ 5 clients do: every call carries the gRPC metadata ``x-mq-date-time`` (UTC,
``20240101T010101Z``) and ``authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time,
Signature=<hex(HMAC-SHA1(secret key, x-mq-date-time))>``. The server looks the access key up, recomputes the
signature (hex in either case) and refuses a date further than :data:`MAX_SKEW_S` from its clock.

Authorization: a super user (and the inner credentials brokers present to each other) may do anything; any other
user needs a policy entry on the resource (``Topic:T``, ``Topic:pre*``, ``Group:G``, ``*``) for the action
(``Pub``, ``Sub``); the most specific matching entries decide, Deny over Allow; no entry is a refusal. Admin RPCs
(see :data:`ADMIN_METHODS`) are for super users only. A call whose resource is known only once its handler read
something (a message by its commitlog offset, a transaction's half message) is checked there: see :class:`Caller`.

The server side is :class:`AclInterceptor`, installed only when authentication or authorization is on; refusals
are gRPC UNAUTHENTICATED (who you are: which check failed) or PERMISSION_DENIED (which permission on which
resource), never naming a secret.
"""

import calendar
import functools
import hashlib
import hmac
import inspect
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from common.topic_validator import (
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_MAX_LENGTH,
    InvalidTopicError,
    conflicts_with_system_topic,
    validate_topic,
)

log = logging.getLogger(__name__)

DATE_KEY = "x-mq-date-time"
AUTH_KEY = "authorization"
ALGORITHM = "MQv2-HMAC-SHA1"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
MAX_SKEW_S = 15 * 60
SUPER = "Super"
NORMAL = "Normal"
PUB, SUB = "Pub", "Sub"
ACTIONS = {"pub": PUB, "sub": SUB, "all": "All"}
ALLOW, DENY = "Allow", "Deny"
ADMIN = "Admin"
T = TypeVar("T")


class AclError(Exception):
    """A request that fails authentication or authorization; ``status`` is what the caller sees."""

    def __init__(self, status: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.status = status


# -- signing ---------------------------------------------------------------------------------------------------
def signature(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def sign(access_key: str, secret_key: str, now: float | None = None) -> list[tuple[str, str]]:
    """The metadata of one signed call."""
    date_time = time.strftime(DATE_FORMAT, time.gmtime(time.time() if now is None else now))
    return [(DATE_KEY, date_time), (AUTH_KEY, f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_KEY}, "
                                              f"Signature={signature(secret_key, date_time)}")]


def check_access_key(access_key: str, what: str = "access key") -> None:
    """ValueError unless ``access_key`` can be carried in the ``authorization`` header and read back as it is:
    gRPC refuses header values outside printable ASCII (and its C core logs about it), the server splits the
    header at ',', reads the key up to the first '/' (upstream's Credential=<ak>/<scope>), and strips spaces."""
    if not access_key:
        raise ValueError(f"{what} is empty")
    if (not all(" " <= c <= "~" for c in access_key) or "," in access_key or "/" in access_key
            or access_key != access_key.strip()):
        raise ValueError(f"{what} {access_key[:64]!r} cannot sign requests: it must be printable ASCII, without "
                         "',' or '/', and not start or end with a space")


def key_pair(access_key: str | None, secret_key: str | None) -> tuple[str, str] | None:
    """The (access key, secret key) a client was given on its command line or environment: both or neither
    (None); ValueError saying what is wrong, before any call (gRPC would log its own complaint about the header)."""
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise ValueError("--access-key and --secret-key go together (or ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY)")
    check_access_key(access_key)
    return access_key, secret_key


class Signer:
    """Signs calls with one key pair; the signature is remade at most once a second (the date's resolution)."""

    def __init__(self, access_key: str, secret_key: str) -> None:
        if not access_key or not secret_key:
            raise ValueError("credentials need a non-empty access key and secret key")
        check_access_key(access_key)
        self.access_key = access_key
        self._secret_key = secret_key
        self._second = -1
        self._metadata: list[tuple[str, str]] = []

    def metadata(self) -> list[tuple[str, str]]:
        now = int(time.time())
        if now != self._second:
            self._metadata = sign(self.access_key, self._secret_key, now)
            self._second = now
        return self._metadata

    def __repr__(self) -> str:  # never the secret
        return f"Signer(access_key={self.access_key!r})"


def _parse_pair(raw: str, key: str, first: str, second: str) -> tuple[str, str]:
    """``{first: .., second: ..}`` -> the two non-empty strings; ValueError naming ``key`` otherwise."""
    try:
        doc = json.loads(raw)
        a, b = doc[first], doc[second]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f'{key} must be JSON {{"{first}":..,"{second}":..}}') from None
    if not isinstance(a, str) or not isinstance(b, str) or not a or not b:
        raise ValueError(f"{key}: {first} and {second} must be non-empty strings")
    check_access_key(a, f"{key}: {first}")  # the user signs with it: refused at start, not at the first call
    return a, b


def parse_credentials(raw: str, key: str = "innerClientAuthenticationCredentials") -> tuple[str, str]:
    """``{"accessKey":..,"secretKey":..}`` -> (ak, sk)."""
    return _parse_pair(raw, key, "accessKey", "secretKey")


def parse_user(raw: str, key: str = "initAuthenticationUser") -> tuple[str, str]:
    """``{"username":..,"password":..}`` -> (username, password)."""
    return _parse_pair(raw, key, "username", "password")


# -- verification ----------------------------------------------------------------------------------------------
def _unauthenticated(message: str) -> AclError:
    return AclError(grpc.StatusCode.UNAUTHENTICATED, message)


def parse_authorization(value: str) -> tuple[str, str, str]:
    """(access key, signed headers, signature) of an ``authorization`` value."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise _unauthenticated(f"authentication failed: authorization algorithm {algorithm[:40]!r} is not "
                               f"{ALGORITHM}")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        name, eq, val = item.strip().partition("=")
        if eq:
            parts[name.strip()] = val.strip()
    missing = [n for n in ("Credential", "SignedHeaders", "Signature") if not parts.get(n)]
    if missing:
        raise _unauthenticated(f"authentication failed: authorization lacks {', '.join(missing)}")
    # Upstream clients may send Credential=<ak>/<scope>: the access key is what comes before the first '/'.
    return parts["Credential"].split("/", 1)[0], parts["SignedHeaders"], parts["Signature"]


def verify(metadata: Mapping[str, str], secret_of: Callable[[str], str | None], now: float | None = None,
           max_skew_s: float = MAX_SKEW_S) -> str:
    """The access key of a correctly signed call; :class:`AclError` (UNAUTHENTICATED) saying which check failed."""
    value = metadata.get(AUTH_KEY)
    if not value:
        raise _unauthenticated("authentication failed: the request is not signed (no authorization metadata); "
                               "pass credentials (access key, secret key)")
    access_key, signed_headers, sig = parse_authorization(value)
    date_time = metadata.get(DATE_KEY)
    if not date_time:
        raise _unauthenticated(f"authentication failed: no {DATE_KEY} metadata")
    if DATE_KEY not in [h.strip().lower() for h in signed_headers.split(";")]:
        raise _unauthenticated(f"authentication failed: SignedHeaders must include {DATE_KEY}")
    try:
        signed_at = _utc_seconds(date_time)
    except ValueError:
        raise _unauthenticated(f"authentication failed: {DATE_KEY} {date_time[:40]!r} is not "
                               "yyyyMMddTHHmmssZ") from None
    skew = (time.time() if now is None else now) - signed_at
    if abs(skew) > max_skew_s:
        raise _unauthenticated(f"authentication failed: {DATE_KEY} {date_time} is {abs(skew):.0f} s from the "
                               f"server's clock (at most {max_skew_s:.0f} s allowed)")
    secret = secret_of(access_key)
    if secret is None:
        raise _unauthenticated(f"authentication failed: unknown access key {access_key[:128]!r}")
    # (as bytes: a str with a character beyond ASCII made compare_digest raise TypeError, answered UNKNOWN)
    if not hmac.compare_digest(signature(secret, date_time).encode(), sig.lower().encode()):
        raise _unauthenticated(f"authentication failed: wrong signature for access key {access_key[:128]!r}")
    return access_key


@functools.lru_cache(maxsize=64)  # one date a second per signer: parsed once, not on every call
def _utc_seconds(date_time: str) -> float:
    return calendar.timegm(time.strptime(date_time, DATE_FORMAT))


# -- policies --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class User:
    username: str
    password: str
    user_type: str = NORMAL

    @property
    def is_super(self) -> bool:
        return self.user_type == SUPER


@dataclass(frozen=True)
class AclEntry:
    resource: str  # "Topic:T", "Topic:pre*", "Group:G", "*"
    actions: tuple[str, ...]  # Pub, Sub, All
    decision: str = ALLOW


@dataclass(frozen=True)
class Policy:
    subject: str  # "User:U"
    entries: tuple[AclEntry, ...] = field(default_factory=tuple)


def normalize_user_type(raw: str) -> str:
    value = (raw or NORMAL).strip().capitalize()
    if value not in (SUPER, NORMAL):
        raise ValueError(f"user type {raw!r} is not Super or Normal")
    return value


def normalize_actions(raw: Iterable[str]) -> tuple[str, ...]:
    out = []
    for a in raw:
        for part in a.split(","):
            if not part.strip():
                continue
            name = ACTIONS.get(part.strip().lower())
            if name is None:
                raise ValueError(f"action {part.strip()!r} is not one of Pub, Sub, All")
            out.append(name)
    if not out:
        raise ValueError("an ACL entry needs at least one action (Pub, Sub, All)")
    return tuple(dict.fromkeys(out))


def normalize_decision(raw: str) -> str:
    value = (raw or ALLOW).strip().capitalize()
    if value not in (ALLOW, DENY):
        raise ValueError(f"decision {raw!r} is not Allow or Deny")
    return value


def normalize_resource(raw: str) -> str:
    raw = raw.strip()
    if raw == "*":
        return raw
    kind, sep, name = raw.partition(":")
    kinds = {"topic": "Topic", "group": "Group"}
    if not sep or kind.strip().lower() not in kinds or not name.strip():
        raise ValueError(f"resource {raw!r} is not Topic:NAME, Topic:PREFIX*, Group:NAME, Group:PREFIX* or *")
    return f"{kinds[kind.strip().lower()]}:{name.strip()}"


def checked_resource(raw: str) -> str:
    """A resource a new entry may name: ``*``, or ``Topic:``/``Group:`` with ``*`` (any of that type), a name
    valid for its type or a prefix pattern ``NAME*`` (what :func:`decide` matches). An entry on a name no topic or
    group can have would match nothing, silently."""
    resource = normalize_resource(raw)
    kind, _, name = resource.partition(":")
    if resource == "*" or name == "*":
        return resource
    try:
        validate_topic(name[:-1] if name.endswith("*") else name)  # groups follow the topic naming rules
    except InvalidTopicError:
        raise ValueError(f"resource {resource[:140]!r} is not {kind}:NAME, {kind}:PREFIX* or {kind}:* (NAME and "
                         f"PREFIX of [%a-zA-Z0-9_-], at most {TOPIC_MAX_LENGTH} characters)") from None
    return resource


def _specificity(pattern: str, resource: str) -> int | None:
    """How closely ``pattern`` matches ``resource`` (higher: more specific); None: no match."""
    if pattern == "*":
        return 0
    if pattern == resource:
        return 1 << 20
    if pattern.endswith("*"):
        stem = pattern[:-1]
        if resource.startswith(stem) and stem.partition(":")[0] == resource.partition(":")[0]:
            return 1 + len(stem)
    return None


def decide(entries: Sequence[AclEntry], resource: str, action: str) -> str | None:
    """Allow, Deny, or None (no entry matches)."""
    best = -1
    decisions: set[str] = set()
    for e in entries:
        if action not in e.actions and "All" not in e.actions:
            continue
        s = _specificity(e.resource, resource)
        if s is None or s < best:
            continue
        if s > best:
            best, decisions = s, set()
        decisions.add(e.decision)
    if not decisions:
        return None
    return ALLOW if decisions == {ALLOW} else DENY  # (fails closed: only Allow allows)


# -- what each RPC needs ---------------------------------------------------------------------------------------
# Methods an ordinary user may not call at all.
ADMIN_METHODS = frozenset({
    "/rmq.BrokerService/UpdateAndCreateTopic", "/rmq.BrokerService/UpdateAndCreateTopicList",
    "/rmq.BrokerService/DeleteTopic", "/rmq.BrokerService/UpdateAndCreateSubscriptionGroup",
    "/rmq.BrokerService/DeleteSubscriptionGroup", "/rmq.BrokerService/UpdateBrokerConfig",
    "/rmq.BrokerService/GetBrokerConfig", "/rmq.BrokerService/UpdateTopicQueueMapping",
    "/rmq.BrokerService/GetAllConsumerOffsets", "/rmq.PopService/GetPopState",
    # Whole tables, every topic's or group's: what replication copies (with the inner credentials) and what
    # operators read. Callers with rights on some topics or groups read theirs with the per-topic/group calls.
    "/rmq.BrokerService/GetAllTopicConfig", "/rmq.BrokerService/GetTopicConfigChanges",
    "/rmq.BrokerService/GetAllSubscriptionGroup", "/rmq.BrokerService/GetAllTopicQueueMapping",
    "/rmq.BrokerService/WaitMetadataChange", "/rmq.BrokerService/GetBrokerStats",
    "/rmq.BrokerService/GetProducerConnectionList", "/rmq.TieredService/GetTieredMetadata",
    "/rmq.ConsumerService/ResetOffsetByTime",
    "/rmq.TieredService/ReplaceSegments", "/rmq.TieredService/MarkExpiredSegments",
    "/rmq.TieredService/DropSegments", "/rmq.TieredService/GetTierCopy",
    "/rmq.KvService/Provision", "/rmq.KvService/ImportSnapshot", "/rmq.KvService/ExportSnapshot",
    "/rmq.HaService/Replicate", "/rmq.HaService/CopyState",
    "/rmq.NamesrvService/RegisterBroker", "/rmq.NamesrvService/UnregisterBroker",
    "/rmq.NamesrvService/DeleteTopicInNamesrv", "/rmq.NamesrvService/WipeWritePermOfBroker",
    "/rmq.NamesrvService/AddWritePermOfBroker",
    "/rmq.ControllerService/ControllerSession", "/rmq.ControllerService/AlterSyncStateSet",
    "/rmq.ControllerService/ElectMaster",
})
ADMIN_SERVICES = ("/rmq.AclService/",)
# Methods checked per request (each item of a stream frame's ``requests``): the action on its topic and group.
PUB_METHODS = frozenset({
    "/rmq.BrokerService/SendMessage", "/rmq.BrokerService/SendMessageStream", "/rmq.BrokerService/RecallMessage",
    "/rmq.TransactionService/EndTransaction",
})
SUB_METHODS = frozenset({
    "/rmq.BrokerService/PullMessage", "/rmq.BrokerService/PullMessageStream",
    "/rmq.BrokerService/UpdateConsumerOffset", "/rmq.BrokerService/QueryConsumerOffset",
    "/rmq.BrokerService/QueryMessage", "/rmq.BrokerService/ViewMessageById",
    "/rmq.PopService/PopMessage", "/rmq.PopService/AckMessage", "/rmq.PopService/ChangeInvisibleTime",
    "/rmq.PopService/ForwardToDeadLetterQueue", "/rmq.PopService/PopMessageStream",
    "/rmq.PopService/AckMessageStream",
    "/rmq.ConsumerService/ConsumerSendMsgBack", "/rmq.ConsumerService/LockBatchMQ",
    "/rmq.ConsumerService/UnlockBatchMQ", "/rmq.ConsumerService/ConsumerSession",
    # a topic's offsets, stats and mapping; a group's progress and members
    "/rmq.BrokerService/GetMinOffset", "/rmq.BrokerService/GetMaxOffset", "/rmq.BrokerService/SearchOffset",
    "/rmq.BrokerService/GetTopicStatsInfo", "/rmq.BrokerService/GetTopicQueueMapping",
    "/rmq.TieredService/GetTieredStatus", "/rmq.BrokerService/GetConsumeStats",
    "/rmq.ConsumerService/GetConsumerList", "/rmq.ConsumerService/GetConsumerConnection",
})
KV_TOPIC = "rmq_sys_KV"
KV_METHODS = {"/rmq.KvService/Write": PUB, "/rmq.KvService/WriteStream": PUB, "/rmq.KvService/Get": SUB,
              "/rmq.KvService/GetStream": SUB, "/rmq.KvService/Scan": SUB}
# Never checked (probes and service discovery).
OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
GROUP_FIELDS = ("consumer_group", "group")
CONSUMER_SESSION = "/rmq.ConsumerService/ConsumerSession"
QUEUE_LIST_METHODS = frozenset({"/rmq.ConsumerService/LockBatchMQ", "/rmq.ConsumerService/UnlockBatchMQ"})


def method_action(method: str) -> str | None:
    """Admin, Pub, Sub, or None (any authenticated user)."""
    if method in ADMIN_METHODS or method.startswith(ADMIN_SERVICES):
        return ADMIN
    if method in PUB_METHODS or KV_METHODS.get(method) == PUB:
        return PUB
    if method in SUB_METHODS or KV_METHODS.get(method) == SUB:
        return SUB
    return None


def request_resources(method: str, request: Any) -> list[str]:
    """The resources one request (or stream frame) names: ``Topic:T`` and ``Group:G``."""
    if method in KV_METHODS:
        return [f"Topic:{KV_TOPIC}"]
    if method == CONSUMER_SESSION:
        return _heartbeat_resources(request)
    items = getattr(request, "requests", None)
    if items is None or isinstance(request, (str, bytes)):
        items = [request]
    out: list[str] = []
    consuming = method in SUB_METHODS  # a consumer's own retries (%RETRY%G) are its group's, as in its session
    for item in items:
        topic = getattr(item, "topic", "")
        if isinstance(topic, str) and topic:
            out.append(subscribed_topic_resource(topic) if consuming else f"Topic:{topic}")
        for name in GROUP_FIELDS:
            group = getattr(item, name, "")
            if isinstance(group, str) and group:
                out.append(f"Group:{group}")
                break
        if method in QUEUE_LIST_METHODS:  # the queues' topics: no lease on another's queues
            out += [subscribed_topic_resource(q.topic) for q in getattr(item, "queues", ()) if q.topic]
    return list(dict.fromkeys(out))


def subscribed_topic_resource(topic: str) -> str:
    """The resource a consumer's use of ``topic`` needs: ``%RETRY%G`` (which consumers of G subscribe to by
    themselves) is G's (upstream's ACL 2.0 checks only the group there); any other topic is itself."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and len(topic) > len(RETRY_GROUP_TOPIC_PREFIX):
        return f"Group:{topic[len(RETRY_GROUP_TOPIC_PREFIX):]}"
    return f"Topic:{topic}"


def _heartbeat_resources(frame: Any) -> list[str]:
    """A ConsumerSession frame names no top-level topic or group: each consumer's group, subscribed topics and the
    queues it says it holds (joining a group takes queues from its members; it also creates the group)."""
    out: list[str] = []
    for consumer in getattr(frame, "consumers", ()):
        if consumer.group:
            out.append(f"Group:{consumer.group}")
        out += [subscribed_topic_resource(s.topic) for s in consumer.subscriptions if s.topic]
        out += [subscribed_topic_resource(q.topic) for q in consumer.queues if q.topic]
    return list(dict.fromkeys(out))


class Authority:
    """What a server knows about callers: secrets by access key, super users, policies. Subclasses (the broker's
    ACL store) read their tables; this one knows only fixed users (the name server's)."""

    def __init__(self, users: Iterable[User] = ()) -> None:
        self._fixed = {u.username: u for u in users}

    def user(self, access_key: str) -> User | None:
        return self._fixed.get(access_key)

    def entries(self, username: str) -> Sequence[AclEntry]:
        return ()

    def secret_of(self, access_key: str) -> str | None:
        u = self.user(access_key)
        return u.password if u is not None else None

    def check(self, username: str, action: str, resources: Sequence[str], method: str) -> None:
        """Raise PERMISSION_DENIED unless ``username`` may do ``action`` on every resource."""
        u = self.user(username)
        if u is not None and u.is_super:
            return
        rpc = method.rsplit("/", 1)[-1]
        if action == ADMIN:
            raise AclError(grpc.StatusCode.PERMISSION_DENIED, f"authorization failed: user {username!r} may not "
                           f"call {rpc}: it needs the admin permission (a Super user)")
        entries = self.entries(username)
        for resource in resources:
            # A group needs Sub; a topic the method's action.
            needed = SUB if resource.startswith("Group:") else action
            if _broker_topic(resource) and method not in KV_METHODS:
                # they hold other topics' messages (half messages, timers): a grant on "*" or a prefix must not
                # open them (the KV store's topic is reached through the KV calls, checked as its own resource)
                raise AclError(grpc.StatusCode.PERMISSION_DENIED, f"authorization failed: user {username!r} has no "
                               f"{needed} permission on {resource} ({rpc}): a system topic, for Super users only")
            if decide(entries, resource, needed) != ALLOW:
                raise AclError(grpc.StatusCode.PERMISSION_DENIED, f"authorization failed: user {username!r} has no "
                               f"{needed} permission on {resource} ({rpc})")


def _broker_topic(resource: str) -> bool:
    return resource.startswith("Topic:") and conflicts_with_system_topic(resource[len("Topic:"):])


# -- checks a handler makes itself ----------------------------------------------------------------------------
# Some calls name no resource until the handler reads it (a message by its commitlog offset, the half message a
# transaction ends, the checks a producer's session is sent): the interceptor records who calls, and the handler
# checks what it read with :func:`check_topic` (or asks its :class:`Caller`).
@dataclass(frozen=True)
class Caller:
    """The user of the call being served, as the interceptor identified them, and the authority deciding."""

    username: str
    authority: Authority

    def check_topic(self, topic: str, action: str, method: str) -> None:
        """PERMISSION_DENIED unless the user may do ``action`` on ``topic`` (the broker's own topics: Super users
        only, see :meth:`Authority.check`)."""
        self.authority.check(self.username, action, [f"Topic:{topic}"], method)

    def may(self, topic: str, action: str, method: str) -> bool:
        try:
            self.check_topic(topic, action, method)
        except AclError:
            return False
        return True


_caller: ContextVar[Caller | None] = ContextVar("acl_caller", default=None)


def current_caller() -> Caller | None:
    """Who makes the call being served; None when nothing is authorized (ACL off, or authentication only)."""
    return _caller.get()


def check_topic(topic: str, action: str, method: str) -> None:
    """PERMISSION_DENIED (:class:`AclError`) unless the current caller may do ``action`` on ``topic``; nothing to
    check when no caller is recorded. A handler raising it answers with :func:`acl_refusals`."""
    caller = _caller.get()
    if caller is not None:
        caller.check_topic(topic, action, method)


async def acl_refusals(context: grpc.aio.ServicerContext, call: Awaitable[T]) -> T:
    """``call``'s result; a refusal it raised (a check the handler made) ends the call with its status."""
    try:
        return await call
    except AclError as exc:
        await context.abort(exc.status, str(exc))
        raise AssertionError("unreachable: abort raises") from None


UNAUTHENTICATED_AUTHORIZATION = (
    "authorization is on without authentication: the server cannot verify signatures, so ANY caller can claim ANY "
    "user (a Super user included) by naming it in the authorization header; turn authentication on too")


def warn_authorization_without_authentication(authenticate: bool, authorize: bool, where: str) -> None:
    """One loud line at start when users are trusted on their word (upstream allows this setup too)."""
    if authorize and not authenticate:
        log.warning("acl_authorization_without_authentication %s: %s", where, UNAUTHENTICATED_AUTHORIZATION)


# -- the server check ------------------------------------------------------------------------------------------
class AclInterceptor(grpc.aio.ServerInterceptor):
    """Authentication (``authenticate``) and authorization (``authorize``) of every call but health/reflection.
    ``checked_methods``: when given, methods it says False to pass unchecked (the name server's route reads)."""

    def __init__(self, authority: Authority, authenticate: bool = True, authorize: bool = True,
                 max_skew_s: float = MAX_SKEW_S, checked_methods: Callable[[str], bool] | None = None) -> None:
        self.authority = authority
        self.authenticate = authenticate
        self.authorize = authorize
        self.max_skew_s = max_skew_s
        self.checked_methods = checked_methods

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Any],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        if self.checked_methods is not None and not self.checked_methods(method):
            return handler
        metadata = {k: v for k, v in (handler_call_details.invocation_metadata or ())
                    if isinstance(v, str)}
        try:
            username = self._who(metadata)
        except AclError as exc:
            return _refusing(handler, exc)
        # A stream's frames come long after it opened: a changed password or a deleted user ends it at its next
        # frame (its client opens it again with the credentials it has now), as authorization does per frame.
        unchanged = self._credentials_unchanged(username) if handler.request_streaming else None
        each_frame = None if unchanged is None else (lambda _request: unchanged())
        if not self.authorize or username is None:
            return handler if each_frame is None else _checking(handler, each_frame, None)
        action = method_action(method)
        try:
            if action == ADMIN:
                self.authority.check(username, ADMIN, (), method)
                return handler if each_frame is None else _checking(handler, each_frame, None)
        except AclError as exc:
            return _refusing(handler, exc)
        caller = Caller(username, self.authority)  # for checks the handler makes on what it reads
        if action is None:
            return _checking(handler, each_frame, caller)

        def check(request: Any) -> None:
            if unchanged is not None:
                unchanged()
            self.authority.check(username, action, request_resources(method, request), method)
        return _checking(handler, check, caller)

    def _credentials_unchanged(self, username: str | None) -> Callable[[], None] | None:
        """For an authenticated stream: a check that its user still has the secret the stream was opened with."""
        if not self.authenticate or username is None:
            return None
        secret = self.authority.secret_of(username)

        def unchanged() -> None:
            if self.authority.secret_of(username) != secret:
                raise _unauthenticated(f"authentication failed: the credentials of access key {username[:128]!r} "
                                       "changed or were removed while this stream was open")
        return unchanged

    def _who(self, metadata: Mapping[str, str]) -> str | None:
        if self.authenticate:
            return verify(metadata, self.authority.secret_of, max_skew_s=self.max_skew_s)
        # authorization without authentication: trust the credential named (upstream does the same)
        value = metadata.get(AUTH_KEY)
        if not value:
            raise _unauthenticated("authorization needs a signed request: no authorization metadata")
        return parse_authorization(value)[0]


def _refusing(handler: Any, exc: AclError) -> Any:
    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(exc.status, str(exc))

    async def refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort(exc.status, str(exc))
        yield  # pragma: no cover  # an async generator

    return _replace_behavior(handler, refuse, refuse_stream)


def _checking(handler: Any, check: Callable[[Any], None] | None, caller: Caller | None) -> Any:
    """The handler run as ``caller`` (:func:`current_caller`; None: nothing is authorized), each request checked
    first (each frame of a request stream) when ``check`` is given."""
    if handler.request_streaming:
        def checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            return requests if check is None else _checked_requests(requests, context, check)

        if handler.response_streaming:
            inner_ss = handler.stream_stream
            if inspect.isasyncgenfunction(inner_ss):
                async def ss(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                    _caller.set(caller)
                    async for item in inner_ss(checked(requests, context), context):
                        yield item
                return handler._replace(stream_stream=ss)

            async def ss_writing(requests: Any, context: grpc.aio.ServicerContext) -> Any:
                _caller.set(caller)
                return await inner_ss(checked(requests, context), context)
            return handler._replace(stream_stream=ss_writing)
        inner_su = handler.stream_unary

        async def su(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            _caller.set(caller)
            return await inner_su(checked(requests, context), context)
        return handler._replace(stream_unary=su)

    async def enter(request: Any, context: grpc.aio.ServicerContext) -> None:
        _caller.set(caller)
        try:
            if check is not None:
                check(request)
        except AclError as exc:
            await context.abort(exc.status, str(exc))

    if handler.response_streaming and not inspect.isasyncgenfunction(handler.unary_stream):
        inner_uw = handler.unary_stream

        async def us_writing(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await enter(request, context)
            return await inner_uw(request, context)
        return handler._replace(unary_stream=us_writing)
    if handler.response_streaming:
        inner_us = handler.unary_stream

        async def us(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await enter(request, context)
            async for item in inner_us(request, context):
                yield item
        return handler._replace(unary_stream=us)
    inner_uu = handler.unary_unary

    async def uu(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await enter(request, context)
        return await inner_uu(request, context)
    return handler._replace(unary_unary=uu)


async def _checked_requests(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext,
                            check: Callable[[Any], None]) -> AsyncIterator[Any]:
    async for request in requests:
        try:
            check(request)
        except AclError as exc:
            await context.abort(exc.status, str(exc))
        yield request


def _replace_behavior(handler: Any, unary: Any, streaming: Any) -> Any:
    if handler.request_streaming and handler.response_streaming:
        return handler._replace(stream_stream=streaming)
    if handler.request_streaming:
        return handler._replace(stream_unary=unary)
    if handler.response_streaming:
        return handler._replace(unary_stream=streaming)
    return handler._replace(unary_unary=unary)


# -- the client side -------------------------------------------------------------------------------------------
class _SigningInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                          grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    def __init__(self, signer: Signer) -> None:
        self.signer = signer

    def _details(self, details: Any) -> Any:
        metadata = [*(details.metadata or ()), *self.signer.metadata()]
        return _CallDetails(details.method, details.timeout, metadata, details.credentials,
                            getattr(details, "wait_for_ready", None), getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method: str, timeout: Any, metadata: Any, credentials: Any, wait_for_ready: Any,
                 compression: Any) -> None:
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression


def signed_channel(channel: grpc.Channel, signer: Signer | None) -> grpc.Channel:
    """``channel`` signing every call with ``signer`` (unchanged when None)."""
    if signer is None:
        return channel
    return grpc.intercept_channel(channel, _SigningInterceptor(signer))


def signer_of(credentials: tuple[str, str] | None) -> Signer | None:
    return Signer(*credentials) if credentials else None


# Process-wide credentials of a daemon's own outgoing calls (innerClientAuthenticationCredentials): set once at
# start by a broker or the proxy, read where they open channels.
_inner: Signer | None = None


def set_inner_credentials(credentials: tuple[str, str] | None) -> None:
    global _inner
    _inner = signer_of(credentials)


def inner_metadata() -> list[tuple[str, str]] | None:
    """Metadata for one outgoing call of a daemon (None when no inner credentials are set)."""
    return _inner.metadata() if _inner is not None else None

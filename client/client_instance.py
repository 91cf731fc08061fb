"""Shared plumbing of producers, consumers and admin: name server look-ups, the route cache, channels."""

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, TypeVar

import grpc

from client import fork_safety
from client.errors import MQClientError
from client.grpc_errors import business_error, rpc_error
from client.replica_health import DownAddresses, channel_connected, live_master, read_replica, unreachable
from client.retry_threads import RetryThreads
from client.rpc_stream import DEFAULT_WINDOW, RpcStream
from client.static_route import (
    VIRTUAL_BROKER_NAME,
    has_unled_logic_queue,
    is_static,
    logic_queue_leaders,
    master_of,
    static_queues,
)
from client.switch_interval import lower_switch_interval
from common import tls
from common.acl import signed_channel, signer_of
from common.address import check_address
from common.message_queue import MessageQueue
from common.perm import PERM_INHERIT, is_readable, is_writeable
from common.response_code import ResponseCode
from common.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC
from proto import broker_pb2, broker_pb2_grpc, common_pb2, kv_pb2, namesrv_pb2, namesrv_pb2_grpc, pop_pb2

log = logging.getLogger(__name__)
T = TypeVar("T")
S = TypeVar("S")

ROUTE_TTL_S = 30.0
# A borrowed TBW102 route is replaced by the real one soon after the first send; a static topic's route with a logic
# queue nobody leads yet (its brokers register their parts of the mapping one by one, or a remap is under way) is
# asked for again as soon, so its leader is found within seconds, not after the 30 s.
SHORT_ROUTE_TTL_S = 2.0
# The name servers did not answer a route refresh: the last route is used, and they are asked again this much later
# (not at every call: a name server that stalls holds each call for the RPC timeout).
STALE_ROUTE_RETRY_S = 30.0
# While a group has no live master, reads come from a slave: a route this old is fetched again, so they return to
# the master (or a newly promoted one) soon after the name server names it, without a fetch per read. Short: a
# controller promotes within tens of milliseconds, and a route fetched just before that would otherwise keep
# keyed sends on the dead master for as long as it is cached.
DEGRADED_ROUTE_MAX_AGE_S = 0.2
# Routes borrowed from TBW102 for names the name server does not know (a proxy's clients may ask any name): one not
# borrowed again within ROUTE_TTL_S is forgotten (its topic was created since, or is not used), and at most this many
# are kept, the oldest forgotten first. A borrowed route is short-lived: forgetting it costs at most a lookup.
MAX_BORROWED_ROUTES = 1024
# A name server that answers TOPIC_NOT_EXIST for a topic whose route a client has may have restarted a moment ago: it
# knows no topic until the brokers register again, within their registerNameServerPeriod (30 s by default), so the
# route is kept meanwhile. Kept for ever, a deleted topic's route stayed in every client (a proxy told its clients
# the topic still existed, and grew by a route per deleted topic): once the name servers have not known the topic
# for this long since their first such answer, longer than a registration period, its route is forgotten.
UNKNOWN_TOPIC_GRACE_S = 60.0
# A route not asked for this long (a used one is asked for every ROUTE_TTL_S) is forgotten, looked at every
# ROUTE_TTL_S after a name server answered a lookup (never during an outage, when cached routes are all there is):
# a topic deleted and never used since, or used once long ago, does not stay cached for the client's life.
IDLE_ROUTE_FORGET_S = 600.0
# A channel to an address no cached route names is closed once it stayed so this long and is not connected: gRPC
# reconnects a failed channel by itself (every second, common/tls.py), so a dead broker's channel (a restart on a new
# port, a scale-in) cost a connect a second for the life of the process. One still connected is kept (an address a
# caller named, such as an admin call's).
UNROUTED_CHANNEL_CLOSE_S = 60.0
# A name server that let a call time out (hung) is not asked for a second opinion for this long (a new topic's
# lookup asks the others after a TOPIC_NOT_EXIST): a hung one cost every new topic's first send a whole timeout. One
# that refuses connections fails fast, and is asked still.
NAMESRV_QUIET_S = 30.0
_NO_REPLICAS: Mapping[int, str] = MappingProxyType({})
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 256 * 1024 * 1024),
                   ("grpc.max_send_message_length", 256 * 1024 * 1024)]


_cache_only: ContextVar[bool] = ContextVar("route_cache_only", default=False)


class RouteNotCached(MQClientError):
    """A route was needed that the cache could not give, within :meth:`ClientInstance.cache_only`."""


def namesrv_addrs(addr: str | None) -> list[str]:
    raw = addr or os.environ.get("NAMESRV_ADDR", "")
    addrs = [a.strip() for a in raw.split(";") if a.strip()]
    if not addrs:
        raise MQClientError("no name server address: pass one or set NAMESRV_ADDR")
    for a in addrs:
        checked_address(a, "name server address")
    return addrs


def checked_address(addr: str, what: str = "address") -> str:
    """``addr`` if it is ``host:port`` with a valid port; MQClientError naming ``what`` otherwise."""
    try:
        return check_address(addr)
    except ValueError as exc:
        raise MQClientError(f"{what} {exc}") from None


def _brokers_unheard(answer: namesrv_pb2.GetRouteInfoResponse, cached: common_pb2.TopicRouteData) -> list[str]:
    """The broker names ``cached`` routes the topic to that a warming name server's ``answer`` lacks because it
    has not heard from them since it started ([] for an answer of a name server past its warm-up)."""
    if not answer.warming_up:
        return []
    have = {bd.broker_name for bd in answer.route.broker_datas} | set(answer.brokers_heard)
    return sorted(bd.broker_name for bd in cached.broker_datas if bd.broker_name not in have)


def borrowed_route(default: common_pb2.TopicRouteData) -> common_pb2.TopicRouteData:
    """TBW102's route restricted to brokers that let new topics inherit it."""
    route = common_pb2.TopicRouteData()
    route.CopyFrom(default)
    del route.queue_datas[:]
    route.queue_datas.extend(qd for qd in default.queue_datas if qd.perm & PERM_INHERIT)
    return route


class ClientInstance:
    def __init__(self, namesrv_addr: str | None, rpc_timeout_s: float = 10.0,
                 down: DownAddresses | None = None, tls_ca: str | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        lower_switch_interval()
        self.namesrv_addrs = namesrv_addrs(namesrv_addr)
        # ACL: (access key, secret key) every call is signed with (RocketMQ 5's MQv2-HMAC-SHA1), or None
        try:
            self.signer = signer_of(credentials)
        except (TypeError, ValueError) as exc:
            raise MQClientError(f"credentials: {exc}") from None
        self.rpc_timeout_s = rpc_timeout_s
        self.down = down or DownAddresses()  # broker addresses that just failed as dead ones do
        # TLS: the CA file the servers' certificates are checked against (None: the process's own, else plaintext)
        try:
            self.tls_ca = tls.read_ca(tls_ca) if tls_ca else None
        except tls.TlsError as exc:
            raise MQClientError(str(exc)) from None
        self._channels: dict[str, grpc.Channel] = {}
        # A generated stub builds a callable per method of its service (~270 us for BrokerService): made once per
        # (service, address), not per call.
        self._stubs: dict[tuple[object, str], Any] = {}
        self._streams: dict[tuple[str, str], RpcStream] = {}
        self.retry_threads = RetryThreads()  # retries decided on a stream's threads run there
        self._routes: dict[str, tuple[float, common_pb2.TopicRouteData]] = {}
        self._route_failed_at: dict[str, float] = {}  # topic -> when its name servers last failed to answer
        self._stale_routes: dict[str, float] = {}  # topic -> when its cached route was found out of date
        self._route_locks: dict[str, threading.Lock] = {}  # topic -> held while its route is asked for
        self._route_lock_users: dict[str, int] = {}  # topic -> lookups holding or waiting for its lock
        # topic -> when the name servers first answered they do not know it while its route was kept
        self._unknown_since: dict[str, float] = {}
        self._idle_swept_at = time.monotonic()
        self._unrouted_since: dict[str, float] = {}  # address of a channel -> when no cached route named it first
        # Told the name of each topic whose route is forgotten (what a user keeps per topic can go too); called on
        # the thread that forgot it, maybe with this instance's lock held: quick, and no call back into it.
        self.on_route_forgotten: list[Callable[[str], None]] = []
        # topic -> (when, the TBW102 route it borrowed), oldest first; changed with self._lock held
        self._borrowed: dict[str, tuple[float, common_pb2.TopicRouteData]] = {}
        # What is read from a route on every call, made once per route fetched (``_per_route``): its groups as
        # {broker name: {broker id: address}}; a static topic's logic queue count and leaders; the writable queues.
        self._groups: dict[str, tuple[common_pb2.TopicRouteData, dict[str, dict[int, str]]]] = {}
        self._static_views: dict[str, tuple[common_pb2.TopicRouteData, tuple[int, dict[int, str]]]] = {}
        self._publish_queues: dict[str, tuple[common_pb2.TopicRouteData, tuple[MessageQueue, ...]]] = {}
        self._lock = threading.Lock()
        self._namesrv_index = 0
        self._namesrv_failed: dict[str, float] = {}  # address: when a call to it last timed out
        self._closed = False
        self._closed_why = "the client is closed"
        fork_safety.track(self)

    # -- channels ----------------------------------------------------------------------------------
    def channel(self, addr: str) -> grpc.Channel:
        ch = self._channels.get(addr)
        if ch is None:
            with self._lock:
                if self._closed:  # a channel opened now would never be closed (nor its stream's threads end)
                    raise MQClientError(f"{self._closed_why}: no call to {addr}")
                ch = self._channels.get(addr)
                if ch is None:
                    checked_address(addr)  # an address given to an SDK call (a broker's, an id's): not yet checked
                    ch = self._channels[addr] = signed_channel(tls.channel(addr, CHANNEL_OPTIONS, self.tls_ca),
                                                               self.signer)
        return ch

    def stub(self, stub_class: Callable[[grpc.Channel], S], addr: str) -> S:
        """The ``stub_class`` (a generated ``...ServiceStub``) on the channel to ``addr``."""
        key = (stub_class, addr)
        stub = self._stubs.get(key)
        if stub is None:
            stub = self._stubs[key] = stub_class(self.channel(addr))  # a race makes two equal stubs: harmless
        return stub

    def broker(self, addr: str) -> broker_pb2_grpc.BrokerServiceStub:
        return self.stub(broker_pb2_grpc.BrokerServiceStub, addr)

    def send_stream(self, addr: str) -> RpcStream:
        """The long-lived send stream to the broker at ``addr`` (opened on first use, reopened after a break)."""
        return self._stream(addr, "SendMessageStream", broker_pb2.SendStreamAnswers, DEFAULT_WINDOW)

    def pull_stream(self, addr: str) -> RpcStream:
        """Without a window: a parked long-polling pull holds its place until it is answered (a push consumer
        parks one a queue); what a pull may bring back is bounded by the pull itself."""
        return self._stream(addr, "PullMessageStream", broker_pb2.PullStreamAnswers, None)

    def pop_stream(self, addr: str) -> RpcStream:
        """POP's stream: like pulls, a long-polling pop holds its place until it is answered."""
        return self._stream(addr, "PopMessageStream", pop_pb2.PopStreamAnswers, None, service="rmq.PopService")

    def ack_stream(self, addr: str) -> RpcStream:
        return self._stream(addr, "AckMessageStream", pop_pb2.AckStreamAnswers, DEFAULT_WINDOW,
                            service="rmq.PopService")

    def kv_write_stream(self, addr: str) -> RpcStream:
        """KV writes: those in flight together join one group commit on the broker and come back in one frame."""
        return self._stream(addr, "WriteStream", kv_pb2.KvWriteAnswers, DEFAULT_WINDOW, service="rmq.KvService")

    def kv_get_stream(self, addr: str) -> RpcStream:
        """KV gets: one stream a broker, as for writes."""
        return self._stream(addr, "GetStream", kv_pb2.KvGetAnswers, DEFAULT_WINDOW, service="rmq.KvService")

    def _stream(self, addr: str, method: str, answers_class: Any, window: int | None,
                service: str = "rmq.BrokerService") -> RpcStream:
        stream = self._streams.get((addr, method))
        if stream is None:
            open_call = self.open_stream(addr, method, answers_class, service)
            with self._lock:
                if self._closed:
                    raise MQClientError(f"{self._closed_why}: no {method} to {addr}")
                stream = self._streams.get((addr, method))
                if stream is None:
                    stream = self._streams[addr, method] = RpcStream(open_call, f"{method}-{addr}", window)
        return stream

    def open_stream(self, addr: str, method: str, answers_class: Any,
                    service: str = "rmq.BrokerService") -> Callable[..., Any]:
        """A stream method (of BrokerService unless said) taking frames as the bytes ``RpcStream`` encodes."""
        return self.channel(addr).stream_stream(f"/{service}/{method}", request_serializer=None,
                                                response_deserializer=answers_class.FromString)

    def namesrv(self, addr: str) -> namesrv_pb2_grpc.NamesrvServiceStub:
        return self.stub(namesrv_pb2_grpc.NamesrvServiceStub, addr)

    def call_namesrv(self, what: str, call: Callable[[namesrv_pb2_grpc.NamesrvServiceStub], T],
                     settled: Callable[[T], bool] | None = None, fullness: Callable[[T], int] = lambda _: 0) -> T:
        """Ask the name servers in turn until one answers, starting at the one that answered last. ``settled``: an
        answer it says no to (a name server warming up after a restart) is taken only when no other one answers
        settled, and then the one ``fullness`` ranks highest (the first of those)."""
        last: grpc.RpcError | None = None
        unsettled: T | None = None
        count, start = len(self.namesrv_addrs), self._namesrv_index
        for i in range(count):
            index = (start + i) % count
            addr = self.namesrv_addrs[index]
            try:
                answer = call(self.namesrv(addr))
            except grpc.RpcError as exc:
                if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:
                    raise rpc_error(what, addr, exc) from None
                if exc.code() is grpc.StatusCode.UNIMPLEMENTED:  # something else serves gRPC there
                    raise MQClientError(self.not_a_namesrv(addr)) from None
                self._note_namesrv_failure(addr, exc)
                last = exc
                continue
            self._namesrv_failed.pop(addr, None)
            if settled is not None and not settled(answer):
                if unsettled is None or fullness(answer) > fullness(unsettled):
                    unsettled = answer
                continue
            self._namesrv_index = index
            return answer
        if unsettled is not None:
            return unsettled
        assert last is not None
        raise rpc_error(what, ";".join(self.namesrv_addrs), last) from None

    def not_a_namesrv(self, addr: str) -> str:
        """Why ``addr`` answered a name server call UNIMPLEMENTED: a broker (asked for its name), or else."""
        try:
            table = self.broker(addr).GetBrokerRuntimeInfo(common_pb2.Empty(), timeout=self.rpc_timeout_s).table
        except grpc.RpcError:
            return f"{addr} is not a name server (it does not serve the name server API)"
        name = table.get("brokerName", "")
        return f"{addr} is a broker{f' ({name})' if name else ''}, not a name server"

    def not_a_broker(self, addr: str) -> str:
        """Why ``addr`` answered a broker call UNIMPLEMENTED: a name server, or else (the reverse of
        :meth:`not_a_namesrv`)."""
        try:
            self.namesrv(addr).GetBrokerClusterInfo(common_pb2.Empty(), timeout=self.rpc_timeout_s)
        except grpc.RpcError:
            return f"{addr} is not a broker (it does not serve the broker API)"
        return f"{addr} is a name server, not a broker"

    # -- routes ------------------------------------------------------------------------------------
    def route(self, topic: str, refresh: bool = False, for_publish: bool = False,
              max_age_s: float = ROUTE_TTL_S) -> common_pb2.TopicRouteData:
        """The topic's route (cached for 30 s, or ``max_age_s``). ``for_publish``: a topic the name server does
        not know borrows the route of TBW102, served by brokers that create topics on first send. When no name
        server answers, the last route is used (as upstream's clients do: brokers outlive a name server outage),
        even for ``refresh``; they are asked again after :data:`STALE_ROUTE_RETRY_S`, or at once after an
        :meth:`invalidate_route` (once per call of it).

        One lookup of a topic asks the name server at a time. The others wait for it, and take its answer if they
        would have taken it from the cache, or it was asked for after they asked (a ``refresh`` or an
        invalidation needs a route newer than itself); its failure, if it failed after they asked. A stalled name
        server holds one call a topic, not one per retrying send."""
        cached = self._routes.get(topic)
        asked_at = time.monotonic()
        stale_since = self._stale_routes.get(topic)
        if cached is not None and not refresh and asked_at - cached[0] < max_age_s and stale_since is None:
            return cached[1]
        if cached is not None and self._failed_since(topic, asked_at - STALE_ROUTE_RETRY_S, stale_since):
            return cached[1]
        if _cache_only.get():
            raise RouteNotCached(f"the route of {topic} is not cached")
        with self._route_lock(topic):
            cached = self._routes.get(topic)
            stale_since = self._stale_routes.get(topic)
            if cached is not None:  # looked up while this call waited?
                fresh = cached[0] >= asked_at or (not refresh and time.monotonic() - cached[0] < max_age_s)
                if (fresh and stale_since is None) or self._failed_since(topic, asked_at, stale_since):
                    return cached[1]
            return self._look_up(topic, cached, for_publish)

    def _failed_since(self, topic: str, since: float, stale_since: float | None) -> bool:
        """Whether the name servers last failed to give the route after ``since``, and after the route was last
        found out of date (``stale_since``)."""
        failed_at = self._route_failed_at.get(topic)
        return failed_at is not None and failed_at >= since and (stale_since is None or stale_since <= failed_at)

    @contextlib.contextmanager
    def _route_lock(self, topic: str) -> Iterator[None]:
        """Held while the topic's route is asked for. Its entry lasts while the topic has a cached route or a lookup
        uses it: a name with no route (a topic that does not exist) leaves nothing behind."""
        with self._lock:
            lock = self._route_locks.get(topic)
            if lock is None:
                lock = self._route_locks[topic] = threading.Lock()
            self._route_lock_users[topic] = self._route_lock_users.get(topic, 0) + 1
        try:
            with lock:
                yield
        finally:
            with self._lock:
                users = self._route_lock_users.pop(topic) - 1
                if users:
                    self._route_lock_users[topic] = users
                elif topic not in self._routes:
                    self._route_locks.pop(topic, None)

    def _look_up(self, topic: str, cached: tuple[float, common_pb2.TopicRouteData] | None,
                 for_publish: bool) -> common_pb2.TopicRouteData:
        """Ask the name servers for the route (the topic's lookup lock held)."""
        started = time.monotonic()
        try:
            response = self._fetch_route(topic)
        except RouteNotCached:
            raise
        except MQClientError as exc:
            if cached is None or self._closed:  # closed: no outage to ride out
                raise
            return self._keep_cached(topic, cached, f"no name server answered ({exc})")
        self._forget_idle_routes(started)  # a name server answered: routes not used for long can be asked again
        if response.code == ResponseCode.TOPIC_NOT_EXIST and cached is not None and cached[1].broker_datas:
            # A name server restarted a moment ago knows no topic until the brokers register again (within their
            # registerNameServerPeriod): as upstream, the route a client has stays, for UNKNOWN_TOPIC_GRACE_S from
            # the first such answer (meanwhile a deleted topic's brokers refuse its sends and pulls themselves).
            unknown_since = self._unknown_since.setdefault(topic, started)
            if started - unknown_since < UNKNOWN_TOPIC_GRACE_S:
                return self._keep_cached(topic, cached, "the name servers do not know the topic (restarted?)")
            self._forget_route(topic, f"the name servers have not known the topic for {started - unknown_since:.0f} s "
                                      "(deleted, or all its brokers gone)", warn=True)
            cached = None  # answered as for a name never routed (a topic to create borrows TBW102's route)
        if self._route_failed_at.pop(topic, None) is not None:
            log.info("route_refreshed topic=%s after_s=%.0f", topic, started - cached[0] if cached else 0.0)
        if response.code == ResponseCode.TOPIC_NOT_EXIST and for_publish and topic != AUTO_CREATE_TOPIC_KEY_TOPIC:
            default = self._fetch_route(AUTO_CREATE_TOPIC_KEY_TOPIC)
            if default.code == ResponseCode.SUCCESS:
                route = borrowed_route(default.route)
                self._routes[topic] = (_short_lived(), route)
                self._up_to_date(topic, started)
                self._note_borrowed(topic, route)
                return route
        if response.code != ResponseCode.SUCCESS:
            self._forget(topic)
            raise business_error(f"route of {topic}", "name server", response.code, response.remark)
        if cached is not None and _brokers_unheard(response, cached[1]):
            # A name server restarted a moment ago has not heard from every broker yet: its route would drop live
            # brokers (a static topic's logic queues they lead, KV shards) until they register again, up to their
            # registerNameServerPeriod. Another name server may know them all; else the cached route stays.
            response = self._complete_route(topic, response, cached[1])
            unheard = _brokers_unheard(response, cached[1])
            if unheard:
                return self._keep_cached(topic, cached, "a name server restarted a moment ago and has not heard from "
                                                        f"{', '.join(unheard)} yet")
        # As of when it was asked for; one with a logic queue nobody leads, as of a time that makes it expire soon.
        self._routes[topic] = (_short_lived() if has_unled_logic_queue(response.route) else started, response.route)
        self._up_to_date(topic, started)
        self._unknown_since.pop(topic, None)  # known again (the brokers registered with a restarted name server)
        if topic in self._borrowed:  # created since it borrowed TBW102's route
            with self._lock:
                self._borrowed.pop(topic, None)
        return response.route

    def _keep_cached(self, topic: str, cached: tuple[float, common_pb2.TopicRouteData],
                     why: str) -> common_pb2.TopicRouteData:
        """The last route of ``topic`` stays in use, asked for again every ``STALE_ROUTE_RETRY_S``."""
        now = time.monotonic()
        if self._route_failed_at.get(topic) is None:  # once while it lasts
            log.warning("route_kept topic=%s age_s=%.0f why=%r: the last route is used, and asked for again every "
                        "%g s", topic, now - cached[0], why, STALE_ROUTE_RETRY_S)
        self._route_failed_at[topic] = now
        return cached[1]

    def _note_borrowed(self, topic: str, route: common_pb2.TopicRouteData) -> None:
        """``topic`` borrowed ``route``: keep it newest, and forget the borrowed routes too old or too many."""
        now = time.monotonic()
        with self._lock:
            self._borrowed.pop(topic, None)
            self._borrowed[topic] = (now, route)
            while self._borrowed:
                oldest = next(iter(self._borrowed))
                at, borrowed = self._borrowed[oldest]
                if now - at < ROUTE_TTL_S and len(self._borrowed) <= MAX_BORROWED_ROUTES:
                    break
                del self._borrowed[oldest]
                cached = self._routes.get(oldest)
                if cached is not None and cached[1] is borrowed:  # not one fetched since
                    self._forget(oldest)
                    if oldest not in self._route_lock_users:
                        self._route_locks.pop(oldest, None)

    def _forget(self, topic: str) -> None:
        """Drop the topic's route and what was read from it (its lookup lock goes once no lookup uses it)."""
        had_route = self._routes.pop(topic, None) is not None
        self._stale_routes.pop(topic, None)
        self._route_failed_at.pop(topic, None)
        self._unknown_since.pop(topic, None)
        self._groups.pop(topic, None)
        self._static_views.pop(topic, None)
        self._publish_queues.pop(topic, None)
        if had_route:
            for listener in self.on_route_forgotten:
                try:
                    listener(topic)
                except Exception:  # a listener's bug must not fail the lookup that forgot the route
                    log.exception("route_forgotten_listener_failed topic=%s", topic)

    def _forget_route(self, topic: str, why: str, warn: bool = False) -> None:
        """Forget a route of the topic's own (and its lookup lock, when no lookup uses it), in one log line."""
        cached = self._routes.get(topic)
        with self._lock:
            borrowed = self._borrowed.pop(topic, None)
            if cached is not None and borrowed is not None and cached[1] is borrowed[1]:
                warn = False  # TBW102's, borrowed again at once: the topic never had a route of its own
            self._forget(topic)
            if topic not in self._route_lock_users:
                self._route_locks.pop(topic, None)
        (log.warning if warn else log.info)("route_forgotten topic=%s why=%r", topic, why)

    def _forget_idle_routes(self, now: float) -> None:
        """Every ROUTE_TTL_S: forget the routes not asked for within IDLE_ROUTE_FORGET_S (neither fetched nor kept
        through a failed lookup since), but for the ones a lookup is under way for."""
        if now - self._idle_swept_at < ROUTE_TTL_S:
            return
        self._idle_swept_at = now
        for topic, (fetched_at, _) in list(self._routes.items()):
            last = max(fetched_at, self._route_failed_at.get(topic, fetched_at))
            if now - last >= IDLE_ROUTE_FORGET_S and topic not in self._route_lock_users:
                self._forget_route(topic, f"not used for {now - last:.0f} s")
        # (off this thread: a stream's close waits for its reader, and a caller's route lookup must not)
        threading.Thread(target=self.close_unrouted_channels, name="close-unrouted-channels", daemon=True).start()

    def close_unrouted_channels(self, now: float | None = None) -> list[str]:
        """Close the channels (and their streams and stubs) to addresses no cached route has named for
        :data:`UNROUTED_CHANNEL_CLOSE_S` and that are not connected; returns those addresses. A later call to one
        opens it again."""
        now = time.monotonic() if now is None else now
        routed = self.route_addrs() | set(self.namesrv_addrs)
        with self._lock:
            unrouted = [addr for addr in self._channels if addr not in routed]
        self._unrouted_since = {addr: self._unrouted_since.get(addr, now) for addr in unrouted}
        due = [addr for addr, since in self._unrouted_since.items() if now - since >= UNROUTED_CHANNEL_CLOSE_S]
        closed = []
        for addr in due:
            channel = self._channels.get(addr)
            if channel is not None and not channel_connected(channel):
                closed.append(addr)
        for addr in closed:
            self._close_channel(addr)
            self._unrouted_since.pop(addr, None)
        if closed:
            log.info("channels_closed addrs=%s why='no route names them and they are not connected'",
                     ",".join(closed))
        return closed

    def _close_channel(self, addr: str) -> None:
        with self._lock:
            channel = self._channels.pop(addr, None)
            streams = [self._streams.pop(key) for key in [k for k in self._streams if k[0] == addr]]
            for key in [k for k in self._stubs if k[1] == addr]:
                del self._stubs[key]
        for stream in streams:
            stream.close()
        if channel is not None:
            channel.close()

    def _up_to_date(self, topic: str, started: float) -> None:
        """A route asked for at ``started`` is cached: it answers the invalidations before then, not later ones."""
        stale_since = self._stale_routes.get(topic)
        if stale_since is not None and stale_since <= started:
            self._stale_routes.pop(topic, None)

    @contextlib.contextmanager
    def cache_only(self) -> Iterator[None]:
        """Within it, a route the cache cannot give raises :class:`RouteNotCached` instead of being fetched: an
        event loop must not wait on the name server."""
        token = _cache_only.set(True)
        try:
            yield
        finally:
            _cache_only.reset(token)

    def _complete_route(self, topic: str, partial: namesrv_pb2.GetRouteInfoResponse,
                        cached: common_pb2.TopicRouteData) -> namesrv_pb2.GetRouteInfoResponse:
        """Another name server's route of ``topic`` that lacks no broker of ``cached`` for want of having heard from
        it; ``partial`` when none answers so."""
        return self._route_from_any(topic, lambda other: not _brokers_unheard(other, cached)) or partial

    def _route_from_any(self, topic: str, accept: Callable[[namesrv_pb2.GetRouteInfoResponse], bool] = lambda r: True,
                        or_any: bool = False) -> namesrv_pb2.GetRouteInfoResponse | None:
        """The first name server's SUCCESS answer for ``topic`` that ``accept`` takes (None: none answers so; with
        ``or_any``, the first SUCCESS answer then), asking those that let no call time out in the last
        ``NAMESRV_QUIET_S``, the one that answered last first."""
        request = namesrv_pb2.GetRouteInfoRequest(topic=topic)
        count, start, now = len(self.namesrv_addrs), self._namesrv_index, time.monotonic()
        fallback = None
        for addr in (self.namesrv_addrs[(start + i) % count] for i in range(count)):
            if now - self._namesrv_failed.get(addr, -NAMESRV_QUIET_S) < NAMESRV_QUIET_S:
                continue
            try:
                other = self.namesrv(addr).GetRouteInfoByTopic(request, timeout=self.rpc_timeout_s)
            except grpc.RpcError as exc:
                self._note_namesrv_failure(addr, exc)
                continue
            if other.code == ResponseCode.SUCCESS:
                if accept(other):
                    return other
                fallback = fallback or (other if or_any else None)
        return fallback

    def _note_namesrv_failure(self, addr: str, exc: grpc.RpcError) -> None:
        if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
            self._namesrv_failed[addr] = time.monotonic()

    def _fetch_route(self, topic: str) -> namesrv_pb2.GetRouteInfoResponse:
        if _cache_only.get():  # the TBW102 lookup of a topic the name server does not know
            raise RouteNotCached(f"the route of {topic} is not cached")
        request = namesrv_pb2.GetRouteInfoRequest(topic=topic)
        response = self.call_namesrv(f"route of {topic}", lambda stub: stub.GetRouteInfoByTopic(
            request, timeout=self.rpc_timeout_s))
        if len(self.namesrv_addrs) == 1 or (response.code == ResponseCode.SUCCESS and not response.warming_up):
            return response
        # One restarted a moment ago knows nothing yet, or not every broker: another may know them all (every one
        # warming: any that knows the topic)
        return self._route_from_any(topic, lambda other: not other.warming_up,
                                    or_any=response.code != ResponseCode.SUCCESS) or response

    def sends_from_cache(self, topic: str) -> bool:
        """Whether a send to ``topic`` is likely to pick its queue and its broker's master from the cache alone:
        a normal topic's route, fetched (a route borrowed from TBW102 is stored as nearly expired) and not about
        to expire or known to be out of date, each of its brokers with a master not marked down. Likely, not sure
        (another thread may invalidate the route meanwhile): :meth:`cache_only` makes sure."""
        cached = self._routes.get(topic)
        if (cached is None or topic in self._stale_routes
                or time.monotonic() - cached[0] >= ROUTE_TTL_S - SHORT_ROUTE_TTL_S):
            return False
        route = cached[1]
        return not is_static(route) and all(0 in bd.broker_addrs and not self.down.is_down(bd.broker_addrs[0])
                                            for bd in route.broker_datas)

    def invalidate_route(self, topic: str) -> None:
        """The topic's route is out of date: the next lookup asks the name server, even one failed a moment ago.
        The route stays as the fallback for when none answers (see :meth:`route`): a retry after a broker's
        failure still has the other brokers to go to."""
        if topic in self._routes:
            self._stale_routes[topic] = time.monotonic()

    def invalidate_routes(self) -> None:
        for topic in list(self._routes):
            self.invalidate_route(topic)

    def route_addrs(self) -> set[str]:
        """Every broker address (each replica's) the cached routes name."""
        return {addr for _, route in list(self._routes.values()) for bd in route.broker_datas
                for addr in bd.broker_addrs.values()}

    # -- replicas ----------------------------------------------------------------------------------
    def report_failure(self, addr: str, status: grpc.StatusCode | None,
                       connected: Callable[[], bool] | None = None) -> bool:
        """A call to ``addr`` failed with ``status``. When that says the broker is gone, ``addr`` is marked down
        for a while (reads go to the group's next replica, sends to another group): True then. ``connected``:
        whether the channel the call went on is connected, when that is not this instance's own channel."""
        if not unreachable(status, connected or (lambda: channel_connected(self.channel(addr)))):
            return False
        if not self.down.is_down(addr):
            log.info("broker_marked_down addr=%s status=%s", addr, status.name if status else "?")
        self.down.mark(addr)
        return True

    def report_answer(self, addr: str) -> None:
        """``addr`` answered: whatever failed there before, it is up now."""
        self.down.clear(addr)

    def group_addrs(self, topic: str, broker_name: str, for_publish: bool = False,
                    max_age_s: float = ROUTE_TTL_S) -> Mapping[int, str]:
        """{broker id: address} of ``broker_name``'s live replicas in the topic's route (empty: not in it); read
        only (shared by the calls that read the same route)."""
        route = self.route(topic, for_publish=for_publish, max_age_s=max_age_s)
        return _per_route(self._groups, topic, route, _groups_of).get(broker_name, _NO_REPLICAS)

    def has_live_master(self, topic: str, broker_name: str, for_publish: bool = False) -> bool:
        """Whether the cached route names a master of ``broker_name`` that is not marked down."""
        return live_master(self.group_addrs(topic, broker_name, for_publish), self.down.is_down) is not None

    def master_addr(self, topic: str, broker_name: str, for_publish: bool = False) -> str:
        """The group's master (id 0), where every write goes. A master marked down is returned all the same
        (after a look at a fresher route): the caller has no other replica to write to, and the mark may be
        stale; choosing another group is the caller's business (see :meth:`has_live_master`)."""
        addrs = self._group_with_master(topic, broker_name, for_publish, writing=True)
        if 0 not in addrs:
            err = MQClientError(f"broker {broker_name} of topic {topic} has no live master")
            err.no_master = True  # type: ignore[attr-defined]  # a failover: a new master may register soon
            raise err
        return addrs[0]

    def read_addr(self, topic: str, broker_name: str) -> str:
        """Where to read ``broker_name``'s queues of ``topic``: its master; while the group has none (the name
        server dropped it) or its master is marked down, its lowest-id live slave, which serves what the master
        had confirmed (slaveReadEnable)."""
        addr = read_replica(self._group_with_master(topic, broker_name, False, writing=False), self.down.is_down)
        if addr is None:
            raise MQClientError(f"broker {broker_name} of topic {topic} has no live replica")
        return addr

    def _group_with_master(self, topic: str, broker_name: str, for_publish: bool,
                           writing: bool) -> Mapping[int, str]:
        """The group's replicas, from the cached route while it names a live master. Else from a fresher one:
        fetched at once when the group is missing or a write finds no master (as before failover existed); at
        most every :data:`DEGRADED_ROUTE_MAX_AGE_S` while the master is only marked down or a read has slaves to
        go to (a fetch per call would load the name server for as long as the master stays dead)."""
        addrs = self.group_addrs(topic, broker_name, for_publish)
        if live_master(addrs, self.down.is_down) is not None:
            return addrs
        if addrs and (0 in addrs or not writing):
            return self.group_addrs(topic, broker_name, for_publish, max_age_s=DEGRADED_ROUTE_MAX_AGE_S)
        self.route(topic, refresh=True, for_publish=for_publish)
        return self.group_addrs(topic, broker_name, for_publish)

    def publish_queues(self, topic: str, refresh: bool = False) -> tuple[MessageQueue, ...]:
        """Writable queues; for a static topic its N logic queues (led or not: N is what a key hashes over)."""
        route = self.route(topic, refresh, for_publish=True)
        return _per_route(self._publish_queues, topic, route, functools.partial(_writable_queues, topic))

    def subscribe_queues(self, topic: str, refresh: bool = False) -> list[MessageQueue]:
        """Readable queues; for a static topic its N logic queues."""
        route = self.route(topic, refresh)
        if is_static(route):
            return static_queues(topic, route)
        return [MessageQueue(topic, qd.broker_name, q) for qd in sorted(route.queue_datas, key=lambda d: d.broker_name)
                if is_readable(qd.perm) for q in range(qd.read_queue_nums)]

    # -- static topics -----------------------------------------------------------------------------
    def _leaders(self, topic: str, refresh: bool, for_publish: bool) -> tuple[common_pb2.TopicRouteData, int,
                                                                              dict[int, str]] | None:
        """The route and its logic queue leaders (computed once per fetched route); None for a normal topic."""
        route = self.route(topic, refresh, for_publish=for_publish)
        if not is_static(route):
            return None
        return (route, *_per_route(self._static_views, topic, route, logic_queue_leaders))

    def logic_leaders(self, topic: str, refresh: bool = False, for_publish: bool = False) -> dict[int, str]:
        """{logic id: leading broker name} for a static topic (:data:`VIRTUAL_BROKER_NAME` where nobody
        leads); an error for a normal topic."""
        view = self._leaders(topic, refresh, for_publish)
        if view is None:
            raise MQClientError(f"topic {topic} is not a static topic: it has no logic queues")
        return view[2]

    def leader_addr(self, topic: str, logic_id: int, for_publish: bool = False, refresh: bool = False) -> str:
        """Master address of the broker leading logic queue ``logic_id`` of static topic ``topic`` (where its
        writes go). A miss (nobody leads it, or its leader has no master) refreshes the route once before failing."""
        return self._leader_replica(topic, logic_id, for_publish, refresh, master_of, "has no live master")

    def leader_read_addr(self, topic: str, logic_id: int, refresh: bool = False) -> str:
        """Where to read logic queue ``logic_id``: its leader's master, or while that is missing or marked down,
        the leader group's lowest-id live slave (slaveReadEnable)."""
        return self._leader_replica(topic, logic_id, False, refresh, self._read_replica_of, "has no live replica")

    def _read_replica_of(self, route: common_pb2.TopicRouteData, broker_name: str) -> str | None:
        for bd in route.broker_datas:
            if bd.broker_name == broker_name:
                return read_replica(bd.broker_addrs, self.down.is_down)
        return None

    def _leader_replica(self, topic: str, logic_id: int, for_publish: bool, refresh: bool,
                        choose: Callable[[common_pb2.TopicRouteData, str], str | None], missing: str) -> str:
        """The replica ``choose`` picks in the group leading logic queue ``logic_id`` (route refreshed once on a
        miss). The error of a miss says ``no_leader``, and ``no_master`` when a group leads it but has no master."""
        for attempt in range(1 if refresh else 2):
            view = self._leaders(topic, refresh or attempt > 0, for_publish)
            if view is None:
                raise MQClientError(f"topic {topic} is not a static topic: it has no logic queue {logic_id}")
            route, total, leaders = view
            name = leaders.get(logic_id, VIRTUAL_BROKER_NAME)
            addr = choose(route, name) if name != VIRTUAL_BROKER_NAME else None
            if addr is not None:
                return addr
        if not 0 <= logic_id < total:
            raise MQClientError(f"topic {topic} has {total} logic queues: there is no logic queue {logic_id}")
        if name == VIRTUAL_BROKER_NAME:
            err = MQClientError(f"logic queue {logic_id} of topic {topic} has no leader right now")
        else:
            err = MQClientError(f"logic queue {logic_id} of topic {topic} has no leader right now: its leader {name} "
                                f"{missing}")
            err.no_master = True  # type: ignore[attr-defined]  # a failover: its group may get a master again
        err.no_leader = True  # type: ignore[attr-defined]  # an unkeyed send may pick another logic queue
        raise err

    def forget_after_fork(self) -> None:
        """In a child of ``os.fork()`` (``client/fork_safety.py``): closed, without closing the parent's channels."""
        self._lock = threading.Lock()  # another thread of the parent may have held it, and its route locks
        self._route_locks, self._route_lock_users = {}, {}
        self.down = DownAddresses()
        self._closed, self._closed_why = True, fork_safety.MADE_BEFORE_FORK
        self._streams, self._channels, self._stubs = {}, {}, {}
        self.retry_threads.forget_after_fork()

    def close(self) -> None:
        self.retry_threads.close()
        with self._lock:
            self._closed = True
            streams = list(self._streams.values())
            self._streams.clear()
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs.clear()
        # Outside the lock: a stream's close waits for its reader thread, whose answer callbacks may need the lock.
        for stream in streams:
            stream.close()
        for ch in channels:
            ch.close()


def _short_lived() -> float:
    """The time to store a route as fetched at, for it to expire :data:`SHORT_ROUTE_TTL_S` from now."""
    return time.monotonic() - ROUTE_TTL_S + SHORT_ROUTE_TTL_S


V = TypeVar("V")


def _per_route(cache: dict[str, tuple[common_pb2.TopicRouteData, V]], topic: str, route: common_pb2.TopicRouteData,
               make: Callable[[common_pb2.TopicRouteData], V]) -> V:
    """What ``make`` reads from ``route``, made once per route fetched: kept with the route object it came from
    (a fetch or a refresh brings a new one). Protobuf fields are slow to read on every send and pull."""
    cached = cache.get(topic)
    if cached is None or cached[0] is not route:
        cached = cache[topic] = (route, make(route))
    return cached[1]


def _writable_queues(topic: str, route: common_pb2.TopicRouteData) -> tuple[MessageQueue, ...]:
    if is_static(route):
        return tuple(static_queues(topic, route))
    return tuple(MessageQueue(topic, qd.broker_name, q) for qd in sorted(route.queue_datas, key=lambda d: d.broker_name)
                 if is_writeable(qd.perm) for q in range(qd.write_queue_nums))


def _groups_of(route: common_pb2.TopicRouteData) -> dict[str, dict[int, str]]:
    return {bd.broker_name: dict(bd.broker_addrs) for bd in route.broker_datas}

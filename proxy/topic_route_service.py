"""Routes and broker addresses for the processors, from the SDK's route cache (``client/client_instance.py``, 30 s).

A look-up the cache answers runs on the event loop (``ClientInstance.cache_only``): every receive, ack and end of a
transaction makes one, and a worker thread for each would make them wait behind whatever holds the shared pool (a
paused broker's calls). The SDK asks the name server synchronously on a miss, so only a miss goes to a worker
thread: one client's miss never stalls the event loop that serves every other client. SDK errors become v2
statuses here."""

import asyncio
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TypeVar

import grpc

from client.client_instance import ClientInstance, RouteNotCached
from client.errors import MQClientError
from client.static_route import VIRTUAL_BROKER_NAME, is_static, logic_queue_leaders, master_of
from common.perm import is_readable
from common.response_code import ResponseCode
from proto import common_pb2
from proxy.broker_channels import BrokerChannels
from proxy.v2_codes import BROKER_UNAVAILABLE, LEADER_MOVING, Code, ProxyError, refusal

log = logging.getLogger(__name__)

T = TypeVar("T")

# A route missing a broker a client's receipt handle or transaction id names is fetched again only when older than
# this (the broker may have joined since): forged names cost the name server at most one fetch a topic this often.
MISSING_BROKER_ROUTE_MAX_AGE_S = 1.0


@dataclass(frozen=True, slots=True)
class StaticView:
    """A static topic as v2 clients see it: ``total`` logic queues, each led by a broker (or nobody)."""

    total: int
    leaders: dict[int, str]  # logic id -> broker name (VIRTUAL_BROKER_NAME: nobody leads it right now)

    def led(self, logic_id: int) -> bool:
        return self.leaders.get(logic_id, VIRTUAL_BROKER_NAME) != VIRTUAL_BROKER_NAME


class TopicRouteService:
    def __init__(self, client: ClientInstance, brokers: BrokerChannels) -> None:
        self.client = client
        self.brokers = brokers

    async def route(self, topic: str, for_publish: bool = False) -> common_pb2.TopicRouteData:
        """The topic's route; ``for_publish``: an unknown topic borrows TBW102's (brokers that create topics on
        their first send), as the SDK's producer does."""
        return await self._ask(f"route of topic {topic}", lambda: self.client.route(topic, for_publish=for_publish))

    async def master_addr(self, topic: str, broker_name: str, for_publish: bool = False) -> str:
        """The master of ``broker_name`` (POP state and every write live there)."""
        return await self._ask(f"broker {broker_name} of topic {topic}",
                               lambda: self.client.master_addr(topic, broker_name, for_publish=for_publish))

    async def unknown_brokers(self, topic: str, names: Collection[str], for_publish: bool = False) -> set[str]:
        """Of ``names`` (brokers a client's receipt handles or transaction id name: its word only), those the
        topic's route does not name. Read from the cache on the loop; a fresher route only when one is missing, and
        at most once a call."""
        route = await self.route(topic, for_publish)
        unknown = set(names) - broker_names(route)
        if unknown:
            route = await self._ask(f"route of topic {topic}", lambda: self.client.route(
                topic, for_publish=for_publish, max_age_s=MISSING_BROKER_ROUTE_MAX_AGE_S))
            unknown -= broker_names(route)
        return unknown

    def unreachable(self, topic: str, addr: str, exc: grpc.RpcError) -> None:
        """A broker of ``topic`` did not answer: its route is fetched again on next use, and a dead address is
        marked down (a restarted broker registers a new one; without this the proxy waited out the route's age)."""
        self.client.invalidate_route(topic)
        self.client.report_failure(addr, exc.code() if hasattr(exc, "code") else None,
                                   lambda: self.brokers.ready(addr))  # the proxy's calls go on its own channels

    def answered(self, addr: str) -> None:
        """The broker at ``addr`` answered: a mark saying it was down is stale."""
        self.client.report_answer(addr)

    async def leader_addr(self, topic: str, logic_id: int) -> str:
        """The master of the broker leading logic queue ``logic_id`` of static topic ``topic``; BAD_REQUEST when
        the topic has no such logic queue (a client's old route, or a normal topic named as a static one)."""
        try:
            return await self._ask(f"logic queue {logic_id} of topic {topic}",
                                   lambda: self.client.leader_addr(topic, logic_id))
        except ProxyError as exc:
            if exc.code != Code.INTERNAL_SERVER_ERROR:  # the SDK says "no such logic queue" without a code
                raise
            view = self.static_view(await self.route(topic))
            if view is None or not 0 <= logic_id < view.total:
                raise ProxyError(Code.BAD_REQUEST, f"topic {topic} has no logic queue {logic_id} (query its route "
                                                   "again)") from None
            raise

    async def moved_leader(self, topic: str, logic_id: int, refused_at: str) -> str | None:
        """The broker at ``refused_at`` answered NOT_LEADER_FOR_QUEUE for logic queue ``logic_id``: a remap moved
        it. The topic's route is fetched again (else the proxy kept asking the old leader for the route cache's
        30 s); the new leader's master, or None when the fresh route still names ``refused_at`` (the name server
        has not heard of the remap yet: asking again now would be refused again)."""
        self.client.invalidate_route(topic)
        addr = await self.leader_addr(topic, logic_id)
        log.info("logic_queue_leader_moved topic=%s logic_queue=%d refused_at=%s leader=%s", topic, logic_id,
                 refused_at, addr)
        return None if addr == refused_at else addr

    @staticmethod
    def static_view(route: common_pb2.TopicRouteData) -> StaticView | None:
        """The logic queues of a static topic's route; None for a normal topic."""
        if not is_static(route):
            return None
        total, leaders = logic_queue_leaders(route)
        return StaticView(total, leaders)

    @staticmethod
    def readable_brokers(route: common_pb2.TopicRouteData) -> list[str]:
        """Names of the brokers that serve reads of a normal topic and have a master (POP pops on the master)."""
        return sorted(qd.broker_name for qd in route.queue_datas
                      if is_readable(qd.perm) and qd.read_queue_nums > 0 and master_of(route, qd.broker_name))

    async def _ask(self, what: str, call: Callable[[], T]) -> T:
        """``call`` on the loop when the route cache answers it; in a worker thread only on a miss."""
        try:
            try:
                with self.client.cache_only():
                    return call()
            except RouteNotCached:  # raised before any name server call: nothing was done yet
                return await asyncio.to_thread(call)
        except MQClientError as exc:
            raise client_error(what, exc) from None


def broker_names(route: common_pb2.TopicRouteData) -> set[str]:
    return {bd.broker_name for bd in route.broker_datas}


def client_error(what: str, exc: MQClientError) -> ProxyError:
    """An SDK error as a v2 status: the broker's or name server's code where it gave one."""
    if exc.code == ResponseCode.TOPIC_NOT_EXIST:
        return ProxyError(Code.TOPIC_NOT_FOUND, f"{what}: the topic does not exist")
    if exc.code is not None:
        return refusal(exc.code, str(exc))
    text = str(exc)
    if getattr(exc, "no_leader", False):  # mid-remap a logic queue is briefly without a leader in the route
        return ProxyError(LEADER_MOVING, text)
    if "invalid argument" in text:  # the SDK's wording for a gRPC INVALID_ARGUMENT from a broker
        return ProxyError(Code.BAD_REQUEST, text)
    if "DEADLINE_EXCEEDED" in text:
        return ProxyError(Code.PROXY_TIMEOUT, text)
    if ": UNAVAILABLE:" in text or getattr(exc, "no_master", False):  # gone, or a failover under way
        return ProxyError(BROKER_UNAVAILABLE, text)
    return ProxyError(Code.INTERNAL_SERVER_ERROR, text)

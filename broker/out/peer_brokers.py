"""Calls to other brokers (static topics read older items and consumer offsets where they live; the timer sends a
static topic's due messages to their logic queue's leader).

Addresses come from the name servers' cluster info, cached, and refreshed every 30 s, when a broker name is
missing, and (at most once a second) after a broker was unreachable: it may be back at another address. A read a
replica may answer (``replica_ok``: an older item's KV state) goes to the group's lowest-id slave while its master
cannot be reached, as the SDK's reads do.
"""

import logging
import threading
import time
from collections.abc import Callable

import grpc

from client.static_route import VIRTUAL_BROKER_NAME, logic_queue_leaders
from common import tls
from common.acl import inner_metadata
from common.refusal import Refusal
from common.response_code import ResponseCode
from proto import broker_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger(__name__)

REFRESH_AFTER_S = 30.0
REFRESH_UNREACHABLE_AFTER_S = 1.0  # a peer was unreachable: its address is looked up again, but not on every call
RPC_TIMEOUT_S = 10.0


class PeerBrokerError(Refusal):
    """Another broker could not be reached, named, or did not do what was asked. Unhandled, it answers the
    request SYSTEM_BUSY: a passing condition (a peer restarting, a route not refreshed yet) that clients retry."""

    def __init__(self, remark: str, reachable: bool = False, status: grpc.StatusCode | None = None) -> None:
        super().__init__(ResponseCode.SYSTEM_BUSY, remark)
        self.reachable = reachable  # the broker answered (an error of its own): asking its replicas helps nobody
        self.status = status  # the call's gRPC status, when it failed with one


class PeerBrokers:
    def __init__(self, namesrv_addrs: list[str], self_name: str, self_addr: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.namesrv_addrs = namesrv_addrs
        self._clock = clock
        self._addrs: dict[str, str] = {self_name: self_addr}
        self._replicas: dict[str, list[str]] = {}  # broker name: its slaves' addresses, lowest id first
        self._fetched_at = 0.0
        self._unreachable = False  # a call found a peer unreachable since the last refresh
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def addr_of(self, bname: str) -> str:
        addr = self._addrs.get(bname)
        age = self._clock() - self._fetched_at
        if addr is None or age > REFRESH_AFTER_S or (self._unreachable and age > REFRESH_UNREACHABLE_AFTER_S):
            self._refresh()
            addr = self._addrs.get(bname)
        if addr is None:
            raise PeerBrokerError(f"broker {bname} has no live master in the name servers' cluster info")
        return addr

    def _refresh(self) -> None:
        """From the first name server that answers; when none does, the addresses held are kept. Either way they
        are asked for again only after the next refresh is due (a stalled name server holds each call 10 s)."""
        for ns in self.namesrv_addrs:
            try:
                info = namesrv_pb2_grpc.NamesrvServiceStub(self._channel(ns)).GetBrokerClusterInfo(
                    common_pb2.Empty(), timeout=RPC_TIMEOUT_S)
            except grpc.RpcError as exc:
                log.warning("peer_lookup_failed namesrv=%s status=%s", ns, exc.code().name)
                continue
            with self._lock:
                for name, data in info.broker_addr_table.items():
                    if 0 in data.broker_addrs:
                        self._addrs[name] = data.broker_addrs[0]
                    self._replicas[name] = [addr for bid, addr in sorted(data.broker_addrs.items()) if bid != 0]
            break
        with self._lock:
            self._fetched_at = self._clock()
            self._unreachable = False

    def logic_queue_leader(self, topic: str, logic_queue_id: int) -> str:
        """The broker that leads logic queue ``logic_queue_id`` of static topic ``topic``, by the name servers'
        route (as a client finds it); PeerBrokerError when none answers or none leads it."""
        for ns in self.namesrv_addrs:
            try:
                response = namesrv_pb2_grpc.NamesrvServiceStub(self._channel(ns)).GetRouteInfoByTopic(
                    namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=RPC_TIMEOUT_S)
            except grpc.RpcError as exc:
                log.warning("peer_lookup_failed namesrv=%s status=%s", ns, exc.code().name)
                continue
            if response.code == ResponseCode.SUCCESS:
                leader = logic_queue_leaders(response.route)[1].get(logic_queue_id, VIRTUAL_BROKER_NAME)
                if leader != VIRTUAL_BROKER_NAME:
                    return leader
            raise PeerBrokerError(f"no broker leads logic queue {logic_queue_id} of {topic} in the name servers' "
                                  f"route ({response.remark or 'it names no leader'})")
        raise PeerBrokerError(f"no name server answered the route of {topic}")

    def _channel(self, addr: str) -> grpc.Channel:
        with self._lock:
            ch = self._channels.get(addr)
            if ch is None:
                ch = self._channels[addr] = tls.channel(
                    addr, options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)])
            return ch

    def call(self, bname: str, method: str, request, service: type = broker_pb2_grpc.BrokerServiceStub,
             replica_ok: bool = False, timeout_s: float | None = None):
        """``method`` of ``service`` (the broker's by default) on broker ``bname``; PeerBrokerError on failure.
        ``replica_ok``: a read the group's slaves may answer, asked of them in turn when its master has no
        address or cannot be reached. ``timeout_s``: each call's (RPC_TIMEOUT_S when None)."""
        timeout = RPC_TIMEOUT_S if timeout_s is None else timeout_s
        try:
            return self._call_at(self.addr_of(bname), bname, method, request, service, timeout)
        except PeerBrokerError as exc:
            replicas = self._replicas.get(bname, []) if replica_ok else []
            if not replicas or exc.reachable:
                raise
            for addr in replicas:
                try:
                    return self._call_at(addr, bname, method, request, service, timeout)
                except PeerBrokerError:
                    continue
            raise

    def _call_at(self, addr: str, bname: str, method: str, request, service: type, timeout_s: float):
        try:
            return getattr(service(self._channel(addr)), method)(request, timeout=timeout_s,
                                                                 metadata=inner_metadata())
        except grpc.RpcError as exc:
            # Only a broker that cannot be reached counts as down: a slow master (a stall past the timeout) is not
            # passed over for its replicas, which may lack what it acknowledged (an ASYNC_MASTER's)
            unreachable = exc.code() == grpc.StatusCode.UNAVAILABLE
            if unreachable:
                self._unreachable = True
            raise PeerBrokerError(f"{method} on broker {bname} failed at {addr}: {exc.code().name}: "
                                  f"{exc.details()}", reachable=not unreachable, status=exc.code()) from None

    def close(self) -> None:
        with self._lock:
            for ch in self._channels.values():
                ch.close()
            self._channels.clear()

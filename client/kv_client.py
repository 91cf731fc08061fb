"""KVClient: put, get, delete, compare-and-set and prefix scans on the brokers' KV store.

Keys hash to the shards of the system static topic ``rmq_sys_KV``; each call goes to the broker leading the
key's shard. While a shard moves (remap) its brokers answer "not leader" or "busy", and while its broker restarts
the route names no leader for it: the client refreshes the route and retries until ``retry_timeout_ms``. A
compare-and-set is retried only when it was never sent (its broker could not be reached); after a failure once sent
(it may have applied) it surfaces as an MQClientError saying so.

Broker groups: writes go to the master of the shard's leader group only. While that group has no master (its
master died, a slave answers NO_PERMISSION, or the route names none yet) a write waits for one, retrying until
``retry_timeout_ms``; a put or delete retried after its answer was lost may apply twice (at least once).
Reads (get, scan) go to the master, or while it is missing or marked down (``client/replica_health.py``) to the
group's lowest-id live slave, which serves the state as of what the master had confirmed.
"""

import heapq
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Protocol, TypeVar

import grpc

from client.argument_checks import checked_timeout_ms
from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.grpc_errors import business_error, never_sent, rpc_error
from client.static_route import total_queues
from common.kv_shard import (
    KV_TOPIC,
    MAX_GET_KEYS,
    KvInputError,
    check_key,
    check_scan_limit,
    check_value,
    shard_of,
    snapshot_shape_error,
)
from common.refusal import says_not_master
from common.response_code import ResponseCode
from proto import broker_pb2, common_pb2, kv_pb2, kv_pb2_grpc

Bytes = bytes | str
RETRYABLE_CODES = (ResponseCode.NOT_LEADER_FOR_QUEUE, ResponseCode.SYSTEM_BUSY)
RETRYABLE_STATUS = (grpc.StatusCode.UNAVAILABLE,)
RETRY_PAUSE_MAX_S = 0.2  # retries back off to this: a write waiting out a failover looks at the route this often
PROVISION_TIMEOUT_S = 30.0  # creating the shards on first use: how long a busy answer is asked again
PRESENT = b"\x01"  # a get's raw state: 0x01 then the value
_COUNT = struct.Struct(">I")  # a get's packed_states: the count of states, then each one's length, then the states


class _Response(Protocol):
    """What every KV response carries (the generated messages have these fields)."""

    @property
    def code(self) -> int: ...

    @property
    def remark(self) -> str: ...


R = TypeVar("R", bound=_Response)


@dataclass(frozen=True, slots=True)
class CasResult:
    applied: bool
    current: bytes | None  # the key's value after the call (None: absent)


def _b(data: Bytes, what: str) -> bytes:
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise MQClientError(f"{what} must be bytes or str, not {type(data).__name__}")


def _checked(check: Callable[..., None], *args: object) -> None:
    try:
        check(*args)
    except KvInputError as exc:
        raise MQClientError(str(exc)) from None


def retryable_answer(response: _Response) -> bool:
    """Not leader or busy (a shard moving), or a slave or a deposed master refusing a write (nothing applied: the
    route that named it master is stale, a failover is under way)."""
    return response.code in RETRYABLE_CODES or (
        response.code == ResponseCode.NO_PERMISSION and "slave" in response.remark.lower()) or (
        response.code == ResponseCode.SERVICE_NOT_AVAILABLE and says_not_master(response.remark))


def response_states(response: kv_pb2.KvGetResponse) -> list[bytes]:
    """A get's raw states in key order: packed (asked for with ``pack_states``), or one field each from a broker
    that predates packing."""
    packed = response.packed_states
    if not packed:
        return list(response.states)
    try:
        (count,) = _COUNT.unpack_from(packed)
        lengths = struct.unpack_from(f">{count}I", packed, _COUNT.size)
    except struct.error:
        raise MQClientError(f"KV get answered {len(packed)} packed bytes, too few for their own table") from None
    ends = list(accumulate(lengths, initial=_COUNT.size * (1 + count)))
    if ends[-1] != len(packed):
        raise MQClientError(f"KV get answered {len(packed)} packed bytes; their table says {ends[-1]}")
    return [packed[start:end] for start, end in pairwise(ends)]


class KVClient:
    """Put, get, delete, compare-and-set and prefix scans on the brokers' KV store (``kvEnable=true``).

    ::

        with KVClient("127.0.0.1:9876") as kv:
            kv.put(b"user:1", b"alice")
            assert kv.get(b"user:1") == b"alice"
    """

    def __init__(self, namesrv_addr: str | None = None, rpc_timeout_ms: int = 10_000,
                 retry_timeout_ms: int = 15_000, tls_ca: str | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        self._timeout_s = checked_timeout_ms("rpc_timeout_ms", rpc_timeout_ms)
        self._retry_s = checked_timeout_ms("retry_timeout_ms", retry_timeout_ms, zero_allowed=True)
        self._instance = ClientInstance(namesrv_addr, self._timeout_s, tls_ca=tls_ca, credentials=credentials)
        # Brokers that predate KvService's streams (a rolling upgrade): their writes and gets go as unary calls
        self._unary_only: dict[str, set[str]] = {"WriteStream": set(), "GetStream": set()}

    def __enter__(self) -> "KVClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._instance.close()

    # -- routing -----------------------------------------------------------------------------------
    def shards(self, refresh: bool = False) -> int:
        """How many shards the store has; on first use (no kvInit) the brokers create them."""
        try:
            total = total_queues(self._instance.route(KV_TOPIC, refresh=refresh))
        except MQClientError:
            self._provision()
            total = total_queues(self._instance.route(KV_TOPIC, refresh=True))
        if total <= 0:
            raise MQClientError(f"topic {KV_TOPIC} is not a static topic: run mqadmin kvInit")
        return total

    def _provision(self) -> None:
        """Ask the first master by name that has KV on to create the shards: every client asks the same broker,
        which makes concurrent first uses one creation. A broker with KV off answers SERVICE_NOT_AVAILABLE (ask
        the next); a busy answer (not ready, or "broker X creates it": this client saw fewer brokers) looks at
        the cluster again."""
        deadline = time.monotonic() + PROVISION_TIMEOUT_S
        while True:
            masters = self._masters()
            for name, addr in masters:
                try:  # each call within the client's timeout (mqadmin's --timeout: it took 30 s at a paused broker)
                    response = self._stub(addr).Provision(kv_pb2.KvProvisionRequest(), timeout=self._timeout_s)
                except grpc.RpcError as exc:
                    raise rpc_error("KV store provisioning", addr, exc) from None
                if response.code == ResponseCode.SUCCESS:
                    self._instance.invalidate_route(KV_TOPIC)
                    return
                if response.code == ResponseCode.SERVICE_NOT_AVAILABLE:  # KV off on this broker: ask the next
                    continue
                if response.code not in RETRYABLE_CODES or time.monotonic() > deadline:
                    raise business_error(f"KV store provisioning on {name}", addr, response.code, response.remark)
                break
            else:
                raise MQClientError(f"the KV store is not initialised and no broker of {len(masters)} has "
                                    "kvEnable=true; enable it in broker.conf, or run mqadmin kvInit")
            time.sleep(0.1)

    def _masters(self) -> list[tuple[str, str]]:
        """(broker name, master address) of every broker with a live master, by name."""
        info = self._instance.call_namesrv("cluster info", lambda s: s.GetBrokerClusterInfo(
            common_pb2.Empty(), timeout=self._timeout_s))
        return sorted((name, data.broker_addrs[0]) for name, data in info.broker_addr_table.items()
                      if 0 in data.broker_addrs)

    def _addr(self, shard: int, refresh: bool, read: bool = False) -> str:
        instance = self._instance
        return (instance.leader_read_addr(KV_TOPIC, shard, refresh=refresh) if read
                else instance.leader_addr(KV_TOPIC, shard, refresh=refresh))

    def _stub(self, addr: str) -> kv_pb2_grpc.KvServiceStub:
        return self._instance.stub(kv_pb2_grpc.KvServiceStub, addr)

    def _on_shard(self, shard: int, what: str, call: Callable[[str], R], retry_transport: bool = True,
                  read: bool = False) -> R:
        """``call`` of the shard's leader's address (a read: of its read replica); refresh-and-retry on
        not-leader, busy, unreachable and a failover, until the retry timeout."""
        deadline = time.monotonic() + self._retry_s
        refresh, pause = False, 0.01
        while True:
            response = self._shard_call(shard, what, call, refresh, read, retry_transport, deadline)
            if response is not None:
                return response
            refresh = True
            time.sleep(pause)
            pause = min(pause * 2, RETRY_PAUSE_MAX_S)

    def _shard_call(self, shard: int, what: str, call: Callable[[str], R], refresh: bool, read: bool,
                    retry_transport: bool, deadline: float) -> R | None:
        """One try: the successful response, or None when another try is worth it (raises otherwise)."""
        late = time.monotonic() > deadline
        try:
            addr = self._addr(shard, refresh, read)
        except MQClientError as exc:
            if getattr(exc, "no_leader", False) and not late:
                return None  # a failover or a move seen between two registrations: nobody leads the shard in the
                # route yet (or its group has no master yet); nothing was sent
            raise
        try:
            response = call(addr)
        except grpc.RpcError as exc:  # a stream's failures too (StatusError)
            down = self._instance.report_failure(addr, exc.code())  # a read then asks the group's next replica
            # A write that must not be applied twice (compare-and-set) is sent again only when it never left: its
            # broker could not be reached (a failover: the new master is asked once the route names it).
            again = never_sent(exc) or (retry_transport and (exc.code() in RETRYABLE_STATUS or (read and down)))
            if not again or late:
                raise rpc_error(what, addr, exc) from None
            return None
        self._instance.report_answer(addr)
        if response.code == ResponseCode.SUCCESS:
            return response
        if not retryable_answer(response) or late:
            raise business_error(what, addr, response.code, response.remark)
        return None

    # -- writes ------------------------------------------------------------------------------------
    def _write(self, request: kv_pb2.KvWriteRequest, what: str, retry_transport: bool = True) -> kv_pb2.KvWriteResponse:
        shard = shard_of(request.key, self.shards())
        return self._on_shard(shard, what, lambda addr: self._write_at(addr, request), retry_transport)

    def _write_at(self, addr: str, request: kv_pb2.KvWriteRequest) -> kv_pb2.KvWriteResponse:
        """On the broker's write stream; a unary Write to a broker that predates the stream (a rolling upgrade: it
        answers UNIMPLEMENTED, having done nothing)."""
        if addr not in self._unary_only["WriteStream"]:
            try:
                return self._instance.kv_write_stream(addr).call(request, self._timeout_s).result()
            except grpc.RpcError as exc:
                if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._unary_only["WriteStream"].add(addr)
        answer: kv_pb2.KvWriteResponse = self._instance.stub(kv_pb2_grpc.KvServiceStub, addr).Write(
            request, timeout=self._timeout_s)
        return answer

    def put(self, key: Bytes, value: Bytes) -> None:
        k, v = _b(key, "key"), _b(value, "value")
        _checked(check_key, k)
        _checked(check_value, v)
        self._write(kv_pb2.KvWriteRequest(op=kv_pb2.KV_PUT, key=k, value=v), f"KV put of {k[:64]!r}")

    def delete(self, key: Bytes) -> None:
        k = _b(key, "key")
        _checked(check_key, k)
        self._write(kv_pb2.KvWriteRequest(op=kv_pb2.KV_DELETE, key=k), f"KV delete of {k[:64]!r}")

    def cas(self, key: Bytes, expected: Bytes | None, value: Bytes) -> CasResult:
        """Set ``value`` if the key holds ``expected`` (None: if the key is absent). Decided by the shard's
        leader in commitlog order; the result says whether it applied and what the key holds now."""
        k, v = _b(key, "key"), _b(value, "value")
        _checked(check_key, k)
        _checked(check_value, v)
        request = kv_pb2.KvWriteRequest(op=kv_pb2.KV_CAS, key=k, value=v, expect_absent=expected is None)
        if expected is not None:
            request.expected = _b(expected, "expected value")
            _checked(check_value, request.expected, "expected value")
        try:
            response = self._write(request, f"KV compare-and-set of {k[:64]!r}", retry_transport=False)
        except MQClientError as exc:
            if exc.status is None or exc.status == "INVALID_ARGUMENT" or "failed to connect" in str(exc):
                raise  # a refusal, or never sent (its broker could not be reached): not applied
            raise MQClientError(f"{exc} (it may have applied: read the key to know)", exc.code, exc.status) from None
        return CasResult(response.applied, response.current if response.exists else None)

    def compare_and_set(self, key: Bytes, expected: Bytes | None, value: Bytes) -> bool:
        return self.cas(key, expected, value).applied

    # -- reads -------------------------------------------------------------------------------------
    def get(self, key: Bytes) -> bytes | None:
        return self.get_batch([key])[0]

    def get_batch(self, keys: Iterable[Bytes]) -> list[bytes | None]:
        """Values of ``keys`` (None where absent): one request per broker leading some of their shards (at most
        MAX_GET_KEYS keys each), all in flight at once on the brokers' streams. A broker whose answer would be too
        large (over 224 MiB: more than 55 values near 4 MiB) answers the first keys' values; the others are asked
        for again."""
        if isinstance(keys, (str, bytes, bytearray)):  # its characters were taken for keys, each read
            raise MQClientError(f"get_batch takes a list of keys, not one {type(keys).__name__}: get(key) reads one")
        ks = [_b(k, "key") for k in keys]
        for k in ks:
            _checked(check_key, k)
        out: list[bytes | None] = [None] * len(ks)
        pending = list(range(len(ks)))
        deadline = time.monotonic() + self._retry_s
        refresh = False  # the route, after a round in which some keys failed
        while pending:
            total = self.shards(refresh)
            by_broker: dict[str, list[int]] = {}
            unled: list[int] = []
            for i in pending:
                try:
                    addr = self._instance.leader_read_addr(KV_TOPIC, shard_of(ks[i], total), refresh=refresh)
                except MQClientError as exc:
                    if not getattr(exc, "no_leader", False) or time.monotonic() > deadline:
                        raise
                    unled.append(i)  # nobody leads its shard in the route yet (see _shard_call)
                    continue
                by_broker.setdefault(addr, []).append(i)
            pending = unled
            pause = 0.05 if unled else 0.0
            calls = [(addr, part, self._get_call(addr, ks, part)) for addr, slots in by_broker.items()
                     for part in (slots[i:i + MAX_GET_KEYS] for i in range(0, len(slots), MAX_GET_KEYS))]
            refresh = bool(unled)
            for addr, slots, call in calls:
                answered, again_in = self._get_from(addr, slots, call, out, deadline)
                pending += slots[answered:]  # not answered yet: asked again (where the shard is now, if it failed)
                if again_in is not None:  # a shard moved or its broker failed
                    refresh = True
                    pause = max(pause, again_in)
            if pause:
                time.sleep(pause)  # once a round, whatever failed in it
        return out

    def _get_call(self, addr: str, ks: list[bytes], slots: Sequence[int]) -> Future[kv_pb2.KvGetResponse]:
        request = kv_pb2.KvGetRequest(keys=[ks[i] for i in slots], addressing=broker_pb2.LOGIC, pack_states=True)
        if addr in self._unary_only["GetStream"]:  # a broker that predates the get stream (see _write_at)
            future: Future[kv_pb2.KvGetResponse] = self._instance.stub(kv_pb2_grpc.KvServiceStub, addr).Get.future(
                request, timeout=self._timeout_s)
            return future
        return self._instance.kv_get_stream(addr).call(request, self._timeout_s)

    def _get_from(self, addr: str, slots: Sequence[int], call: Future[kv_pb2.KvGetResponse], out: list[bytes | None],
                  deadline: float) -> tuple[int, float | None]:
        """Fill ``out`` from the answer to ``call``: how many of ``slots`` (the first ones) it answered, and None or,
        after a failure, the pause before the others are asked for again."""
        what = f"KV get of {len(slots)} keys"
        try:
            response = call.result()
        except grpc.RpcError as exc:  # the stream's failures (StatusError)
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED and addr not in self._unary_only["GetStream"]:
                self._unary_only["GetStream"].add(addr)  # asked again at once, unary
                return 0, 0.0
            down = self._instance.report_failure(addr, exc.code())  # the next try asks the group's next replica
            if (exc.code() in RETRYABLE_STATUS or down) and time.monotonic() < deadline:
                return 0, 0.05
            raise rpc_error(what, addr, exc) from None
        self._instance.report_answer(addr)
        if response.code in RETRYABLE_CODES and time.monotonic() < deadline:
            return 0, 0.01
        if response.code != ResponseCode.SUCCESS:
            raise business_error(what, addr, response.code, response.remark)
        states = response_states(response)
        if not 0 < len(states) <= len(slots):  # fewer: the first keys' values (too large together), never none
            raise MQClientError(f"{what} at {addr} answered {len(states)} values")
        for i, raw in zip(slots, states, strict=False):
            out[i] = raw[1:] if raw[:1] == PRESENT else None
        return len(states), None

    def scan(self, prefix: Bytes = b"", limit: int = 100, start_after: Bytes = b"") -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` (key, value) with ``prefix`` in key order, after ``start_after`` (pass the last key
        returned to resume)."""
        p, after = _b(prefix, "prefix"), _b(start_after, "start_after")
        _checked(check_scan_limit, limit)
        per_shard = [self._scan_shard(shard, p, after, limit) for shard in range(self.shards())]
        return list(heapq.merge(*per_shard))[:limit]

    def _scan_shard(self, shard: int, prefix: bytes, start_after: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        request = kv_pb2.KvScanRequest(shard=shard, prefix=prefix, start_after=start_after, limit=limit,
                                       addressing=broker_pb2.LOGIC)
        response = self._on_shard(shard, f"KV scan of shard {shard}",
                                  lambda addr: self._stub(addr).Scan(request, timeout=self._timeout_s), read=True)
        return [(e.key, e.value) for e in response.entries]

    # -- snapshots ---------------------------------------------------------------------------------
    def export_snapshot(self, shard: int) -> list[kv_pb2.KvSnapshotChunk]:
        """A consistent copy of one shard from its leader: a header chunk, then entry chunks."""
        addr = self._addr(shard, refresh=False)
        try:
            return list(self._stub(addr).ExportSnapshot(kv_pb2.KvSnapshotRequest(shard=shard),
                                                        timeout=max(self._timeout_s, 300)))
        except grpc.RpcError as exc:
            raise rpc_error(f"KV snapshot export of shard {shard}", addr, exc) from None

    def import_snapshot(self, chunks: list[kv_pb2.KvSnapshotChunk]) -> int:
        """Load an exported shard into the same shard here (its leader must hold nothing). Returns entries."""
        problem = snapshot_shape_error(chunks)
        if problem is not None:
            raise MQClientError(problem)
        shard = chunks[0].header.shard
        response = self._on_shard(shard, f"KV snapshot import of shard {shard}",
                                  lambda addr: self._stub(addr).ImportSnapshot(iter(chunks),
                                                                               timeout=max(self._timeout_s, 300)),
                                  retry_transport=False)
        return response.imported

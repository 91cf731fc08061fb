"""An in-memory name server and brokers injected into a ClientInstance, for unit tests of the SDK.

``FakeCluster.install(client_instance)`` replaces the instance's route fetch and broker stubs. Brokers answer
normal topics through per-test ``handlers`` and static topics through :class:`FakeStaticTopic`, a small model
of logic queue chains (segments on brokers, logic offsets, leaders, "retry now" at a drained older segment).
"""

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc

from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.grpc_errors import StatusError
from common.message_codec import decode_records, encode_record
from common.response_code import ResponseCode
from proto import broker_pb2, common_pb2, namesrv_pb2

Handler = Callable[[object], object]


def bodies_of(request: broker_pb2.SendMessageRequest) -> list[bytes]:
    """What a send carries: its records' bodies (the SDK), or its bodies (a unary client)."""
    if request.records:
        return [m.body for m in decode_records(request.records)]
    return list(request.bodies)


def addr_of(broker_name: str) -> str:
    return f"{broker_name}:10911"


FakeRpcError = StatusError


class DoneCall:
    """A finished grpc call future."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self._response: object = None
        self._error: grpc.RpcError | None = None
        try:
            self._response = fn()
        except grpc.RpcError as exc:
            self._error = exc

    def result(self, timeout: float | None = None) -> object:
        if self._error is not None:
            raise self._error
        return self._response

    def add_done_callback(self, callback: Callable[["DoneCall"], None]) -> None:
        callback(self)


class FakeMethod:
    def __init__(self, broker: "FakeBroker", method: str) -> None:
        self.broker = broker
        self.method = method

    def __call__(self, request: object, timeout: float | None = None) -> object:
        if self.method.endswith("Stream"):  # the SDK's streams: answered one request at a time, as unary calls
            return self._stream(request)  # type: ignore[arg-type]
        return self.broker.invoke(self.method, request)

    def _stream(self, frames: Iterator[Any]) -> Iterator[Any]:
        unary = self.method.removesuffix("Stream")
        answers = broker_pb2.SendStreamAnswers if unary == "SendMessage" else broker_pb2.PullStreamAnswers
        for frame in frames:
            responses = []
            for request in frame.requests:
                response: Any = self.broker.invoke(unary, request)
                response.request_id = request.request_id
                responses.append(response)
            yield answers(responses=responses)

    def future(self, request: object, timeout: float | None = None) -> DoneCall:
        return DoneCall(lambda: self.broker.invoke(self.method, request))


class FakeStub:
    def __init__(self, broker: "FakeBroker") -> None:
        self._broker = broker

    def __getattr__(self, method: str) -> FakeMethod:
        return FakeMethod(self._broker, method)


class FakeBroker:
    def __init__(self, cluster: "FakeCluster", name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.addr = addr_of(name)
        self.calls: list[tuple[str, object]] = []
        self.handlers: dict[str, Handler] = {}
        self.down = False

    def invoke(self, method: str, request: object) -> object:
        copy = type(request)()
        copy.CopyFrom(request)
        with self.cluster.lock:
            self.calls.append((method, copy))
            self.cluster.calls.append((self.name, method, copy))
        if self.down:
            raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, f"{self.name} is down")
        topic = self.cluster.static_topics.get(getattr(copy, "topic", ""))
        if topic is not None:
            return topic.handle(self.name, method, copy)
        handler = self.handlers.get(method)
        if handler is None:
            raise FakeRpcError(grpc.StatusCode.UNIMPLEMENTED, f"{method} not faked on {self.name}")
        return handler(copy)

    def requests(self, method: str) -> list:
        return [r for m, r in self.calls if m == method]


class FakeCluster:
    """Name server plus brokers. ``routes`` is what the name server answers (a copy per fetch)."""

    def __init__(self, *broker_names: str) -> None:
        self.lock = threading.Lock()
        self.routes: dict[str, common_pb2.TopicRouteData] = {}
        self.fetches: list[str] = []
        self.calls: list[tuple[str, str, object]] = []  # (broker, method, request), in arrival order
        self.brokers = {name: FakeBroker(self, name) for name in broker_names}
        self.static_topics: dict[str, FakeStaticTopic] = {}

    def install(self, client: ClientInstance) -> None:
        client._fetch_route = self.fetch_route  # type: ignore[method-assign]
        client.broker = self.stub  # type: ignore[method-assign]
        client.open_stream = self.open_stream  # type: ignore[method-assign]

    def open_stream(self, addr: str, method: str, answers_class: Any,
                    service: str = "rmq.BrokerService") -> Callable[..., Any]:
        stub = self.stub(addr)
        frame_class = broker_pb2.SendStreamFrame if method == "SendMessageStream" else broker_pb2.PullStreamFrame
        return lambda frames: getattr(stub, method)(frame_class.FromString(f) for f in frames)

    def stub(self, addr: str) -> FakeStub:
        for broker in self.brokers.values():
            if broker.addr == addr:
                return FakeStub(broker)
        raise AssertionError(f"no fake broker at {addr}")

    def fetch_route(self, topic: str) -> namesrv_pb2.GetRouteInfoResponse:
        with self.lock:
            self.fetches.append(topic)
        static = self.static_topics.get(topic)
        route = static.route() if static is not None else self.routes.get(topic)
        if route is None:
            return namesrv_pb2.GetRouteInfoResponse(code=ResponseCode.TOPIC_NOT_EXIST, remark=f"no route of {topic}")
        copy = common_pb2.TopicRouteData()
        copy.CopyFrom(route)
        return namesrv_pb2.GetRouteInfoResponse(code=ResponseCode.SUCCESS, route=copy)

    def all_calls(self, method: str) -> list[tuple[str, object]]:
        """(broker, request) of every ``method`` call, in arrival order."""
        return [(b, r) for b, m, r in self.calls if m == method]


STALL_LIMIT_S = 20  # a stalled fake name server answers after this at the latest (a failing test still ends)


class FlakyNameServer:
    """The fake cluster's route fetch, failing while ``down``; counts the fetches. While ``hold`` is clear, a
    fetch that :meth:`stalls` waits for it to be set (``held`` says one does), and then answers what it would
    have answered when it was asked."""

    def __init__(self, fake: FakeCluster) -> None:
        self.fake = fake
        self.down = False
        self.fetches = 0
        self.hold = threading.Event()
        self.hold.set()
        self.held = threading.Event()

    def fetch_route(self, topic: str):
        self.fetches += 1
        answer = None if self.down else self.fake.fetch_route(topic)
        if self.stalls(topic):
            self.held.set()
            assert self.hold.wait(STALL_LIMIT_S), "the stalled name server was never let go"
        if answer is None:
            raise MQClientError(f"route of {topic} failed at fake-namesrv:9876: UNAVAILABLE")
        return answer

    def stalls(self, topic: str) -> bool:
        return not self.hold.is_set()


# -- routes ----------------------------------------------------------------------------------------
def broker_data(name: str, with_master: bool = True) -> common_pb2.BrokerData:
    return common_pb2.BrokerData(cluster="DefaultCluster", broker_name=name,
                                 broker_addrs={0: addr_of(name)} if with_master else {1: f"{name}-slave:10911"})


def mapping_info(topic: str, name: str, epoch: int, total: int, led: dict[int, int],
                 dirty: bool = False) -> common_pb2.TopicQueueMappingInfo:
    return common_pb2.TopicQueueMappingInfo(topic=topic, scope="__global__", total_queues=total, bname=name,
                                            epoch=epoch, dirty=dirty, curr_id_map=led)


def static_route(topic: str, total: int, leads: dict[str, tuple[int, dict[int, int]]],
                 dirty: frozenset[str] = frozenset(), no_master: frozenset[str] = frozenset()
                 ) -> common_pb2.TopicRouteData:
    """``leads``: broker name -> (epoch, {logic id: physical id})."""
    route = common_pb2.TopicRouteData()
    for name, (epoch, led) in sorted(leads.items()):
        n = max([*led.values(), -1]) + 1
        route.queue_datas.append(common_pb2.QueueData(broker_name=name, read_queue_nums=n, write_queue_nums=n,
                                                      perm=6))
        route.broker_datas.append(broker_data(name, name not in no_master))
        route.topic_queue_mapping_by_broker[name].CopyFrom(
            mapping_info(topic, name, epoch, total, led, dirty=name in dirty))
    return route


def normal_route(topic: str, queues: dict[str, int]) -> common_pb2.TopicRouteData:
    route = common_pb2.TopicRouteData()
    for name, n in sorted(queues.items()):
        route.queue_datas.append(common_pb2.QueueData(broker_name=name, read_queue_nums=n, write_queue_nums=n,
                                                      perm=6))
        route.broker_datas.append(broker_data(name))
    return route


# -- a static topic --------------------------------------------------------------------------------
@dataclass
class Segment:
    """One link of a logic queue's chain: a physical queue on ``bname`` whose offset 0 is ``logic_start``."""

    bname: str
    logic_start: int
    bodies: list[bytes] = field(default_factory=list)


class FakeStaticTopic:
    """Logic queues as chains of segments; the last segment's broker leads (and alone accepts sends)."""

    def __init__(self, cluster: FakeCluster, topic: str, leaders: dict[int, str | None]) -> None:
        self.cluster = cluster
        self.topic = topic
        self.total = len(leaders)
        self.epoch = 1000
        self.chains: dict[int, list[Segment]] = {i: [Segment(b, 0)] if b else [] for i, b in leaders.items()}
        self.offsets: dict[tuple[str, int], int] = {}  # (group, logic id) -> committed logic offset
        self.unled: set[int] = set()  # logic ids whose leader gave them up (nobody leads them for now)
        self.fenced: set[str] = set()  # brokers answering NOT_LEADER_FOR_QUEUE whatever the route says
        self.long_poll_s = 0.02  # an empty pull with a suspend time waits this long (keeps push loops calm)
        cluster.static_topics[topic] = self

    # state changes
    def leader(self, logic_id: int) -> str | None:
        chain = self.chains.get(logic_id)
        return chain[-1].bname if chain and logic_id not in self.unled else None

    def append(self, logic_id: int, *bodies: bytes) -> int:
        with self.cluster.lock:
            seg = self.chains[logic_id][-1]
            first = seg.logic_start + len(seg.bodies)
            seg.bodies.extend(bodies)
            return first

    def remap(self, logic_id: int, new_leader: str, logic_start: int) -> None:
        """Move the logic queue: a new segment on ``new_leader`` starting at ``logic_start``."""
        with self.cluster.lock:
            self.chains[logic_id].append(Segment(new_leader, logic_start))
            self.unled.discard(logic_id)
            self.epoch += 1000

    def route(self) -> common_pb2.TopicRouteData:
        with self.cluster.lock:
            leads: dict[str, tuple[int, dict[int, int]]] = {name: (self.epoch, {}) for name in self.cluster.brokers}
            for logic_id in self.chains:
                leader = self.leader(logic_id)
                if leader is not None:
                    leads[leader][1][logic_id] = logic_id
            return static_route(self.topic, self.total, leads)

    # broker side
    def handle(self, bname: str, method: str, req) -> object:
        if req.addressing != broker_pb2.LOGIC:
            raise FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, f"{self.topic} is static: address it LOGIC")
        if self.leader(req.queue_id) != bname or bname in self.fenced:
            not_leader = f"{bname} does not lead logic queue {req.queue_id}"
            if method in ("SendMessage", "PullMessage"):
                cls = broker_pb2.SendMessageResponse if method == "SendMessage" else broker_pb2.PullMessageResponse
                return cls(code=ResponseCode.NOT_LEADER_FOR_QUEUE, remark=not_leader)
            if method == "UpdateConsumerOffset":
                return common_pb2.CommandResponse(code=ResponseCode.NOT_LEADER_FOR_QUEUE, remark=not_leader)
            return broker_pb2.OffsetResponse(code=ResponseCode.NOT_LEADER_FOR_QUEUE, remark=not_leader)
        chain = self.chains[req.queue_id]
        if method == "SendMessage":
            bodies = bodies_of(req)
            offset = self.append(req.queue_id, *bodies)
            return broker_pb2.SendMessageResponse(code=ResponseCode.SUCCESS, queue_id=req.queue_id,
                                                  queue_offset=offset, physical_offsets=list(range(len(bodies))))
        if method == "PullMessage":
            return self._pull(chain, req)
        if method == "UpdateConsumerOffset":
            self.offsets[(req.consumer_group, req.queue_id)] = req.commit_offset
            return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)
        if method == "QueryConsumerOffset":
            offset = self.offsets.get((req.consumer_group, req.queue_id))
            if offset is None:
                return broker_pb2.OffsetResponse(code=ResponseCode.QUERY_NOT_FOUND)
            return broker_pb2.OffsetResponse(code=ResponseCode.SUCCESS, offset=offset)
        if method == "GetMinOffset":
            return broker_pb2.OffsetResponse(code=ResponseCode.SUCCESS, offset=chain[0].logic_start)
        if method in ("GetMaxOffset", "SearchOffset"):
            return broker_pb2.OffsetResponse(code=ResponseCode.SUCCESS,
                                             offset=chain[-1].logic_start + len(chain[-1].bodies))
        raise FakeRpcError(grpc.StatusCode.UNIMPLEMENTED, method)

    def _pull(self, chain: list[Segment], req) -> broker_pb2.PullMessageResponse:
        s = req.queue_offset
        lo = chain[0].logic_start
        hi = chain[-1].logic_start + len(chain[-1].bodies)
        i = max((k for k, seg in enumerate(chain) if seg.logic_start <= s), default=0)
        seg = chain[i]
        index = s - seg.logic_start
        if 0 <= index < len(seg.bodies):
            bodies = seg.bodies[index:index + req.max_msg_nums]
            records = b"".join(encode_record(self.topic.encode(), 100 + req.queue_id, body, b"",
                                             queue_offset=index + k) for k, body in enumerate(bodies))
            return broker_pb2.PullMessageResponse(code=ResponseCode.SUCCESS, next_begin_offset=s + len(bodies),
                                                  min_offset=lo, max_offset=hi, records=records,
                                                  offset_delta=seg.logic_start)
        if i < len(chain) - 1 and index >= len(seg.bodies):  # an older segment drained: hop to the next one
            return broker_pb2.PullMessageResponse(code=ResponseCode.PULL_RETRY_IMMEDIATELY,
                                                  next_begin_offset=chain[i + 1].logic_start, min_offset=lo,
                                                  max_offset=hi)
        if req.suspend_timeout_ms:
            time.sleep(self.long_poll_s)
        return broker_pb2.PullMessageResponse(code=ResponseCode.PULL_NOT_FOUND, next_begin_offset=s,
                                              min_offset=lo, max_offset=hi)

"""Admin: what mqadmin uses. Topics and groups are created on brokers (named, or every master of a
cluster); routes and cluster membership come from the name server."""

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from client.argument_checks import checked_timeout_ms
from client.client_instance import ClientInstance
from client.errors import MQClientError, partly_applied
from client.group_admin import GroupAdmin, GroupMember
from client.grpc_errors import business_error, rpc_error
from client.logical_queue_admin import DrainStatus, LogicalQueueAdmin, LogicQueueMoves
from client.pull_consumer import checked_consumer_group
from client.static_query_positions import to_logic_positions
from client.static_topic_admin import (
    GrpcMappingTransport,
    StaticTopicAdmin,
    StaticTopicRemap,
    StaticTopicStatus,
    StaticTopicUpdate,
)
from common.group_topics import dlq_topic, retry_topic
from common.kv_shard import DEFAULT_KV_SHARDS, KV_TOPIC
from common.message import MessageExt
from common.message_codec import decode_records
from common.message_id import parse_message_id
from common.message_queue import MessageQueue
from common.perm import PERM_READ_WRITE
from common.response_code import ResponseCode, code_name
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import TopicConfig
from common.topic_config_codec import topic_config_to_proto
from common.topic_validator import InvalidTopicError, is_system_topic, system_topic_refusal, validate_topic
from proto import broker_pb2, common_pb2, namesrv_pb2, tiered_pb2, tiered_pb2_grpc

log = logging.getLogger(__name__)
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # upstream's group of mqadmin's own reads
# A replica a read goes past to the next: gone, or not answering in time (a hung master: each one tried costs a
# timeout)
UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
UNREACHABLE_NAMES = frozenset(code.name for code in UNREACHABLE)  # as MQClientError.status says them


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str


@dataclass(frozen=True, slots=True)
class QueueStatus:
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int
    broker_id: int = 0  # the replica that answered: 0 the master, else a slave (the group had no live master)

    @property
    def from_slave(self) -> bool:
        return self.broker_id != 0


@dataclass(frozen=True, slots=True)
class QueueProgress:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int
    broker_id: int = 0  # as QueueStatus.broker_id

    @property
    def diff(self) -> int:
        """Messages left to consume; never below 0 (an offset committed past the queue's end), as the lag metric
        and statsAll."""
        return max(self.broker_offset - max(self.consumer_offset, 0), 0)

    @property
    def from_slave(self) -> bool:
        return self.broker_id != 0


@dataclass(frozen=True, slots=True)
class MessageAt:
    """A message read by queue offset, and the replica that answered (as QueueStatus.broker_id)."""
    message: MessageExt
    broker_id: int = 0

    @property
    def from_slave(self) -> bool:
        return self.broker_id != 0


def _check_topic_filter(what: str, topic: str | None) -> None:
    """A topic given to narrow a query (None: every topic) must be a topic name: an empty one is not "all"."""
    if topic is None:
        return
    try:
        validate_topic(topic)
    except InvalidTopicError as exc:
        raise MQClientError(f"{what}: {exc}") from None


class Admin:
    """What mqadmin does, as calls: topics, groups, offsets, static topics, KV shards, cluster information.

    ::

        with Admin("127.0.0.1:9876") as admin:
            admin.create_topic("TopicA", cluster="DefaultCluster", read_queue_nums=4, write_queue_nums=4)
    """

    def __init__(self, namesrv_addr: str | None = None, rpc_timeout_ms: int = 10_000,
                 tls_ca: str | None = None, credentials: tuple[str, str] | None = None) -> None:
        self.client = ClientInstance(namesrv_addr, checked_timeout_ms("rpc_timeout_ms", rpc_timeout_ms), tls_ca=tls_ca,
                                     credentials=credentials)

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    # -- plumbing ----------------------------------------------------------------------------------
    def _broker_call(self, what: str, addr: str, method: str, request):
        try:
            return self._rpc(addr, method, request)
        except grpc.RpcError as exc:
            raise self._call_error(what, addr, exc) from None

    def _rpc(self, addr: str, method: str, request) -> Any:
        return getattr(self.client.broker(addr), method)(request, timeout=self.client.rpc_timeout_s)

    def _call_error(self, what: str, addr: str, exc: grpc.RpcError) -> MQClientError:
        if exc.code() is grpc.StatusCode.UNIMPLEMENTED:  # something else serves gRPC there
            return MQClientError(self.client.not_a_broker(addr))
        return rpc_error(what, addr, exc)

    def _read_call(self, what: str, broker_name: str, replicas: Mapping[int, str], method: str,
                   request) -> tuple[int, Any]:
        """(broker id that answered, answer) of a read of ``broker_name``'s state, as upstream's selectBrokerAddr
        picks the replica: its master; without one in the route (or when it is not reachable), its slaves by id,
        which hold what the master confirmed and the configs and offsets they last copied from it."""
        ids = sorted(replicas)
        if not ids:
            raise MQClientError(f"{what}: broker {broker_name} has no live replica")
        for broker_id in ids:
            addr = replicas[broker_id]
            try:
                return broker_id, self._rpc(addr, method, request)
            except grpc.RpcError as exc:
                if exc.code() not in UNREACHABLE or broker_id == ids[-1]:
                    raise self._call_error(what, addr, exc) from None
                log.warning("replica_unreachable broker=%s broker_id=%d addr=%s status=%s action='reading from its "
                            "next replica'", broker_name, broker_id, addr, exc.code().name)
        raise AssertionError("unreachable: the last replica answers or raises")

    def _read_replicas(self, broker_names: list[str] | None = None) -> dict[str, dict[int, str]]:
        """{broker name: {broker id: addr}} of the named broker groups (None: every registered one) in the cluster
        info; a named group with no live replica is an error."""
        table = self.cluster_info().broker_addr_table
        if broker_names is None:
            return {name: dict(table[name].broker_addrs) for name in sorted(table) if table[name].broker_addrs}
        out = {}
        for name in broker_names:
            data = table.get(name)
            if data is None or not data.broker_addrs:
                raise MQClientError(f"broker {name} has no live replica registered with the name server")
            out[name] = dict(data.broker_addrs)
        return out

    def _check(self, what: str, addr: str, response) -> None:
        if response.code != ResponseCode.SUCCESS:
            raise business_error(what, addr, response.code, response.remark)

    # -- cluster -----------------------------------------------------------------------------------
    def cluster_info(self) -> namesrv_pb2.ClusterInfo:
        """The first settled name server's (one that restarted a moment ago may lack brokers that have not
        registered with it again: commands on "every broker of the cluster" would act on some)."""
        return self.client.call_namesrv("cluster info", lambda s: s.GetBrokerClusterInfo(
            common_pb2.Empty(), timeout=self.client.rpc_timeout_s), settled=lambda info: not info.warming_up,
            fullness=lambda info: len(info.broker_addr_table))

    def brokers(self, cluster: str | None = None, broker_names: list[str] | None = None) -> list[BrokerInfo]:
        """Masters of ``cluster`` or the named brokers; an unknown cluster or broker is an error."""
        info = self.cluster_info()
        if cluster is not None:
            if cluster not in info.cluster_addr_table:
                raise MQClientError(f"cluster {cluster} does not exist (known: {', '.join(info.cluster_addr_table)})")
            broker_names = list(info.cluster_addr_table[cluster].broker_names)
        out = []
        for name in broker_names or []:
            data = info.broker_addr_table.get(name)
            if data is None or 0 not in data.broker_addrs:
                raise MQClientError(f"broker {name} is not registered with a live master")
            out.append(BrokerInfo(data.cluster, name, 0, data.broker_addrs[0]))
        return sorted(out, key=lambda b: b.broker_name)

    def all_brokers(self) -> list[BrokerInfo]:
        info = self.cluster_info()
        return sorted((BrokerInfo(d.cluster, name, bid, addr) for name, d in info.broker_addr_table.items()
                       for bid, addr in d.broker_addrs.items()), key=lambda b: (b.cluster, b.broker_name, b.broker_id))

    def broker_runtime_info(self, addr: str) -> dict[str, str]:
        return dict(self._broker_call("runtime info", addr, "GetBrokerRuntimeInfo", common_pb2.Empty()).table)

    # -- brokers: config, write permission, producers, stats ---------------------------------------
    def broker_config(self, addr: str) -> tuple[dict[str, str], list[str]]:
        """The broker's broker.conf keys with their current values, and which of them can change live."""
        answer = self._broker_call("broker config", addr, "GetBrokerConfig", common_pb2.Empty())
        return dict(answer.table), list(answer.live_keys)

    def update_broker_config(self, addr: str, key: str, value: str) -> None:
        """Change a live key on the broker at ``addr`` (until it restarts); other keys are refused."""
        response = self._broker_call(f"update broker config {key}", addr, "UpdateBrokerConfig",
                                     broker_pb2.UpdateBrokerConfigRequest(key=key, value=value))
        self._check(f"update broker config {key}", addr, response)

    def set_write_perm(self, broker_name: str, writeable: bool) -> dict[str, int]:
        """wipeWritePerm (False) or addWritePerm (True) of ``broker_name`` on every name server: routes then
        show its queues without (with) PERM_WRITE, so producers stop (resume) sending there. Per name server,
        the number of topics the broker serves there."""
        request = namesrv_pb2.WritePermRequest(broker_name=broker_name)
        what = f"{'add' if writeable else 'wipe'} write perm of {broker_name}"
        out: dict[str, int] = {}
        failed: list[str] = []  # each name server is asked, whatever another answered (as upstream)
        for addr in self.client.namesrv_addrs:
            stub = self.client.namesrv(addr)
            call = stub.AddWritePermOfBroker if writeable else stub.WipeWritePermOfBroker
            try:
                response = call(request, timeout=self.client.rpc_timeout_s)
                self._check(what, addr, response)
            except grpc.RpcError as exc:
                failed.append(self.client.not_a_namesrv(addr) if exc.code() is grpc.StatusCode.UNIMPLEMENTED
                              else str(rpc_error(what, addr, exc)))
                continue
            except MQClientError as exc:
                failed.append(str(exc))
                continue
            if not response.registered:
                failed.append(f"{what} failed at {addr}: broker {broker_name} is not registered there")
                continue
            out[addr] = response.topic_count
        self.client.invalidate_routes()
        if failed:
            done = f"done at {', '.join(out)}" if out else "done at no name server"
            raise MQClientError(f"{'; '.join(failed)} ({done}: run it again once every name server answers)")
        return out

    def producer_connections(self, group: str) -> list[tuple[str, broker_pb2.ProducerConnection]]:
        """(broker name, connection) of each producer session of ``group`` on the masters."""
        out = []
        for b in self.all_masters():
            answer = self._broker_call(f"producers of {group}", b.addr, "GetProducerConnectionList",
                                       broker_pb2.GroupRequest(group_name=group))
            self._check(f"producers of {group}", b.addr, answer)
            out += [(b.broker_name, c) for c in answer.connections]
        if not out:
            raise MQClientError(f"no producer of group {group} is connected to any broker (only producers with a "
                                "transaction checker keep sessions with the brokers)")
        return out

    def stats_all(self) -> list[tuple[str, broker_pb2.TopicStatsRow]]:
        """(broker name, row) of every master's per-topic and per-group stats."""
        out = []
        for b in self.all_masters():
            answer = self._broker_call("broker stats", b.addr, "GetBrokerStats", common_pb2.Empty())
            out += [(b.broker_name, row) for row in answer.rows]
        return out

    def query_msg_by_offset(self, topic: str, broker_name: str, queue_id: int, offset: int) -> MessageAt:
        """The message at ``offset`` of queue ``queue_id`` of ``topic`` on ``broker_name``: read from its master,
        or from a slave while the group has no live master (slaveReadEnable)."""
        route = self.client.route(topic, refresh=True)
        data = next((bd for bd in route.broker_datas if bd.broker_name == broker_name), None)
        if data is None or not data.broker_addrs:
            raise MQClientError(f"topic {topic} has no queues on a live replica of broker {broker_name}")
        what = f"pull {topic}/{broker_name}/{queue_id} at {offset}"
        request = broker_pb2.PullMessageRequest(consumer_group=TOOLS_CONSUMER_GROUP, topic=topic, queue_id=queue_id,
                                                queue_offset=offset, max_msg_nums=1, sub_expression="*",
                                                commit_offset=-1)
        broker_id, response = self._read_call(what, broker_name, data.broker_addrs, "PullMessage", request)
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(f"no message at offset {offset} of {topic}/{broker_name}/{queue_id} (queue holds "
                                f"{response.min_offset}..{response.max_offset - 1}): {code_name(response.code)}"
                                + (f": {response.remark}" if response.remark else ""))
        messages = decode_records(response.records)
        if not messages or messages[0].queue_offset != offset:
            raise MQClientError(f"no message at offset {offset} of {topic}/{broker_name}/{queue_id}")
        return MessageAt(messages[0], broker_id)

    # -- topics ------------------------------------------------------------------------------------
    def create_topic(self, topic: str, cluster: str | None = None, brokers: list[str] | None = None,
                     read_queue_nums: int = 8, write_queue_nums: int = 8, perm: int = PERM_READ_WRITE) -> list[str]:
        """Create or update ``topic`` on every target broker; returns their names."""
        if (cluster is None) == (brokers is None):
            raise MQClientError("give exactly one of a cluster or a broker list")
        targets = self.brokers(cluster, brokers)
        config = common_pb2.TopicConfig(topic_name=topic, read_queue_nums=read_queue_nums,
                                        write_queue_nums=write_queue_nums, perm=perm)
        for i, b in enumerate(targets):
            try:
                response = self._broker_call(f"create topic {topic}", b.addr, "UpdateAndCreateTopic",
                                             broker_pb2.UpdateTopicRequest(config=config))
                self._check(f"create topic {topic} on {b.broker_name}", b.addr, response)
            except MQClientError as exc:
                raise partly_applied(exc, [t.broker_name for t in targets[:i]],
                                     [t.broker_name for t in targets[i + 1:]]) from None
        self.client.invalidate_route(topic)
        return [b.broker_name for b in targets]

    def create_topics(self, topics: Iterable[str | TopicConfig], cluster: str | None = None,
                      brokers: list[str] | None = None, read_queue_nums: int = 8, write_queue_nums: int = 8,
                      perm: int = PERM_READ_WRITE, chunk_size: int = 2000) -> list[str]:
        """Create or update many topics on every target broker (the masters of ``cluster``, or the named
        brokers) with the batch RPC, ``chunk_size`` topics per call; returns the brokers' names.

        ``topics``: names (created with ``read_queue_nums``/``write_queue_nums``/``perm``) or TopicConfigs
        (used as they are). All are checked before anything is sent. Each chunk is applied by a broker as a
        whole (one write, one registration) or not at all; a failure stops at that chunk, and the chunks
        already sent stay created (creating again is harmless)."""
        if (cluster is None) == (brokers is None):
            raise MQClientError("give exactly one of a cluster or a broker list")
        if not 1 <= chunk_size <= 50_000:
            raise MQClientError(f"chunk size {chunk_size} is outside 1..50000")
        configs = [t if isinstance(t, TopicConfig) else
                   TopicConfig(t, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums, perm=perm)
                   for t in topics]
        seen: set[str] = set()
        for config in configs:
            try:
                config.validate()
            except ValueError as exc:
                raise MQClientError(f"topic {config.topic_name[:130]!r}: {exc}") from None
            if config.topic_name in seen:
                raise MQClientError(f"topic {config.topic_name} is given more than once")
            seen.add(config.topic_name)
        targets = self.brokers(cluster, brokers)
        if not configs:
            return [b.broker_name for b in targets]
        chunks = [broker_pb2.UpdateTopicListRequest(configs=[topic_config_to_proto(c) for c in
                                                             configs[i:i + chunk_size]])
                  for i in range(0, len(configs), chunk_size)]
        for b in targets:
            for n, request in enumerate(chunks):
                what = f"create topics {request.configs[0].topic_name}..{request.configs[-1].topic_name}"
                response = self._broker_call(what, b.addr, "UpdateAndCreateTopicList", request)
                self._check(f"{what} on {b.broker_name} (chunk {n + 1} of {len(chunks)})", b.addr, response)
        for config in configs:
            self.client.invalidate_route(config.topic_name)
        log.info("topics_created count=%d brokers=%s chunks=%d", len(configs), ",".join(b.broker_name for b in targets),
                 len(chunks))
        return [b.broker_name for b in targets]

    def delete_topic(self, topic: str, cluster: str) -> list[str]:
        """Delete ``topic`` from every broker of ``cluster`` and from the name servers' routes."""
        if (refusal := system_topic_refusal(topic)) is not None:  # before the route: the name server may have none
            raise MQClientError(f"delete topic {topic}: {refusal}")
        # Every master of the cluster, as upstream: the topic's route may lack a broker that holds it (a name server
        # restarted a moment ago has not heard from every broker yet).
        deleted: list[str] = []
        failed: dict[str, MQClientError] = {}
        for b in self.brokers(cluster):
            try:
                response = self._broker_call(f"delete topic {topic}", b.addr, "DeleteTopic",
                                             broker_pb2.TopicRequest(topic=topic))
                if response.code == ResponseCode.SUCCESS:
                    deleted.append(b.broker_name)
                elif response.code != ResponseCode.TOPIC_NOT_EXIST:
                    self._check(f"delete topic {topic}", b.addr, response)
            except MQClientError as exc:  # the others are asked all the same
                failed[b.broker_name] = exc
        self.client.invalidate_route(topic)
        if deleted:
            self._forget_topic(topic, cluster, deleted)
        # A master that did not answer and that the topic's route does not name (a dead broker still registered)
        # never had it: the command succeeds without it, as when it asked the route's brokers only.
        holding = self._routed_brokers(topic) & set(failed) if failed else set()
        for name in sorted(set(failed) - holding):
            log.info("topic_delete_skipped topic=%s broker=%s error=%s: the topic's route does not name it", topic,
                     name, failed[name])
        if holding:
            first = failed[min(holding)]
            raise partly_applied(MQClientError(f"{first} (and {len(holding) - 1} more)" if len(holding) > 1
                                               else str(first), first.code, first.status), sorted(deleted), [])
        if not deleted:
            raise MQClientError(f"delete topic {topic}: no broker of cluster {cluster} has it",
                                ResponseCode.TOPIC_NOT_EXIST)
        return sorted(deleted)

    def _routed_brokers(self, topic: str) -> set[str]:
        """The broker names a name server routes ``topic`` to now (none when it does not know the topic)."""
        answer = self.client.call_namesrv(f"route of {topic}", lambda s: s.GetRouteInfoByTopic(
            namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=self.client.rpc_timeout_s))
        return {q.broker_name for q in answer.route.queue_datas} if answer.code == ResponseCode.SUCCESS else set()

    def _forget_topic(self, topic: str, cluster: str, brokers: list[str]) -> None:
        """Drop ``topic``'s route on ``brokers`` of ``cluster`` on every name server (each holds routes); best
        effort: the brokers' next registration says the same. Only theirs: a broker the route lacked (a name server
        warming up) still holds the topic, and its route must stay."""
        request = namesrv_pb2.DeleteTopicInNamesrvRequest(topic=topic, cluster_name=cluster, broker_names=brokers)
        for addr in self.client.namesrv_addrs:
            try:
                self.client.namesrv(addr).DeleteTopicInNamesrv(request, timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                log.warning("namesrv_delete_failed namesrv=%s topic=%s status=%s", addr, topic, exc.code().name)

    def topic_list(self) -> list[str]:
        response = self.client.call_namesrv("topic list", lambda s: s.GetAllTopicList(
            common_pb2.Empty(), timeout=self.client.rpc_timeout_s))
        return sorted(response.topics)

    def topic_route(self, topic: str) -> common_pb2.TopicRouteData:
        return self.client.route(topic, refresh=True)

    def topic_status(self, topic: str) -> list[QueueStatus]:
        """Each queue of each broker of the topic's route, from the group's master, or from a slave while the
        group has no live master (``QueueStatus.broker_id``)."""
        route = self.client.route(topic, refresh=True)
        what = f"status of {topic}"
        out = []
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            broker_id, stats = self._read_call(what, bd.broker_name, bd.broker_addrs, "GetTopicStatsInfo",
                                               broker_pb2.TopicRequest(topic=topic))
            self._check(what, bd.broker_addrs[broker_id], stats)
            out += [QueueStatus(bd.broker_name, q.queue_id, q.min_offset, q.max_offset, q.last_update_timestamp,
                                broker_id) for q in stats.queues]
        if not out:  # a route without brokers, or brokers with no queue of it: not an empty success
            raise MQClientError(f"topic {topic} has no queues on any broker of its route")
        return out

    def tiered_status(self, topic: str) -> list[tiered_pb2.TieredStatusResponse]:
        """Per broker of the topic's route: each queue's local and tiered min/max, segments, bytes, upload lag."""
        out = []
        tiered_off: list[str] = []
        for bd in sorted(self.client.route(topic, refresh=True).broker_datas, key=lambda b: b.broker_name):
            addr = bd.broker_addrs.get(0)
            if addr is None:
                continue
            what = f"tiered status of {topic}"
            try:
                response = self.client.stub(tiered_pb2_grpc.TieredServiceStub, addr).GetTieredStatus(
                    tiered_pb2.TieredStatusRequest(topic=topic), timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                raise rpc_error(what, addr, exc) from None
            if response.code == ResponseCode.TOPIC_NOT_EXIST:  # e.g. a broker holding only a static topic's
                continue  # mapping, no queues
            if response.code == ResponseCode.SERVICE_NOT_AVAILABLE:  # tieredStoreEnable=false on that broker
                tiered_off.append(bd.broker_name)
                continue
            self._check(what, addr, response)
            out.append(response)
        if not out:
            raise MQClientError(f"topic {topic} has no tiered queues on any broker of its route"
                                + (f" (tiered storage is off on broker {', '.join(tiered_off)})" if tiered_off else ""))
        return out

    # -- static topics -----------------------------------------------------------------------------
    @property
    def static_topics(self) -> StaticTopicAdmin:
        return StaticTopicAdmin(GrpcMappingTransport(self.client))

    def update_static_topic(self, topic: str, queue_num: int, cluster: str | None = None,
                            brokers: list[str] | None = None) -> StaticTopicUpdate:
        """Create static topic ``topic`` with ``queue_num`` logic queues, or extend it to that many, on the
        masters of ``cluster`` or the named brokers (brokers already holding the topic join them)."""
        if topic == KV_TOPIC:
            raise MQClientError(f"topic {KV_TOPIC} is the KV store: create it with kvInit; its number of shards "
                                "cannot change (keys hash over it)")
        return self._update_static_topic(topic, queue_num, cluster, brokers)

    def _update_static_topic(self, topic: str, queue_num: int, cluster: str | None,
                             brokers: list[str] | None) -> StaticTopicUpdate:
        result = self.static_topics.update_static_topic(topic, queue_num, cluster, brokers)
        self.client.invalidate_route(topic)
        return result

    def remap_static_topic(self, topic: str, cluster: str | None = None,
                           brokers: list[str] | None = None) -> StaticTopicRemap:
        """Move the logic queues of ``topic`` onto the masters of ``cluster`` or the named brokers."""
        result = self.static_topics.remap_static_topic(topic, cluster, brokers)
        self.client.invalidate_route(topic)
        return result

    def migrate_logical_queue(self, topic: str, logic_id: int, broker: str) -> StaticTopicRemap:
        """Move logic queue ``logic_id`` of ``topic`` onto ``broker`` (an expired physical queue of its chain
        there is reused)."""
        result = self.static_topics.migrate_logical_queue(topic, logic_id, broker)
        self.client.invalidate_route(topic)
        return result

    def drain_broker(self, broker: str) -> LogicQueueMoves:
        """Move every logic queue ``broker`` leads, over all static topics, onto the other masters of its cluster."""
        result = LogicalQueueAdmin(self.static_topics).drain_broker(broker)
        self.client.invalidate_routes()
        return result

    def rebalance_logical_queues(self, cluster: str, exclude: list[str] | None = None) -> LogicQueueMoves:
        """Spread every static topic's leaders over the masters of ``cluster`` but ``exclude``."""
        result = LogicalQueueAdmin(self.static_topics).rebalance(cluster, exclude)
        self.client.invalidate_routes()
        return result

    def drain_status(self, broker: str) -> DrainStatus:
        """What keeps a drained ``broker`` from being removed (nothing: ``removable``)."""
        addr = self.brokers(broker_names=[broker])[0].addr
        reserved = self.broker_config(addr)[0].get("fileReservedTime")
        status = LogicalQueueAdmin(self.static_topics).drain_status(broker, float(reserved) if reserved else None)
        status.timer_pending = int(self.broker_runtime_info(addr).get("timerPending") or 0)
        return status

    def static_topic_status(self, topic: str) -> StaticTopicStatus | None:
        """Logic queues with their chains and each item's physical min/max/last update; None when no broker
        holds a mapping for ``topic``."""
        return self.static_topics.static_topic_status(topic)

    def kv_init(self, shards: int = DEFAULT_KV_SHARDS, cluster: str | None = None,
                brokers: list[str] | None = None) -> StaticTopicUpdate | None:
        """Create the KV store's shards: the static topic rmq_sys_KV with ``shards`` logic queues on the masters
        of ``cluster`` or the named brokers (which need kvEnable=true). The number of shards is fixed: keys hash
        over it, so changing it later is refused (move shards between brokers with remap_static_topic). None when
        the store already has ``shards`` shards (nothing to do)."""
        status = self.static_topic_status(KV_TOPIC)
        if status is not None and status.total_queues != shards:
            raise MQClientError(f"the KV store already has {status.total_queues} shards; the number of shards "
                                "cannot change (keys hash over it)")
        if status is not None:
            self.brokers(cluster, brokers)  # an unknown cluster or broker is an error, not "nothing to do"
            return None
        return self._update_static_topic(KV_TOPIC, shards, cluster, brokers)

    def is_static_topic(self, topic: str) -> bool:
        """Whether the name servers' route of ``topic`` carries a static-topic mapping."""
        return bool(self.client.route(topic, refresh=True).topic_queue_mapping_by_broker)

    # -- groups ------------------------------------------------------------------------------------
    def update_subscription_group(self, group: str, cluster: str | None = None, brokers: list[str] | None = None,
                                  consume_enable: bool = True, retry_max_times: int = 16,
                                  consume_message_orderly: bool = False) -> list[str]:
        if (cluster is None) == (brokers is None):
            raise MQClientError("give exactly one of a cluster or a broker list")
        checked_consumer_group(group)
        targets = self.brokers(cluster, brokers)
        request = broker_pb2.SubscriptionGroupConfig(group_name=group, consume_enable=consume_enable,
                                                     consume_broadcast_enable=True, retry_queue_nums=1,
                                                     retry_max_times=retry_max_times,
                                                     consume_message_orderly=consume_message_orderly)
        for b in targets:
            response = self._broker_call(f"update group {group}", b.addr, "UpdateAndCreateSubscriptionGroup", request)
            self._check(f"update group {group} on {b.broker_name}", b.addr, response)
        return [b.broker_name for b in targets]

    def consumer_progress(self, group: str, topic: str | None = None,
                          unreachable: dict[str, str] | None = None) -> list[QueueProgress]:
        """The group's offsets per queue against the queues' max, from each broker group's master, or from a slave
        (its offsets as of its last copy from the master) while the group has no live master. ``unreachable``: the
        broker groups none of whose replicas could be reached are put in it (name: why) and the others answered,
        rather than failing the whole call (a static topic's older link on a broker that is down)."""
        _check_topic_filter(f"progress of {group}", topic)
        what = f"progress of {group}"
        request = broker_pb2.ConsumeStatsRequest(consumer_group=group, topic=topic or "")
        out = []
        for name, replicas in self._read_replicas(self._broker_names_of(topic) if topic else None).items():
            try:
                broker_id, stats = self._read_call(what, name, replicas, "GetConsumeStats", request)
            except MQClientError as exc:
                if unreachable is None or exc.status not in UNREACHABLE_NAMES:
                    raise
                unreachable[name] = str(exc)
                continue
            if stats.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                continue
            self._check(what, replicas[broker_id], stats)
            out += [QueueProgress(q.topic, name, q.queue_id, q.broker_offset, q.consumer_offset, q.last_timestamp,
                                  broker_id) for q in stats.queues]
        if not out and not unreachable:
            raise MQClientError(f"consumer group {group} has no offsets" + (f" on topic {topic}" if topic else ""))
        return sorted(out, key=lambda p: (p.topic, p.broker_name, p.queue_id))

    def subscription_group(self, group: str) -> dict[str, broker_pb2.SubscriptionGroupConfig]:
        """The group's config on each master that has it, by broker name."""
        out = {}
        for b in self.all_masters():
            answer = self._broker_call("subscription groups", b.addr, "GetAllSubscriptionGroup", common_pb2.Empty())
            for config in answer.groups:
                if config.group_name == group:
                    out[b.broker_name] = config
        return out

    def delete_subscription_group(self, group: str, cluster: str | None = None,
                                  brokers: list[str] | None = None) -> dict[str, bool]:
        """Delete the group's config on every target broker; per broker name, whether it had the group. Its
        committed offsets stay (as upstream without removeOffset); a member still running creates it again."""
        if (cluster is None) == (brokers is None):
            raise MQClientError("give exactly one of a cluster or a broker list")
        out = {}
        for b in self.brokers(cluster, brokers):
            response = self._broker_call(f"delete group {group}", b.addr, "DeleteSubscriptionGroup",
                                         broker_pb2.GroupRequest(group_name=group))
            if response.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                self._check(f"delete group {group} on {b.broker_name}", b.addr, response)
            out[b.broker_name] = response.code == ResponseCode.SUCCESS
        log.info("subscription_group_deleted group=%s brokers=%s", group, ",".join(n for n, had in out.items() if had))
        return out

    def delete_group_topics(self, group: str, cluster: str | None = None,
                            brokers: list[str] | None = None) -> dict[str, dict[str, bool]]:
        """Delete the group's retry and dead-letter topics on every target broker; per topic, per broker name,
        whether the broker had it. Each broker re-registers without them; for a whole cluster the name servers
        forget them at once as well (as deleteTopic does)."""
        if (cluster is None) == (brokers is None):
            raise MQClientError("give exactly one of a cluster or a broker list")
        targets = self.brokers(cluster, brokers)
        out: dict[str, dict[str, bool]] = {}
        for topic in (retry_topic(group), dlq_topic(group)):
            out[topic] = {}
            for b in targets:
                response = self._broker_call(f"delete topic {topic}", b.addr, "DeleteTopic",
                                             broker_pb2.TopicRequest(topic=topic))
                if response.code != ResponseCode.TOPIC_NOT_EXIST:
                    self._check(f"delete topic {topic} on {b.broker_name}", b.addr, response)
                out[topic][b.broker_name] = response.code == ResponseCode.SUCCESS
            if cluster is not None and any(out[topic].values()):
                self._forget_topic(topic, cluster, [name for name, had in out[topic].items() if had])
            self.client.invalidate_route(topic)
        return out

    def consumer_connection(self, group: str) -> list[GroupMember]:
        """The group's members (client ids, subscriptions, the queues each consumes) as the brokers see them."""
        return GroupAdmin(self.client).connection(group, [b.addr for b in self.all_masters()])

    def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int) -> dict[MessageQueue, int]:
        addrs = [b.addr for b in self.brokers(broker_names=self._broker_names_of(topic))]
        return GroupAdmin(self.client).reset_offset_by_time(group, topic, timestamp_ms, addrs)

    def all_masters(self) -> list[BrokerInfo]:
        return [b for b in self.all_brokers() if b.broker_id == 0]

    def _broker_names_of(self, topic: str) -> list[str]:
        return sorted(bd.broker_name for bd in self.client.route(topic, refresh=True).broker_datas)

    # -- messages ----------------------------------------------------------------------------------
    def _static_details(self, topic: str) -> list[TopicQueueMappingDetail]:
        """Every broker's chains of a static topic ([] for a normal topic): where physical queues sit in logic
        terms, so query results carry logic queues and offsets as pulls do."""
        transport = GrpcMappingTransport(self.client)
        states = [transport.read(bname, topic) for bname in sorted(transport.mapping_holders(topic))]
        return [state.detail for state in states if state.detail is not None]

    def query_msg_by_key(self, topic: str, key: str, max_num: int = 64) -> list[MessageExt]:
        found: list[MessageExt] = []
        details = self._static_details(topic)
        for name in self._broker_names_of(topic):
            addr = self.client.master_addr(topic, name)
            response = self._broker_call(f"query {topic} by key", addr, "QueryMessage",
                                         broker_pb2.QueryMessageRequest(topic=topic, key=key, max_num=max_num))
            if response.code == ResponseCode.SUCCESS:
                found += to_logic_positions(decode_records(response.records), name, details)
            elif response.code != ResponseCode.QUERY_NOT_FOUND:
                self._check(f"query {topic} by key", addr, response)
        return sorted(found, key=lambda m: m.store_timestamp)

    def query_msg_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message with ``msg_id``: an offset id (store host and commitlog offset, SendResult.offset_msg_id)
        is read from its broker directly; otherwise the id is a unique key (SendResult.msg_id), looked up in the
        index of ``topic``, or of every topic when none is given."""
        if not msg_id.strip():  # else every topic's index is asked for the empty key, and the first refusal names it
            raise MQClientError("message id is empty")
        _check_topic_filter(f"query message {msg_id}", topic)
        try:
            addr, offset = parse_message_id(msg_id)
        except ValueError:
            addr, offset = "", -1
        names = {b.addr: b.broker_name for b in self.all_brokers()}
        if addr and addr in names:
            response = self._broker_call(f"view message {msg_id}", addr, "ViewMessageById",
                                         broker_pb2.ViewMessageRequest(commit_log_offset=offset))
            self._check(f"view message {msg_id}", addr, response)
            msg = decode_records(response.records)[0]
            return to_logic_positions([msg], names[addr], self._static_details(msg.topic))[0]
        for name in [topic] if topic else [t for t in self.topic_list() if not is_system_topic(t)]:
            found = [m for m in self.query_msg_by_key(name, msg_id) if m.unique_key == msg_id]
            if found:
                return found[0]
        raise MQClientError(f"no message with id {msg_id} (neither an offset id of a live broker nor a unique key "
                            f"found in {'topic ' + topic if topic else 'any topic'})")

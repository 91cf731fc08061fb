"""Translation between the name server's protobuf messages and its route models, with request validation."""

import zlib
from collections.abc import Iterator

from google.protobuf.message import DecodeError

from common.request_error import RequestError
from namesrv.route_models import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    LiveBroker,
    QueueData,
    RegisterBrokerRequest,
    TopicConfig,
    TopicQueueMappingInfo,
    TopicRouteData,
)
from proto import common_pb2, namesrv_pb2

# A compressed body may not inflate beyond this: a few bytes of zlib must not make us allocate gigabytes.
MAX_INFLATED_BODY_BYTES = 1 << 30


class MalformedRequest(RequestError):
    """A request that breaks the protocol; the message says what was wrong (sent as INVALID_ARGUMENT)."""


# ---- requests --------------------------------------------------------------------------------------------


def register_request_from_proto(request: namesrv_pb2.RegisterBrokerRequest) -> RegisterBrokerRequest:
    missing = [name for name in ("cluster_name", "broker_name", "broker_addr") if not getattr(request, name)]
    if missing:
        raise MalformedRequest(f"RegisterBroker without {', '.join(missing)}")
    if request.broker_id < 0:
        raise MalformedRequest(f"RegisterBroker with negative broker_id {request.broker_id}")
    if request.heartbeat_timeout_ms < 0:
        raise MalformedRequest(f"RegisterBroker with negative heartbeat_timeout_ms {request.heartbeat_timeout_ms}")
    body = _register_body(request)
    if any(not config.topic_name for config in body.topic_configs):
        raise MalformedRequest("RegisterBroker body has a topic config with an empty topic_name")
    return RegisterBrokerRequest(
        cluster_name=request.cluster_name,
        broker_name=request.broker_name,
        broker_id=request.broker_id,
        broker_addr=request.broker_addr,
        data_version=data_version_from_proto(request.data_version),
        full=request.full,
        topic_configs=_topic_configs(body),
        deleted_topics=list(body.deleted_topics),
        topic_queue_mapping_infos={topic: mapping_info_from_proto(info)
                                   for topic, info in body.topic_queue_mapping_info.items()},
        # Unset on a delta means "relative to nothing": never matches, so the broker is asked for a full one.
        base_version=data_version_from_proto(request.base_version) if request.HasField("base_version") else None,
        heartbeat_timeout_ms=request.heartbeat_timeout_ms,
        master_epoch=request.master_epoch,
        register_period_ms=request.register_period_ms,
    )


def _register_body(request: namesrv_pb2.RegisterBrokerRequest) -> namesrv_pb2.RegisterBrokerBody:
    if not request.compressed_body:
        return request.body
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(request.compressed_body, MAX_INFLATED_BODY_BYTES)
    except zlib.error as e:
        raise MalformedRequest(f"compressed_body is not valid zlib: {e}") from None
    if inflater.unconsumed_tail:
        raise MalformedRequest(f"compressed_body inflates beyond {MAX_INFLATED_BODY_BYTES} bytes")
    if not inflater.eof:
        raise MalformedRequest("compressed_body is truncated zlib")
    body = namesrv_pb2.RegisterBrokerBody()
    try:
        body.ParseFromString(raw)
    except DecodeError as e:
        raise MalformedRequest(f"compressed_body is not a RegisterBrokerBody: {e}") from None
    return body


def _topic_configs(body: namesrv_pb2.RegisterBrokerBody) -> Iterator[TopicConfig]:
    """Lazily, so a million-topic body is converted while applied instead of copied into a list first."""
    for config in body.topic_configs:
        yield TopicConfig(config.topic_name, config.read_queue_nums, config.write_queue_nums, config.perm,
                          config.topic_sys_flag)


def data_version_from_proto(version: common_pb2.DataVersion) -> DataVersion:
    return DataVersion(version.state_version, version.counter)


def mapping_info_from_proto(info: common_pb2.TopicQueueMappingInfo) -> TopicQueueMappingInfo:
    return TopicQueueMappingInfo(info.topic, info.scope, info.total_queues, info.bname, info.epoch, info.dirty,
                                 dict(info.curr_id_map))


# ---- responses -------------------------------------------------------------------------------------------


def data_version_to_proto(version: DataVersion) -> common_pb2.DataVersion:
    return common_pb2.DataVersion(state_version=version.state_version, counter=version.counter)


def mapping_info_to_proto(info: TopicQueueMappingInfo) -> common_pb2.TopicQueueMappingInfo:
    return common_pb2.TopicQueueMappingInfo(topic=info.topic, scope=info.scope, total_queues=info.total_queues,
                                            bname=info.bname, epoch=info.epoch, dirty=info.dirty,
                                            curr_id_map=dict(info.curr_id_map))


def queue_data_to_proto(queue_data: QueueData) -> common_pb2.QueueData:
    return common_pb2.QueueData(broker_name=queue_data.broker_name, read_queue_nums=queue_data.read_queue_nums,
                                write_queue_nums=queue_data.write_queue_nums, perm=queue_data.perm,
                                topic_sys_flag=queue_data.topic_sys_flag)


def broker_data_to_proto(broker_data: BrokerData) -> common_pb2.BrokerData:
    return common_pb2.BrokerData(cluster=broker_data.cluster, broker_name=broker_data.broker_name,
                                 broker_addrs=broker_data.broker_addrs)


def route_to_proto(route: TopicRouteData) -> common_pb2.TopicRouteData:
    return common_pb2.TopicRouteData(
        queue_datas=[queue_data_to_proto(qd) for qd in route.queue_datas],
        broker_datas=[broker_data_to_proto(bd) for bd in route.broker_datas],
        topic_queue_mapping_by_broker={name: mapping_info_to_proto(info)
                                       for name, info in route.topic_queue_mapping_by_broker.items()},
    )


def live_broker_to_proto(broker: LiveBroker) -> namesrv_pb2.BrokerLiveInfo:
    return namesrv_pb2.BrokerLiveInfo(broker_addr=broker.broker_addr,
                                      last_update_timestamp=broker.last_update_timestamp,
                                      data_version=data_version_to_proto(broker.data_version),
                                      topic_count=broker.topic_count)


def cluster_info_to_proto(info: ClusterInfo) -> namesrv_pb2.ClusterInfo:
    return namesrv_pb2.ClusterInfo(
        broker_addr_table={name: broker_data_to_proto(bd) for name, bd in info.broker_addr_table.items()},
        cluster_addr_table={cluster: namesrv_pb2.BrokerNames(broker_names=names)
                            for cluster, names in info.cluster_addr_table.items()},
        live_brokers=[live_broker_to_proto(broker) for broker in info.live_brokers],
    )

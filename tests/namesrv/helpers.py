"""Builders shared by the name server tests."""

from common.perm import PERM_READ_WRITE
from namesrv.route_models import DataVersion, TopicConfig, TopicQueueMappingInfo
from proto import common_pb2, namesrv_pb2

STATE = 1_700_000_000_000  # a broker's start time, the state_version of its DataVersion
CLUSTER = "DefaultCluster"


def version(counter: int) -> DataVersion:
    return DataVersion(STATE, counter)


def topic_configs(*names: str, queues: int = 4, perm: int = PERM_READ_WRITE) -> list[TopicConfig]:
    return [TopicConfig(name, queues, queues, perm) for name in names]


def mapping(topic: str, bname: str, curr_id_map: dict[int, int], total: int = 4,
            epoch: int = 1000) -> TopicQueueMappingInfo:
    return TopicQueueMappingInfo(topic, "__global__", total, bname, epoch, False, curr_id_map)


def register_request_pb(broker_name: str, addr: str, topics: list[str], counter: int = 1, *, broker_id: int = 0,
                        full: bool = True, base: int | None = None, cluster: str = CLUSTER,
                        heartbeat_timeout_ms: int = 0) -> namesrv_pb2.RegisterBrokerRequest:
    request = namesrv_pb2.RegisterBrokerRequest(
        cluster_name=cluster, broker_name=broker_name, broker_id=broker_id, broker_addr=addr,
        data_version=common_pb2.DataVersion(state_version=STATE, counter=counter), full=full,
        body=register_body_pb(topics), heartbeat_timeout_ms=heartbeat_timeout_ms)
    if base is not None:
        request.base_version.CopyFrom(common_pb2.DataVersion(state_version=STATE, counter=base))
    return request


def register_body_pb(topics: list[str], queues: int = 4) -> namesrv_pb2.RegisterBrokerBody:
    return namesrv_pb2.RegisterBrokerBody(topic_configs=[
        common_pb2.TopicConfig(topic_name=t, read_queue_nums=queues, write_queue_nums=queues,
                               perm=PERM_READ_WRITE) for t in topics])

"""A forged registration claiming a static topic's logic queue at its epoch does not take the queue (real daemons)."""

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, Message, Producer
from client.static_route import logic_queue_leaders
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from proto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.cluster import wait_until
from tests.statictopic.cluster_fixture import StaticCluster, make_static_cluster

T = "ForgedT"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StaticCluster]:
    c = make_static_cluster(tmp_path)
    yield c
    c.stop()


def forged_registration(epoch: int) -> namesrv_pb2.RegisterBrokerRequest:
    """broker-x, which nobody made part of the topic, claims logic queue 0 at the topic's own epoch."""
    body = namesrv_pb2.RegisterBrokerBody()
    body.topic_queue_mapping_info[T].CopyFrom(common_pb2.TopicQueueMappingInfo(
        topic=T, scope="__global__", total_queues=2, bname="broker-x", epoch=epoch, curr_id_map={0: 0}))
    return namesrv_pb2.RegisterBrokerRequest(
        cluster_name="DefaultCluster", broker_name="broker-x", broker_id=0, broker_addr="127.0.0.1:1",
        data_version=common_pb2.DataVersion(state_version=1, counter=1), full=True, body=body)


def test_a_forged_leader_at_the_same_epoch_is_ignored_and_logged(cluster: StaticCluster):
    with Admin(cluster.addr) as admin:
        admin.update_static_topic(T, 2, brokers=["broker-a"])
        epoch = cluster.mapping("broker-a", T).detail.epoch
        cluster.wait_route_epoch(T, epoch)
        assert logic_queue_leaders(admin.topic_route(T)) == (2, {0: "broker-a", 1: "broker-a"})

        with grpc.insecure_channel(cluster.addr) as channel:
            response = namesrv_pb2_grpc.NamesrvServiceStub(channel).RegisterBroker(forged_registration(epoch),
                                                                                   timeout=10)
        assert response.code == ResponseCode.SUCCESS  # the registration itself is taken; only the mapping is not
        wait_until(lambda: "static_mapping_ignored" in cluster.namesrv.log(), timeout=10,
                   what="the name server to log the ignored mapping")
        (line,) = [ln for ln in cluster.namesrv.log().splitlines() if "static_mapping_ignored" in ln]
        assert f"topic={T} broker=broker-x" in line and f"two leaders at epoch {epoch} for logic queue 0" in line

        route = admin.topic_route(T)
        assert "broker-x" not in route.topic_queue_mapping_by_broker
        assert logic_queue_leaders(route) == (2, {0: "broker-a", 1: "broker-a"})

    queue0 = MessageQueue(T, LOGICAL_QUEUE_MOCK_BROKER_NAME, 0)
    with Producer(cluster.addr) as producer:
        result = producer.send(Message(T, b"still to broker-a"), queue=queue0)
    assert (result.queue, result.queue_offset) == (queue0, 0)

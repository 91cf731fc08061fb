"""Three real brokers and a name server for static-topic tests."""

from pathlib import Path

import grpc

from client import Admin
from proto import broker_pb2, broker_pb2_grpc
from tests.cluster import Cluster, make_cluster, static_route_mappings, wait_static_route

BROKERS = ("broker-a", "broker-b", "broker-c")


class StaticCluster(Cluster):
    def stub(self, name: str) -> broker_pb2_grpc.BrokerServiceStub:
        return broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(self.brokers[name].addr))

    def mapping(self, name: str, topic: str) -> broker_pb2.TopicQueueMappingResponse:
        return self.stub(name).GetTopicQueueMapping(broker_pb2.TopicRequest(topic=topic), timeout=5)

    def wait_route_epoch(self, topic: str, epoch: int) -> None:
        """Until the name server's route shows every broker of the topic at ``epoch`` or later."""
        try:
            wait_static_route(self.addr, topic, epoch)
        except TimeoutError as exc:  # say where each side stands: the route's epochs and the brokers' own
            with Admin(self.addr) as admin:
                routed = {b: i.epoch for b, i in static_route_mappings(admin, topic).items()}
            held = {b: self.mapping(b, topic).detail.epoch for b in self.brokers}
            raise TimeoutError(f"{exc}; route epochs {routed}, broker epochs {held}") from exc


def make_static_cluster(workdir: Path, **settings: object) -> StaticCluster:
    cluster = make_cluster(workdir, BROKERS, cls=StaticCluster, **{"registerNameServerPeriod": 1000, **settings})
    assert isinstance(cluster, StaticCluster)
    return cluster

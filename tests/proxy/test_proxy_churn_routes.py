"""A deleted topic through mqproxy: its route is forgotten once the name servers have not known it for the route
cache's grace (``UNKNOWN_TOPIC_GRACE_S``), and QueryRoute then answers TOPIC_NOT_FOUND, as for a topic that never
existed. Before, the proxy kept the route for its life: QueryRoute answered OK with the deleted topic's queues, and
the proxy grew by a route (and a receive turn) per deleted topic.

Real daemons (a name server, a broker, mqproxy), spoken to with this repository's copy of the v2 protos. The proxy is
this module run as a script (see the end): mqproxy itself, with a grace of a second instead of a minute."""

import asyncio
import itertools
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, client_instance
from proto import common_pb2
from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from proxy.proxy_config import ProxyConfig
from proxy.proxy_server import ProxyServer
from tests.cluster import Cluster, Daemon, make_cluster, start_daemon, wait_until

Code = definition_pb2.Code
GRACE_S = 1.0  # the proxy's UNKNOWN_TOPIC_GRACE_S here


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Cluster, Daemon]]:
    cluster = make_cluster(tmp_path, ["broker-a"], registerNameServerPeriod=1000)
    try:
        proxy = start_daemon("mqproxy", __name__, ["-n", cluster.addr, "--host", "127.0.0.1", "-p", "0"],
                             tmp_path / "mqproxy")
        try:
            yield cluster, proxy
        finally:
            assert proxy.stop() == 0, proxy.log()[-3000:]
    finally:
        cluster.stop()


def query_route(stub: service_pb2_grpc.MessagingServiceStub, topic: str) -> service_pb2.QueryRouteResponse:
    return stub.QueryRoute(service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic)), timeout=10)


def send(stub: service_pb2_grpc.MessagingServiceStub, topic: str) -> service_pb2.SendMessageResponse:
    message = definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=b"x",
                                     system_properties=definition_pb2.SystemProperties(
                                         message_id=uuid.uuid4().hex.upper()))
    return stub.SendMessage(service_pb2.SendMessageRequest(messages=[message]), timeout=10)


def test_query_route_of_a_deleted_topic_is_topic_not_found_after_the_grace(cluster: tuple[Cluster, Daemon]):
    daemons, proxy = cluster
    topic = f"Gone_{uuid.uuid4().hex[:8]}"
    daemons.create_topic(topic, queues=2)
    with grpc.insecure_channel(proxy.addr) as channel, Admin(daemons.addr) as admin:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        answer = query_route(stub, topic)
        assert answer.status.code == Code.OK and len(answer.message_queues) == 2
        assert send(stub, topic).status.code == Code.OK
        assert query_route(stub, "NeverExisted").status.code == Code.TOPIC_NOT_FOUND

        admin.delete_topic(topic, "DefaultCluster")
        wait_until(lambda: topic not in admin.topic_list(), what="the name server to forget the topic")
        seen: list[str] = []

        def not_found() -> bool:
            # A v2 producer still sending there: the broker refuses each send, which has the proxy ask the name
            # server again (the route would otherwise be asked for only when its 30 s are up).
            sent = send(stub, topic)
            seen.append(f"send {Code.Name(sent.status.code)}")
            assert sent.status.code != Code.OK, "the deleted topic took a message"
            answer = query_route(stub, topic)
            seen.append(f"route {Code.Name(answer.status.code)}")
            return answer.status.code == Code.TOPIC_NOT_FOUND

        try:
            wait_until(not_found, timeout=30, interval=0.3, what="QueryRoute TOPIC_NOT_FOUND")
        except TimeoutError:
            raise AssertionError(f"QueryRoute still answers the deleted topic's route: {seen[-4:]}") from None
        assert query_route(stub, topic).status.code == Code.TOPIC_NOT_FOUND  # and it stays so
        assert send(stub, topic).status.code == Code.TOPIC_NOT_FOUND
    assert f"route_forgotten topic={topic} why='the name servers have not known the topic" in proxy.log()


def test_a_forgotten_route_takes_the_receive_turn_of_its_topic_with_it():
    """The proxy's own per-topic state goes with the route cache's entry (wired in ProxyServer)."""

    async def scenario() -> dict:
        server = ProxyServer(ProxyConfig(namesrv_addr="127.0.0.1:1", port=0))
        servicer = server._servicer()
        try:
            assert server._producer is not None
            client = server._producer.client
            client._routes["Gone"] = (0.0, common_pb2.TopicRouteData())
            servicer.consume._turns["Gone"] = itertools.count()
            servicer.consume._turns["Kept"] = itertools.count()
            client._forget_route("Gone", "deleted")
            return dict(servicer.consume._turns)
        finally:
            for closable in (server._transaction, server._producer, server._admin):
                if closable is not None:
                    closable.close()

    assert set(asyncio.run(scenario())) == {"Kept"}


if __name__ == "__main__":  # the test's mqproxy: the daemon, with a short grace
    from proxy.main import main

    client_instance.UNKNOWN_TOPIC_GRACE_S = GRACE_S
    sys.exit(main())

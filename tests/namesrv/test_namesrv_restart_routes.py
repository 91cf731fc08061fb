"""A name server restarted a moment ago knows only the brokers that registered with it since: each comes at its next
registerNameServerPeriod. Running clients took its partial route in place of their whole cached one: a static
topic's logic queues led by a broker not yet back had no leader (keyed sends failed), KV shards stalled, for up to
the period, even with a second name server up. Its route answers say it is warming up; a client keeps a cached
route that has brokers such an answer lacks."""

from collections.abc import Iterator

import pytest

from client import Admin, Message, MessageQueue, Producer
from cluster.daemon_process import start_namesrv
from tests.cluster import Cluster, make_cluster, start_broker, wait_until

TOPIC = "RestartRoutesT"


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    c = make_cluster(tmp_path, broker_names=("broker-a",), registerNameServerPeriod=1000)
    c.brokers["broker-b"] = start_broker(tmp_path, "broker-b", c.addr, registerNameServerPeriod=600_000)
    try:
        yield c
    finally:
        c.stop()


def brokers_of(route) -> set[str]:
    return {bd.broker_name for bd in route.broker_datas}


def test_a_client_keeps_the_brokers_a_restarted_name_server_has_not_heard_from_yet(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, queues=2)
    with Producer(cluster.addr) as producer:
        client = producer.client
        assert brokers_of(client.route(TOPIC, refresh=True)) == {"broker-a", "broker-b"}
        port = cluster.addr.rpartition(":")[2]
        cluster.namesrv.kill()
        cluster.namesrv = start_namesrv(cluster.workdir, "-p", port)  # broker-b registers again in 10 minutes
        with Admin(cluster.addr) as admin:
            wait_until(lambda: TOPIC in admin.topic_list(), what="broker-a registered again")
            assert {q.broker_name for q in admin.topic_route(TOPIC).queue_datas} == {"broker-a"}
        assert brokers_of(client.route(TOPIC, refresh=True)) == {"broker-a", "broker-b"}  # was {broker-a}
        assert producer.send(Message(TOPIC, b"to-b"), queue=MessageQueue(TOPIC, "broker-b", 0)).queue_offset == 0


def test_a_broker_whose_registration_failed_registers_again_within_seconds_not_a_period_later(
        cluster: Cluster) -> None:
    """A failed registration waited the whole period (here 10 minutes) before the next try."""
    cluster.create_topic(TOPIC, queues=1)
    port = cluster.addr.rpartition(":")[2]
    cluster.namesrv.stop()
    cluster.brokers["broker-b"].stop()
    b = cluster.brokers["broker-b"] = start_broker(cluster.workdir, "broker-b", cluster.addr,
                                                   registerNameServerPeriod=600_000)  # its first try fails
    wait_until(lambda: "register_failed" in b.log(), timeout=30, what="broker-b's registration failed")
    cluster.namesrv = start_namesrv(cluster.workdir, "-p", port)
    with Admin(cluster.addr) as admin:
        wait_until(lambda: TOPIC in admin.topic_list() and {q.broker_name for q in admin.topic_route(
            TOPIC).queue_datas} == {"broker-a", "broker-b"}, timeout=15, what="broker-b registered again")

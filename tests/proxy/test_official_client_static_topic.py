"""A static topic through mqproxy with the official client, across a remap: messages produced before and after the
logic queues moved to another broker are all received once (the new leader pops the older items from the old
broker), with their logic queue ids."""

import uuid

from client import Admin
from tests.cluster import static_route_epoch, wait_static_route
from tests.proxy.conftest import OfficialClient, ProxyCluster


def test_static_topic_produced_and_consumed_through_the_proxy_across_a_remap(proxy_cluster: ProxyCluster,
                                                                             official_client: OfficialClient):
    topic = f"ProxyStaticPop_{uuid.uuid4().hex[:8]}"
    group = f"static_pop_{uuid.uuid4().hex[:8]}"
    with Admin(proxy_cluster.namesrv) as admin:
        admin.update_static_topic(topic, 4, brokers=["broker-a"])
        wait_static_route(proxy_cluster.namesrv, topic, 0)
        before = official_client.run("produce.py", proxy_cluster.endpoint, topic, 20, "--prefix", "before")
        epoch = static_route_epoch(admin, topic)
        admin.remap_static_topic(topic, brokers=["broker-b"])
        wait_static_route(proxy_cluster.namesrv, topic, epoch + 1)  # the remapped route
    after = official_client.run("produce.py", proxy_cluster.endpoint, topic, 20, "--prefix", "after")
    sent = {line["message_id"]: line["body"] for line in before + after if "message_id" in line}
    assert len(sent) == 40

    lines = official_client.run("simple_consume.py", proxy_cluster.endpoint, group, topic, "drain",
                                "--expect", len(sent), "--invisible", 20, "--linger", 3, "--budget", 60)
    received = [line for line in lines if line.get("event") in ("received", "received-again")]
    assert {d["message_id"]: d["body"] for d in received} == sent
    assert len(received) == len(sent), "a message came twice"

"""The official RocketMQ 5 Python client's SimpleConsumer receives through mqproxy, which pops from the brokers'
``rmq.PopService``: every message once when each is acked, an un-acked one again after its invisible time with its
attempt raised, and a changed invisible duration honoured with a new receipt handle (the old one refused)."""

import uuid

from client import Admin
from proto.v2 import definition_pb2
from tests.proxy.conftest import OfficialClient, ProxyCluster

Code = definition_pb2.Code


def fresh_topic(proxy_cluster: ProxyCluster, queues: int = 4) -> str:
    topic = f"ProxyRecv_{uuid.uuid4().hex[:8]}"
    proxy_cluster.cluster.create_topic(topic, queues)
    return topic


def send(official_client: OfficialClient, proxy_cluster: ProxyCluster, topic: str, count: int) -> dict[str, str]:
    lines = official_client.run("produce.py", proxy_cluster.endpoint, topic, count, "--tag", "TagA", "--keys",
                                "--property", "color=red")
    return {line["message_id"]: line["body"] for line in lines if "message_id" in line}


def deliveries(lines: list[dict], *events: str) -> list[dict]:
    return [line for line in lines if line.get("event") in events]


def test_every_message_received_and_acked_exactly_once(proxy_cluster: ProxyCluster,
                                                       official_client: OfficialClient):
    topic = fresh_topic(proxy_cluster)
    sent = send(official_client, proxy_cluster, topic, 40)
    group = f"simple_{uuid.uuid4().hex[:8]}"
    lines = official_client.run("simple_consume.py", proxy_cluster.endpoint, group, topic, "drain",
                                "--expect", len(sent), "--invisible", 20, "--linger", 4, "--budget", 60)
    received = deliveries(lines, "received", "received-again")
    assert {d["message_id"]: d["body"] for d in received} == sent
    assert len(received) == len(sent), "a message acked in time came again"
    for d in received:
        assert d["attempt"] == 1 and d["tag"] == "TagA" and d["properties"] == {"color": "red"}
        assert not d["corrupted"]  # the client checked the body against the CRC32 digest the proxy sent
        assert d["keys"] == [f"key-{d['body'].rsplit('-', 1)[1]}"]


def test_unacked_message_comes_again_after_its_invisible_time_with_its_attempt_raised(
        proxy_cluster: ProxyCluster, official_client: OfficialClient):
    topic = fresh_topic(proxy_cluster, queues=1)
    sent = send(official_client, proxy_cluster, topic, 1)
    group = f"simple_{uuid.uuid4().hex[:8]}"
    lines = official_client.run("simple_consume.py", proxy_cluster.endpoint, group, topic, "redeliver",
                                "--invisible", 3, "--budget", 40)
    (first,) = deliveries(lines, "received")
    (again,) = deliveries(lines, "redelivered")
    assert first["message_id"] == again["message_id"] and first["message_id"] in sent
    assert (first["attempt"], again["attempt"]) == (1, 2)
    assert again["t"] - first["t"] >= 3 - 0.2, "handed out again before its invisible time passed"


def test_change_invisible_duration_holds_the_message_back_and_voids_the_old_handle(
        proxy_cluster: ProxyCluster, official_client: OfficialClient):
    topic = fresh_topic(proxy_cluster, queues=1)
    send(official_client, proxy_cluster, topic, 1)
    group = f"simple_{uuid.uuid4().hex[:8]}"
    lines = official_client.run("simple_consume.py", proxy_cluster.endpoint, group, topic, "change-invisible",
                                "--invisible", 2, "--to", 6, "--budget", 40)
    (first,) = deliveries(lines, "received")
    (changed,) = deliveries(lines, "changed")
    (again,) = deliveries(lines, "redelivered")
    (old_ack,) = deliveries(lines, "old-handle-ack")
    assert changed["new_handle_differs"]
    assert again["message_id"] == first["message_id"]
    assert again["t"] - changed["t"] >= 6 - 0.2, "handed out again before the changed invisible time passed"
    invalid_receipt_handle = f"BadRequestException: {Code.INVALID_RECEIPT_HANDLE}, "
    assert not old_ack["ok"] and old_ack["error"].startswith(invalid_receipt_handle), old_ack


def test_push_consumer_consumes_a_topic_and_a_failed_message_comes_again(proxy_cluster: ProxyCluster,
                                                                         official_client: OfficialClient):
    topic = fresh_topic(proxy_cluster)
    sent = send(official_client, proxy_cluster, topic, 20)
    failing = next(body for body in sent.values() if body.endswith("-7"))
    group = f"push_{uuid.uuid4().hex[:8]}"
    lines = official_client.run("push_consume.py", proxy_cluster.endpoint, group, topic, "--expect", len(sent),
                                "--fail-suffix", "-7", "--linger", 3, "--budget", 90, timeout=150)
    delivered = deliveries(lines, "delivered")
    succeeded = {d["message_id"]: d["body"] for d in delivered if d["result"] == "success"}
    assert succeeded == sent
    assert len([d for d in delivered if d["result"] == "success"]) == len(sent), "a consumed message came again"
    retried = [d for d in delivered if d["body"] == failing]
    assert [(d["attempt"], d["result"]) for d in retried] == [(1, "failure"), (2, "success")]


def test_fifo_message_groups_are_received_in_order(proxy_cluster: ProxyCluster, official_client: OfficialClient):
    topic = fresh_topic(proxy_cluster)
    group = f"fifo_{uuid.uuid4().hex[:8]}"
    with Admin(proxy_cluster.namesrv) as admin:
        admin.update_subscription_group(group, cluster="DefaultCluster", consume_message_orderly=True)
    sent: dict[str, str] = {}
    for message_group in ("order-A", "order-B"):
        lines = official_client.run("produce.py", proxy_cluster.endpoint, topic, 50, "--message-group",
                                    message_group, "--prefix", message_group)
        sent |= {line["message_id"]: line["body"] for line in lines if "message_id" in line}
    lines = official_client.run("simple_consume.py", proxy_cluster.endpoint, group, topic, "drain",
                                "--expect", len(sent), "--invisible", 20, "--budget", 90, timeout=150)
    received = deliveries(lines, "received", "received-again")
    assert {d["message_id"]: d["body"] for d in received} == sent and len(received) == len(sent)
    for message_group in ("order-A", "order-B"):
        bodies = [d["body"] for d in received if d["group"] == message_group]
        assert bodies == [f"{message_group}-{i}" for i in range(50)], f"{message_group} out of order: {bodies}"

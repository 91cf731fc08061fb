"""Broker SIGKILL during POP consumption, seen by the official RocketMQ 5 Python client through mqproxy: 40
messages are received with a short invisible time and 25 acked; while the other 15 are still in flight both brokers
holding the topic are SIGKILLed and restarted on their stores. Afterwards every un-acked message comes again (none
lost), once, with its attempt raised, and no acked one does (nothing acked redelivered)."""

import time
import uuid
from pathlib import Path

import grpc
from google.protobuf.duration_pb2 import Duration

from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from tests.proxy.conftest import OfficialClient, ProxyCluster, running_proxy_cluster

COUNT, ACKED = 40, 25
INVISIBLE_S = 3
BROKERS = ("broker-a", "broker-b")
Code = definition_pb2.Code


def proxy_pops_on(proxy_cluster: ProxyCluster, topic: str, broker_name: str) -> bool:
    """Whether a receive through the proxy that starts at ``broker_name`` reaches it: a probe group, a tag no
    message carries (nothing is handed out, the test group's state is untouched), no long polling."""
    request = service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name="pop_crash_probe"),
        message_queue=definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic), id=-1,
                                                  broker=definition_pb2.Broker(name=broker_name)),
        filter_expression=definition_pb2.FilterExpression(type=definition_pb2.TAG, expression="NoSuchTag"),
        batch_size=1, invisible_duration=Duration(seconds=1), long_polling_timeout=Duration(seconds=0))
    with grpc.insecure_channel(proxy_cluster.endpoint) as channel:
        try:
            answers = list(service_pb2_grpc.MessagingServiceStub(channel).ReceiveMessage(
                request, timeout=5, metadata=[("x-mq-client-id", "pop-crash-probe")]))
        except grpc.RpcError:
            return False
    return bool(answers) and answers[0].status.code in (Code.OK, Code.MESSAGE_NOT_FOUND)


def wait_until_routed(proxy_cluster: ProxyCluster, topic: str, timeout: float) -> float:
    """Poll until the proxy pops on every restarted broker; the seconds it took."""
    started = time.monotonic()
    pending = set(BROKERS)
    while pending:
        pending = {name for name in pending if not proxy_pops_on(proxy_cluster, topic, name)}
        if pending and time.monotonic() - started > timeout:
            raise AssertionError(f"the proxy did not reach {sorted(pending)} within {timeout}s of the restart\n"
                                 f"{proxy_cluster.proxy.log()[-3000:]}")
        if pending:
            time.sleep(0.25)
    return time.monotonic() - started


def test_broker_sigkill_during_pop_consumption_loses_nothing_unacked_and_redelivers_nothing_acked(
        tmp_path: Path, official_client: OfficialClient):
    with running_proxy_cluster(tmp_path, broker_names=BROKERS) as proxy_cluster:
        cluster = proxy_cluster.cluster
        topic, group = f"ProxyPopCrash_{uuid.uuid4().hex[:8]}", f"pop_crash_{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, 2)  # on both brokers
        lines = official_client.run("produce.py", proxy_cluster.endpoint, topic, COUNT, "--prefix", "crash")
        sent = {line["message_id"]: line["body"] for line in lines if "message_id" in line}
        assert len(sent) == COUNT

        with official_client.start("simple_consume.py", proxy_cluster.endpoint, group, topic, "ack-some",
                                   "--expect", COUNT, "--ack", ACKED, "--invisible", INVISIBLE_S,
                                   "--budget", 60) as consumer:
            summary = consumer.wait_for(lambda line: line.get("event") == "acked-some", 90, "the acks")
            acked_at = time.monotonic()
            for name in BROKERS:  # while the un-acked are in flight (their invisible time has not passed)
                cluster.brokers[name].kill()
            killed_after = time.monotonic() - acked_at
            for name in BROKERS:
                cluster.start_broker(name)
            consumer_lines = consumer.finish()
        first = [line for line in consumer_lines if line.get("event") == "received"]
        acked, unacked = set(summary["acked"]), set(summary["unacked"])
        assert not summary["early"], f"redelivered before all {COUNT} came: raise the invisible time {summary}"
        assert {d["message_id"] for d in first} == set(sent) and len(first) == COUNT
        assert len(acked) == ACKED and len(unacked) == COUNT - ACKED and acked | unacked == set(sent)
        # the script's clock: the first receive, and (about) the kill, which came right after the acks' line
        killed_at = summary["t"] + killed_after
        in_flight_at_kill = killed_at < min(d["t"] for d in first) + INVISIBLE_S
        assert in_flight_at_kill, f"killed {killed_at:.2f}s into the script: after the first invisible time ended"

        routed_after = wait_until_routed(proxy_cluster, topic, timeout=45)
        lines = official_client.run("simple_consume.py", proxy_cluster.endpoint, group, topic, "drain",
                                    "--expect", len(unacked), "--invisible", 30, "--linger", 5, "--budget", 60,
                                    timeout=120)
        again = [line for line in lines if line.get("event") in ("received", "received-again")]
        again_ids = [d["message_id"] for d in again]
        context = f"killed at {killed_at:.2f}s, routed again {routed_after:.1f}s after the restart"
        print(context)
        assert not acked & set(again_ids), f"acked messages redelivered: {sorted(acked & set(again_ids))} ({context})"
        assert unacked <= set(again_ids), f"un-acked messages lost: {sorted(unacked - set(again_ids))} ({context})"
        assert len(again_ids) == len(unacked), f"an un-acked message came more than once: {again_ids} ({context})"
        assert {d["body"] for d in again} == {sent[i] for i in unacked}
        assert all(d["attempt"] == 2 for d in again), [(d["body"], d["attempt"]) for d in again]

"""A pull that carries a commit into an older link whose broker is down is served all the same (the commit is
best-effort, as every commit a pull carries): it was refused SYSTEM_BUSY for as long as that broker was down, so a
consumer still behind on the leader's own link could not read it."""

from pathlib import Path

from client import Message, Producer
from common.response_code import ResponseCode
from proto import broker_pb2
from tests.statictopic.cluster_fixture import make_static_cluster
from tests.statictopic.test_static_topic_cluster import create, remap


def test_a_pull_committing_into_a_link_on_a_broker_that_is_down_is_served(tmp_path: Path) -> None:
    cluster = make_static_cluster(tmp_path, staticTopicCleanInterval=300)
    try:
        topic = "StaticOlderDownT"
        create(cluster, topic, 1, ["broker-a"])
        with Producer(cluster.addr) as producer:
            for i in range(3):
                producer.send(Message(topic, b"a%d" % i))
            remap(cluster, topic, ["broker-b"])
            first_b = producer.send(Message(topic, b"b0")).queue_offset
        cluster.brokers["broker-a"].stop()
        response = cluster.stub("broker-b").PullMessage(broker_pb2.PullMessageRequest(
            consumer_group="older-down", topic=topic, queue_id=0, queue_offset=first_b, max_msg_nums=8,
            commit_offset=2, addressing=broker_pb2.LOGIC), timeout=20)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert response.next_begin_offset == first_b + 1
    finally:
        cluster.stop()

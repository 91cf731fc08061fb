"""Members of one clustering group that subscribe differently: the broker warns once per change of the group's
subscriptions (``broker/client/consumer_manager.py``), and mqadmin's consumerConnection and consumerProgress say
so under their tables (``admin_cli/group_commands.py``)."""

import json
import logging
from collections.abc import Iterator

import pytest

from broker.client.consumer_manager import ConsumerInfo, ConsumerManager
from client import Message, Producer, PushConsumer
from common.group_topics import retry_topic
from proto import consumer_pb2
from tests.admin_cli.helpers import mqadmin, ok
from tests.cluster import Cluster, make_cluster, wait_until

LOGGER = "broker.client.consumer_manager"
NOTE = "Subscriptions differ between members:"


def info(*subscriptions: tuple[str, str], model: int = consumer_pb2.CLUSTERING) -> ConsumerInfo:
    return ConsumerInfo("g", message_model=model, subscriptions=(*subscriptions, (retry_topic("g"), "*")))


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING and "subscription_inconsistent" in r.getMessage()]


@pytest.fixture
def manager(caplog: pytest.LogCaptureFixture) -> ConsumerManager:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    return ConsumerManager(30_000, lambda: 0)


# -- the broker's warning -----------------------------------------------------------------------------------
def test_different_tags_warn_once_not_on_every_heartbeat(manager: ConsumerManager, caplog: pytest.LogCaptureFixture):
    manager.heartbeat(1, "c1", "a:1", [info(("T", "TagA"))])
    manager.heartbeat(2, "c2", "a:2", [info(("T", "TagB"))])
    assert warnings(caplog) == ["subscription_inconsistent group=g client=c2 differs_from=c1 topic=T theirs=TagA "
                                "ours=TagB differing_topics=1"]
    for _ in range(5):  # refreshes, and a third member repeating a known variant, say nothing new
        manager.heartbeat(1, "c1", "a:1", [info(("T", "TagA"))])
        manager.heartbeat(2, "c2", "a:2", [info(("T", "TagB"))])
    manager.heartbeat(3, "c3", "a:3", [info(("T", "TagA"))])
    assert len(warnings(caplog)) == 1


def test_a_new_difference_warns_again(manager: ConsumerManager, caplog: pytest.LogCaptureFixture):
    manager.heartbeat(1, "c1", "a:1", [info(("T", "TagA"))])
    manager.heartbeat(2, "c2", "a:2", [info(("T", "TagB"))])
    manager.heartbeat(2, "c2", "a:2", [info(("T", "TagB || TagC"))])  # changed: another state of the group
    assert len(warnings(caplog)) == 2
    manager.heartbeat(2, "c2", "a:2", [info(("T", "TagA"))])  # consistent again
    manager.close_session(2)
    manager.heartbeat(4, "c4", "a:4", [info(("T", "TagB"))])  # the old difference, after it was fixed
    assert len(warnings(caplog)) == 3


def test_different_topic_sets_warn_with_the_missing_side(manager: ConsumerManager, caplog: pytest.LogCaptureFixture):
    manager.heartbeat(1, "x", "a:1", [info(("TopicX", "*"))])
    manager.heartbeat(2, "y", "a:2", [info(("TopicY", "*"))])
    assert warnings(caplog) == ["subscription_inconsistent group=g client=y differs_from=x topic=TopicX theirs=* "
                                "ours=- differing_topics=2"]


def test_alike_subscriptions_and_broadcasting_members_do_not_warn(manager: ConsumerManager,
                                                                  caplog: pytest.LogCaptureFixture):
    manager.heartbeat(1, "c1", "a:1", [info(("T", "TagA || TagB"))])
    manager.heartbeat(2, "c2", "a:2", [info(("T", "TagB||TagA"))])  # the same tags, written otherwise
    manager.heartbeat(3, "c3", "a:3", [info(("Other", "*"), model=consumer_pb2.BROADCASTING)])
    assert warnings(caplog) == []


# -- end to end: real daemons, the broker's log and mqadmin --------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("sub-consistency"), ["broker-a"])
    try:
        yield c
    finally:
        c.stop()


def test_mixed_tags_are_logged_by_the_broker_and_shown_by_mqadmin(cluster: Cluster):
    topic, group = "SubMixT", "sub-mix"
    cluster.create_topic(topic, queues=4)
    members = [PushConsumer(cluster.addr, group=group, topic=topic, tags=tags, handler=lambda m: None,
                            heartbeat_interval_ms=300) for tags in ("TagA", "TagB")]
    for m in members:
        m.start()
    try:
        broker = cluster.brokers["broker-a"]

        def logged() -> list[str]:
            return [line for line in broker.log().splitlines()
                    if "subscription_inconsistent" in line and f"group={group} " in line]

        lines = wait_until(logged, timeout=10, interval=0.1, what="the broker's warning")
        assert "WARNING" in lines[0] and f"topic={topic}" in lines[0]
        assert "theirs=TagA ours=TagB" in lines[0] or "theirs=TagB ours=TagA" in lines[0]
        wait_until(lambda: all(m.assigned_queues() for m in members), timeout=10, what="both members hold queues")

        text = ok(cluster.addr, "consumerConnection", "-g", group)
        note = [line for line in text.splitlines() if line.startswith(NOTE)]
        a, b = sorted(members, key=lambda m: m.tags)
        assert note == [f"{NOTE} {topic}: TagA on {a.client_id}, TagB on {b.client_id}"], text
        rows = json.loads(mqadmin(cluster.addr, "--json", "consumerConnection", "-g", group).stdout)
        assert isinstance(rows, list) and len(rows) == 2  # --json keeps its shape

        with Producer(cluster.addr) as producer:  # progress has rows once offsets are committed
            producer.send_batch([Message(topic, b"m", tags=tag) for tag in ("TagA", "TagB") * 4])
        wait_until(lambda: mqadmin(cluster.addr, "consumerProgress", "-g", group, "-t", topic).returncode == 0,
                   timeout=10, interval=0.2, what="the group's offsets")
        progress = ok(cluster.addr, "consumerProgress", "-g", group, "-t", topic)
        assert f"{NOTE} {topic}: TagA on {a.client_id}, TagB on {b.client_id}" in progress.splitlines(), progress
        assert len(logged()) == 1  # heartbeats every 300 ms since: still one warning
    finally:
        for m in members:
            m.close()


def test_a_group_subscribing_alike_has_no_note(cluster: Cluster):
    topic, group = "SubSameT", "sub-same"
    cluster.create_topic(topic, queues=2)
    members = [PushConsumer(cluster.addr, group=group, topic=topic, tags="TagA", handler=lambda m: None)
               for _ in range(2)]
    for m in members:
        m.start()
    try:
        wait_until(lambda: all(m.assigned_queues() for m in members), timeout=10, what="both members hold queues")
        assert NOTE not in ok(cluster.addr, "consumerConnection", "-g", group)
        assert f"group={group} " not in "\n".join(line for line in cluster.brokers["broker-a"].log().splitlines()
                                                   if "subscription_inconsistent" in line)
    finally:
        for m in members:
            m.close()

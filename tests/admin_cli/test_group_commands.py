"""mqadmin's consumer-group commands end to end: consumerConnection, consumerProgress's member column,
resetOffsetByTime, deleteSubGroup, updateSubGroup -r, and queryMsgByKey on a group's retry and dead-letter
topics. The real CLI as a subprocess; live members are PushConsumers in this process."""

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from client import Admin, Message, MessageQueue, Producer, PushConsumer
from common.group_topics import dlq_topic, retry_topic
from tests.admin_cli.helpers import CLUSTER, fails, mqadmin, ok, ok_json, registered_cluster, table_lines, wait_route
from tests.cluster import Cluster, wait_until

BROKERS = ["broker-a", "broker-b"]
MEMBER_KEYS = {"client_id", "addr", "consume_type", "message_model", "orderly", "subscriptions", "queues",
               "last_heartbeat"}
PROGRESS_KEYS = {"topic", "broker_name", "queue_id", "broker_offset", "consumer_offset", "client_id", "diff",
                 "last_timestamp"}
RESET_KEYS = {"topic", "broker_name", "queue_id", "offset"}
DELETE_KEYS = {"kind", "name", "broker_name", "deleted"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Retries wait delay level 3 + reconsume times: one second each here, so a retried message comes back at once.
    c = registered_cluster(tmp_path_factory.mktemp("mqadmin-groups"), BROKERS, registerNameServerPeriod=1000,
                           messageDelayLevel="1s 1s 1s 1s 1s 1s")
    try:
        yield c
    finally:
        c.stop()


class Collector:
    """A handler that records every body it is given (thread-safe); ``fail=True`` raises after recording."""

    def __init__(self, fail: bool = False) -> None:
        self.bodies: list[bytes] = []
        self.reconsume_times: list[int] = []
        self.fail = fail
        self._lock = threading.Lock()

    def __call__(self, msg: Any) -> None:
        with self._lock:
            self.bodies.append(msg.body)
            self.reconsume_times.append(msg.reconsume_times)
        if self.fail:
            raise RuntimeError("handler fails on purpose")

    def count(self) -> int:
        with self._lock:
            return len(self.bodies)

    def counts(self) -> Counter[bytes]:
        with self._lock:
            return Counter(self.bodies)


def send(cluster: Cluster, topic: str, n: int, tag: str) -> list[bytes]:
    bodies = [f"{tag}-{i}".encode() for i in range(n)]
    with Producer(cluster.addr) as producer:
        producer.send_batch([Message(topic, b) for b in bodies])
    return bodies


def queue_key(q: MessageQueue | dict[str, Any]) -> tuple[str, str, int]:
    if isinstance(q, MessageQueue):
        return q.topic, q.broker_name, q.queue_id
    return q["topic"], q["broker_name"], q["queue_id"]


def try_json(cluster: Cluster, *args: str) -> Any:
    """The JSON of a command that may fail for now (it is polled); None when it did."""
    proc = mqadmin(cluster.addr, "--json", *args)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def start_members(cluster: Cluster, n: int, **kwargs: Any) -> list[PushConsumer]:
    members = [PushConsumer(cluster.addr, **kwargs) for _ in range(n)]
    for m in members:
        m.start()
    return members


def upstream_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d#%H:%M:%S:") + f"{ms % 1000:03d}"


# -- consumerConnection -------------------------------------------------------------------------------------
def test_consumer_connection_lists_each_member_with_its_queues(cluster: Cluster):
    topic, group = "GrpConnT", "grp-conn"
    cluster.create_topic(topic, queues=2)
    members = start_members(cluster, 2, group=group, topic=topic, handler=Collector())
    try:
        def shown() -> list[dict] | None:  # members report their queues by heartbeat after each rebalance
            rows = try_json(cluster, "consumerConnection", "-g", group) or []
            by_id = {r["client_id"]: {queue_key(q) for q in r["queues"]} for r in rows}
            held = {m.client_id: {queue_key(q) for q in m.assigned_queues()} for m in members}
            topic_queues = {q for qs in held.values() for q in qs if q[0] == topic}
            return rows if by_id == held and len(topic_queues) == 4 and all(held.values()) else None

        rows = wait_until(shown, timeout=20, interval=0.2, what="both members and their queues")
        assert all(set(r) == MEMBER_KEYS for r in rows)
        assert sorted(r["client_id"] for r in rows) == sorted(m.client_id for m in members)
        for r in rows:
            assert (r["consume_type"], r["message_model"], r["orderly"]) == ("PUSH", "CLUSTERING", False)
            assert {"topic": topic, "expression": "*"} in r["subscriptions"]
            assert {"topic": retry_topic(group), "expression": "*"} in r["subscriptions"]
            assert r["addr"] and r["last_heartbeat"] > 0

        text = ok(cluster.addr, "consumerConnection", "-g", group)
        for m in members:
            assert len(table_lines(text, m.client_id, "PUSH", "CLUSTERING", "false")) == 1
            for q in m.assigned_queues():
                assert table_lines(text, m.client_id, q.topic, q.broker_name, str(q.queue_id)), (q, text)
    finally:
        for m in members:
            m.close()
    # a member's session ends with its close: the group is empty at once
    wait_until(lambda: try_json(cluster, "consumerConnection", "-g", group) is None, timeout=10, interval=0.2,
               what="the members gone")
    line = fails(cluster.addr, "consumerConnection", "-g", group)
    assert group in line and "no member online" in line


# -- consumerProgress ---------------------------------------------------------------------------------------
def test_consumer_progress_names_the_member_consuming_each_queue(cluster: Cluster):
    topic, group = "GrpProgT", "grp-prog"
    cluster.create_topic(topic, queues=2)
    sent = send(cluster, topic, 40, "p")
    handlers = [Collector(), Collector()]
    members = [PushConsumer(cluster.addr, group=group, topic=topic, handler=h, consume_from_first=True)
               for h in handlers]
    for m in members:
        m.start()
    try:
        def settled() -> list[dict] | None:  # everything consumed and committed, each queue owned
            rows = try_json(cluster, "consumerProgress", "-g", group, "-t", topic) or []
            owners = {queue_key(q): m.client_id for m in members for q in m.assigned_queues()}
            done = len(rows) == 4 and all(r["consumer_offset"] == r["broker_offset"] for r in rows)
            matches = all(r["client_id"] == owners.get(queue_key(r)) for r in rows)
            return rows if done and matches and sum(h.count() for h in handlers) >= len(sent) else None

        rows = wait_until(settled, timeout=30, interval=0.3, what="offsets committed and queues owned")
        assert all(set(r) == PROGRESS_KEYS for r in rows)
        assert {r["client_id"] for r in rows} == {m.client_id for m in members}  # 2 queues each
        text = ok(cluster.addr, "consumerProgress", "-g", group, "-t", topic)
        assert "Client ID" in text.splitlines()[0]
        cells = [line.split() for line in text.splitlines()[1:] if line.startswith(topic)]
        assert {(c[1], int(c[2])): c[5] for c in cells} == {(r["broker_name"], r["queue_id"]): r["client_id"]
                                                            for r in rows}  # the column after Consumer Offset
        assert text.rstrip().splitlines()[-1] == "Diff Total: 0"
    finally:
        for m in members:
            m.close()

    def unowned() -> list[dict] | None:
        rows = try_json(cluster, "consumerProgress", "-g", group, "-t", topic) or []
        return rows if rows and all(r["client_id"] == "" for r in rows) else None

    rows = wait_until(unowned, timeout=10, interval=0.2, what="no owner once the members left")
    assert len(rows) == 4
    text = ok(cluster.addr, "consumerProgress", "-g", group, "-t", topic)
    cells = [line.split() for line in text.splitlines()[1:] if line.startswith(topic)]
    assert len(cells) == 4 and {c[5] for c in cells} == {"-"}  # an unowned queue shows the missing mark


# -- resetOffsetByTime --------------------------------------------------------------------------------------
def quiet(handler: Collector, for_s: float = 1.0) -> int:
    """Wait until the handler has been given nothing for ``for_s``; its count then."""
    def still() -> int | None:
        before = handler.count()
        time.sleep(for_s)
        return before if handler.count() == before else None

    return wait_until(still, timeout=20, interval=0, what="deliveries to stop")


def test_reset_offset_by_time_rewinds_running_members(cluster: Cluster):
    topic, group = "GrpResetT", "grp-reset"
    cluster.create_topic(topic, queues=2)
    early = send(cluster, topic, 20, "early")
    time.sleep(0.05)
    mark = int(time.time() * 1000)
    time.sleep(0.05)
    late = send(cluster, topic, 20, "late")
    handler = Collector()
    member = PushConsumer(cluster.addr, group=group, topic=topic, handler=handler, consume_from_first=True)
    member.start()
    try:
        wait_until(lambda: set(handler.counts()) == set(early + late), timeout=20, what="everything consumed once")
        quiet(handler)

        seen = handler.counts()
        rows = ok_json(cluster.addr, "resetOffsetByTime", "-g", group, "-t", topic, "-s", str(mark))
        assert all(set(r) == RESET_KEYS for r in rows)
        assert sorted((r["broker_name"], r["queue_id"]) for r in rows) == [(b, q) for b in BROKERS for q in (0, 1)]
        assert sum(r["offset"] for r in rows) == len(early)  # each queue: the first message after the mark
        wait_until(lambda: all(handler.counts()[b] > seen[b] for b in late), timeout=20,
                   what="the late messages consumed again")
        quiet(handler)

        seen = handler.counts()
        text = ok(cluster.addr, "resetOffsetByTime", "-g", group, "-t", topic, "-s", upstream_time(mark))
        cells = [line.split() for line in text.splitlines()[1:] if line.startswith(topic)]
        assert {(c[1], int(c[2])): int(c[3]) for c in cells} == {(r["broker_name"], r["queue_id"]): r["offset"]
                                                                 for r in rows}
        assert text.splitlines()[-1].endswith(f"({mark} ms)")
        wait_until(lambda: all(handler.counts()[b] > seen[b] for b in late), timeout=20,
                   what="the late messages consumed once more")
        before = quiet(handler)
        assert all(handler.counts()[b] == 1 for b in early)  # before the mark: never again

        now = ok_json(cluster.addr, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "now")
        assert sum(r["offset"] for r in now) == len(early) + len(late)  # the queue ends: nothing to redo
        time.sleep(1.5)
        assert handler.count() == before
    finally:
        member.close()


# -- deleteSubGroup -----------------------------------------------------------------------------------------
def group_brokers(cluster: Cluster, group: str) -> dict[str, int]:
    with Admin(cluster.addr) as admin:
        return {b: c.retry_max_times for b, c in admin.subscription_group(group).items()}


def test_delete_sub_group_from_named_brokers_then_the_cluster(cluster: Cluster):
    group = "grp-del"
    ok(cluster.addr, "updateSubGroup", "-g", group, "-c", CLUSTER)
    assert sorted(group_brokers(cluster, group)) == BROKERS

    rows = ok_json(cluster.addr, "deleteSubGroup", "-g", group, "-b", "broker-a")
    assert rows == [{"kind": "group", "name": group, "broker_name": "broker-a", "deleted": True}]
    assert sorted(group_brokers(cluster, group)) == ["broker-b"]

    text = ok(cluster.addr, "deleteSubGroup", "-g", group, "-c", CLUSTER)
    assert len(table_lines(text, "broker-a", "group", group, "not", "found")) == 1
    assert len(table_lines(text, "broker-b", "group", group, "deleted")) == 1
    assert group_brokers(cluster, group) == {}

    line = fails(cluster.addr, "deleteSubGroup", "-g", group, "-c", CLUSTER)
    assert f"consumer group {group} does not exist" in line and "broker-a" in line


def test_delete_sub_group_r_also_deletes_its_retry_and_dlq_topics(cluster: Cluster):
    topic, group = "GrpDelTopicsT", "grp-del-topics"
    cluster.create_topic(topic, queues=1)
    ok(cluster.addr, "updateSubGroup", "-g", group, "-c", CLUSTER)
    with PushConsumer(cluster.addr, group=group, topic=topic, handler=Collector()):
        wait_route(cluster.addr, retry_topic(group), BROKERS)  # a clustering member's heartbeat creates it

    rows = ok_json(cluster.addr, "deleteSubGroup", "-g", group, "-c", CLUSTER, "-r")
    assert all(set(r) == DELETE_KEYS for r in rows)
    assert sorted((r["kind"], r["name"], r["broker_name"], r["deleted"]) for r in rows) == sorted(
        [("group", group, b, True) for b in BROKERS] + [("topic", retry_topic(group), b, True) for b in BROKERS]
        + [("topic", dlq_topic(group), b, False) for b in BROKERS])
    wait_until(lambda: {"topic": retry_topic(group)} not in ok_json(cluster.addr, "topicList"), timeout=15,
               interval=0.2, what="the retry topic gone from topicList")
    assert group_brokers(cluster, group) == {}
    assert retry_topic(group) in fails(cluster.addr, "topicRoute", "-t", retry_topic(group))


# -- updateSubGroup -r, and queryMsgByKey on a group's own topics ---------------------------------------------
def query_rows(cluster: Cluster, topic: str, key: str) -> list[dict] | None:
    return try_json(cluster, "queryMsgByKey", "-t", topic, "-k", key)


def test_update_sub_group_retry_max_times_reaches_the_brokers(cluster: Cluster):
    group = "grp-retry-times"
    rows = ok_json(cluster.addr, "updateSubGroup", "-g", group, "-c", CLUSTER, "-r", "2")
    assert [(r["broker_name"], r["retry_max_times"]) for r in rows] == [(b, 2) for b in BROKERS]
    assert group_brokers(cluster, group) == {b: 2 for b in BROKERS}

    text = ok(cluster.addr, "updateSubGroup", "-g", group, "-b", "broker-b", "-r", "5")
    assert len(table_lines(text, group, "broker-b", "true", "5")) == 1
    assert group_brokers(cluster, group) == {"broker-a": 2, "broker-b": 5}
    assert group_brokers(cluster, "grp-never-made") == {}


def test_query_msg_by_key_finds_a_dead_letter(cluster: Cluster):
    topic, group = "GrpDlqT", "grp-dlq"
    cluster.create_topic(topic, queues=1)
    handler = Collector(fail=True)
    member = PushConsumer(cluster.addr, group=group, topic=topic, handler=handler, max_reconsume_times=0)
    member.start()
    try:
        wait_until(lambda: [q for q in member.assigned_queues() if q.topic == topic], timeout=10,
                   what="the member holds the topic's queues")
        wait_route(cluster.addr, retry_topic(group), BROKERS)
        # the group's retry topic is an ordinary topic to query: an absent key is "no message", not a refusal
        line = fails(cluster.addr, "queryMsgByKey", "-t", retry_topic(group), "-k", "dlq-key")
        assert "no message with key 'dlq-key'" in line

        with Producer(cluster.addr) as producer:
            sent = producer.send(Message(topic, b"poison", keys=["dlq-key"]))
        found = wait_until(lambda: query_rows(cluster, dlq_topic(group), "dlq-key"), timeout=30, interval=0.3,
                           what="the failed message in the dead-letter topic")
    finally:
        member.close()
    assert len(found) == 1 and handler.bodies == [b"poison"]  # max_reconsume_times=0: never retried
    row = found[0]
    assert (row["topic"], row["keys"], row["body_preview"]) == (dlq_topic(group), ["dlq-key"], "poison")
    assert row["msg_id"] == sent.msg_id  # the unique key travels with the message
    text = ok(cluster.addr, "queryMsgByKey", "-t", dlq_topic(group), "-k", "dlq-key")
    assert len(table_lines(text, sent.msg_id, "dlq-key", "poison")) == 1


def test_the_groups_retry_max_times_sends_a_message_through_retry_to_dlq(cluster: Cluster):
    topic, group = "GrpRetryT", "grp-retry"
    cluster.create_topic(topic, queues=1)
    ok(cluster.addr, "updateSubGroup", "-g", group, "-c", CLUSTER, "-r", "1")
    handler = Collector(fail=True)
    member = PushConsumer(cluster.addr, group=group, topic=topic, handler=handler)  # limit None: the group's
    member.start()
    try:
        wait_until(lambda: [q for q in member.assigned_queues() if q.topic == topic], timeout=10,
                   what="the member holds the topic's queues")
        with Producer(cluster.addr) as producer:
            producer.send(Message(topic, b"twice", keys=["retry-key"]))
        dead = wait_until(lambda: query_rows(cluster, dlq_topic(group), "retry-key"), timeout=30, interval=0.3,
                          what="the message dead-lettered after one retry")
    finally:
        member.close()
    assert handler.reconsume_times == [0, 1]  # delivered, retried once (the group's retryMaxTimes), then dead
    retried = query_rows(cluster, retry_topic(group), "retry-key")
    assert retried and [r["topic"] for r in retried] == [retry_topic(group)]
    assert [r["body_preview"] for r in dead] == ["twice"]


# -- failures: exit 1, one line on stderr, no traceback ------------------------------------------------------
@pytest.mark.parametrize(("args", "says"), [
    (["consumerConnection", "-g", "grp-nobody"], "grp-nobody"),
    (["consumerConnection"], "-g"),
    (["resetOffsetByTime", "-g", "grp-x", "-t", "GrpConnT", "-s", "yesterday"], "-s"),
    (["resetOffsetByTime", "-g", "grp-x", "-t", "GrpConnT", "-s", "2024-01-01 00:00:00"], "yyyy-MM-dd#HH:mm:ss:SSS"),
    (["resetOffsetByTime", "-g", "grp-x", "-t", "GrpConnT"], "-s"),
    (["resetOffsetByTime", "-g", "grp-x", "-t", "GrpNoSuchTopic", "-s", "now"], "GrpNoSuchTopic"),
    (["deleteSubGroup", "-g", "grp-x"], "exactly one"),
    (["deleteSubGroup", "-g", "grp-x", "-c", CLUSTER, "-b", "broker-a"], "exactly one"),
    (["deleteSubGroup", "-g", "grp-never-made", "-c", CLUSTER], "grp-never-made"),
    (["deleteSubGroup", "-g", "grp-never-made", "-b", "broker-a", "-r"], "nor its retry"),
    (["deleteSubGroup", "-g", "grp-x", "-b", "broker-zz"], "broker-zz"),
], ids=lambda v: "_".join(v) if isinstance(v, list) else None)
def test_failures_exit_1_with_one_line(cluster: Cluster, args: list[str], says: str):
    line = fails(cluster.addr, *args)
    assert says in line, line
    assert line.startswith("mqadmin")

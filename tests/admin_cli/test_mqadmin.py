"""mqadmin end to end: the real CLI as a subprocess against one name server and two real brokers."""

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from client import Admin, Message, MessageQueue, MQClientError, Producer, PullConsumer, PullStatus
from client.message_encoding import new_unique_key, wire_properties
from common.kv_shard import KV_TOPIC
from common.message_properties import MAX_USER_PROPERTIES_SIZE
from common.timer_topic import TIMER_TOPIC
from common.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC
from common.transaction_topic import HALF_TOPIC, OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from proto import broker_pb2, broker_pb2_grpc, common_pb2
from tests.admin_cli.helpers import (
    CLUSTER,
    fails,
    free_port,
    mqadmin,
    ok,
    ok_json,
    table_lines,
    wait_route,
)
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until

BROKERS = ["broker-a", "broker-b"]
TOPIC_STATUS_KEYS = {"broker_name", "queue_id", "min_offset", "max_offset", "last_update_timestamp"}
CLUSTER_KEYS = {"cluster", "broker_name", "broker_id", "addr", "role", "put_tps", "get_tps", "topic_count", "uptime_ms",
                "store_type", "status", "error"}
PROGRESS_KEYS = {"topic", "broker_name", "queue_id", "broker_offset", "consumer_offset", "client_id", "diff",
                 "last_timestamp"}
MESSAGE_KEYS = {"msg_id", "offset_msg_id", "topic", "queue_id", "queue_offset", "commit_log_offset", "tags", "keys",
                "store_timestamp", "born_timestamp", "store_host", "born_host", "reconsume_times", "properties",
                "body_size", "body_preview"}


@dataclass
class Cluster:
    namesrv: Daemon
    brokers: dict[str, Daemon]

    @property
    def addr(self) -> str:
        return self.namesrv.addr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("mqadmin")
    namesrv = start_namesrv(tmp / "namesrv")
    daemons: dict[str, Daemon] = {}
    try:
        for name in BROKERS:
            daemons[name] = start_broker(tmp, name, namesrv.addr)
        with Admin(namesrv.addr) as admin:
            wait_until(lambda: sorted(b.broker_name for b in admin.all_brokers()) == BROKERS, timeout=15,
                       what="both brokers registered")
        yield Cluster(namesrv, daemons)
    finally:
        for daemon in daemons.values():
            daemon.stop()
        namesrv.stop()


def create_topic(c: Cluster, topic: str, *flags: str, brokers: list[str] = BROKERS) -> str:
    out = ok(c.addr, "updateTopic", "-t", topic, *flags)
    wait_route(c.addr, topic, brokers)
    return out


# -- topics ------------------------------------------------------------------------------------------------
def test_update_topic_by_cluster_shows_in_list_route_and_status(cluster: Cluster):
    out = create_topic(cluster, "AdmByCluster", "-c", CLUSTER, "-r", "4", "-w", "4")
    assert [len(table_lines(out, "AdmByCluster", b, "4")) for b in BROKERS] == [1, 1]

    assert table_lines(ok(cluster.addr, "topicList"), "AdmByCluster")
    assert {"topic": "AdmByCluster"} in ok_json(cluster.addr, "topicList")

    route_text = ok(cluster.addr, "topicRoute", "-t", "AdmByCluster")
    for broker in BROKERS:
        assert table_lines(route_text, CLUSTER, broker, cluster.brokers[broker].addr)
        assert table_lines(route_text, broker, "4", "RW-", "(6)")
    route = ok_json(cluster.addr, "topicRoute", "-t", "AdmByCluster")
    assert set(route) == {"broker_datas", "queue_datas", "topic_queue_mappings"}
    assert route["broker_datas"] == [{"cluster": CLUSTER, "broker_name": b, "broker_id": 0,
                                      "addr": cluster.brokers[b].addr} for b in BROKERS]
    assert [(q["broker_name"], q["read_queue_nums"], q["write_queue_nums"], q["perm"]) for q in route["queue_datas"]] \
        == [(b, 4, 4, 6) for b in BROKERS]
    assert route["topic_queue_mappings"] == []

    status = ok_json(cluster.addr, "topicStatus", "-t", "AdmByCluster")
    assert all(set(row) == TOPIC_STATUS_KEYS for row in status)
    assert sorted((r["broker_name"], r["queue_id"], r["min_offset"], r["max_offset"]) for r in status) == \
        [(b, q, 0, 0) for b in BROKERS for q in range(4)]
    status_text = ok(cluster.addr, "topicStatus", "-t", "AdmByCluster")
    assert "Last Updated" in status_text.splitlines()[0]
    assert len(table_lines(status_text, "broker-b", "3", "0", "-")) == 1


def test_update_topic_by_broker_list(cluster: Cluster):
    out = create_topic(cluster, "AdmOnlyA", "-b", "broker-a", "-r", "2", "-w", "3", "-p", "4", brokers=["broker-a"])
    assert table_lines(out, "AdmOnlyA", "broker-a", "2", "3", "R--", "(4)")
    assert "broker-b" not in out
    route = ok_json(cluster.addr, "topicRoute", "-t", "AdmOnlyA")
    assert [(q["broker_name"], q["read_queue_nums"], q["write_queue_nums"], q["perm"]) for q in route["queue_datas"]] \
        == [("broker-a", 2, 3, 4)]
    status = ok_json(cluster.addr, "topicStatus", "-t", "AdmOnlyA")
    assert {r["broker_name"] for r in status} == {"broker-a"} and [r["queue_id"] for r in status][:2] == [0, 1]

    both = json.loads(ok(cluster.addr, "updateTopic", "-t", "AdmListed", "-b", "broker-b, broker-a", "--json"))
    assert [row["broker_name"] for row in both] == BROKERS
    assert set(both[0]) == {"topic", "broker_name", "read_queue_nums", "write_queue_nums", "perm"}
    wait_route(cluster.addr, "AdmListed", BROKERS)


def test_delete_topic_removes_it_from_topic_list(cluster: Cluster):
    create_topic(cluster, "AdmDoomed", "-c", CLUSTER)
    out = ok(cluster.addr, "deleteTopic", "-t", "AdmDoomed", "-c", CLUSTER)
    assert [len(table_lines(out, "AdmDoomed", CLUSTER, b)) for b in BROKERS] == [1, 1]
    wait_until(lambda: {"topic": "AdmDoomed"} not in ok_json(cluster.addr, "topicList"), timeout=15, interval=0.1,
               what="AdmDoomed gone from topicList")
    assert "AdmDoomed" in fails(cluster.addr, "topicRoute", "-t", "AdmDoomed")



@pytest.fixture(scope="module")
def auto_create_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A name server and a broker that serves TBW102 (autoCreateTopicEnable), so TBW102 has a route."""
    tmp = tmp_path_factory.mktemp("mqadmin-system-topics")
    namesrv = start_namesrv(tmp / "namesrv")
    try:
        broker = start_broker(tmp, "broker-s", namesrv.addr, autoCreateTopicEnable="true")
        try:
            wait_route(namesrv.addr, AUTO_CREATE_TOPIC_KEY_TOPIC, ["broker-s"])
            yield Cluster(namesrv, {"broker-s": broker})
        finally:
            broker.stop()
    finally:
        namesrv.stop()


SYSTEM_TOPICS = [AUTO_CREATE_TOPIC_KEY_TOPIC, TIMER_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC,
                 KV_TOPIC, "rmq_sys_other"]


@pytest.mark.parametrize("topic", SYSTEM_TOPICS)
def test_system_topics_are_not_updated_nor_deleted(auto_create_broker: Cluster, topic: str):
    c = auto_create_broker
    line = fails(c.addr, "updateTopic", "-t", topic, "-c", CLUSTER, "-r", "2", "-w", "2")
    assert f"topic {topic} is conflict with system topic" in line, line
    line = fails(c.addr, "deleteTopic", "-t", topic, "-c", CLUSTER)  # (the half topics have no route: said first)
    assert f"topic {topic} is conflict with system topic" in line, line
    with grpc.insecure_channel(c.brokers["broker-s"].addr) as channel:  # the broker refuses, whoever asks
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        for call in (lambda: stub.UpdateAndCreateTopic(broker_pb2.UpdateTopicRequest(
                         config=common_pb2.TopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1,
                                                       perm=6)), timeout=10),
                     lambda: stub.UpdateAndCreateTopicList(broker_pb2.UpdateTopicListRequest(configs=[
                         common_pb2.TopicConfig(topic_name="SysOk", read_queue_nums=1, write_queue_nums=1, perm=6),
                         common_pb2.TopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1, perm=6)]),
                         timeout=10),
                     lambda: stub.DeleteTopic(broker_pb2.TopicRequest(topic=topic), timeout=10)):
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "system topic" in (info.value.details() or "")


def test_delete_topic_refuses_tbw102_and_keeps_its_route(auto_create_broker: Cluster):
    c = auto_create_broker
    line = fails(c.addr, "deleteTopic", "-t", AUTO_CREATE_TOPIC_KEY_TOPIC, "-c", CLUSTER)
    assert f"topic {AUTO_CREATE_TOPIC_KEY_TOPIC} is conflict with system topic" in line, line
    assert ok_json(c.addr, "topicRoute", "-t", AUTO_CREATE_TOPIC_KEY_TOPIC)["queue_datas"]
    assert "SysOk" not in ok(c.addr, "topicList")  # the batch with a system topic changed nothing


def test_retry_and_dlq_topics_can_still_be_updated_and_deleted(auto_create_broker: Cluster):
    c = auto_create_broker
    for topic in ("%RETRY%sys-g", "%DLQ%sys-g"):
        ok(c.addr, "updateTopic", "-t", topic, "-c", CLUSTER, "-r", "1", "-w", "1", "-p", "6")
        wait_route(c.addr, topic, ["broker-s"])
        ok(c.addr, "deleteTopic", "-t", topic, "-c", CLUSTER)

# -- messages ----------------------------------------------------------------------------------------------
def test_query_messages_by_key_and_by_id(cluster: Cluster):
    create_topic(cluster, "AdmMessages", "-c", CLUSTER, "-r", "2", "-w", "2")
    with Producer(cluster.addr, group="adm-pg") as producer:
        sent = [producer.send(Message("AdmMessages", f"body {i}\nsecond line".encode(), tags="TagA",
                                      keys=[f"key-{i}", "shared-key"])) for i in range(3)]

    def all_indexed() -> list[dict] | None:  # the index is built asynchronously, message by message
        proc = mqadmin(cluster.addr, "--json", "queryMsgByKey", "-t", "AdmMessages", "-k", "shared-key")
        rows = json.loads(proc.stdout) if proc.returncode == 0 else []
        return rows if len(rows) == len(sent) else None

    found = wait_until(all_indexed, timeout=15, interval=0.1, what="messages indexed by key")
    assert all(set(m) == MESSAGE_KEYS for m in found)
    assert sorted(m["msg_id"] for m in found) == sorted(r.msg_id for r in sent)
    assert {m["tags"] for m in found} == {"TagA"}

    one = ok(cluster.addr, "queryMsgByKey", "-t", "AdmMessages", "-k", "key-1")
    assert table_lines(one, sent[1].msg_id, str(sent[1].queue.queue_id), str(sent[1].queue_offset), "TagA")
    assert "body 1\\nsecond line" in one and len(one.splitlines()) == 2  # header + one row, body on one line

    for result in sent:  # either id finds the message: the unique key (msgId) and the offset id
        assert result.msg_id != result.offset_msg_id and str(result).startswith("SendResult [sendStatus=SEND_OK")
        for msg_id in (result.msg_id, result.offset_msg_id):
            msg = ok_json(cluster.addr, "queryMsgById", "-i", msg_id)
            assert set(msg) == MESSAGE_KEYS
            assert (msg["topic"], msg["queue_id"], msg["queue_offset"]) == \
                ("AdmMessages", result.queue.queue_id, result.queue_offset)
            assert (msg["msg_id"], msg["offset_msg_id"]) == (result.msg_id, result.offset_msg_id)
            assert msg["keys"][1] == "shared-key" and msg["store_timestamp"] > 0
    assert ok_json(cluster.addr, "queryMsgById", "-i", sent[0].msg_id, "-t", "AdmMessages")["msg_id"] == sent[0].msg_id
    missing = mqadmin(cluster.addr, "queryMsgById", "-i", "0123456789ABCDEF0123456789AB")
    assert missing.returncode == 1 and "no message with id" in missing.stderr and "Traceback" not in missing.stderr
    text = ok(cluster.addr, "queryMsgById", "-i", sent[2].msg_id)
    fields = {k.strip(): v for k, v in (line.split(": ", 1) for line in text.splitlines())}
    expected = {"Message ID": sent[2].msg_id, "Topic": "AdmMessages", "Queue ID": str(sent[2].queue.queue_id),
                "Queue Offset": str(sent[2].queue_offset), "Tags": "TagA", "Keys": "key-2 shared-key",
                "Body": "body 2\\nsecond line"}
    assert expected.items() <= fields.items(), fields
    assert fields["Store Time"] != "-" and fields["Store Time"][:2] == "20"

    def status_with_all_messages() -> list[dict] | None:  # consume queues too are built asynchronously
        rows = ok_json(cluster.addr, "topicStatus", "-t", "AdmMessages")
        return rows if sum(r["max_offset"] for r in rows) == len(sent) else None

    status = wait_until(status_with_all_messages, timeout=15, interval=0.1, what="3 messages in topicStatus")
    assert {(r["broker_name"], r["queue_id"]) for r in status if r["max_offset"] > 0} == \
        {(r.queue.broker_name, r.queue.queue_id) for r in sent}
    assert all(r["last_update_timestamp"] > 0 for r in status if r["max_offset"] > 0)

    line = fails(cluster.addr, "queryMsgByKey", "-t", "AdmMessages", "-k", "no-such-key")
    assert "no-such-key" in line


# -- groups ------------------------------------------------------------------------------------------------
def progress_by_queue(c: Cluster, group: str, topic: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    rows = ok_json(c.addr, "consumerProgress", "-g", group, "-t", topic)
    assert all(set(r) == PROGRESS_KEYS for r in rows)
    return {(r["broker_name"], r["queue_id"]): (r["broker_offset"], r["consumer_offset"], r["diff"]) for r in rows}


def test_update_sub_group_and_consumer_progress(cluster: Cluster):
    create_topic(cluster, "AdmProgress", "-c", CLUSTER, "-r", "2", "-w", "2")
    out = ok(cluster.addr, "updateSubGroup", "-g", "adm-cg", "-c", CLUSTER)
    assert [len(table_lines(out, "adm-cg", b)) for b in BROKERS] == [1, 1]
    only_b = ok_json(cluster.addr, "updateSubGroup", "-g", "adm-cg-b", "-b", "broker-b")
    assert [r["broker_name"] for r in only_b] == ["broker-b"]

    qa0, qb1 = MessageQueue("AdmProgress", "broker-a", 0), MessageQueue("AdmProgress", "broker-b", 1)
    with Producer(cluster.addr, group="adm-pg") as producer:
        for mq, count in ((qa0, 3), (qb1, 2)):
            for i in range(count):
                producer.send(Message("AdmProgress", f"m{i}".encode()), queue=mq)

    expected = {("broker-a", 0): (3, -1, 3), ("broker-a", 1): (0, -1, 0),
                ("broker-b", 0): (0, -1, 0), ("broker-b", 1): (2, -1, 2)}
    wait_until(lambda: progress_by_queue(cluster, "adm-cg", "AdmProgress") == expected, timeout=15, interval=0.1,
               what="broker offsets dispatched")  # consume queues are built asynchronously after the append
    assert "Diff Total: 5" in ok(cluster.addr, "consumerProgress", "-g", "adm-cg", "-t", "AdmProgress")

    with PullConsumer(cluster.addr, group="adm-cg") as consumer:
        result = consumer.pull(qa0, 0)
        assert result.status is PullStatus.FOUND and len(result.messages) == 3
        consumer.commit(qa0, result.next_begin_offset)
        consumer.commit(qb1, 1)

    after = progress_by_queue(cluster, "adm-cg", "AdmProgress")
    assert after[("broker-a", 0)] == (3, 3, 0) and after[("broker-b", 1)] == (2, 1, 1)
    text = ok(cluster.addr, "consumerProgress", "-g", "adm-cg", "-t", "AdmProgress")
    assert text.rstrip().splitlines()[-1] == "Diff Total: 1"
    assert table_lines(text, "AdmProgress", "broker-a", "0", "3", "3", "0")

    every_topic = ok_json(cluster.addr, "consumerProgress", "-g", "adm-cg")
    assert {(r["topic"], r["broker_name"], r["queue_id"], r["consumer_offset"]) for r in every_topic} >= \
        {("AdmProgress", "broker-a", 0, 3), ("AdmProgress", "broker-b", 1, 1)}


# -- cluster -----------------------------------------------------------------------------------------------
def test_cluster_list_lists_both_brokers(cluster: Cluster):
    text = ok(cluster.addr, "clusterList")
    for name in BROKERS:
        assert len(table_lines(text, CLUSTER, name, "0", cluster.brokers[name].addr, "OK")) == 1
    rows = json.loads(ok(cluster.addr, "clusterList", "--json"))
    assert all(set(r) == CLUSTER_KEYS for r in rows)
    assert [(r["broker_name"], r["addr"], r["status"], r["error"]) for r in rows] == \
        [(b, cluster.brokers[b].addr, "OK", None) for b in BROKERS]
    assert all(isinstance(r["topic_count"], int) and isinstance(r["put_tps"], float) for r in rows)
    assert {r["role"] for r in rows} == {"ASYNC_MASTER"}


def test_cluster_list_tolerates_a_broker_that_does_not_answer(tmp_path: Path):
    namesrv = start_namesrv(tmp_path / "namesrv")
    try:
        broker = start_broker(tmp_path, "broker-z", namesrv.addr, brokerClusterName="ZCluster")
        with Admin(namesrv.addr) as admin:
            wait_until(lambda: admin.all_brokers(), timeout=15, what="broker-z registered")
        broker.stop(signal.SIGKILL)  # the name server keeps it until it expires
        rows = ok_json(namesrv.addr, "clusterList")
        assert [(r["cluster"], r["broker_name"], r["addr"], r["status"], r["topic_count"]) for r in rows] == \
            [("ZCluster", "broker-z", broker.addr, "NO ANSWER", None)]
        assert broker.addr in rows[0]["error"]
        assert table_lines(ok(namesrv.addr, "clusterList"), "ZCluster", "broker-z", "NO", "ANSWER")
    finally:
        namesrv.stop()


# -- global options ----------------------------------------------------------------------------------------
def test_json_and_namesrv_flags_before_or_after_the_command(cluster: Cluster):
    create_topic(cluster, "AdmFlags", "-c", CLUSTER)
    before = json.loads(ok(cluster.addr, "--json", "topicList"))
    after = json.loads(ok(None, "topicList", "--json", "-n", cluster.addr))
    from_env = ok(None, "topicList", env={"NAMESRV_ADDR": cluster.addr})
    assert {"topic": "AdmFlags"} in before and {"topic": "AdmFlags"} in after
    assert before == after and all(set(row) == {"topic"} for row in before)
    assert from_env.splitlines()[0] == "Topic" and "AdmFlags" in from_env.split()


# -- failures: exit 1, one line on stderr, no traceback ------------------------------------------------------
@pytest.mark.parametrize(("args", "says"), [
    (["topicRoute", "-t", "AdmNoSuchTopic"], "AdmNoSuchTopic"),
    (["topicStatus", "-t", "AdmNoSuchTopic"], "AdmNoSuchTopic"),
    (["updateTopic", "-c", CLUSTER], "-t"),
    (["updateTopic", "-t", "AdmX", "-c", CLUSTER, "-b", "broker-a"], "exactly one"),
    (["updateTopic", "-t", "AdmX"], "exactly one"),
    (["updateTopic", "-t", "AdmX", "-c", CLUSTER, "-r", "abc"], "abc"),
    (["updateTopic", "-t", "AdmX", "-c", CLUSTER, "-p", "3"], "-p"),
    (["updateTopic", "-t", "AdmX", "-c", "NoSuchCluster"], "NoSuchCluster"),
    (["updateTopic", "-t", "AdmX", "-b", "broker-zz"], "broker-zz"),
    (["deleteTopic", "-t", "AdmNoSuchTopic", "-c", CLUSTER], "AdmNoSuchTopic"),
    (["updateSubGroup", "-g", "adm-g", "-c", CLUSTER, "-b", "broker-a"], "exactly one"),
    (["updateSubGroup", "-g", "adm-g"], "exactly one"),
    (["consumerProgress", "-g", "adm-no-such-group"], "adm-no-such-group"),
    (["consumerProgress"], "-g"),
    (["queryMsgByKey", "-t", "AdmNoSuchTopic", "-k", "k"], "AdmNoSuchTopic"),
    (["queryMsgById", "-i", "not-an-id"], "not-an-id"),
    (["noSuchCommand"], "noSuchCommand"),
    # found by fuzzing: a plan of 2^63 logic queues ran out of memory; protobuf ints overflowed
    (["updateStaticTopic", "-t", "AdmHuge", "-c", CLUSTER, "-qn", str(1 << 63)], "do not fit"),
    (["updateSubGroup", "-g", "adm-g", "-c", CLUSTER, "-r", str(1 << 31)], str(1 << 31)),
    (["queryMsgByOffset", "-t", "AdmX", "-b", "broker-a", "-i", str(1 << 31), "-o", "0"], str(1 << 31)),
    (["queryMsgByOffset", "-t", "AdmX", "-b", "broker-a", "-i", "0", "-o", str(1 << 63)], str(1 << 63)),
    (["electMaster", "-b", "broker-a", "-i", str(1 << 63)], str(1 << 63)),
    (["sendMessage", "-t", "AdmX", "-p", "x", "-k", "k" * 70_000], f"at most {MAX_USER_PROPERTIES_SIZE}"),
    (["queryMsgById", "-i", ""], "message id is empty"),  # was refused as "query <first topic> by key: key is empty"
    (["topicRoute", "-t", "\udcff"], "not valid UTF-8"),
    (["--tls-ca", "/nonexistent.pem", "getSyncStateSet", "-b", "broker-a"], "cannot read the TLS CA file"),
], ids=lambda v: "_".join(v)[:60] if isinstance(v, list) else None)
def test_failures_exit_1_with_one_line(cluster: Cluster, args: list[str], says: str):
    line = fails(cluster.addr, *args)
    assert says in line, line
    assert line.startswith("mqadmin")


@pytest.mark.parametrize("args", [["consumerProgress", "-g", "adm-cg"], ["queryMsgById", "-i",
                                                                       "0123456789ABCDEF0123456789AB"],
                                  ["queryMsgById", "-i", "7F0000010000A5D90000000000000000"]],
                         ids=["consumerProgress", "queryMsgById-unique-key", "queryMsgById-offset-id"])
def test_an_empty_topic_filter_is_refused(cluster: Cluster, args: list[str]):
    assert "topic is empty" in fails(cluster.addr, *args, "-t", "")


def test_unreachable_name_server(cluster: Cluster):
    addr = f"127.0.0.1:{free_port()}"
    for args in (["topicList"], ["clusterList", "--json"], ["topicRoute", "-t", "AdmByCluster"]):
        assert addr in fails(addr, *args)


def test_send_with_properties_over_the_brokers_limit_is_refused_before_sending(cluster: Cluster):
    """The SDK checked 65535 bytes (the record's field) and the broker refuses above its limit: 20,000 keys (40,043
    bytes of properties) were sent and refused by the broker. The SDK checks the broker's limit for a producer's
    block (what the broker's own properties leave), which takes a message at it."""
    create_topic(cluster, "AdmBigProps", "-c", CLUSTER)
    keys = ",".join(["k"] * 20_000)  # as the bug hunt sent them
    line = fails(cluster.addr, "sendMessage", "-t", "AdmBigProps", "-p", "x", "-k", keys)
    assert f"properties (tags, keys and the rest) are 40043 bytes: at most {MAX_USER_PROPERTIES_SIZE}" in line, line
    base = len(wire_properties(Message("AdmBigProps", b"x", properties={"big": ""}), new_unique_key()))
    limit = MAX_USER_PROPERTIES_SIZE
    with Producer(cluster.addr) as producer:
        at_limit = Message("AdmBigProps", b"x", properties={"big": "v" * (limit - base)})
        assert producer.send(at_limit).queue_offset >= 0
        with pytest.raises(MQClientError, match=f"at most {limit}"):
            producer.send(Message("AdmBigProps", b"x", properties={"big": "v" * (limit - base + 1)}))


@pytest.mark.parametrize("addr", ["127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:0", "127.0.0.1:abc", "127.0.0.1"])
def test_an_address_with_a_bad_port_is_refused_before_any_call(cluster: Cluster, addr: str):
    """gRPC took the port modulo 65536: -n 127.0.0.1:99999 reached (and named) 127.0.0.1:34463."""
    line = fails(addr, "topicList")
    assert line.startswith(f"mqadmin topicList: name server address {addr!r} "), line
    assert f"name server address {addr!r} " in fails(f"{cluster.addr};{addr}", "clusterList")  # one of several
    assert fails(None, "brokerStatus", "-b", addr).startswith(f"mqadmin brokerStatus: -b {addr!r} ")
    assert fails(cluster.addr, "getBrokerConfig", "-b", addr).startswith(f"mqadmin getBrokerConfig: -b {addr!r} ")
    if addr.endswith(("99999", "65536")):
        assert line.endswith(f"has port {addr.rpartition(':')[2]}, outside 1..65535"), line


def test_missing_name_server_address():
    assert "NAMESRV_ADDR" in fails(None, "topicList")
    assert "NAMESRV_ADDR" in fails("", "clusterList")

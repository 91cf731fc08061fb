"""mqadmin for operators (issue 18): brokerStatus, getBrokerConfig/updateBrokerConfig, wipeWritePerm/addWritePerm,
producerConnection, statsAll, queryMsgByOffset, sendMessage/consumeMessage, --timeout, and a broker given as -n.
The real CLI as a subprocess against one name server and two real brokers."""

import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from client import Message, Producer, PullConsumer, TransactionResolution
from tests.admin_cli.helpers import CLUSTER, fails, free_port, mqadmin, ok, ok_json, registered_cluster, wait_route
from tests.cluster import Cluster, wait_until

BROKERS = ["broker-a", "broker-b"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = registered_cluster(tmp_path_factory.mktemp("operator"), BROKERS, tieredStoreS3SecretKey="do-not-show-me")
    try:
        yield c
    finally:
        c.stop()


def create_topic(c: Cluster, topic: str) -> None:
    ok(c.addr, "updateTopic", "-t", topic, "-c", CLUSTER, "-r", "4", "-w", "4")
    wait_route(c.addr, topic, BROKERS)


def broker_addr(c: Cluster, name: str = "broker-a") -> str:
    return c.brokers[name].addr


# -- brokerStatus ------------------------------------------------------------------------------------------
def test_broker_status_shows_runtime_info(cluster: Cluster):
    rows = {r["key"]: r["value"] for r in ok_json(cluster.addr, "brokerStatus", "-b", broker_addr(cluster))}
    assert rows["brokerName"] == "broker-a"
    assert rows["brokerVersionDesc"].startswith("pyrocketmq")
    for key in ("commitLogMaxOffset", "putTps", "getTps", "commitLogDiskRatio", "brokerRole"):
        assert key in rows, key
    text = ok(None, "brokerStatus", "-b", broker_addr(cluster))  # needs no name server
    assert any(line.split()[:2] == ["brokerName", "broker-a"] for line in text.splitlines())


def test_broker_status_of_nothing_fails(cluster: Cluster):
    line = fails(None, "--timeout", "2000", "brokerStatus", "-b", f"127.0.0.1:{free_port()}")
    assert "runtime info" in line


# -- getBrokerConfig / updateBrokerConfig -------------------------------------------------------------------
def config_of(c: Cluster) -> dict[str, dict]:
    return {r["key"]: r for r in ok_json(c.addr, "getBrokerConfig", "-b", broker_addr(c))}


def test_get_and_update_broker_config(cluster: Cluster):
    config = config_of(cluster)
    assert config["brokerName"]["value"] == "broker-a" and config["brokerName"]["live"] is False
    assert config["flushConsumerOffsetInterval"]["live"] is True
    assert config["tieredStoreS3SecretKey"]["value"] == "******"  # secrets never leave the broker
    out = ok_json(cluster.addr, "updateBrokerConfig", "-b", broker_addr(cluster), "-k", "flushConsumerOffsetInterval",
                  "-v", "1500")
    assert out[0]["value"] == "1500" and "restart" in out[0]["lasts"]
    assert config_of(cluster)["flushConsumerOffsetInterval"]["value"] == "1500"

    # autoCreateTopicEnable is live: the broker starts (and stops) serving TBW102 at once
    ok(cluster.addr, "updateBrokerConfig", "-b", broker_addr(cluster), "-k", "autoCreateTopicEnable", "-v", "true")
    wait_route(cluster.addr, "TBW102", ["broker-a"])
    ok(cluster.addr, "updateBrokerConfig", "-b", broker_addr(cluster), "-k", "autoCreateTopicEnable", "-v", "false")
    wait_route(cluster.addr, "TBW102", [])


def test_update_broker_config_refuses_what_is_not_live(cluster: Cluster):
    line = fails(cluster.addr, "updateBrokerConfig", "-b", broker_addr(cluster), "-k", "maxMessageSize", "-v", "1024")
    assert "maxMessageSize" in line and "restart" in line
    assert "noSuchKey" in fails(cluster.addr, "updateBrokerConfig", "-b", broker_addr(cluster), "-k", "noSuchKey",
                                "-v", "1")
    line = fails(cluster.addr, "updateBrokerConfig", "-b", broker_addr(cluster), "-k", "flushConsumerOffsetInterval",
                 "-v", "soon")
    assert "flushConsumerOffsetInterval" in line
    assert config_of(cluster)["maxMessageSize"]["value"] == "4194304"


# -- wipeWritePerm / addWritePerm ----------------------------------------------------------------------------
def brokers_sent_to(c: Cluster, topic: str, n: int) -> set[str]:
    with Producer(c.addr) as producer:
        return {producer.send(Message(topic, b"x%d" % i)).queue.broker_name for i in range(n)}


def test_wipe_write_perm_moves_sends_to_the_other_broker_and_add_brings_them_back(cluster: Cluster):
    create_topic(cluster, "OpWipe")
    assert brokers_sent_to(cluster, "OpWipe", 16) == set(BROKERS)
    rows = ok_json(cluster.addr, "wipeWritePerm", "-b", "broker-a")
    assert rows == [{"namesrv_addr": cluster.addr, "broker_name": "broker-a", "writeable": False,
                     "topic_count": rows[0]["topic_count"]}] and rows[0]["topic_count"] >= 1
    try:
        route = ok_json(cluster.addr, "topicRoute", "-t", "OpWipe")
        perms = {q["broker_name"]: q["perm"] for q in route["queue_datas"]}
        assert perms["broker-a"] & 2 == 0 and perms["broker-b"] & 2 == 2
        assert brokers_sent_to(cluster, "OpWipe", 16) == {"broker-b"}
        with PullConsumer(cluster.addr, group="op-wipe-reader") as consumer:  # reads still reach broker-a
            assert {mq.broker_name for mq in consumer.queues("OpWipe")} == set(BROKERS)
    finally:
        ok(cluster.addr, "addWritePerm", "-b", "broker-a")
    assert brokers_sent_to(cluster, "OpWipe", 16) == set(BROKERS)


def test_wipe_write_perm_of_unknown_broker_fails(cluster: Cluster):
    assert "broker-zz" in fails(cluster.addr, "wipeWritePerm", "-b", "broker-zz")


# -- producerConnection --------------------------------------------------------------------------------------
def test_producer_connection_lists_sessions(cluster: Cluster):
    create_topic(cluster, "OpProducers")
    with Producer(cluster.addr, group="op-pg", transaction_checker=lambda m: TransactionResolution.COMMIT,
                  topics=["OpProducers"]):
        wait_until(lambda: mqadmin(cluster.addr, "producerConnection", "-g", "op-pg", "-t", "OpProducers")
                   .returncode == 0, timeout=15, what="producer session")
        rows = ok_json(cluster.addr, "producerConnection", "-g", "op-pg", "-t", "OpProducers")
        assert {r["broker_name"] for r in rows} <= set(BROKERS) and rows
        assert all(r["client_id"] and r["addr"] for r in rows)
    assert "op-pg-none" in fails(cluster.addr, "producerConnection", "-g", "op-pg-none", "-t", "OpProducers")


# -- statsAll --------------------------------------------------------------------------------------------------
def test_stats_all_counts_in_and_out(cluster: Cluster):
    create_topic(cluster, "OpStats")
    with Producer(cluster.addr) as producer:
        for i in range(10):
            producer.send(Message("OpStats", b"s%d" % i))
    ok(cluster.addr, "consumeMessage", "-t", "OpStats", "-g", "op-stats-g", "-c", "100")
    rows = ok_json(cluster.addr, "statsAll", "-t", "OpStats")
    topic_rows = [r for r in rows if r["group"] == ""]
    group_rows = [r for r in rows if r["group"] == "op-stats-g"]
    assert sum(r["total"] for r in topic_rows) == 10 and sum(r["count_since_boot"] for r in topic_rows) == 10
    assert sum(r["tps"] for r in topic_rows) > 0
    assert sum(r["total"] for r in group_rows) == 10 and sum(r["lag"] for r in group_rows) == 0
    assert sum(r["count_since_boot"] for r in group_rows) == 10
    assert "OpStats" in ok(cluster.addr, "statsAll")
    assert "NoSuchTopic" in fails(cluster.addr, "statsAll", "-t", "NoSuchTopic")


# -- queryMsgByOffset, sendMessage, consumeMessage ------------------------------------------------------------
def test_send_then_query_by_offset_and_consume(cluster: Cluster):
    create_topic(cluster, "OpQuick")
    sent = ok_json(cluster.addr, "sendMessage", "-t", "OpQuick", "-p", "hello operator", "-k", "op-k1", "-c", "TagA")
    [result] = sent
    msg = ok_json(cluster.addr, "queryMsgByOffset", "-t", "OpQuick", "-b", result["broker_name"], "-i",
                  str(result["queue_id"]), "-o", str(result["queue_offset"]))
    assert msg["body_preview"] == "hello operator" and msg["tags"] == "TagA" and msg["keys"] == ["op-k1"]
    assert msg["msg_id"] == result["msg_id"]
    text = ok(cluster.addr, "queryMsgByOffset", "-t", "OpQuick", "-b", result["broker_name"], "-i",
              str(result["queue_id"]), "-o", str(result["queue_offset"]))
    assert "hello operator" in text

    read = ok_json(cluster.addr, "consumeMessage", "-t", "OpQuick", "-c", "10")
    assert [m["body_preview"] for m in read] == ["hello operator"]
    assert ok_json(cluster.addr, "consumeMessage", "-t", "OpQuick", "-g", "op-quick-g")[0]["keys"] == ["op-k1"]
    assert ok_json(cluster.addr, "consumeMessage", "-t", "OpQuick", "-g", "op-quick-g") == []  # committed
    assert "1 message(s)" in ok(cluster.addr, "consumeMessage", "-t", "OpQuick")


def test_quick_message_commands_bad_input(cluster: Cluster):
    create_topic(cluster, "OpQuickBad")
    line = fails(cluster.addr, "queryMsgByOffset", "-t", "OpQuickBad", "-b", "broker-a", "-i", "0", "-o", "99")
    assert "offset 99" in line
    assert "-o" in fails(cluster.addr, "queryMsgByOffset", "-t", "OpQuickBad", "-b", "broker-a", "-i", "0", "-o", "x")
    assert "NoSuchTopicQ" in fails(cluster.addr, "sendMessage", "-t", "NoSuchTopicQ", "-p", "x")
    assert "NoSuchTopicQ" in fails(cluster.addr, "consumeMessage", "-t", "NoSuchTopicQ")
    assert "-c" in fails(cluster.addr, "consumeMessage", "-t", "OpQuickBad", "-c", "0")


# -- --timeout and a broker given as the name server -----------------------------------------------------------
@pytest.fixture
def silent_addr() -> Iterator[str]:
    """An address that accepts TCP connections and never says anything."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("args", [("clusterList",), ("topicList",), ("statsAll",)])
def test_timeout_bounds_a_silent_name_server(silent_addr: str, args: tuple[str, ...]):
    start = time.monotonic()
    line = fails(silent_addr, "--timeout", "1000", *args)
    elapsed = time.monotonic() - start
    assert "DEADLINE_EXCEEDED" in line and silent_addr in line
    assert elapsed < 5.0, f"took {elapsed:.1f}s with --timeout 1000"


def test_timeout_bounds_a_silent_broker(cluster: Cluster, silent_addr: str):
    start = time.monotonic()
    fails(None, "brokerStatus", "-b", silent_addr, "--timeout", "800")  # the flag after the command too
    assert time.monotonic() - start < 5.0
    assert "--timeout" in fails(cluster.addr, "--timeout", "0", "clusterList")


def test_namesrv_address_that_is_a_broker_says_so(cluster: Cluster):
    addr = broker_addr(cluster)
    for args in (("clusterList",), ("topicList",), ("wipeWritePerm", "-b", "broker-a")):
        line = fails(addr, *args)
        assert f"{addr} is a broker (broker-a), not a name server" in line, line


BROKER_ADDR_COMMANDS = [("brokerStatus",), ("getBrokerConfig",),
                        ("updateBrokerConfig", "-k", "autoCreateTopicEnable", "-v", "true")]


@pytest.mark.parametrize("args", BROKER_ADDR_COMMANDS, ids=lambda a: a[0])
def test_broker_address_that_is_a_name_server_says_so(cluster: Cluster, args: tuple[str, ...]):
    """The reverse of the above: these said "UNIMPLEMENTED: Method not found!"."""
    for namesrv in (None, cluster.addr):
        line = fails(namesrv, args[0], "-b", cluster.addr, *args[1:])
        assert line == f"mqadmin {args[0]}: {cluster.addr} is a name server, not a broker", line


@pytest.mark.parametrize("args", BROKER_ADDR_COMMANDS, ids=lambda a: a[0])
def test_broker_address_that_serves_other_grpc_says_so(args: tuple[str, ...]):
    server = grpc.server(ThreadPoolExecutor(max_workers=2))  # serves no service: every method is UNIMPLEMENTED
    addr = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    try:
        line = fails(None, args[0], "-b", addr, *args[1:])
        assert line == f"mqadmin {args[0]}: {addr} is not a broker (it does not serve the broker API)", line
    finally:
        server.stop(None)


def test_producer_connection_of_an_empty_group_names_a_producer_group(cluster: Cluster):
    assert fails(cluster.addr, "producerConnection", "-g", "").endswith(": invalid argument: producer group is empty")

"""mqadmin tieredStatus end to end: the real CLI as a subprocess against a name server, a broker with tiered
storage on (posix backend, fast group commit) and one with it off."""

from collections.abc import Iterator
from typing import Any

import pytest

from client import Admin, Message, MessageQueue, Producer
from tests.admin_cli.helpers import fails, mqadmin, ok, ok_json, table_lines, wait_route
from tests.cluster import Cluster, make_cluster, start_broker, wait_until

TIERED_KEYS = {"broker_name", "queue_id", "local_min_offset", "local_max_offset", "tiered_min_offset",
               "tiered_max_offset", "commit_log_segments", "consume_queue_segments", "tiered_bytes", "upload_lag",
               "storage_level"}
HEADERS = ["Broker", "QID", "Local Min", "Local Max", "Tiered Min", "Tiered Max", "CL Segs", "CQ Segs", "Bytes",
           "Upload Lag"]
QUEUES = 4
SENT = {0: 5, 1: 3, 2: 7}  # queue 3 gets nothing: it has no flat file in the tier


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("tiered-cli")
    c = make_cluster(tmp, ("broker-a",), tieredStoreEnable="true", tieredBackendServiceProvider="posix",
                     tieredStoreGroupCommitAge=50)
    try:
        c.brokers["broker-b"] = start_broker(tmp, "broker-b", c.addr)  # tiered storage off
        with Admin(c.addr) as admin:
            wait_until(lambda: sorted(b.broker_name for b in admin.all_brokers()) == ["broker-a", "broker-b"],
                       timeout=15, what="both brokers registered")
        yield c
    finally:
        c.stop()


def create_topic(c: Cluster, topic: str, broker: str) -> None:
    ok(c.addr, "updateTopic", "-t", topic, "-b", broker, "-r", str(QUEUES), "-w", str(QUEUES))
    wait_route(c.addr, topic, [broker])


def status(c: Cluster, topic: str) -> list[dict[str, Any]]:
    return ok_json(c.addr, "tieredStatus", "-t", topic)


@pytest.fixture(scope="module")
def uploaded(cluster: Cluster) -> list[dict[str, Any]]:
    """Topic TierCli on broker-a with SENT messages per queue, once the tier has all of them."""
    create_topic(cluster, "TierCli", "broker-a")
    with Producer(cluster.addr) as producer:
        for queue_id, n in SENT.items():
            for i in range(n):
                producer.send(Message("TierCli", f"q{queue_id}-{i}".encode() * 20),
                              queue=MessageQueue("TierCli", "broker-a", queue_id))

    def settled() -> list[dict[str, Any]] | None:
        rows = status(cluster, "TierCli")
        done = all(r["upload_lag"] == 0 for r in rows) and [r["local_max_offset"] for r in rows] == [
            SENT.get(q, 0) for q in range(QUEUES)]
        return rows if done else None

    return wait_until(settled, timeout=20, interval=0.1, what="every message of TierCli in the tier")


def test_json_rows_show_each_queue_in_both_tiers(uploaded: list[dict[str, Any]]):
    assert [set(r) for r in uploaded] == [TIERED_KEYS] * QUEUES
    assert [(r["broker_name"], r["queue_id"]) for r in uploaded] == [("broker-a", q) for q in range(QUEUES)]
    for row in uploaded:
        n = SENT.get(row["queue_id"], 0)
        assert row["storage_level"] == "NOT_IN_DISK"
        assert (row["local_min_offset"], row["local_max_offset"], row["upload_lag"]) == (0, n, 0)
        if n:
            assert (row["tiered_min_offset"], row["tiered_max_offset"]) == (0, n)
            assert row["commit_log_segments"] == row["consume_queue_segments"] == 1
            # the queue's records plus n 28-byte consume-queue units; each record is bigger than its body
            assert row["tiered_bytes"] > n * (28 + len(f"q{row['queue_id']}-0") * 20)
        else:
            assert (row["tiered_min_offset"], row["tiered_max_offset"]) == (None, None)
            assert (row["commit_log_segments"], row["consume_queue_segments"], row["tiered_bytes"]) == (0, 0, 0)
    busiest = max(uploaded, key=lambda r: r["tiered_max_offset"] or 0)
    assert busiest["queue_id"] == 2


def test_table_has_the_columns_and_one_line_per_queue(cluster: Cluster, uploaded: list[dict[str, Any]]):
    out = ok(cluster.addr, "tieredStatus", "-t", "TierCli")
    lines = out.splitlines()
    header = lines[0]
    positions = [header.index(h) for h in HEADERS]
    assert positions == sorted(positions), header
    by_row = {r["queue_id"]: r for r in uploaded}
    for queue_id in range(QUEUES):
        row = by_row[queue_id]
        n = SENT.get(queue_id, 0)
        tier = [str(0), str(n)] if n else ["-", "-"]
        expected = ["broker-a", str(queue_id), "0", str(n), *tier, str(row["commit_log_segments"]),
                    str(row["consume_queue_segments"]), str(row["tiered_bytes"]), "0"]
        assert [line.split() for line in lines[1:] if line.split()[:2] == ["broker-a", str(queue_id)]] == [expected]
    assert table_lines(out, "broker-a:", "tieredStorageLevel=NOT_IN_DISK")


def test_long_option_and_options_after_the_command(cluster: Cluster, uploaded: list[dict[str, Any]]):
    proc = mqadmin(None, "tieredStatus", "--topic", "TierCli", "-n", cluster.addr, "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert [r["tiered_max_offset"] for r in ok_json(cluster.addr, "tieredStatus", "--topic", "TierCli")] == [
        r["tiered_max_offset"] for r in uploaded]


def test_broker_with_tiered_storage_off_fails_with_one_line(cluster: Cluster):
    create_topic(cluster, "TierOff", "broker-b")
    line = fails(cluster.addr, "tieredStatus", "-t", "TierOff")
    assert line.startswith("mqadmin tieredStatus: ")
    assert "tiered storage is off on broker broker-b" in line
    assert fails(cluster.addr, "--json", "tieredStatus", "-t", "TierOff") == line


def test_topic_on_brokers_with_and_without_tiered_storage_shows_the_tiered_ones(cluster: Cluster):
    ok(cluster.addr, "updateTopic", "-t", "TierMixed", "-b", "broker-a,broker-b", "-r", "2", "-w", "2")
    wait_route(cluster.addr, "TierMixed", ["broker-a", "broker-b"])
    rows = ok_json(cluster.addr, "tieredStatus", "-t", "TierMixed")
    assert rows and {r["broker_name"] for r in rows} == {"broker-a"}, rows


def test_unknown_topic_fails_with_one_line(cluster: Cluster):
    line = fails(cluster.addr, "tieredStatus", "-t", "NoSuchTieredTopic")
    assert line.startswith("mqadmin tieredStatus: ") and "NoSuchTieredTopic" in line


def test_usage_errors_fail_with_one_line(cluster: Cluster):
    assert "-t" in fails(cluster.addr, "tieredStatus")
    assert "name server" in fails(None, "tieredStatus", "-t", "TierCli")

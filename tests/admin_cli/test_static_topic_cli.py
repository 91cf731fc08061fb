"""mqadmin static-topic commands end to end: the real CLI against a name server and three real brokers."""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from client import Admin
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import block_round_up
from common.statictopic.mapping_checks import check_cluster
from common.statictopic.mapping_codec import detail_from_proto
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import TopicConfig
from proto import broker_pb2, broker_pb2_grpc
from tests.admin_cli.helpers import CLUSTER, fails, ok, ok_json, table_lines, wait_route
from tests.cluster import Daemon, start_broker, start_namesrv, wait_static_route, wait_until

BROKERS = ["broker-a", "broker-b", "broker-c"]


@dataclass
class Cluster:
    workdir: Path
    namesrv: Daemon
    brokers: dict[str, Daemon]

    @property
    def addr(self) -> str:
        return self.namesrv.addr

    def stub(self, name: str) -> broker_pb2_grpc.BrokerServiceStub:
        return broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(self.brokers[name].addr))

    def mapping(self, name: str, topic: str) -> tuple[TopicQueueMappingDetail | None, TopicConfig | None]:
        r = self.stub(name).GetTopicQueueMapping(broker_pb2.TopicRequest(topic=topic), timeout=5)
        assert r.code == ResponseCode.SUCCESS, r.remark
        config = None
        if r.HasField("config"):
            config = TopicConfig(r.config.topic_name, r.config.read_queue_nums, r.config.write_queue_nums)
        return (detail_from_proto(r.detail) if r.HasField("detail") else None), config

    def details(self, topic: str) -> dict[str, TopicQueueMappingDetail]:
        out = {}
        for b in BROKERS:
            detail, _config = self.mapping(b, topic)
            assert detail is not None, f"broker {b} holds no detail for {topic}"
            out[b] = detail
        return out

    def consistent(self, topic: str, total: int) -> dict[str, TopicQueueMappingDetail]:
        """Every broker holds a detail; all at one epoch and total; the admin's cluster check passes."""
        details = self.details(topic)
        check_cluster(details, {b: self.mapping(b, topic)[1] for b in BROKERS})
        assert {d.total_queues for d in details.values()} == {total}
        assert len({d.epoch for d in details.values()}) == 1, {b: d.epoch for b, d in details.items()}
        return details

    def send_logic(self, topic: str, logic_id: int, count: int) -> int:
        """``count`` messages to logic queue ``logic_id`` through its leader; the offset of the last one."""
        leader = leaders(self.details(topic))[logic_id]
        last = -1
        while count > 0:
            n = min(count, 4000)
            r = self.stub(leader).SendMessage(broker_pb2.SendMessageRequest(
                producer_group="pg", topic=topic, queue_id=logic_id, bodies=[b"x"] * n,
                addressing=broker_pb2.LOGIC), timeout=10)
            assert r.code == ResponseCode.SUCCESS, r.remark
            last = r.queue_offset + n - 1
            count -= n
        return last



def leaders(details: dict[str, TopicQueueMappingDetail]) -> dict[int, str]:
    return {g: b for b, d in details.items() for g in d.led_queues()}


def led_counts(details: dict[str, TopicQueueMappingDetail]) -> list[int]:
    return sorted(len(d.led_queues()) for d in details.values())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("static-cli")
    namesrv = start_namesrv(tmp / "namesrv")
    daemons: dict[str, Daemon] = {}
    try:
        for name in BROKERS:
            daemons[name] = start_broker(tmp, name, namesrv.addr, registerNameServerPeriod=1000)
        with Admin(namesrv.addr) as admin:
            wait_until(lambda: sorted(b.broker_name for b in admin.all_brokers()) == BROKERS, timeout=15,
                       what="three brokers registered")
        yield Cluster(tmp, namesrv, daemons)
    finally:
        for daemon in daemons.values():
            daemon.stop()
        namesrv.stop()


# -- updateStaticTopic --------------------------------------------------------------------------------------
def test_update_static_topic_by_cluster(cluster: Cluster):
    out = ok(cluster.addr, "updateStaticTopic", "-t", "StByCluster", "-qn", "6", "-c", CLUSTER)
    details = cluster.consistent("StByCluster", 6)
    assert led_counts(details) == [2, 2, 2]
    epoch = next(iter(details.values())).epoch
    for gid, broker in leaders(details).items():  # one table line per logic queue: id, leader, physical, epoch
        physical = details[broker].led_queues()[gid]
        assert len([line for line in table_lines(out, str(gid), broker, str(physical), str(epoch))
                    if line.split()[0] == str(gid)]) == 1, out
    for broker, d in details.items():
        _detail, config = cluster.mapping(broker, "StByCluster")
        assert config is not None and config.write_queue_nums == config.read_queue_nums == len(d.led_queues())


def test_update_static_topic_by_broker_list_json_and_empty_details_elsewhere(cluster: Cluster):
    doc = ok_json(cluster.addr, "updateStaticTopic", "-t", "StByList", "-qn", "4", "-b", "broker-a,broker-b")
    details = cluster.consistent("StByList", 4)
    epoch = details["broker-a"].epoch
    assert [(q["logic_id"], q["epoch"]) for q in doc["logic_queues"]] == [(g, epoch) for g in range(4)]
    assert {q["broker_name"] for q in doc["logic_queues"]} == {"broker-a", "broker-b"}
    assert {(q["logic_id"], q["broker_name"], q["queue_id"]) for q in doc["logic_queues"]} == {
        (g, b, details[b].led_queues()[g]) for g, b in leaders(details).items()}
    assert [(b["broker_name"], b["epoch"], b["total_queues"]) for b in doc["brokers"]] == [
        (b, epoch, 4) for b in BROKERS]
    c_detail, c_config = cluster.mapping("broker-c", "StByList")  # a no-target broker: an empty detail
    assert c_detail is not None and c_detail.hosted_queues == {} and c_config is None
    # extending by another broker list: the holders join, the new queues land on the least loaded (c)
    ok(cluster.addr, "updateStaticTopic", "-t", "StByList", "-qn", "6", "-b", "broker-c")
    details = cluster.consistent("StByList", 6)
    assert details["broker-a"].epoch >= epoch + 1000
    assert sorted(details["broker-c"].led_queues()) == [4, 5]


@pytest.mark.parametrize(("qn", "words"), [("0", "must be positive"), ("2", "never shrinks"),
                                           ("3", "nothing to do")])
def test_queue_number_zero_below_or_equal_fails_with_one_line(cluster: Cluster, qn: str, words: str):
    topic = f"StQn{qn}"
    ok(cluster.addr, "updateStaticTopic", "-t", topic, "-qn", "3", "-c", CLUSTER)
    before = cluster.details(topic)
    line = fails(cluster.addr, "updateStaticTopic", "-t", topic, "-qn", qn, "-c", CLUSTER)
    assert words in line and line.startswith("mqadmin updateStaticTopic:"), line
    assert cluster.details(topic) == before


def test_target_errors_fail_with_one_line(cluster: Cluster):
    assert "exactly one of" in fails(cluster.addr, "updateStaticTopic", "-t", "StTargets", "-qn", "2")
    assert "cluster NoSuchCluster does not exist" in fails(cluster.addr, "updateStaticTopic", "-t", "StTargets",
                                                           "-qn", "2", "-c", "NoSuchCluster")
    assert "broker broker-z is not registered" in fails(cluster.addr, "remappingStaticTopic", "-t", "StTargets",
                                                        "-b", "broker-a,broker-z")
    assert "static topic StNobody does not exist" in fails(cluster.addr, "remappingStaticTopic", "-t", "StNobody",
                                                           "-c", CLUSTER)


def test_a_name_held_by_a_normal_topic_is_refused(cluster: Cluster):
    ok(cluster.addr, "updateTopic", "-t", "NormalClash", "-b", "broker-b", "-r", "2", "-w", "2")
    line = fails(cluster.addr, "updateStaticTopic", "-t", "NormalClash", "-qn", "4", "-b", "broker-a")
    assert "NormalClash is a normal topic on broker broker-b" in line, line
    for b in BROKERS:
        assert cluster.mapping(b, "NormalClash")[0] is None


def test_update_topic_on_a_static_topic_is_refused(cluster: Cluster):
    ok(cluster.addr, "updateStaticTopic", "-t", "StNoUpdateTopic", "-qn", "2", "-c", CLUSTER)
    line = fails(cluster.addr, "updateTopic", "-t", "StNoUpdateTopic", "-c", CLUSTER, "-r", "8", "-w", "8")
    assert "is a static topic" in line and "updateStaticTopic" in line, line
    for b in BROKERS:  # nothing changed
        _detail, config = cluster.mapping(b, "StNoUpdateTopic")
        assert config is None or config.write_queue_nums <= 1


def test_update_topic_static_creates_a_static_topic_in_one_step(cluster: Cluster):
    doc = ok_json(cluster.addr, "updateTopic", "-t", "StOneStep", "-c", CLUSTER, "--static", "-qn", "6")
    details = cluster.consistent("StOneStep", 6)
    assert led_counts(details) == [2, 2, 2]
    assert sorted(q["logic_id"] for q in doc["logic_queues"]) == list(range(6))
    assert "--static and -qn N go together" in fails(cluster.addr, "updateTopic", "-t", "StHalf", "-c", CLUSTER,
                                                      "--static")
    assert "--static and -qn N go together" in fails(cluster.addr, "updateTopic", "-t", "StHalf", "-c", CLUSTER,
                                                      "-qn", "4")


# -- remappingStaticTopic -----------------------------------------------------------------------------------
def test_remap_moves_queues_decides_offsets_and_a_second_remap_only_bumps_the_epoch(cluster: Cluster):
    topic = "StRemap"
    ok(cluster.addr, "updateStaticTopic", "-t", topic, "-qn", "6", "-b", "broker-a")
    before = cluster.consistent(topic, 6)
    assert led_counts(before) == [0, 0, 6]
    last = {2: cluster.send_logic(topic, 2, 3), 3: cluster.send_logic(topic, 3, 5500)}
    assert last == {2: 2, 3: 5499}

    doc = ok_json(cluster.addr, "remappingStaticTopic", "-t", topic, "-c", CLUSTER)
    details = cluster.consistent(topic, 6)
    epoch = details["broker-a"].epoch
    assert doc["epoch"] == epoch > before["broker-a"].epoch
    assert led_counts(details) == [2, 2, 2]
    now = leaders(details)
    moved = {m["logic_id"]: m for m in doc["moved"]}
    assert set(moved) == {g for g in range(6) if now[g] != "broker-a"} == {2, 3, 4, 5}  # a keeps 0 and 1
    for gid, m in moved.items():
        assert (m["from_broker"], m["to_broker"]) == ("broker-a", now[gid])
        chain = details[now[gid]].hosted_queues[gid]
        assert [i.bname for i in chain] == ["broker-a", now[gid]] and chain[1].queue_id == m["queue_id"]
        assert chain[0].end_offset == last.get(gid, -1) + 1
        assert m["logic_offset"] == chain[1].logic_offset == block_round_up(last.get(gid, -1) + 1)
    assert moved[2]["logic_offset"] == 10_000
    assert moved[3]["logic_offset"] == 20_000  # 5500 is in the upper half of its block: one more block
    # the old leader answers NOT_LEADER_FOR_QUEUE for a moved queue; the new leader continues past the jump
    gid = 3
    r = cluster.stub("broker-a").SendMessage(broker_pb2.SendMessageRequest(
        producer_group="pg", topic=topic, queue_id=gid, bodies=[b"x"], addressing=broker_pb2.LOGIC), timeout=5)
    assert r.code == ResponseCode.NOT_LEADER_FOR_QUEUE
    assert cluster.send_logic(topic, gid, 1) == moved[gid]["logic_offset"]

    text = ok(cluster.addr, "remappingStaticTopic", "-t", topic, "-c", CLUSTER)
    again = cluster.consistent(topic, 6)
    assert leaders(again) == now
    assert again["broker-a"].epoch >= epoch + 1000
    assert "no logic queue moved" in text and f"new epoch {again['broker-a'].epoch}" in text, text
    for gid, b in now.items():  # the chains stay as they were (the old leader may drop the ones it lost)
        assert again[b].hosted_queues[gid] == details[b].hosted_queues[gid]


def test_remap_human_output_lists_moved_queues(cluster: Cluster):
    ok(cluster.addr, "updateStaticTopic", "-t", "StRemapText", "-qn", "3", "-b", "broker-c")
    text = ok(cluster.addr, "remappingStaticTopic", "-t", "StRemapText", "-b", "broker-a,broker-b")
    details = cluster.consistent("StRemapText", 3)
    now = leaders(details)
    assert sorted(now.values()) == ["broker-a", "broker-a", "broker-b"]
    for gid in range(3):
        assert len([line for line in table_lines(text, str(gid), "broker-c", now[gid], "10000")
                    if line.split()[0] == str(gid)]) == 1, text
    assert f"3 of 3 logic queues moved, new epoch {details['broker-a'].epoch}" in text


# -- topicStatus --------------------------------------------------------------------------------------------
def test_topic_status_shows_the_chains_of_a_static_topic(cluster: Cluster):
    topic = "StStatus"
    ok(cluster.addr, "updateStaticTopic", "-t", topic, "-qn", "2", "-b", "broker-b")
    cluster.send_logic(topic, 0, 7)
    ok(cluster.addr, "remappingStaticTopic", "-t", topic, "-b", "broker-c")
    cluster.send_logic(topic, 0, 2)
    details = cluster.consistent(topic, 2)
    wait_static_route(cluster.addr, topic, details["broker-c"].epoch)

    doc = ok_json(cluster.addr, "topicStatus", "-t", topic)
    assert doc["static"] is True and doc["total_queues"] == 2 and doc["epoch"] == details["broker-c"].epoch
    assert set(doc["broker_epochs"]) == set(BROKERS)
    q0 = doc["logic_queues"][0]
    assert q0["logic_id"] == 0 and q0["leader_broker"] == "broker-c"
    assert (q0["min_offset"], q0["max_offset"]) == (0, 10_002)
    items = [(i["gen"], i["broker_name"], i["logic_offset"], i["end_offset"], i["min_offset"], i["max_offset"],
              i["leader"]) for i in q0["items"]]
    assert items == [(0, "broker-b", 0, 7, 0, 7, False), (1, "broker-c", 10_000, -1, 0, 2, True)]
    assert q0["items"][1]["last_update_timestamp"] > 0

    assert [(i["status"], i["logic_first"], i["logic_last"]) for i in q0["items"]] == [
        ("ReadOnly", 0, 6), ("Normal", 10_000, None)]

    text = ok(cluster.addr, "topicStatus", "-t", topic)
    assert table_lines(text, "0", "0", "broker-b", "7", "0", "7", "ReadOnly", "0-6"), text
    c_line = table_lines(text, "1", "broker-c", "10000", "-1", "0", "2", "*", "Normal", "10000-")
    assert len(c_line) == 1 and c_line[0].split()[0] == "0", text
    assert f"Static topic {topic}: 2 logic queues, epoch {doc['epoch']}" in text


def test_topic_status_of_a_normal_topic_is_unchanged(cluster: Cluster):
    ok(cluster.addr, "updateTopic", "-t", "NormalStatus", "-b", "broker-a", "-r", "2", "-w", "2")
    wait_route(cluster.addr, "NormalStatus", ["broker-a"])
    rows = ok_json(cluster.addr, "topicStatus", "-t", "NormalStatus")
    assert [(r["broker_name"], r["queue_id"]) for r in rows] == [("broker-a", 0), ("broker-a", 1)]
    assert set(rows[0]) == {"broker_name", "queue_id", "min_offset", "max_offset", "last_update_timestamp"}
    assert table_lines(ok(cluster.addr, "topicStatus", "-t", "NormalStatus"), "broker-a", "1", "0")


def test_topic_status_right_after_creation_reads_the_brokers(cluster: Cluster):
    ok(cluster.addr, "updateStaticTopic", "-t", "StFresh", "-qn", "3", "-c", CLUSTER)
    doc = ok_json(cluster.addr, "topicStatus", "-t", "StFresh")  # whether or not the route is registered yet
    assert [(q["logic_id"], len(q["items"])) for q in doc["logic_queues"]] == [(0, 1), (1, 1), (2, 1)]
    assert "topicStatus" in fails(cluster.addr, "topicStatus", "-t", "StNeverCreated")


@pytest.mark.parametrize("name", ["bad topic", "TBW102"])
def test_bad_or_system_topic_names_fail_with_one_line(cluster: Cluster, name: str):
    line = fails(cluster.addr, "updateStaticTopic", "-t", name, "-qn", "2", "-c", CLUSTER)
    assert name in line, line


def test_topic_status_names_brokers_that_did_not_answer_and_queues_without_a_chain(monkeypatch: pytest.MonkeyPatch):
    """Rendering only (no daemons): a broker down shows as a footer line, and in --json."""
    from click.testing import CliRunner

    from admin_cli import topic_commands
    from admin_cli.main import cli
    from client.static_topic_admin import LogicQueueStatus, MappingItemStatus, StaticTopicStatus

    item = MappingItemStatus(0, "broker-a", 0, 0, 0, -1, 1, -1, True, 0, 5, 0, "Normal", 0, None)
    status = StaticTopicStatus("StDown", 2, 7, {"broker-a": 7}, [LogicQueueStatus(0, "broker-a", 0, 0, 5, [item])],
                               unreachable={"broker-b": "broker-b failed: UNAVAILABLE"}, missing=[1])

    class FakeAdmin:
        def is_static_topic(self, topic: str) -> bool:
            return True

        def static_topic_status(self, topic: str) -> StaticTopicStatus:
            return status

    monkeypatch.setattr(topic_commands, "open_admin", FakeAdmin)
    text = CliRunner().invoke(cli, ["-n", "x:1", "topicStatus", "-t", "StDown"]).output
    assert "broker broker-b unreachable: broker-b failed: UNAVAILABLE" in text, text
    assert "logic queues without a chain on any answering broker: [1]" in text, text
    assert table_lines(text, "0", "broker-a", "-1", "5", "*"), text
    doc = json.loads(CliRunner().invoke(cli, ["-n", "x:1", "--json", "topicStatus", "-t", "StDown"]).output)
    assert doc["missing"] == [1] and list(doc["unreachable"]) == ["broker-b"]
    assert doc["logic_queues"][0]["items"][0]["max_offset"] == 5

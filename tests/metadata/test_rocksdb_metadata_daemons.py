"""RocksDB metadata with real daemons: SIGKILL loses nothing acknowledged, 100,000 topics through the batch
RPC survive a restart and reach the name server, a JSON store is imported."""

import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from client import Admin
from client.errors import MQClientError
from common.response_code import ResponseCode
from proto import broker_pb2, broker_pb2_grpc, common_pb2
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until

ROCKSDB = {"storeType": "defaultRocksDB"}


def stub(daemon: Daemon) -> broker_pb2_grpc.BrokerServiceStub:
    channel = grpc.insecure_channel(daemon.addr, options=[("grpc.max_receive_message_length", 256 << 20)])
    return broker_pb2_grpc.BrokerServiceStub(channel)


def all_topics(daemon: Daemon) -> dict[str, common_pb2.TopicConfig]:
    return {c.topic_name: c for c in stub(daemon).GetAllTopicConfig(common_pb2.Empty(), timeout=60).configs}


def topic_proto(name: str, queues: int) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(topic_name=name, read_queue_nums=queues, write_queue_nums=queues, perm=6)


# -- (a) SIGKILL during a stream of changes ----------------------------------------------------------------------
@dataclass
class Acked:
    """Every change the broker acknowledged, and the one in flight when it died (present or not)."""

    topics: dict[str, int] = field(default_factory=dict)  # name -> queue count
    groups: dict[str, int] = field(default_factory=dict)  # name -> retry_max_times, the last acknowledged
    offsets: dict[int, int] = field(default_factory=dict)  # queue of (OFFSET_GROUP, OFFSET_TOPIC) -> offset
    pending: tuple | None = None
    ops_this_cycle: int = 0


OFFSET_GROUP, OFFSET_TOPIC, OFFSET_QUEUES = "CG", "OffsetTopic", 4


def stream_changes(broker: broker_pb2_grpc.BrokerServiceStub, acked: Acked, cycle: int, stop: threading.Event):
    """Topic creates (single and batches of 50), group updates and offset commits until the broker dies."""
    i = 0
    while not stop.is_set():
        i += 1
        kind = i % 4
        try:
            if kind == 0:
                name, queues = f"K{cycle}_{i}", 1 + (i // 4) % 8
                acked.pending = ("topic", name, queues)
                broker.UpdateAndCreateTopic(broker_pb2.UpdateTopicRequest(config=topic_proto(name, queues)),
                                            timeout=5)
                acked.topics[name] = queues
            elif kind == 1:
                names = [f"KB{cycle}_{i}_{j}" for j in range(50)]
                acked.pending = ("topics", names)
                broker.UpdateAndCreateTopicList(broker_pb2.UpdateTopicListRequest(
                    configs=[topic_proto(n, 2) for n in names]), timeout=5)
                acked.topics.update((n, 2) for n in names)
            elif kind == 2:
                group, retries = f"G{i % 7}", cycle * 100_000 + i
                acked.pending = ("group", group, retries)
                broker.UpdateAndCreateSubscriptionGroup(broker_pb2.SubscriptionGroupConfig(
                    group_name=group, consume_enable=True, consume_broadcast_enable=True, retry_queue_nums=1,
                    retry_max_times=retries), timeout=5)
                acked.groups[group] = retries
            else:
                queue, offset = (i // 4) % OFFSET_QUEUES, cycle * 100_000 + i
                acked.pending = ("offset", queue, offset)
                response = broker.UpdateConsumerOffset(broker_pb2.UpdateConsumerOffsetRequest(
                    consumer_group=OFFSET_GROUP, topic=OFFSET_TOPIC, queue_id=queue, commit_offset=offset), timeout=5)
                assert response.code == ResponseCode.SUCCESS, response.remark
                acked.offsets[queue] = offset
            acked.pending = None
            acked.ops_this_cycle += 1
        except grpc.RpcError:
            return  # the broker died: whatever was in flight stays pending


def check_everything_acked_is_there(broker: Daemon, acked: Acked) -> None:
    pending = acked.pending or ("none",)
    topics = all_topics(broker)
    missing = [n for n in acked.topics if n not in topics]
    assert not missing, f"{len(missing)} acknowledged topics lost, e.g. {missing[:5]}"
    wrong = [n for n, q in acked.topics.items() if topics[n].read_queue_nums != q or topics[n].write_queue_nums != q]
    assert not wrong, f"acknowledged topic configs changed: {wrong[:5]}"

    groups = {g.group_name: g.retry_max_times for g in
              stub(broker).GetAllSubscriptionGroup(common_pb2.Empty(), timeout=10).groups}
    for group, retries in acked.groups.items():
        allowed = {retries, pending[2]} if pending[:2] == ("group", group) else {retries}
        assert groups.get(group) in allowed, f"group {group}: {groups.get(group)}, acknowledged {retries}"

    for queue, offset in acked.offsets.items():
        got = stub(broker).QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
            consumer_group=OFFSET_GROUP, topic=OFFSET_TOPIC, queue_id=queue), timeout=10).offset
        allowed = {offset, pending[2]} if pending[:2] == ("offset", queue) else {offset}
        assert got in allowed, f"offset of queue {queue}: {got}, acknowledged {offset}"


def test_sigkill_during_metadata_changes_loses_nothing_acknowledged(tmp_path: Path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    # An hour between offset flushes: what survives the kill was written when it was committed.
    settings = {**ROCKSDB, "flushConsumerOffsetInterval": 3_600_000}
    broker = start_broker(tmp_path, "broker-k", "", **settings)
    acked = Acked()
    try:
        stub(broker).UpdateAndCreateTopic(broker_pb2.UpdateTopicRequest(
            config=topic_proto(OFFSET_TOPIC, OFFSET_QUEUES)), timeout=5)
        acked.topics[OFFSET_TOPIC] = OFFSET_QUEUES
        for cycle in range(3):
            acked.ops_this_cycle, acked.pending = 0, None
            stop = threading.Event()
            client = threading.Thread(target=stream_changes, args=(stub(broker), acked, cycle, stop), daemon=True)
            client.start()
            # Enough changes acknowledged to lose some (however slow the machine), then killed at a random point.
            wait_until(lambda: acked.ops_this_cycle >= 20, timeout=30, what=f"20 acknowledged changes (seed {seed})")
            time.sleep(rng.uniform(0.4, 1.2))
            broker.kill()
            stop.set()
            client.join(10)
            assert not client.is_alive()
            broker = start_broker(tmp_path, "broker-k", "", **settings)
            check_everything_acked_is_there(broker, acked)
            assert "metadata_imported" not in broker.log()
    finally:
        if broker.alive:
            broker.stop()
    assert len(acked.topics) > 100 and len(acked.groups) == 7 and len(acked.offsets) == OFFSET_QUEUES


# -- (b) 100,000 topics through the batch RPC, then a restart -------------------------------------------------------
def routed(admin: Admin, topic: str, broker_name: str, broker_addr: str, queues: int) -> bool:
    try:
        route = admin.topic_route(topic)
    except MQClientError:
        return False
    addrs = {bd.broker_name: bd.broker_addrs.get(0) for bd in route.broker_datas}
    return (addrs == {broker_name: broker_addr} and
            [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] ==
            [(broker_name, queues, queues)])


def test_100k_topics_created_in_batches_survive_a_restart_and_reach_the_name_server(tmp_path: Path):
    n, name = 100_000, "broker-big"
    topics = [f"Big{i:06d}" for i in range(n)]
    sample = random.Random(7).sample(topics, 40)
    namesrv = start_namesrv(tmp_path / "namesrv")
    broker = start_broker(tmp_path, name, namesrv.addr, **ROCKSDB)
    try:
        with Admin(namesrv.addr, rpc_timeout_ms=60_000) as admin:
            wait_until(lambda: name in {b.broker_name for b in admin.all_brokers()}, what="broker registered")
            started = time.monotonic()
            assert admin.create_topics(topics, brokers=[name], read_queue_nums=2, write_queue_nums=2) == [name]
            created_s = time.monotonic() - started
            wait_until(lambda: len(admin.topic_list()) == n, timeout=30, interval=0.2, what="100k topics routed")
            assert all(routed(admin, t, name, broker.addr, 2) for t in sample)

            # One bad config in a batch: nothing of that batch is created (checked by the SDK, and by the broker).
            with pytest.raises(MQClientError, match="bad name"):
                admin.create_topics(["Fresh1", "bad name"], brokers=[name])
            for bad in ([topic_proto("Fresh1", 1), topic_proto("bad name", 1)],
                        [topic_proto("Fresh1", 1), topic_proto("Fresh2", 0)],
                        [topic_proto("Fresh1", 1), topic_proto("Fresh1", 1)]):
                with pytest.raises(MQClientError, match="invalid argument"):
                    admin._broker_call("batch", broker.addr, "UpdateAndCreateTopicList",
                                       broker_pb2.UpdateTopicListRequest(configs=bad))
            assert "Fresh1" not in all_topics(broker)

            broker.stop()
            broker = start_broker(tmp_path, name, namesrv.addr, **ROCKSDB)
            configs = all_topics(broker)
            assert set(configs) == set(topics)
            assert {(c.read_queue_nums, c.write_queue_nums, c.perm) for c in configs.values()} == {(2, 2, 6)}
            assert re.search(r"topic_config_loaded topics=100000 ", broker.log())

            # The restarted broker (a new address) registers all of them again; later batches go as deltas.
            wait_until(lambda: all(routed(admin, t, name, broker.addr, 2) for t in sample), timeout=30, interval=0.2,
                       what="routes point at the restarted broker")
            more = [f"More{i:04d}" for i in range(3000)]
            admin.create_topics(more, brokers=[name], read_queue_nums=3, write_queue_nums=3, chunk_size=1000)
            wait_until(lambda: len(admin.topic_list()) == n + len(more), timeout=30, interval=0.2,
                       what="topics created after the restart routed")
            assert all(routed(admin, t, name, broker.addr, 3) for t in more[::250])
            assert "Fresh1" not in admin.topic_list()
        print(f"created {n} topics through the batch RPC in {created_s:.1f}s")
    finally:
        for d in (broker, namesrv):
            if d.alive:
                d.stop()


# -- (c) a JSON store started in RocksDB mode -----------------------------------------------------------------------
def test_broker_imports_a_json_store_once_when_started_in_rocksdb_mode(tmp_path: Path):
    broker = start_broker(tmp_path, "broker-j", "")  # storeType=default: JSON files
    try:
        s = stub(broker)
        s.UpdateAndCreateTopicList(broker_pb2.UpdateTopicListRequest(
            configs=[topic_proto(f"J{i}", 4) for i in range(250)]), timeout=10)
        s.UpdateAndCreateSubscriptionGroup(broker_pb2.SubscriptionGroupConfig(
            group_name="JG", consume_enable=False, retry_queue_nums=1, retry_max_times=9), timeout=5)
        for q in range(3):
            s.UpdateConsumerOffset(broker_pb2.UpdateConsumerOffsetRequest(
                consumer_group="JG", topic="J1", queue_id=q, commit_offset=40 + q), timeout=5)
    finally:
        broker.stop()  # a clean stop writes the offsets file
    config = tmp_path / "broker-j" / "store" / "config"
    assert (config / "topics.json").exists() and (config / "consumerOffset.json").exists()

    broker = start_broker(tmp_path, "broker-j", "", **ROCKSDB)
    try:
        lines = [line for line in broker.log().splitlines() if "metadata_imported" in line]
        assert len(lines) == 1 and "topics=250 groups=1 offsets=3 " in lines[0], lines
        assert not (config / "topics.json").exists() and (config / "topics.json.imported").exists()
        assert len(all_topics(broker)) == 250
        groups = stub(broker).GetAllSubscriptionGroup(common_pb2.Empty(), timeout=5).groups
        assert [(g.group_name, g.consume_enable, g.retry_max_times) for g in groups] == [("JG", False, 9)]
        assert [stub(broker).QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
            consumer_group="JG", topic="J1", queue_id=q), timeout=5).offset for q in range(3)] == [40, 41, 42]
        broker.stop()
        broker = start_broker(tmp_path, "broker-j", "", **ROCKSDB)
        assert "metadata_imported" not in broker.log().split("broker_stopped")[-1]
        assert len(all_topics(broker)) == 250
    finally:
        if broker.alive:
            broker.stop()

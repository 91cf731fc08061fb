"""``SlaveSynchronize`` against a master served over gRPC in this process, with a slave's real metadata managers:
groups the master deleted are deleted on the slave, and a copy stopped (a promotion) is neither waited for nor
applied, even when its master answers afterwards. Before, a promotion waited 5 s for a copy stuck on a hung master,
then the copy went on and wrote the old master's tables into the new master."""

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from broker.ha.slave_synchronize import SlaveSynchronize
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from common.topic_config import TopicConfig
from common.topic_config_codec import topic_config_to_proto
from proto import broker_pb2, broker_pb2_grpc


@dataclass
class Tables:
    topics: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)


class FakeMaster(broker_pb2_grpc.BrokerServiceServicer):
    """The metadata calls a slave's copy makes; ``hang`` set: GetAllConsumerOffsets waits for ``release``."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.hang = False
        self.hanging = threading.Event()
        self.release = threading.Event()

    def GetTopicConfigChanges(self, request, context):
        configs = [topic_config_to_proto(TopicConfig(name, 1, 1)) for name in self.tables.topics]
        return broker_pb2.TopicConfigChanges(configs=configs, whole=True)

    def GetAllSubscriptionGroup(self, request, context):
        return broker_pb2.SubscriptionGroupList(groups=[
            broker_pb2.SubscriptionGroupConfig(group_name=g, consume_enable=True, retry_queue_nums=1,
                                               retry_max_times=16) for g in self.tables.groups])

    def GetAllConsumerOffsets(self, request, context):
        if self.hang:
            self.hanging.set()
            self.release.wait(30)
        return broker_pb2.ConsumerOffsetList(offsets=[
            broker_pb2.ConsumerOffsetEntry(group=g, topic=t, queue_id=q, offset=o)
            for (g, t, q), o in self.tables.offsets.items()])

    def GetAllTopicQueueMapping(self, request, context):
        return broker_pb2.TopicQueueMappingList()


@dataclass
class Slave:
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    sync: SlaveSynchronize

    def state(self) -> Tables:
        return Tables(sorted(c.topic_name for c in self.topics.all_configs()),
                      sorted(self.groups.subscription_group_table),
                      {(g, t, q): o for g, t, q, o in self.offsets.all_offsets()})


@pytest.fixture
def master() -> Iterator[tuple[FakeMaster, str]]:
    fake = FakeMaster(Tables(["T"], ["kept", "doomed"], {("kept", "T", 0): 7}))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    broker_pb2_grpc.add_BrokerServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield fake, f"127.0.0.1:{port}"
    fake.release.set()
    server.stop(grace=0)


def slave_of(tmp_path: Path, addr: str) -> Slave:
    config = tmp_path / "slave"
    topics, groups, offsets = TopicConfigManager(config), SubscriptionGroupManager(config), \
        ConsumerOffsetManager(config)
    for manager in (topics, groups, offsets):
        manager.load()
    return Slave(topics, groups, offsets, SlaveSynchronize(lambda: addr, topics, groups, offsets, lambda: None))


def test_groups_the_master_deleted_are_deleted_on_the_slave(tmp_path: Path, master: tuple[FakeMaster, str]):
    fake, addr = master
    slave = slave_of(tmp_path, addr)
    slave.sync.sync_all(addr)
    assert slave.state().groups == ["doomed", "kept"]
    fake.tables.groups.remove("doomed")  # deleteSubscriptionGroup on the master
    slave.sync.sync_all(addr)
    assert slave.state().groups == ["kept"]  # it stayed, and came back after a failover


def test_a_group_a_read_made_on_the_slave_is_not_deleted_by_every_copy(tmp_path: Path,
                                                                       master: tuple[FakeMaster, str]):
    """A pull on a slave (slaveReadEnable) auto-creates its group there: deleted by each copy as one the master
    lacks, it was made again by the next pull, the group table rewritten every 5 s."""
    _, addr = master
    slave = slave_of(tmp_path, addr)
    slave.sync.sync_all(addr)
    slave.groups.update(SubscriptionGroupConfig("read-on-slave"))
    slave.sync.sync_all(addr)
    assert slave.state().groups == ["doomed", "kept", "read-on-slave"]


def test_a_stopped_copy_is_not_waited_for_and_applies_nothing_when_its_master_answers_late(
        tmp_path: Path, master: tuple[FakeMaster, str]):
    fake, addr = master
    slave = slave_of(tmp_path, addr)
    slave.groups.update(SubscriptionGroupConfig("new-masters-own"))  # what the promoted broker has by then
    slave.offsets.commit_offset("kept", "T", 0, 90)
    before = slave.state()
    fake.hang = True  # the master hangs in the copy's offsets call
    slave.sync.start()
    assert fake.hanging.wait(10)
    started = time.monotonic()
    slave.sync.shutdown()  # promotion
    waited = time.monotonic() - started
    fake.release.set()  # the old master answers after all
    slave.sync.join(10)
    assert not slave.sync.is_alive()
    assert slave.state() == before  # not its topics, nor its groups (deleting new-masters-own), nor its offsets
    assert waited < 1.0  # a promotion was held up 5 s


def test_shutdown_waits_for_the_piece_being_applied_and_nothing_after_it_is(
        tmp_path: Path, master: tuple[FakeMaster, str], monkeypatch: pytest.MonkeyPatch):
    _fake, addr = master
    slave = slave_of(tmp_path, addr)
    applying, finish = threading.Event(), threading.Event()
    update = slave.groups.update

    def slow_update(config: SubscriptionGroupConfig) -> None:
        applying.set()
        finish.wait(10)
        update(config)

    monkeypatch.setattr(slave.groups, "update", slow_update)
    copy = threading.Thread(target=lambda: slave.sync._guarded(addr, slave.sync.sync_all))
    copy.start()
    assert applying.wait(10)
    stopping = threading.Thread(target=slave.sync.shutdown)
    stopping.start()
    time.sleep(0.2)
    assert stopping.is_alive()  # the groups being written are written before shutdown returns
    finish.set()
    stopping.join(5)
    copy.join(5)
    assert not stopping.is_alive() and not copy.is_alive()
    state = slave.state()
    assert state.topics == ["T"] and state.groups == ["doomed", "kept"] and state.offsets == {}  # offsets: after

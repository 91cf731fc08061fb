"""A slave's copy of its master's topic table goes by what changed since its last copy (``GetTopicConfigChanges``):
the master answers the changes since the slave's version, or the whole table for a first copy, a version of
another start of the master, or one ahead of it; the slave applies either, deletions included, and asks from the
version it holds (from the same master only). With millions of topics the whole table every 5 s kept the master's
event loop busy for seconds (0.31 s to encode 100,000 topics, 0.26 s to decode them on the slave)."""

from pathlib import Path

import grpc

from broker.ha.slave_synchronize import SlaveSynchronize
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.store.config import StoreType
from common.topic_config import TopicConfig
from proto import broker_pb2, common_pb2
from tests.metadata.test_delete_topic_refused import Broker


def changes(broker: Broker, since: common_pb2.DataVersion | None) -> broker_pb2.TopicConfigChanges:
    return broker.admin.topic_config_changes(broker_pb2.TopicConfigChangesRequest(since=since))


def names(answer: broker_pb2.TopicConfigChanges) -> set[str]:
    return {c.topic_name for c in answer.configs}


def test_the_master_answers_what_changed_since_the_slaves_version(tmp_path: Path):
    broker = Broker(tmp_path, StoreType.DEFAULT)
    try:
        broker.topics.update_many([TopicConfig("A", 1, 1), TopicConfig("B", 1, 1)])
        first = changes(broker, None)
        assert first.whole and names(first) == {"A", "B"} and not first.deleted
        broker.topics.update(TopicConfig("B", 2, 2))
        broker.topics.update(TopicConfig("C", 1, 1))
        broker.topics.delete("A")
        delta = changes(broker, first.data_version)
        assert not delta.whole and names(delta) == {"B", "C"} and list(delta.deleted) == ["A"]
        assert {c.read_queue_nums for c in delta.configs if c.topic_name == "B"} == {2}
        assert not names(changes(broker, delta.data_version))  # nothing since
        other_start = common_pb2.DataVersion(state_version=first.data_version.state_version - 1, counter=1)
        ahead = common_pb2.DataVersion(state_version=first.data_version.state_version, counter=10_000)
        for since in (other_start, ahead):
            answer = changes(broker, since)
            assert answer.whole and names(answer) == {"B", "C"}
    finally:
        broker.close()


def slave_of(topics: TopicConfigManager) -> SlaveSynchronize:
    return SlaveSynchronize(lambda: "", topics, None, None, lambda: None)  # type: ignore[arg-type]


def test_the_slave_applies_a_whole_table_or_the_changes_and_asks_from_its_copy(tmp_path: Path):
    master = Broker(tmp_path / "master", StoreType.DEFAULT)
    topics = TopicConfigManager(tmp_path / "slave")
    topics.load()
    topics.update(TopicConfig("LocalOnly", 1, 1))  # e.g. a topic of an old master it once was
    sync = slave_of(topics)
    try:
        master.topics.update_many([TopicConfig("A", 1, 1), TopicConfig("B", 1, 1)])
        whole = changes(master, None)
        sync._copy_topics("m:1", whole)
        assert {c.topic_name for c in topics.all_configs()} == {"A", "B"}
        assert sync._topics_copied == ("m:1", whole.data_version)

        master.topics.update(TopicConfig("B", 4, 4))
        master.topics.delete("A")
        delta = changes(master, sync._topics_copied[1])
        changed, gone = sync._copy_topics("m:1", delta)
        assert ([c.topic_name for c in changed], gone) == (["B"], ["A"])
        assert [(c.topic_name, c.read_queue_nums) for c in topics.all_configs()] == [("B", 4)]
        assert sync._copy_topics("m:1", changes(master, delta.data_version)) == ([], [])
    finally:
        master.close()


class Unimplemented(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNIMPLEMENTED


class MasterStub:
    """The master's two RPCs over ``broker``; ``older``: a release without GetTopicConfigChanges."""

    def __init__(self, broker: Broker, older: bool = False) -> None:
        self.broker, self.older = broker, older
        self.asked: list[common_pb2.DataVersion | None] = []

    def GetTopicConfigChanges(self, request: broker_pb2.TopicConfigChangesRequest, **_kw: object):
        if self.older:
            raise Unimplemented()
        self.asked.append(request.since if request.HasField("since") else None)
        return self.broker.admin.topic_config_changes(request)

    def GetAllTopicConfig(self, request: common_pb2.Empty, **_kw: object) -> broker_pb2.TopicConfigList:
        return self.broker.admin.all_topic_configs()


def test_the_slave_asks_from_its_copy_of_the_same_master_and_copies_an_older_master_whole(tmp_path: Path):
    master = Broker(tmp_path / "master", StoreType.DEFAULT)
    topics = TopicConfigManager(tmp_path / "slave")
    topics.load()
    sync = slave_of(topics)
    stub = MasterStub(master)
    try:
        master.topics.update(TopicConfig("A", 1, 1))
        sync._copy_topics("m:1", sync._fetch_topic_changes(stub, "m:1", {}))  # type: ignore[arg-type]
        copied = sync._topics_copied
        assert copied is not None
        sync._fetch_topic_changes(stub, "m:1", {})  # type: ignore[arg-type]
        sync._fetch_topic_changes(stub, "m:2", {})  # type: ignore[arg-type]  # another master: from nothing
        assert stub.asked == [None, copied[1], None]

        older = MasterStub(master, older=True)
        answer = sync._fetch_topic_changes(older, "m:1", {})  # type: ignore[arg-type]
        assert answer.whole and names(answer) == {"A"}
        sync._copy_topics("m:1", answer)
        assert sync._topics_copied is None  # no version to ask from: whole again next time
    finally:
        master.close()

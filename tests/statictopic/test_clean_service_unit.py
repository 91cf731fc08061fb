"""The static-topic clean service's rules, with the physical queues and the peers' mappings as plain data."""

import errno
import logging
import os
from pathlib import Path

import pytest

from broker.metadata import metadata_store
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.out.peer_brokers import PeerBrokerError
from broker.statictopic.static_topic_clean_service import StaticTopicCleanService
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from common.kv_shard import KV_TOPIC
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.mapping_codec import detail_to_proto
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from proto import broker_pb2, common_pb2

T = "CleanT"


class FakeOffsets:
    """A broker's consumer offsets: (group, topic, queue) -> offset."""

    def __init__(self, table: dict[tuple[str, str, int], int] | None = None) -> None:
        self.table = dict(table or {})

    def all_offsets(self) -> list[tuple[str, str, int, int]]:
        return [(g, t, q, o) for (g, t, q), o in self.table.items()]

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table[(group, topic, queue_id)] = offset

    def persist(self) -> None:
        pass


class FakePeers:
    def __init__(self, leads: dict[str, bool], down: frozenset[str] = frozenset(),
                 offsets: dict[str, FakeOffsets] | None = None) -> None:
        self.leads, self.down = leads, down
        self.offsets = offsets or {}

    def call(self, bname: str, method: str, request):
        if bname in self.down:
            raise PeerBrokerError(f"broker {bname} is down")
        offsets = self.offsets.setdefault(bname, FakeOffsets())
        if method == "GetAllConsumerOffsets":
            return broker_pb2.ConsumerOffsetList(offsets=[broker_pb2.ConsumerOffsetEntry(
                group=g, topic=t, queue_id=q, offset=o) for g, t, q, o in offsets.all_offsets()])
        if method == "UpdateConsumerOffset":
            offsets.commit_offset(request.consumer_group, request.topic, request.queue_id, request.commit_offset)
            return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)
        assert method == "GetTopicQueueMapping"
        detail = TopicQueueMappingDetail(request.topic, 4, bname, 1)
        if self.leads[bname]:
            detail.hosted_queues[3] = [LogicQueueMappingItem(0, 7, bname, 0)]
        return broker_pb2.TopicQueueMappingResponse(code=ResponseCode.SUCCESS, detail=detail_to_proto(detail))


class FakeStaticTopics:
    broker_name = "lead"

    def __init__(self, mins: dict[tuple[str, int], int], peers: FakePeers, local: FakeOffsets) -> None:
        self.mins, self.peer_brokers, self.consumer_offset_manager = mins, peers, local

    def commit_physical(self, topic: str, item: LogicQueueMappingItem, group: str, physical: int) -> None:
        if item.bname == self.broker_name:
            self.consumer_offset_manager.commit_offset(group, topic, item.queue_id, physical)
        else:
            self.peer_brokers.call(item.bname, "UpdateConsumerOffset", broker_pb2.UpdateConsumerOffsetRequest(
                consumer_group=group, topic=topic, queue_id=item.queue_id, commit_offset=physical))

    def physical_offset(self, item: LogicQueueMappingItem, method: str, topic: str) -> int:
        assert method == "GetMinOffset"
        if item.bname in self.peer_brokers.down:
            raise PeerBrokerError(f"broker {item.bname} is down")
        return self.mins[(item.bname, item.queue_id)]


def item(gen: int, bname: str, queue_id: int, logic: int, end: int = -1) -> LogicQueueMappingItem:
    return LogicQueueMappingItem(gen=gen, queue_id=queue_id, bname=bname, logic_offset=logic, end_offset=end)


def run(tmp_path: Path, topic: str, chain: list[LogicQueueMappingItem], mins: dict[tuple[str, int], int],
        leads: dict[str, bool], down: frozenset[str] = frozenset(),
        offsets: dict[str, FakeOffsets] | None = None) -> list[tuple[str, int]]:
    manager = TopicQueueMappingManager(tmp_path, "lead")
    manager.update(TopicQueueMappingDetail(topic, 4, "lead", 1, hosted_queues={0: chain}))
    announced = []
    offsets = offsets if offsets is not None else {}
    local = offsets.setdefault("lead", FakeOffsets())
    static_topics = FakeStaticTopics(mins, FakePeers(leads, down, offsets), local)
    service = StaticTopicCleanService(manager, static_topics, lambda: announced.append(1),  # type: ignore[arg-type]
                                      interval_ms=1000)
    dropped = service.run_once()
    assert bool(announced) == bool(dropped)
    detail = manager.get(topic)
    assert detail is not None
    return [(i.bname, i.queue_id) for i in detail.hosted_queues[0]]


def test_expired_links_stay_while_their_broker_leads_and_go_once_it_leads_nothing(tmp_path: Path):
    chain = [item(0, "old", 0, 0, end=10), item(1, "lead", 0, 10_000)]
    assert run(tmp_path / "1", T, chain, {("old", 0): 10}, {"old": True}) == [("old", 0), ("lead", 0)]
    assert run(tmp_path / "2", T, chain, {("old", 0): 10}, {"old": False}) == [("lead", 0)]
    assert run(tmp_path / "3", T, chain, {("old", 0): 9}, {"old": False}) == [("old", 0), ("lead", 0)]  # readable
    assert run(tmp_path / "4", T, chain, {}, {"old": False}, down=frozenset({"old"})) == [("old", 0), ("lead", 0)]


def test_only_the_newest_expired_link_on_a_broker_is_kept(tmp_path: Path):
    chain = [item(0, "old", 0, 0, end=10), item(1, "lead", 0, 10_000, end=5), item(2, "old", 1, 20_000, end=5),
             item(3, "lead", 1, 30_000)]
    mins = {("old", 0): 10, ("lead", 0): 5, ("old", 1): 5}
    assert run(tmp_path, T, chain, mins, {"old": True}) == [("old", 1), ("lead", 1)]


def test_kv_shards_never_expire(tmp_path: Path):
    chain = [item(0, "old", 0, 0, end=10), item(1, "lead", 0, 10_000)]
    assert run(tmp_path, KV_TOPIC, chain, {("old", 0): 10}, {"old": False}) == [("old", 0), ("lead", 0)]


def test_offsets_on_a_dropped_link_are_carried_to_the_next_links_start(tmp_path: Path):
    chain = [item(0, "old", 0, 0, end=10), item(1, "mid", 3, 10_000, end=0), item(2, "lead", 2, 20_000)]
    offsets = {"old": FakeOffsets({("g", T, 0): 10, ("h", T, 0): 4, ("k", T, 0): 10}),
               "lead": FakeOffsets({("k", T, 2): 7})}
    mins = {("old", 0): 10, ("mid", 3): 0}
    assert run(tmp_path, T, chain, mins, {"old": False, "mid": False}, offsets=offsets) == [("lead", 2)]
    # g and h only had offsets on dropped links: they now sit at the leader's start; k had one there already
    assert offsets["lead"].table == {("g", T, 2): 0, ("h", T, 2): 0, ("k", T, 2): 7}


def test_a_link_whose_offsets_cannot_be_carried_stays(tmp_path: Path):
    chain = [item(0, "old", 0, 0, end=10), item(1, "mid", 3, 10_000)]
    mins = {("old", 0): 10}

    class Unwritable(FakeOffsets):
        def all_offsets(self) -> list[tuple[str, str, int, int]]:
            raise PeerBrokerError("broker mid is restarting")

    offsets = {"old": FakeOffsets({("g", T, 0): 10}), "mid": Unwritable()}
    manager_chain = run(tmp_path, T, [*chain[:1], item(1, "mid", 3, 10_000, end=5), item(2, "lead", 1, 20_000)],
                        {**mins, ("mid", 3): 0}, {"old": False, "mid": False}, offsets=offsets)
    assert manager_chain == [("old", 0), ("mid", 3), ("lead", 1)]  # mid holds data; old could not hand over


def test_an_update_applied_while_a_pass_runs_is_not_undone(tmp_path: Path):
    manager = TopicQueueMappingManager(tmp_path, "lead")
    chain = [item(0, "old", 0, 0, end=10), item(1, "lead", 0, 10_000)]
    manager.update(TopicQueueMappingDetail(T, 4, "lead", 1, hosted_queues={0: chain}))
    newer = TopicQueueMappingDetail(T, 4, "lead", 5000, hosted_queues={0: chain, 1: [item(0, "lead", 1, 0)]})

    class UpdatingPeers(FakePeers):
        def call(self, bname: str, method: str, request):
            if method == "GetTopicQueueMapping" and manager.get(T) is not newer:
                manager.update(newer)  # an admin's write lands while the pass asks the peer
            return super().call(bname, method, request)

    peers = UpdatingPeers({"old": False}, offsets={"lead": FakeOffsets()})
    static_topics = FakeStaticTopics({("old", 0): 10}, peers, peers.offsets["lead"])
    service = StaticTopicCleanService(manager, static_topics, lambda: None, interval_ms=1000)  # type: ignore[arg-type]
    assert service.run_once() == 0
    assert manager.get(T) is newer  # the next pass trims the new detail
    assert service.run_once() == 1
    held = manager.get(T)
    assert held is not None and held.epoch == 5000 and set(held.hosted_queues) == {0, 1}


def test_a_slave_trims_nothing(tmp_path: Path):
    manager = TopicQueueMappingManager(tmp_path, "lead")
    chain = [item(0, "old", 0, 0, end=10), item(1, "lead", 0, 10_000)]
    manager.update(TopicQueueMappingDetail(T, 4, "lead", 1, hosted_queues={0: chain}))
    peers = FakePeers({"old": False})
    service = StaticTopicCleanService(manager, FakeStaticTopics({("old", 0): 10}, peers, FakeOffsets()),  # type: ignore[arg-type]
                                      lambda: None, interval_ms=1000, is_master=lambda: False)
    assert service.run_once() == 0 and len(manager.get(T).hosted_queues[0]) == 2  # type: ignore[union-attr]


def test_a_broker_that_does_not_answer_is_logged_once_while_it_lasts(tmp_path: Path, caplog):
    """Every pass skips its links (nothing is dropped on a guess), and says so once, not at every pass."""
    manager = TopicQueueMappingManager(tmp_path, "lead")
    manager.update(TopicQueueMappingDetail(T, 4, "lead", 1, hosted_queues={0: [
        item(0, "old", 0, 0, end=10), item(1, "lead", 0, 10_000)]}))
    peers = FakePeers({"old": False}, frozenset({"old"}), {})
    static_topics = FakeStaticTopics({("old", 0): 10}, peers, FakeOffsets())
    service = StaticTopicCleanService(manager, static_topics, lambda: None,  # type: ignore[arg-type]
                                      interval_ms=1000)
    caplog.set_level(logging.INFO, logger="broker.statictopic.static_topic_clean_service")

    def skipped() -> int:
        return sum("static_clean_skipped" in r.getMessage() for r in caplog.records)

    assert [service.run_once() for _ in range(3)] == [0, 0, 0] and skipped() == 1
    peers.down = frozenset()  # it answers again; then it goes down again: said once more
    static_topics.mins[("old", 0)] = 9  # (still readable there: kept)
    assert service.run_once() == 0 and skipped() == 1
    peers.down = frozenset({"old"})
    assert service.run_once() == 0 and service.run_once() == 0 and skipped() == 2


def _enospc(*_args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _json_offsets_service(tmp_path: Path, chain: list[LogicQueueMappingItem], mins: dict[tuple[str, int], int],
                          peers: FakePeers) -> tuple[StaticTopicCleanService, ConsumerOffsetManager]:
    """A clean service over a real mapping file and real JSON consumer offsets (storeType=default)."""
    manager = TopicQueueMappingManager(tmp_path / "config", "lead")
    manager.update(TopicQueueMappingDetail(T, 4, "lead", 1, hosted_queues={0: chain}))
    offsets = ConsumerOffsetManager(tmp_path / "config")
    service = StaticTopicCleanService(manager, FakeStaticTopics(mins, peers, offsets),  # type: ignore[arg-type]
                                      lambda: None, interval_ms=1000)
    return service, offsets


def _after_a_kill(tmp_path: Path) -> tuple[list[tuple[str, int]], ConsumerOffsetManager]:
    """The chain and the offsets a broker killed now finds at restart: what is on disk (JSON files are replaced
    whole, fsynced: nothing of them is buffered outside the process's memory)."""
    manager = TopicQueueMappingManager(tmp_path / "config", "lead")
    manager.load()
    offsets = ConsumerOffsetManager(tmp_path / "config")
    offsets.load()
    detail = manager.get(T)
    assert detail is not None
    return [(i.bname, i.queue_id) for i in detail.hosted_queues[0]], offsets


def test_offsets_carried_here_are_on_disk_before_the_link_goes(tmp_path: Path):
    """JSON metadata keeps commits in memory until its timer: the carried offset is flushed before the mapping
    without the link is written. (Not flushed, a kill between lost the group's only offset on the logic queue:
    it read -1 and a consumer started at max, skipping every unconsumed message.)"""
    chain = [item(0, "old", 0, 0, end=100), item(1, "lead", 0, 10_000)]
    peers = FakePeers({"old": False}, offsets={"old": FakeOffsets({("g", T, 0): 100})})
    service, offsets = _json_offsets_service(tmp_path, chain, {("old", 0): 100}, peers)
    assert service.run_once() == 1 and offsets.query_offset("g", T, 0) == 0
    kept, reopened = _after_a_kill(tmp_path)
    assert kept == [("lead", 0)]
    assert reopened.query_offset("g", T, 0) == 0


def test_a_link_stays_while_the_offsets_carried_here_cannot_be_written(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    chain = [item(0, "old", 0, 0, end=100), item(1, "lead", 0, 10_000)]
    peers = FakePeers({"old": False}, offsets={"old": FakeOffsets({("g", T, 0): 100})})
    service, _offsets = _json_offsets_service(tmp_path, chain, {("old", 0): 100}, peers)
    monkeypatch.setattr(metadata_store, "write_json_atomically", _enospc)  # the full disk refuses the flush
    assert service.run_once() == 0
    monkeypatch.undo()
    kept, reopened = _after_a_kill(tmp_path)
    assert kept == [("old", 0), ("lead", 0)]  # the old link still holds g's offset
    assert service.run_once() == 1  # room again: carried (already in memory), flushed, dropped
    kept, reopened = _after_a_kill(tmp_path)
    assert kept == [("lead", 0)] and reopened.query_offset("g", T, 0) == 0


def test_a_link_whose_offsets_went_to_a_peer_goes_at_a_later_pass(tmp_path: Path):
    """A peer's UpdateConsumerOffset may only reach its memory (JSON metadata), and no request flushes it: the link
    stays for this pass and goes at the next one, when a fresh read finds the offset on the peer (its flush timer,
    far shorter than the clean interval, has written it by then; lost in a crash, it is carried again)."""
    chain = [item(0, "old", 0, 0, end=100), item(1, "mid", 3, 10_000, end=50), item(2, "old", 1, 20_000, end=5),
             item(3, "lead", 1, 30_000)]
    mins = {("old", 0): 100, ("mid", 3): 0, ("old", 1): 5}  # old's first link goes (old has a newer one there)
    offsets = {"old": FakeOffsets({("g", T, 0): 100})}
    service, _offsets = _json_offsets_service(tmp_path, chain, mins, FakePeers({"old": True}, offsets=offsets))
    assert service.run_once() == 0
    assert offsets["mid"].table == {("g", T, 3): 0}  # carried to the next link, on mid
    kept, _ = _after_a_kill(tmp_path)
    assert kept == [("old", 0), ("mid", 3), ("old", 1), ("lead", 1)]
    del offsets["mid"].table[("g", T, 3)]  # mid restarted before its flush: the next pass carries it again
    assert service.run_once() == 0 and offsets["mid"].table == {("g", T, 3): 0}
    assert service.run_once() == 1
    kept, _ = _after_a_kill(tmp_path)
    assert kept == [("mid", 3), ("old", 1), ("lead", 1)]

"""Two admins changing the same static topic at once. Admin B read the brokers (queue 0 led by broker-a), admin A
moved queue 0 to broker-b and finished, producers wrote to broker-b; B went on with its stale view and, its epoch
being later, every write was accepted: broker-c got a link at the same logic offset as broker-b's (offsets handed
out twice) and broker-b a detail without its link (its messages in no chain). Now every write is conditional on
the epoch the admin planned from (the broker compares under its lock), and a broker never takes a detail that drops
the decided link it leads or forks a link it holds."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.broker_config import BrokerConfig
from broker.broker_stats import BrokerStats
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.admin_broker_processor import AdminBrokerProcessor
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.message_store import MessageStore
from client.errors import MQClientError
from client.static_topic_admin import StaticTopicAdmin
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.mapping_checks import NO_DETAIL, MappingConflict
from common.statictopic.mapping_codec import detail_to_proto
from common.statictopic.static_topic_plan import BrokerUpdate, plan_moves
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import TopicConfig
from common.topic_config_codec import topic_config_to_proto
from proto import broker_pb2
from tests.statictopic.test_admin_static_topic_unit import NOW, Clock, FakeTransport, T, assert_consistent
from tests.store.conftest import store_config

BROKERS = {"broker-a", "broker-b", "broker-c"}


def links(transport: FakeTransport) -> set[tuple[str, int, int]]:
    """(broker, physical queue, gen) of every link any broker's detail holds."""
    return {(i.bname, i.queue_id, i.gen) for d in transport.details().values() for items in d.hosted_queues.values()
            for i in items}


class OldAdminTransport(FakeTransport):
    """An admin from before expected epochs: its writes carry none."""

    def write(self, bname: str, update: BrokerUpdate, expected_epoch: int | None = None) -> None:
        super().write(bname, update, None)


def a_moved_queue_0_while_b_held_a_stale_view(transport: FakeTransport):
    """Queue 0 on broker-a (120 messages); B reads; A moves queue 0 to broker-b, 300 messages are written there.
    Returns (B, the states B read, broker-b's new link)."""
    StaticTopicAdmin(transport, Clock()).update_static_topic(T, 1, brokers=["broker-a"])
    transport.brokers["broker-a"].maxes[0] = 120
    admin_a = StaticTopicAdmin(transport, Clock(NOW + 5_000))
    admin_b = StaticTopicAdmin(transport, Clock(NOW + 60_000))  # a minute later on its own clock
    _targets, stale = admin_b.read_targets(T, None, ["broker-c"])
    admin_a.migrate_logical_queue(T, 0, "broker-b")
    b_link = transport.details()["broker-b"].hosted_queues[0][-1]
    transport.brokers["broker-b"].maxes[b_link.queue_id] = 300
    return admin_b, stale, b_link


def test_the_second_admin_is_refused_and_told_to_run_again_and_the_rerun_keeps_the_first_s_link():
    transport = FakeTransport({"C1": sorted(BROKERS)})
    admin_b, stale, b_link = a_moved_queue_0_while_b_held_a_stale_view(transport)
    after_a = {b: d.copy() for b, d in transport.details().items()}
    writes = len(transport.writes())
    with pytest.raises(MQClientError) as err:
        admin_b.move(T, stale, {0: "broker-c"})
    msg = str(err.value)
    assert "another change of the topic came in between" in msg and "run the command again" in msg, msg
    assert "broker-c" in msg and "changed meanwhile" in msg, msg
    assert len(transport.writes()) == writes + 1  # refused at its first write: nothing changed
    assert transport.details() == after_a
    assert transport.leaders() == {0: "broker-b"}

    # the operator runs it again: read afresh, queue 0 goes on from broker-b's link
    result = admin_b.migrate_logical_queue(T, 0, "broker-c")
    assert_consistent(transport, BROKERS, 1)
    chain = transport.details()["broker-c"].hosted_queues[0]
    assert [(i.bname, i.gen) for i in chain] == [("broker-a", 0), ("broker-b", 1), ("broker-c", 2)]
    assert (chain[1].queue_id, chain[1].logic_offset, chain[1].end_offset) == (b_link.queue_id, 10_000, 300)
    assert result.moved[0].logic_offset == chain[2].logic_offset == 20_000  # after broker-b's 300, never twice


def test_an_old_admin_without_expected_epochs_cannot_fork_or_drop_the_link_it_did_not_see():
    transport = OldAdminTransport({"C1": sorted(BROKERS)})
    admin_b, stale, b_link = a_moved_queue_0_while_b_held_a_stale_view(transport)
    with pytest.raises(MQClientError) as err:
        admin_b.move(T, stale, {0: "broker-c"})
    assert "broker-a" in str(err.value) and "forks at gen 1" in str(err.value), str(err.value)  # step 2, fenced
    assert ("broker-b", b_link.queue_id, 1) in links(transport)
    for bname in ("broker-a", "broker-b"):  # the old leader and broker-b keep broker-b's link, decided
        kept = transport.details()[bname].hosted_queues[0][-1]
        assert (kept.bname, kept.queue_id, kept.logic_offset) == ("broker-b", b_link.queue_id, 10_000)


def test_a_plan_carries_the_epoch_each_broker_held_when_it_was_read():
    transport = FakeTransport({"C1": sorted(BROKERS)})
    StaticTopicAdmin(transport, Clock()).update_static_topic(T, 1, brokers=["broker-a"])
    states = transport.states()
    epoch = states["broker-a"].detail.epoch
    plan = plan_moves(T, states, {0: "broker-b"}, NOW + 5_000)
    assert [(u.bname, u.expected_epoch) for u in plan.gained] == [("broker-b", epoch)]
    assert {b: u.expected_epoch for b, u in plan.full.items()} == dict.fromkeys(BROKERS, epoch)
    fresh = FakeTransport({"C1": sorted(BROKERS)})
    admin = StaticTopicAdmin(fresh, Clock())
    _targets, empty = admin.read_targets(T, None, ["broker-a"])
    assert all(s.epoch() == NO_DETAIL for s in empty.values())
    admin.update_static_topic(T, 2, brokers=["broker-a"])  # a create expects no detail anywhere: accepted


# -- the broker side: the request field, compared under the manager's lock -----------------------------------------
@pytest.fixture
def processor(tmp_path: Path) -> Iterator[AdminBrokerProcessor]:
    store = MessageStore(store_config(tmp_path / "store"))
    store.start()
    config_dir = tmp_path / "config"
    topics, offsets = TopicConfigManager(config_dir), ConsumerOffsetManager(config_dir)
    mappings = TopicQueueMappingManager(config_dir, "broker-a")
    for manager in (topics, offsets, mappings):
        manager.load()
    try:
        yield AdminBrokerProcessor(
            config=BrokerConfig(store_path_root_dir=str(tmp_path / "store")), broker_addr="127.0.0.1:0",
            topic_config_manager=topics, subscription_group_manager=SubscriptionGroupManager(config_dir),
            consumer_offset_manager=offsets, mapping_manager=mappings, store=store, local_store=store,
            stats=BrokerStats(), boot_timestamp=0, on_topics_changed=lambda: None)
    finally:
        store.shutdown()


def request(epoch: int, gens: int, expected: int | None) -> broker_pb2.UpdateTopicQueueMappingRequest:
    chain = [LogicQueueMappingItem(gen=g, queue_id=g, bname="broker-a", logic_offset=g * 10_000) for g in range(gens)]
    for earlier in chain[:-1]:
        earlier.end_offset = 5
    detail = TopicQueueMappingDetail(T, 1, "broker-a", epoch, hosted_queues={0: chain})
    return broker_pb2.UpdateTopicQueueMappingRequest(detail=detail_to_proto(detail), config=topic_config_to_proto(
        TopicConfig(T, gens, gens)), expected_epoch=expected)


def test_the_broker_applies_an_update_only_while_it_holds_the_epoch_planned_from(processor: AdminBrokerProcessor):
    with pytest.raises(RequestError, match="changed meanwhile: the change was planned from epoch 1000"):
        processor.update_mapping(request(2_000, 1, 1_000))  # the admin saw a detail this broker does not hold
    assert processor.update_mapping(request(2_000, 1, NO_DETAIL)).code == ResponseCode.SUCCESS
    assert processor.update_mapping(request(3_000, 2, 2_000)).code == ResponseCode.SUCCESS
    with pytest.raises(RequestError, match="planned from epoch 2000, the broker holds 3000"):
        processor.update_mapping(request(4_000, 3, 2_000))  # a second admin that read before the first wrote
    assert processor.mapping_manager.get(T).epoch == 3_000
    assert processor.update_mapping(request(4_000, 3, None)).code == ResponseCode.SUCCESS  # an old admin: as before
    with pytest.raises(MappingConflict):  # the manager compares under its lock
        processor.mapping_manager.update(TopicQueueMappingDetail(T, 1, "broker-a", 5_000, hosted_queues={
            0: processor.mapping_manager.get(T).hosted_queues[0]}), 3_000)
    assert processor.mapping_manager.get(T).epoch == 4_000


def test_the_topic_config_of_a_refused_update_is_not_applied(processor: AdminBrokerProcessor):
    assert processor.update_mapping(request(2_000, 1, NO_DETAIL)).code == ResponseCode.SUCCESS
    with pytest.raises(RequestError):
        processor.update_mapping(request(3_000, 2, 1_000))
    config = processor.topic_config_manager.select(T)
    assert isinstance(config, TopicConfig) and config.write_queue_nums == 1

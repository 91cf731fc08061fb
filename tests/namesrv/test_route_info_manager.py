"""RouteInfoManager: registration (full and delta), routes, static-topic mappings, expiry, deletes, scale."""

import logging
import time
from collections.abc import Iterable

import pytest

from common.perm import PERM_READ
from namesrv.route_info_manager import RouteInfoManager
from namesrv.route_models import (
    DataVersion,
    QueueData,
    RegisterBrokerRequest,
    RegisterBrokerResult,
    TopicConfig,
    TopicQueueMappingInfo,
)
from tests.namesrv.helpers import CLUSTER, mapping, topic_configs, version

EXPIRY_MS = 10_000


class FakeClock:
    def __init__(self) -> None:
        self.now = 5_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manager(clock: FakeClock) -> RouteInfoManager:
    return RouteInfoManager(broker_expiry_ms=EXPIRY_MS, clock=clock, wall_clock=lambda: 42)


def register(manager: RouteInfoManager, broker_name: str = "broker-a", configs: Iterable[TopicConfig] = (),
             counter: int = 1, *, broker_id: int = 0, addr: str | None = None, full: bool = True,
             base: DataVersion | None = None, deleted: Iterable[str] = (),
             mappings: dict[str, TopicQueueMappingInfo] | None = None, cluster: str = CLUSTER,
             heartbeat_timeout_ms: int = 0, register_period_ms: int = 0) -> RegisterBrokerResult:
    return manager.register_broker(RegisterBrokerRequest(
        cluster_name=cluster, broker_name=broker_name, broker_id=broker_id,
        broker_addr=addr or f"{broker_name}-{broker_id}:10911", data_version=version(counter), full=full,
        topic_configs=configs, deleted_topics=deleted, topic_queue_mapping_infos=mappings or {}, base_version=base,
        heartbeat_timeout_ms=heartbeat_timeout_ms, register_period_ms=register_period_ms))


def route_brokers(manager: RouteInfoManager, topic: str) -> list[str]:
    route = manager.pickup_topic_route_data(topic)
    return [] if route is None else [qd.broker_name for qd in route.queue_datas]


def live_version(manager: RouteInfoManager, addr: str) -> DataVersion:
    (broker,) = [b for b in manager.get_broker_cluster_info().live_brokers if b.broker_addr == addr]
    return broker.data_version


# ---- full registration and routes ------------------------------------------------------------------------


def test_full_registration_makes_routes_and_cluster_info(manager: RouteInfoManager):
    assert register(manager, "broker-a", topic_configs("T1", "T2")) == RegisterBrokerResult()
    register(manager, "broker-b", topic_configs("T2", queues=8))

    route = manager.pickup_topic_route_data("T2")
    assert route is not None
    assert route.queue_datas == [QueueData("broker-a", 4, 4, 6, 0), QueueData("broker-b", 8, 8, 6, 0)]
    assert [(bd.cluster, bd.broker_name, bd.broker_addrs) for bd in route.broker_datas] == [
        (CLUSTER, "broker-a", {0: "broker-a-0:10911"}), (CLUSTER, "broker-b", {0: "broker-b-0:10911"})]
    assert route.topic_queue_mapping_by_broker == {}
    assert route_brokers(manager, "T1") == ["broker-a"]
    assert manager.pickup_topic_route_data("nope") is None
    assert sorted(manager.get_all_topic_list()) == ["T1", "T2"]

    info = manager.get_broker_cluster_info()
    assert info.cluster_addr_table == {CLUSTER: ["broker-a", "broker-b"]}
    assert info.broker_addr_table["broker-b"].broker_addrs == {0: "broker-b-0:10911"}
    assert sorted((b.broker_addr, b.topic_count, b.data_version) for b in info.live_brokers) == [
        ("broker-a-0:10911", 2, version(1)), ("broker-b-0:10911", 1, version(1))]


def test_full_registration_replaces_all_topics_of_that_broker(manager: RouteInfoManager):
    register(manager, "broker-a", topic_configs("T1", "T2"))
    register(manager, "broker-b", topic_configs("T1"))
    register(manager, "broker-a", topic_configs("T3"), counter=2)
    assert sorted(manager.get_all_topic_list()) == ["T1", "T3"]
    assert route_brokers(manager, "T1") == ["broker-b"]
    assert manager.pickup_topic_route_data("T2") is None


def test_route_queue_data_comes_from_the_master_and_survives_it_on_a_slave(manager: RouteInfoManager,
                                                                           clock: FakeClock):
    register(manager, "broker-a", topic_configs("T", queues=4), broker_id=0, heartbeat_timeout_ms=EXPIRY_MS)
    register(manager, "broker-a", topic_configs("T", queues=2, perm=PERM_READ), broker_id=1,
             heartbeat_timeout_ms=3 * EXPIRY_MS)
    route = manager.pickup_topic_route_data("T")
    assert route is not None and route.queue_datas == [QueueData("broker-a", 4, 4, 6, 0)]
    assert route.broker_datas[0].broker_addrs == {0: "broker-a-0:10911", 1: "broker-a-1:10911"}

    clock.now += EXPIRY_MS + 1
    manager.scan_not_active_brokers()
    route = manager.pickup_topic_route_data("T")
    assert route is not None and route.queue_datas == [QueueData("broker-a", 2, 2, PERM_READ, 0)]
    assert route.broker_datas[0].broker_addrs == {1: "broker-a-1:10911"}

    register(manager, "broker-a", topic_configs("T", queues=4), broker_id=0)
    route = manager.pickup_topic_route_data("T")
    assert route is not None and route.queue_datas == [QueueData("broker-a", 4, 4, 6, 0)]


def test_a_returning_master_replaces_what_the_slave_routed(manager: RouteInfoManager):
    register(manager, "broker-a", topic_configs("T", "SlaveOnly"), broker_id=1)
    assert route_brokers(manager, "SlaveOnly") == ["broker-a"]
    register(manager, "broker-a", topic_configs("T"), broker_id=0)
    assert manager.pickup_topic_route_data("SlaveOnly") is None
    assert manager.get_all_topic_list() == ["T"]


# ---- delta registration ----------------------------------------------------------------------------------


def test_delta_with_matching_base_is_applied(manager: RouteInfoManager):
    register(manager, "broker-a", topic_configs("T1", "T2", "T3"), counter=1)
    result = register(manager, "broker-a", [*topic_configs("T4"), *topic_configs("T1", queues=16)], counter=2,
                      full=False, base=version(1), deleted=["T2"])
    assert result == RegisterBrokerResult()
    assert sorted(manager.get_all_topic_list()) == ["T1", "T3", "T4"]
    route = manager.pickup_topic_route_data("T1")
    assert route is not None and route.queue_datas[0].write_queue_nums == 16
    assert live_version(manager, "broker-a-0:10911") == version(2)


def test_delta_on_a_stale_base_changes_nothing_and_asks_for_full(manager: RouteInfoManager, clock: FakeClock):
    register(manager, "broker-a", topic_configs("T1", "T2"), counter=5)
    before = manager.get_broker_cluster_info()
    clock.now += 1000
    result = register(manager, "broker-a", topic_configs("T9"), counter=7, full=False, base=version(6),
                      deleted=["T1"])
    assert result.need_full and "5" in result.remark and "6" in result.remark
    assert sorted(manager.get_all_topic_list()) == ["T1", "T2"]
    assert manager.get_broker_cluster_info() == before  # version, topic count and heartbeat all untouched

    assert register(manager, "broker-a", topic_configs("T9"), counter=7) == RegisterBrokerResult()
    assert manager.get_all_topic_list() == ["T9"]


def test_an_older_full_registration_applied_late_changes_nothing(manager: RouteInfoManager,
                                                                 caplog: pytest.LogCaptureFixture):
    # A full registration (version 2) took longer than the broker's RPC timeout; the broker sent a newer one
    # (version 3), applied first, and then the name server's worker reached the old one.
    register(manager, "broker-a", topic_configs("T1", "T2", "T3"), counter=3)
    with caplog.at_level(logging.WARNING, logger="namesrv.route_info_manager"):
        assert register(manager, "broker-a", topic_configs("T1"), counter=2) == RegisterBrokerResult()
    assert sorted(manager.get_all_topic_list()) == ["T1", "T2", "T3"]
    assert live_version(manager, "broker-a-0:10911") == version(3)
    assert "broker_registration_outdated broker=broker-a id=0 addr=broker-a-0:10911 version=" in caplog.text
    # The broker's next delta, based on the version it was answered for, applies: no full one needed.
    assert register(manager, "broker-a", topic_configs("T4"), counter=4, full=False, base=version(3),
                    deleted=["T3"]) == RegisterBrokerResult()
    assert sorted(manager.get_all_topic_list()) == ["T1", "T2", "T4"]
    # A restarted broker (a new start time) counts from anew: its full registration applies whatever its counter.
    manager.register_broker(RegisterBrokerRequest(
        cluster_name=CLUSTER, broker_name="broker-a", broker_id=0, broker_addr="broker-a-0:10911",
        data_version=DataVersion(version(1).state_version + 60_000, 1), topic_configs=topic_configs("T9")))
    assert manager.get_all_topic_list() == ["T9"]

@pytest.mark.parametrize("base", [version(1), None])
def test_delta_from_an_unknown_broker_asks_for_full(manager: RouteInfoManager, base: DataVersion | None):
    result = register(manager, "broker-a", topic_configs("T1"), counter=2, full=False, base=base)
    assert result.need_full
    assert manager.get_all_topic_list() == [] and manager.get_broker_cluster_info().live_brokers == []


def test_empty_delta_keeps_the_broker_alive(manager: RouteInfoManager, clock: FakeClock):
    register(manager, "broker-a", topic_configs("T1"), counter=1)
    register(manager, "broker-b", topic_configs("T1"), counter=1)
    for counter in range(2, 6):
        clock.now += EXPIRY_MS // 2
        assert not register(manager, "broker-a", counter=counter, full=False, base=version(counter - 1)).need_full
        manager.scan_not_active_brokers()
    assert route_brokers(manager, "T1") == ["broker-a"]  # broker-b fell silent two scans ago
    assert live_version(manager, "broker-a-0:10911") == version(5)


# ---- expiry ----------------------------------------------------------------------------------------------


def test_silent_broker_expires_with_its_topics(manager: RouteInfoManager, clock: FakeClock,
                                               caplog: pytest.LogCaptureFixture):
    register(manager, "broker-a", topic_configs("T1", "Only-a"))
    register(manager, "broker-b", topic_configs("T1"), heartbeat_timeout_ms=3 * EXPIRY_MS)
    clock.now += EXPIRY_MS  # exactly at the timeout: still alive
    assert manager.scan_not_active_brokers() == []
    clock.now += 1
    with caplog.at_level(logging.INFO, logger="namesrv.route_info_manager"):
        expired = manager.scan_not_active_brokers()
    assert [b.broker_addr for b in expired] == ["broker-a-0:10911"]
    assert route_brokers(manager, "T1") == ["broker-b"]
    assert manager.pickup_topic_route_data("Only-a") is None
    assert manager.get_all_topic_list() == ["T1"]
    assert "broker-a" not in manager.get_broker_cluster_info().broker_addr_table
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("broker_expired")]
    assert lines == [f"broker_expired cluster={CLUSTER} broker=broker-a id=0 addr=broker-a-0:10911 "
                     f"idle_ms={EXPIRY_MS + 1} timeout_ms={EXPIRY_MS}"]

    clock.now += 2 * EXPIRY_MS  # broker-b registered its own, longer, timeout
    assert [b.broker_name for b in manager.scan_not_active_brokers()] == ["broker-b"]
    assert manager.get_all_topic_list() == [] and manager.get_broker_cluster_info().cluster_addr_table == {}


def test_unregister_broker(manager: RouteInfoManager):
    register(manager, "broker-a", topic_configs("T1"))
    assert not manager.unregister_broker(CLUSTER, "broker-a", 1, "broker-a-0:10911")  # wrong id: ignored
    assert manager.unregister_broker(CLUSTER, "broker-a", 0, "broker-a-0:10911")
    assert manager.pickup_topic_route_data("T1") is None
    assert not manager.unregister_broker(CLUSTER, "broker-a", 0, "broker-a-0:10911")


def test_broker_restarted_on_a_new_address_supersedes_the_old_one(manager: RouteInfoManager, clock: FakeClock):
    register(manager, "broker-a", topic_configs("Old"), addr="h:1")
    clock.now += EXPIRY_MS - 1
    register(manager, "broker-a", topic_configs("New"), addr="h:2")
    assert [b.broker_addr for b in manager.get_broker_cluster_info().live_brokers] == ["h:2"]
    assert manager.get_all_topic_list() == ["New"]
    clock.now += 2  # the old address's heartbeat would have expired now; it must not take the new one along
    assert manager.scan_not_active_brokers() == []
    assert route_brokers(manager, "New") == ["broker-a"]


def test_address_taken_over_by_another_broker(manager: RouteInfoManager):
    register(manager, "broker-a", topic_configs("A"), addr="h:1")
    assert register(manager, "broker-b", counter=2, addr="h:1", full=False, base=version(1)).need_full
    assert manager.get_all_topic_list() == ["A"]
    register(manager, "broker-b", topic_configs("B"), addr="h:1")
    assert manager.get_all_topic_list() == ["B"]
    assert list(manager.get_broker_cluster_info().broker_addr_table) == ["broker-b"]


# ---- deletes ---------------------------------------------------------------------------------------------


def test_delete_topic_in_one_cluster_or_everywhere(manager: RouteInfoManager):
    register(manager, "broker-a", topic_configs("T", "U"), cluster="c1")
    register(manager, "broker-b", topic_configs("T"), cluster="c2")
    assert manager.delete_topic("T", "c1")
    assert route_brokers(manager, "T") == ["broker-b"]
    assert not manager.delete_topic("T", "c1")
    assert manager.delete_topic("T")
    assert manager.pickup_topic_route_data("T") is None
    assert manager.get_all_topic_list() == ["U"]


def test_delete_topic_of_some_brokers_of_a_cluster(manager: RouteInfoManager):
    """deleteTopic -c forgets the topic on the brokers that deleted it only: one the command missed still has it."""
    register(manager, "broker-a", topic_configs("T"), cluster="c1")
    register(manager, "broker-b", topic_configs("T"), cluster="c1", addr="h:2")
    assert manager.delete_topic("T", "c1", frozenset({"broker-a"}))
    assert route_brokers(manager, "T") == ["broker-b"]


def test_an_operators_delete_racing_a_create_on_the_broker_is_undone_by_its_next_registration(
        manager: RouteInfoManager):
    """deleteTopic racing updateTopic: the broker deleted the topic and took it again (its registrations of both
    arrived), then the admin's delete reached the name server, which dropped the broker's queues. Its next
    registration of changes, with nothing new, left the topic out of its route for good."""
    register(manager, "broker-a", topic_configs("T"), counter=1)
    register(manager, "broker-a", (), counter=2, full=False, base=version(1), deleted=["T"])
    register(manager, "broker-a", topic_configs("T"), counter=3, full=False, base=version(2))
    assert manager.delete_topic("T", CLUSTER, frozenset({"broker-a"}))
    assert route_brokers(manager, "T") == []
    assert register(manager, "broker-a", (), counter=3, full=False, base=version(3)).need_full
    assert register(manager, "broker-a", topic_configs("T"), counter=3) == RegisterBrokerResult()
    assert route_brokers(manager, "T") == ["broker-a"]


# ---- static topics ---------------------------------------------------------------------------------------


def static_topic(manager: RouteInfoManager) -> None:
    register(manager, "broker-a", topic_configs("S", queues=2), mappings={"S": mapping("S", "broker-a", {0: 0, 1: 1})})
    register(manager, "broker-b", topic_configs("S", queues=2), mappings={"S": mapping("S", "broker-b", {2: 0, 3: 1})})


def test_static_topic_mapping_is_in_the_route(manager: RouteInfoManager):
    static_topic(manager)
    route = manager.pickup_topic_route_data("S")
    assert route is not None
    assert route.topic_queue_mapping_by_broker == {"broker-a": mapping("S", "broker-a", {0: 0, 1: 1}),
                                                   "broker-b": mapping("S", "broker-b", {2: 0, 3: 1})}
    # a broker taking part with no queue of its own is still routed, so a client can reach it
    register(manager, "broker-c", mappings={"S": mapping("S", "broker-c", {})})
    route = manager.pickup_topic_route_data("S")
    assert route is not None and "broker-c" in route.topic_queue_mapping_by_broker
    assert [bd.broker_name for bd in route.broker_datas] == ["broker-a", "broker-b", "broker-c"]


def test_full_registration_without_the_mapping_removes_it(manager: RouteInfoManager):
    static_topic(manager)
    register(manager, "broker-a", topic_configs("S", queues=2), counter=2)
    route = manager.pickup_topic_route_data("S")
    assert route is not None and list(route.topic_queue_mapping_by_broker) == ["broker-b"]
    assert route_brokers(manager, "S") == ["broker-a", "broker-b"]


def test_static_topic_mapping_goes_with_topic_delete(manager: RouteInfoManager):
    static_topic(manager)
    manager.delete_topic("S")
    assert manager.pickup_topic_route_data("S") is None
    assert manager.get_all_topic_list() == []
    register(manager, "broker-a", counter=2, full=False, base=version(1))  # an empty delta resurrects nothing
    assert manager.pickup_topic_route_data("S") is None


def test_static_topic_mapping_goes_with_a_delta_delete(manager: RouteInfoManager):
    static_topic(manager)
    register(manager, "broker-a", counter=2, full=False, base=version(1), deleted=["S"])
    route = manager.pickup_topic_route_data("S")
    assert route is not None and list(route.topic_queue_mapping_by_broker) == ["broker-b"]


def test_a_broker_registering_less_often_than_the_expiry_is_kept_three_periods(manager: RouteInfoManager,
                                                                               clock: FakeClock):
    """registerNameServerPeriod above the expiry: the live broker left every route between its registrations."""
    register(manager, "broker-a", topic_configs("T"), register_period_ms=EXPIRY_MS)
    register(manager, "broker-b", topic_configs("T"), register_period_ms=EXPIRY_MS // 10)  # the default applies
    clock.now += EXPIRY_MS + 1
    assert [b.broker_name for b in manager.scan_not_active_brokers()] == ["broker-b"]
    clock.now += 2 * EXPIRY_MS
    assert [b.broker_name for b in manager.scan_not_active_brokers()] == ["broker-a"]


def test_static_topic_mapping_goes_with_broker_expiry(manager: RouteInfoManager, clock: FakeClock):
    static_topic(manager)
    clock.now += EXPIRY_MS
    register(manager, "broker-b", counter=2, full=False, base=version(1))
    clock.now += EXPIRY_MS // 2
    manager.scan_not_active_brokers()
    route = manager.pickup_topic_route_data("S")
    assert route is not None and list(route.topic_queue_mapping_by_broker) == ["broker-b"]
    assert [bd.broker_name for bd in route.broker_datas] == ["broker-b"]


# ---- scale and accounting --------------------------------------------------------------------------------


def test_many_topics_then_cheap_empty_heartbeats(manager: RouteInfoManager):
    n = 200_000
    register(manager, "broker-a", (TopicConfig(f"topic-{i}", 8, 8, 6) for i in range(n)), counter=1)
    assert len(manager.get_all_topic_list()) == n

    started = time.perf_counter()
    for counter in range(2, 1002):
        result = register(manager, "broker-a", counter=counter, full=False, base=version(counter - 1))
        assert not result.need_full
    elapsed = time.perf_counter() - started

    assert elapsed < 2.0, f"1000 empty heartbeats over {n} topics took {elapsed:.2f}s"
    assert live_version(manager, "broker-a-0:10911") == version(1001)
    assert len(manager.topic_queue_table) == n


def test_stats_count_brokers_and_topics(manager: RouteInfoManager):
    register(manager, "broker-a", topic_configs(*(f"T{i}" for i in range(100))))
    register(manager, "broker-a", topic_configs(*(f"T{i}" for i in range(100))), broker_id=1)
    register(manager, "broker-b", topic_configs("T0"), cluster="c2")
    stats = manager.stats()
    assert (stats.broker_count, stats.cluster_count, stats.topic_count) == (3, 2, 100)
    assert 40 < stats.bytes_per_topic < 2000
    assert stats.topic_table_bytes >= stats.bytes_per_topic * 100
    assert stats.as_table()["topic_count"] == "100"

"""RouteInfoManager ignores static-topic mappings that fail the consistency rules (mapping_info_checks), keeps
routing by what it accepted before, and warns once per (topic, broker, reason)."""


import pytest

from namesrv.route_info_manager import RouteInfoManager
from namesrv.route_models import RegisterBrokerRequest, RegisterBrokerResult, TopicQueueMappingInfo
from tests.namesrv.helpers import CLUSTER, mapping, topic_configs, version

T = "S"
IGNORED = "static_mapping_ignored"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def manager(clock: Clock) -> RouteInfoManager:
    return RouteInfoManager(broker_expiry_ms=10_000, clock=clock, wall_clock=lambda: 42)


class Registrar:
    """Registers brokers the way a broker does: every registration carries all of its mapping infos."""

    def __init__(self, manager: RouteInfoManager) -> None:
        self.manager = manager
        self.counters: dict[str, int] = {}

    def __call__(self, broker: str, mappings: dict[str, TopicQueueMappingInfo], *topics: str,
                 full: bool = True) -> RegisterBrokerResult:
        counter = self.counters.get(broker, 0) + 1
        self.counters[broker] = counter
        return self.manager.register_broker(RegisterBrokerRequest(
            cluster_name=CLUSTER, broker_name=broker, broker_id=0, broker_addr=f"{broker}:10911",
            data_version=version(counter), full=full, topic_configs=topic_configs(*(topics or mappings)),
            topic_queue_mapping_infos=mappings, base_version=None if full else version(counter - 1)))


@pytest.fixture
def register(manager: RouteInfoManager) -> Registrar:
    return Registrar(manager)


def routed(manager: RouteInfoManager, topic: str = T) -> dict[str, TopicQueueMappingInfo]:
    route = manager.pickup_topic_route_data(topic)
    return {} if route is None else route.topic_queue_mapping_by_broker


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if IGNORED in r.getMessage()]


# ---- rule 1: the info on its own -------------------------------------------------------------------------

@pytest.mark.parametrize(("info", "reason"), [
    (mapping(T, "broker-x", {0: 0}, total=0), "total not positive: total queues 0"),
    (mapping(T, "broker-x", {0: 0, 4: 1}), "hole: logic queue 4 outside 0..3"),
    (mapping(T, "broker-x", {-1: 0}), "hole: logic queue -1 outside 0..3"),
    (mapping(T, "broker-x", {1: -2}), "negative physical queue -2 for logic queue 1"),
    (mapping(T, "broker-x", {0: 3, 2: 3}), "shared physical queue 3: logic queues 0 and 2"),
    (mapping(T, "broker-a", {0: 0}), "bname mismatch: info of broker-a registered by broker-x"),
])
def test_a_malformed_mapping_is_ignored_and_the_rest_of_the_registration_is_kept(
        manager: RouteInfoManager, register: Registrar, caplog: pytest.LogCaptureFixture,
        info: TopicQueueMappingInfo, reason: str):
    register("broker-x", {T: info, "Other": mapping("Other", "broker-x", {0: 0})}, T, "Other", "Normal")
    assert "broker-x" not in routed(manager)
    assert routed(manager, "Other") == {"broker-x": mapping("Other", "broker-x", {0: 0})}
    normal = manager.pickup_topic_route_data("Normal")
    assert normal is not None and [qd.broker_name for qd in normal.queue_datas] == ["broker-x"]
    assert warnings(caplog) == [f"{IGNORED} topic={T} broker=broker-x reason={reason!r}"]


def test_an_info_without_bname_is_taken_as_the_registering_brokers(manager: RouteInfoManager, register: Registrar):
    register("broker-a", {T: mapping(T, "", {0: 0})})
    assert list(routed(manager)) == ["broker-a"]


# ---- rule 2: one leader and one total per epoch ----------------------------------------------------------

def test_two_leaders_at_one_epoch_the_first_keeps_routing(manager: RouteInfoManager, register: Registrar,
                                                          caplog: pytest.LogCaptureFixture):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0, 1: 1})})
    register("broker-x", {T: mapping(T, "broker-x", {1: 5, 0: 4})})
    assert list(routed(manager)) == ["broker-a"]
    assert warnings(caplog) == [
        f"{IGNORED} topic={T} broker=broker-x reason='two leaders at epoch 1000 for logic queue 0: broker-a and "
        "broker-x'"]
    register("broker-a", {T: mapping(T, "broker-a", {0: 0, 1: 1})})  # the first one's heartbeat: still its
    assert list(routed(manager)) == ["broker-a"]


def test_same_epoch_with_another_total_is_ignored(manager: RouteInfoManager, register: Registrar,
                                                  caplog: pytest.LogCaptureFixture):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0, 1: 1})})
    register("broker-b", {T: mapping(T, "broker-b", {2: 0}, total=8)})
    assert list(routed(manager)) == ["broker-a"]
    assert warnings(caplog) == [
        f"{IGNORED} topic={T} broker=broker-b reason='total mismatch at epoch 1000: broker-a has 4, broker-b has 8'"]


def test_an_ignored_newcomer_is_taken_once_the_conflict_is_gone(manager: RouteInfoManager, register: Registrar):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0})})
    register("broker-x", {T: mapping(T, "broker-x", {0: 0})})
    assert list(routed(manager)) == ["broker-a"]
    register("broker-a", {T: mapping(T, "broker-a", {}, epoch=2000)})
    register("broker-x", {T: mapping(T, "broker-x", {0: 0})})  # its next heartbeat: epochs differ now
    assert sorted(routed(manager)) == ["broker-a", "broker-x"]


# ---- rule 3: a broker's epoch does not go backwards ------------------------------------------------------

def test_an_epoch_going_backwards_is_ignored_and_the_accepted_mapping_stays(
        manager: RouteInfoManager, register: Registrar, caplog: pytest.LogCaptureFixture):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0, 1: 1}, epoch=2000)})
    register("broker-a", {T: mapping(T, "broker-a", {0: 0}, epoch=1000)}, full=False)
    assert routed(manager) == {"broker-a": mapping(T, "broker-a", {0: 0, 1: 1}, epoch=2000)}
    assert warnings(caplog) == [f"{IGNORED} topic={T} broker=broker-a reason='epoch going backwards: 1000 after 2000'"]


def test_a_topic_delete_forgets_the_epoch(manager: RouteInfoManager, register: Registrar):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0}, epoch=2000)})
    manager.delete_topic(T)
    register("broker-a", {T: mapping(T, "broker-a", {0: 0}, epoch=1000)})
    assert routed(manager) == {"broker-a": mapping(T, "broker-a", {0: 0}, epoch=1000)}


def test_broker_expiry_forgets_the_epoch(manager: RouteInfoManager, register: Registrar, clock: Clock):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0}, epoch=2000)})
    clock.now += 20_000
    assert [b.broker_name for b in manager.scan_not_active_brokers()] == ["broker-a"]
    register("broker-a", {T: mapping(T, "broker-a", {0: 0}, epoch=1000)})
    assert routed(manager) == {"broker-a": mapping(T, "broker-a", {0: 0}, epoch=1000)}


# ---- logging ---------------------------------------------------------------------------------------------

def test_one_warning_per_reason_change_not_per_heartbeat(manager: RouteInfoManager, register: Registrar,
                                                         caplog: pytest.LogCaptureFixture):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0, 1: 1})})
    for _ in range(3):
        register("broker-x", {T: mapping(T, "broker-x", {1: 0})})
    register("broker-x", {T: mapping(T, "broker-x", {5: 0})})  # another reason: said once more
    register("broker-x", {T: mapping(T, "broker-x", {2: 0})})  # accepted: the memory goes
    register("broker-x", {T: mapping(T, "broker-x", {5: 0})})
    reasons = [m.split("reason=")[1] for m in warnings(caplog)]
    assert reasons == ["'two leaders at epoch 1000 for logic queue 1: broker-a and broker-x'",
                       "'hole: logic queue 5 outside 0..3'", "'hole: logic queue 5 outside 0..3'"]
    assert routed(manager)["broker-x"] == mapping(T, "broker-x", {2: 0})  # the accepted one stays


def test_the_warning_memory_goes_with_the_broker(manager: RouteInfoManager, register: Registrar, clock: Clock):
    register("broker-x", {T: mapping(T, "broker-x", {5: 0})})
    assert manager.ignored_mappings == {(T, "broker-x"): "hole: logic queue 5 outside 0..3"}
    clock.now += 20_000
    manager.scan_not_active_brokers()
    assert manager.ignored_mappings == {}


# ---- legit transitions keep working ----------------------------------------------------------------------

def test_remap_moves_a_queue_through_overlapping_claims_at_different_epochs(manager: RouteInfoManager,
                                                                            register: Registrar):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0, 1: 1}, total=2, epoch=1000)})
    register("broker-b", {T: mapping(T, "broker-b", {}, total=2, epoch=1000)})
    register("broker-b", {T: mapping(T, "broker-b", {1: 0}, total=2, epoch=2000)})  # new leader first
    assert set(routed(manager)["broker-b"].curr_id_map) == {1}
    register("broker-a", {T: mapping(T, "broker-a", {0: 0}, total=2, epoch=2000)})  # then the old one lets go
    assert {b: dict(i.curr_id_map) for b, i in routed(manager).items()} == {"broker-a": {0: 0}, "broker-b": {1: 0}}


def test_extend_registers_a_higher_epoch_and_total_one_broker_at_a_time(manager: RouteInfoManager,
                                                                        register: Registrar):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0, 1: 1}, total=2, epoch=1000)})
    register("broker-b", {T: mapping(T, "broker-b", {}, total=2, epoch=1000)})
    register("broker-b", {T: mapping(T, "broker-b", {2: 0, 3: 1}, total=4, epoch=2000)})
    register("broker-a", {T: mapping(T, "broker-a", {0: 0, 1: 1}, total=4, epoch=2000)})
    assert {b: (i.epoch, i.total_queues) for b, i in routed(manager).items()} == {
        "broker-a": (2000, 4), "broker-b": (2000, 4)}


def test_a_restarted_broker_re_registers_its_epoch(manager: RouteInfoManager, register: Registrar,
                                                    caplog: pytest.LogCaptureFixture):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0})})
    manager.unregister_broker(CLUSTER, "broker-a", 0, "broker-a:10911")
    register("broker-a", {T: mapping(T, "broker-a", {0: 0})})
    register("broker-a", {T: mapping(T, "broker-a", {0: 0})})
    assert list(routed(manager)) == ["broker-a"] and warnings(caplog) == []


def test_a_dirty_info_beside_a_clean_one_at_one_epoch_is_routed(manager: RouteInfoManager, register: Registrar):
    register("broker-a", {T: mapping(T, "broker-a", {0: 0})})
    dirty = TopicQueueMappingInfo(T, "__global__", 4, "broker-b", 1000, True, {0: 0})
    register("broker-b", {T: dirty})
    assert routed(manager)["broker-b"] == dirty

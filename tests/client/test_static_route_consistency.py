"""static_route skips mapping infos that fail the per-info rules and warns (once) about two leaders at one epoch."""

from collections.abc import Iterator

import pytest

from client import static_route
from client.static_route import VIRTUAL_BROKER_NAME, logic_queue_leaders, total_queues
from common.statictopic.mapping_info_checks import field_fault, registration_fault
from namesrv.route_models import TopicQueueMappingInfo
from proto import common_pb2
from tests.client.fakes import mapping_info
from tests.client.fakes import static_route as make_route

T = "StaticT"
IGNORED = "static_mapping_ignored"


@pytest.fixture(autouse=True)
def fresh_warnings() -> Iterator[None]:
    static_route._warned.clear()  # "once per process": each test is its own process here
    yield
    static_route._warned.clear()


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if IGNORED in r.getMessage()]


@pytest.mark.parametrize(("bad", "reason"), [
    (mapping_info(T, "broker-x", 1000, 2, {0: 0, 5: 1}), "hole: logic queue 5 outside 0..1"),
    (mapping_info(T, "broker-x", 9000, 0, {}), "total not positive: total queues 0"),
    (mapping_info(T, "broker-x", 9000, 2, {0: 1, 1: 1}), "shared physical queue 1: logic queues 0 and 1"),
    (mapping_info(T, "broker-x", 9000, 2, {0: -1}), "negative physical queue -1 for logic queue 0"),
    (mapping_info(T, "broker-a", 9000, 2, {0: 0, 1: 1}), "bname mismatch: info of broker-a registered by broker-x"),
])
def test_an_info_failing_the_field_rules_is_skipped_and_warned_about_once(
        caplog: pytest.LogCaptureFixture, bad: common_pb2.TopicQueueMappingInfo, reason: str):
    route = make_route(T, 2, {"broker-a": (1000, {0: 0}), "broker-b": (1000, {1: 0})})
    route.topic_queue_mapping_by_broker["broker-x"].CopyFrom(bad)
    for _ in range(3):  # routes are recomputed on every look-up: one warning, not three
        assert logic_queue_leaders(route) == (2, {0: "broker-a", 1: "broker-b"})
        assert total_queues(route) == 2
    assert warnings(caplog) == [f"{IGNORED} topic={T} broker=broker-x reason={reason!r}"]


def test_a_route_of_only_bad_infos_has_no_queues():
    route = make_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1, 5: 2})})
    assert logic_queue_leaders(route) == (0, {})


def test_a_skipped_leader_leaves_its_queue_to_the_virtual_broker():
    route = make_route(T, 2, {"broker-a": (1000, {0: 0})})
    route.topic_queue_mapping_by_broker["broker-b"].CopyFrom(mapping_info(T, "broker-b", 1000, 2, {1: 0, 0: 0}))
    assert logic_queue_leaders(route) == (2, {0: "broker-a", 1: VIRTUAL_BROKER_NAME})


def test_two_leaders_at_one_epoch_keep_the_smallest_name_and_warn_once(caplog: pytest.LogCaptureFixture):
    route = make_route(T, 2, {"broker-x": (1000, {0: 0}), "broker-a": (1000, {0: 0, 1: 1})})
    for _ in range(2):
        assert logic_queue_leaders(route) == (2, {0: "broker-a", 1: "broker-a"})
    assert warnings(caplog) == [
        f"{IGNORED} topic={T} broker=broker-x reason='two leaders at epoch 1000 for logic queue 0: broker-a and "
        "broker-x'"]


def test_legit_overlaps_do_not_warn(caplog: pytest.LogCaptureFixture):
    # mid-remap (different epochs), an extension under way (higher epoch, larger total), a dirty/clean tie
    mid_remap = make_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1}), "broker-b": (2000, {1: 0})})
    assert logic_queue_leaders(mid_remap) == (2, {0: "broker-a", 1: "broker-b"})
    extending = make_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1})})
    extending.topic_queue_mapping_by_broker["broker-b"].CopyFrom(mapping_info(T, "broker-b", 2000, 4, {2: 0, 3: 1}))
    assert logic_queue_leaders(extending) == (4, {0: "broker-a", 1: "broker-a", 2: "broker-b", 3: "broker-b"})
    dirty_tie = make_route(T, 1, {"broker-a": (1000, {0: 0}), "broker-b": (1000, {0: 0})},
                           dirty=frozenset({"broker-a"}))
    assert logic_queue_leaders(dirty_tie) == (1, {0: "broker-b"})
    assert warnings(caplog) == []


def test_the_warned_set_is_bounded(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(static_route, "_WARNED_MAX", 3)
    for i in range(10):
        route = make_route(f"T{i}", 1, {"broker-a": (1000, {0: 0, 1: 1})})
        total_queues(route)
    assert 0 < len(static_route._warned) <= 3


def test_the_rules_read_the_proto_and_the_name_servers_dataclass_alike():
    proto = mapping_info(T, "broker-a", 1000, 2, {0: 0, 3: 1})
    record = TopicQueueMappingInfo(T, "__global__", 2, "broker-a", 1000, False, {0: 0, 3: 1})
    assert field_fault(proto, "broker-a") == field_fault(record, "broker-a") == "hole: logic queue 3 outside 0..1"
    rival = mapping_info(T, "broker-b", 1000, 2, {0: 0})
    accepted = TopicQueueMappingInfo(T, "__global__", 2, "broker-a", 1000, False, {0: 0, 1: 1})
    expected = "two leaders at epoch 1000 for logic queue 0: broker-a and broker-b"
    assert registration_fault(rival, "broker-b", {"broker-a": accepted}) == expected
    assert registration_fault(rival, "broker-b", {"broker-a": mapping_info(T, "broker-a", 1000, 2, {0: 0})}) == expected

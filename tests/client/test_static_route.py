"""static_route over hand-built routes, and ClientInstance's static-topic look-ups over a fake name server."""

import pytest

from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.static_route import (
    VIRTUAL_BROKER_NAME,
    is_logic_queue,
    is_static,
    leader_address,
    logic_queue_leaders,
    static_queues,
    total_queues,
)
from common.message_queue import MessageQueue
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from proto import common_pb2
from tests.client.fakes import FakeCluster, addr_of, mapping_info, normal_route, static_route

T = "StaticT"


def test_a_route_without_mapping_infos_is_not_static():
    route = normal_route("N", {"broker-a": 4})
    assert not is_static(route)
    assert logic_queue_leaders(route) == (0, {})
    assert static_queues("N", route) == []


def test_a_route_with_mapping_infos_is_static_even_if_a_broker_leads_nothing():
    route = static_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1}), "broker-b": (1000, {})})
    assert is_static(route)
    assert logic_queue_leaders(route) == (2, {0: "broker-a", 1: "broker-a"})


def test_static_queues_are_the_n_logic_queues_on_the_mock_broker():
    route = static_route(T, 3, {"broker-a": (1000, {0: 0, 2: 1}), "broker-b": (1000, {1: 0})})
    queues = static_queues(T, route)
    assert queues == [MessageQueue(T, "__logical_queue_broker__", i) for i in range(3)]
    assert LOGICAL_QUEUE_MOCK_BROKER_NAME == "__logical_queue_broker__"
    assert all(is_logic_queue(mq) for mq in queues)
    assert not is_logic_queue(MessageQueue(T, "broker-a", 0))


def test_the_highest_epoch_leader_wins_per_logic_queue():
    # mid-remap: broker-b already holds queue 1 at the new epoch; broker-a still claims it at the old one
    route = static_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1}), "broker-b": (2000, {1: 0})})
    assert logic_queue_leaders(route) == (2, {0: "broker-a", 1: "broker-b"})
    # the order of the infos in the route does not matter
    route = static_route(T, 2, {"broker-a": (3000, {0: 0, 1: 1}), "broker-b": (2000, {1: 0})})
    assert logic_queue_leaders(route) == (2, {0: "broker-a", 1: "broker-a"})


def test_equal_epochs_pick_the_same_broker_for_every_client():
    route = static_route(T, 1, {"broker-b": (1000, {0: 0}), "broker-a": (1000, {0: 3})})
    assert logic_queue_leaders(route)[1] == {0: "broker-a"}


def test_a_logic_queue_nobody_leads_maps_to_the_virtual_broker():
    route = static_route(T, 4, {"broker-a": (1000, {0: 0, 1: 1}), "broker-b": (1000, {3: 0})})
    total, leaders = logic_queue_leaders(route)
    assert total == 4
    assert leaders == {0: "broker-a", 1: "broker-a", 2: VIRTUAL_BROKER_NAME, 3: "broker-b"}
    assert len(static_queues(T, route)) == 4  # a hole is still a queue: N never changes
    assert leader_address(route, 2) is None
    assert leader_address(route, 3) == addr_of("broker-b")


def test_the_total_comes_from_the_highest_epoch():
    # an extension from 2 to 4 queues: broker-b announces the new total at a newer epoch first
    route = static_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1})})
    route.topic_queue_mapping_by_broker["broker-b"].CopyFrom(mapping_info(T, "broker-b", 2000, 4, {2: 0, 3: 1}))
    assert total_queues(route) == 4
    assert logic_queue_leaders(route) == (4, {0: "broker-a", 1: "broker-a", 2: "broker-b", 3: "broker-b"})


def test_a_mapping_with_ids_beyond_the_total_is_ignored_whole():
    route = static_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1, 5: 2})})
    assert logic_queue_leaders(route) == (0, {})  # a hole: nothing it says is routed


def test_dirty_infos_count_only_when_no_clean_one_leads_the_queue():
    route = static_route(T, 2, {"broker-a": (1000, {0: 0}), "broker-b": (2000, {0: 0, 1: 1})},
                         dirty=frozenset({"broker-b"}))
    # queue 0: the clean broker-a wins over the dirty broker-b despite its higher epoch;
    # queue 1: only the dirty broker-b leads it, so it still serves
    assert logic_queue_leaders(route) == (2, {0: "broker-a", 1: "broker-b"})


def test_all_dirty_infos_still_route():
    route = static_route(T, 2, {"broker-a": (1000, {0: 0}), "broker-b": (2000, {0: 0, 1: 1})},
                         dirty=frozenset({"broker-a", "broker-b"}))
    assert logic_queue_leaders(route) == (2, {0: "broker-b", 1: "broker-b"})


def test_the_total_ignores_a_dirty_info_when_a_clean_one_exists():
    route = static_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1})})
    route.topic_queue_mapping_by_broker["broker-b"].CopyFrom(
        mapping_info(T, "broker-b", 9000, 8, {}, dirty=True))
    assert total_queues(route) == 2


def test_leader_address_needs_a_live_master():
    route = static_route(T, 1, {"broker-a": (1000, {0: 0})}, no_master=frozenset({"broker-a"}))
    assert logic_queue_leaders(route)[1] == {0: "broker-a"}
    assert leader_address(route, 0) is None
    assert leader_address(route, 7) is None


def test_proto_field_names_the_module_relies_on():
    info = common_pb2.TopicQueueMappingInfo(epoch=1, total_queues=2, dirty=True, curr_id_map={1: 0})
    assert dict(info.curr_id_map) == {1: 0}


# -- ClientInstance ----------------------------------------------------------------------------------
@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster("broker-a", "broker-b")


@pytest.fixture
def instance(fake: FakeCluster) -> ClientInstance:
    client = ClientInstance("fake-namesrv:9876")
    fake.install(client)
    return client


def test_publish_and_subscribe_queues_of_a_static_topic_are_its_logic_queues(fake, instance):
    fake.routes[T] = static_route(T, 3, {"broker-a": (1000, {0: 0, 1: 1}), "broker-b": (1000, {})})
    expected = [MessageQueue(T, LOGICAL_QUEUE_MOCK_BROKER_NAME, i) for i in range(3)]
    assert list(instance.publish_queues(T)) == expected
    assert instance.subscribe_queues(T) == expected


def test_publish_and_subscribe_queues_of_a_normal_topic_are_unchanged(fake, instance):
    fake.routes["N"] = normal_route("N", {"broker-b": 2, "broker-a": 1})
    expected = [MessageQueue("N", "broker-a", 0), MessageQueue("N", "broker-b", 0), MessageQueue("N", "broker-b", 1)]
    assert list(instance.publish_queues("N")) == expected
    assert instance.subscribe_queues("N") == expected
    assert instance.publish_queues("N") is instance.publish_queues("N")  # built once per route, not per send
    fake.routes["N"] = normal_route("N", {"broker-a": 2})  # a new route: its own queues
    assert list(instance.publish_queues("N", refresh=True)) == [MessageQueue("N", "broker-a", 0),
                                                               MessageQueue("N", "broker-a", 1)]


def test_leader_addr_uses_the_cached_route(fake, instance):
    fake.routes[T] = static_route(T, 2, {"broker-a": (1000, {0: 0}), "broker-b": (1000, {1: 0})})
    assert instance.leader_addr(T, 0) == addr_of("broker-a")
    assert instance.leader_addr(T, 1) == addr_of("broker-b")
    assert fake.fetches == [T]


def test_leader_addr_refreshes_the_route_once_on_a_miss(fake, instance):
    fake.routes[T] = static_route(T, 2, {"broker-a": (1000, {0: 0}), "broker-b": (1000, {})})
    assert instance.leader_addr(T, 0) == addr_of("broker-a")
    fake.routes[T] = static_route(T, 2, {"broker-a": (2000, {0: 0}), "broker-b": (2000, {1: 0})})
    assert instance.leader_addr(T, 1) == addr_of("broker-b")
    assert fake.fetches == [T, T]


def test_leader_addr_of_a_queue_nobody_leads_fails_clearly_after_one_refresh(fake, instance):
    fake.routes[T] = static_route(T, 3, {"broker-a": (1000, {0: 0, 1: 1})})
    with pytest.raises(MQClientError, match=f"logic queue 2 of topic {T} has no leader right now") as info:
        instance.leader_addr(T, 2)
    assert info.value.no_leader is True
    assert fake.fetches == [T, T]


def test_leader_addr_of_a_leader_without_master_fails_clearly(fake, instance):
    fake.routes[T] = static_route(T, 1, {"broker-a": (1000, {0: 0})}, no_master=frozenset({"broker-a"}))
    with pytest.raises(MQClientError, match="has no leader right now: its leader broker-a has no live master"):
        instance.leader_addr(T, 0)


def test_leader_addr_of_an_id_beyond_the_total_fails_clearly(fake, instance):
    fake.routes[T] = static_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1})})
    with pytest.raises(MQClientError, match=f"topic {T} has 2 logic queues: there is no logic queue 2"):
        instance.leader_addr(T, 2)


def test_leader_addr_of_a_normal_topic_fails_clearly(fake, instance):
    fake.routes["N"] = normal_route("N", {"broker-a": 1})
    with pytest.raises(MQClientError, match="topic N is not a static topic"):
        instance.leader_addr("N", 0)
    with pytest.raises(MQClientError, match="topic N is not a static topic"):
        instance.logic_leaders("N")


def test_logic_leaders_follow_a_refresh(fake, instance):
    fake.routes[T] = static_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1})})
    assert instance.logic_leaders(T) == {0: "broker-a", 1: "broker-a"}
    fake.routes[T] = static_route(T, 2, {"broker-a": (1000, {0: 0, 1: 1}), "broker-b": (2000, {1: 0})})
    assert instance.logic_leaders(T) == {0: "broker-a", 1: "broker-a"}  # cached
    assert instance.logic_leaders(T, refresh=True) == {0: "broker-a", 1: "broker-b"}

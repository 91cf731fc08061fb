"""The client's route cache when the name server fails: the last route is kept (and not asked for again at every
call), an invalidated route is asked for once more at once, and the answer of a recovered name server replaces
it."""

import pytest

from client.client_instance import ClientInstance
from tests.client.fakes import FakeCluster, FlakyNameServer, normal_route

T = "RouteCacheT"


@pytest.fixture
def client():
    c = ClientInstance("fake-namesrv:9876")
    yield c
    c.close()


def brokers_of(route) -> list[str]:
    return [bd.broker_name for bd in route.broker_datas]


def test_an_invalidated_route_is_asked_for_once_more_even_right_after_a_failure(client: ClientInstance):
    fake = FakeCluster("broker-a", "broker-b")
    fake.routes[T] = normal_route(T, {"broker-a": 1})
    namesrv = FlakyNameServer(fake)
    client._fetch_route = namesrv.fetch_route  # type: ignore[method-assign]
    assert brokers_of(client.route(T)) == ["broker-a"]

    namesrv.down = True
    assert brokers_of(client.route(T, refresh=True)) == ["broker-a"]  # kept
    assert brokers_of(client.route(T, refresh=True)) == ["broker-a"]  # and not asked for again at once
    assert namesrv.fetches == 2
    client.invalidate_route(T)
    assert brokers_of(client.route(T)) == ["broker-a"]  # asked once more, failed, kept
    assert brokers_of(client.route(T)) == ["broker-a"]
    assert namesrv.fetches == 3

    namesrv.down = False  # back, with the route changed meanwhile
    fake.routes[T] = normal_route(T, {"broker-b": 1})
    assert brokers_of(client.route(T, refresh=True)) == ["broker-a"]  # within the retry pause
    client.invalidate_route(T)  # a broker said the route is wrong
    assert brokers_of(client.route(T)) == ["broker-b"]
    assert brokers_of(client.route(T)) == ["broker-b"]  # cached again
    assert namesrv.fetches == 4

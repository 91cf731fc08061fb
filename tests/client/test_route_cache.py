"""The client's route cache when the name server fails: the last route is kept (and not asked for again at every
call), an invalidated route is asked for once more at once, and the answer of a recovered name server replaces
it. When the name server stalls, lookups of a topic wait for the one that asks instead of each asking."""

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from client import client_instance
from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.static_route import VIRTUAL_BROKER_NAME, logic_queue_leaders
from common.perm import PERM_INHERIT
from common.response_code import ResponseCode
from common.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC
from proto import common_pb2, namesrv_pb2
from tests.client.fakes import FakeCluster, FlakyNameServer, normal_route, static_route
from tests.cluster import wait_until

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


class CountingLock:
    """A topic's lookup lock that counts the lookups that came to it (to know they wait behind a stalled one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counting = threading.Lock()
        self.arrived = 0

    def __enter__(self) -> "CountingLock":
        with self._counting:  # += is not atomic between threads
            self.arrived += 1
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def lookups_behind_a_stall(client: ClientInstance, namesrv: FlakyNameServer, lookup: Callable[[], Any],
                           meanwhile: Callable[[], None] = lambda: None, n: int = 8) -> list[list[str]]:
    """``lookup`` on ``n`` threads: the first one's fetch stalls until the others wait behind it, then the name
    server answers (after ``meanwhile``). The brokers of each one's route, the stalled one's first."""
    lock = client._route_locks[T] = CountingLock()  # type: ignore[assignment]
    namesrv.hold.clear()
    with ThreadPoolExecutor(n) as pool:
        first = pool.submit(lookup)
        assert namesrv.held.wait(5), "the first lookup did not ask the name server"
        others = [pool.submit(lookup) for _ in range(n - 1)]
        wait_until(lambda: lock.arrived == n, timeout=5, what="the other lookups to wait behind the stalled one")
        meanwhile()
        namesrv.hold.set()
        return [brokers_of(f.result(timeout=5)) for f in [first, *others]]


def test_lookups_during_a_stall_wait_for_the_one_that_asks(client: ClientInstance):
    fake = FakeCluster("broker-a")
    fake.routes[T] = normal_route(T, {"broker-a": 1})
    namesrv = FlakyNameServer(fake)
    client._fetch_route = namesrv.fetch_route  # type: ignore[method-assign]
    assert lookups_behind_a_stall(client, namesrv, lambda: client.route(T)) == [["broker-a"]] * 8
    assert namesrv.fetches == 1


def test_retries_during_a_stall_take_a_route_asked_for_after_they_found_theirs_out_of_date(client: ClientInstance):
    """Each retry invalidated the route after the stalled lookup had asked: that lookup's answer may predate what
    they saw, so one more lookup asks, and all of them take its answer."""
    fake = FakeCluster("broker-a", "broker-b")
    fake.routes[T] = normal_route(T, {"broker-a": 1})
    namesrv = FlakyNameServer(fake)
    client._fetch_route = namesrv.fetch_route  # type: ignore[method-assign]
    client.route(T)

    def retry() -> Any:
        client.invalidate_route(T)
        return client.route(T, refresh=True)

    def moved() -> None:
        fake.routes[T] = normal_route(T, {"broker-b": 1})

    assert lookups_behind_a_stall(client, namesrv, retry, meanwhile=moved) == [["broker-a"]] + [["broker-b"]] * 7
    assert namesrv.fetches == 3  # the first lookup, the stalled one, one after it
    assert brokers_of(client.route(T)) == ["broker-b"]  # and it is cached
    assert namesrv.fetches == 3


def test_retries_during_a_stall_that_fails_keep_the_last_route_without_asking_again(client: ClientInstance):
    fake = FakeCluster("broker-a")
    fake.routes[T] = normal_route(T, {"broker-a": 1})
    namesrv = FlakyNameServer(fake)
    client._fetch_route = namesrv.fetch_route  # type: ignore[method-assign]
    client.route(T)
    namesrv.down = True

    def retry() -> Any:
        client.invalidate_route(T)
        return client.route(T, refresh=True)

    assert lookups_behind_a_stall(client, namesrv, retry) == [["broker-a"]] * 8
    assert namesrv.fetches == 2  # the first lookup, the stalled one that failed


def test_a_static_route_with_a_logic_queue_nobody_leads_is_asked_for_again_soon(client: ClientInstance,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    # The brokers of a new static topic register their parts of the mapping one by one: a route fetched in between
    # names no leader for some logic queue, and was kept for the whole 30 s (a v2 client saw that queue unwritable).
    monkeypatch.setattr(client_instance, "SHORT_ROUTE_TTL_S", 0.3)
    fake = FakeCluster("broker-a", "broker-b")
    fake.routes[T] = static_route(T, 2, {"broker-a": (1, {0: 0})})
    namesrv = FlakyNameServer(fake)
    client._fetch_route = namesrv.fetch_route  # type: ignore[method-assign]
    assert logic_queue_leaders(client.route(T))[1] == {0: "broker-a", 1: VIRTUAL_BROKER_NAME}
    assert namesrv.fetches == 1 and client.route(T) is not None and namesrv.fetches == 1  # cached, briefly

    fake.routes[T] = static_route(T, 2, {"broker-a": (1, {0: 0}), "broker-b": (1, {1: 0})})
    wait_until(lambda: logic_queue_leaders(client.route(T))[1] == {0: "broker-a", 1: "broker-b"}, timeout=5,
               what="the second leader")
    fetches = namesrv.fetches
    time.sleep(0.5)  # past the short age: a route where every logic queue has a leader is kept the 30 s
    client.route(T)
    assert namesrv.fetches == fetches


def test_names_with_no_route_leave_nothing_cached(client: ClientInstance):
    # A proxy's v2 clients may ask any name: each name asked used to keep its lookup lock for good.
    fake = FakeCluster("broker-a")
    fake.routes[T] = normal_route(T, {"broker-a": 1})
    fake.install(client)
    client.route(T)
    for i in range(100):
        with pytest.raises(MQClientError):
            client.route(f"no-such-topic-{i}")
    assert set(client._route_locks) == {T} and set(client._routes) == {T}


def test_borrowed_routes_are_bounded_and_an_existing_topic_keeps_its_own(client: ClientInstance,
                                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(client_instance, "MAX_BORROWED_ROUTES", 4)
    fake = FakeCluster("broker-a")
    fake.routes[T] = normal_route(T, {"broker-a": 1})
    fake.routes[AUTO_CREATE_TOPIC_KEY_TOPIC] = normal_route(AUTO_CREATE_TOPIC_KEY_TOPIC, {"broker-a": 4})
    fake.routes[AUTO_CREATE_TOPIC_KEY_TOPIC].queue_datas[0].perm |= PERM_INHERIT
    fake.install(client)
    route = client.route(T, for_publish=True)
    client.publish_queues(T)
    names = [f"new-topic-{i}" for i in range(100)]
    for name in names:  # what a send to a topic the name server does not know yet reads
        assert len(client.publish_queues(name)) == 4
        assert client.master_addr(name, "broker-a")
    kept = set(names[-4:]) | {T}
    for cache in (client._routes, client._route_locks, client._publish_queues, client._groups):
        assert set(cache) <= kept
    assert set(client._routes) == kept
    assert client.route(T, for_publish=True) is route  # still cached
    assert len(fake.fetches) == 1 + 2 * len(names)

    fake.routes[names[-1]] = normal_route(names[-1], {"broker-a": 2})  # created by its first send
    client.invalidate_route(names[-1])
    assert len(client.publish_queues(names[-1])) == 2
    assert names[-1] not in client._borrowed and names[-1] in client._routes

    at, borrowed = client._borrowed[names[-4]]  # the oldest, with room for one more
    client._borrowed[names[-4]] = (at - client_instance.ROUTE_TTL_S, borrowed)  # not borrowed again for 30 s
    client.route("one-more", for_publish=True)
    assert names[-4] not in client._routes and names[-3] in client._routes


def test_a_route_is_kept_when_the_name_server_forgot_the_topic(client: ClientInstance):
    """A name server restarted a moment ago knows no topic until the brokers register again (their
    registerNameServerPeriod, 30 s): its TOPIC_NOT_EXIST dropped the client's route, and every send failed for as
    long. As upstream, the route a client has stays (a deleted topic's brokers refuse it themselves)."""
    fake = FakeCluster("broker-a")
    fake.routes[T] = normal_route(T, {"broker-a": 1})
    namesrv = FlakyNameServer(fake)
    client._fetch_route = namesrv.fetch_route  # type: ignore[method-assign]
    assert brokers_of(client.route(T)) == ["broker-a"]
    del fake.routes[T]  # the name server restarted
    for for_publish in (False, True):
        assert brokers_of(client.route(T, refresh=True, for_publish=for_publish)) == ["broker-a"]
    fake.routes[T] = normal_route(T, {"broker-a": 2})  # the brokers registered again
    client.invalidate_route(T)
    assert [q.write_queue_nums for q in client.route(T).queue_datas] == [2]  # the new one replaces it
    with pytest.raises(MQClientError, match="TOPIC_NOT_EXIST"):
        client.route("NeverHadARoute")  # a name never routed is still an error


class AnsweringNameServer:
    def __init__(self, route: common_pb2.TopicRouteData | None) -> None:
        self.route = route

    def GetRouteInfoByTopic(self, request: namesrv_pb2.GetRouteInfoRequest, timeout: float):
        if self.route is None:
            return namesrv_pb2.GetRouteInfoResponse(code=ResponseCode.TOPIC_NOT_EXIST, remark="restarted")
        return namesrv_pb2.GetRouteInfoResponse(code=ResponseCode.SUCCESS, route=self.route)


def test_a_topic_one_name_server_does_not_know_is_asked_of_the_others():
    """Only a name server that does not answer used to send the lookup on to the next; one restarted a moment ago
    answers, and its TOPIC_NOT_EXIST was taken as the truth."""
    c = ClientInstance("ns-restarted:9876;ns-up:9876")
    try:
        servers = {"ns-restarted:9876": AnsweringNameServer(None),
                   "ns-up:9876": AnsweringNameServer(normal_route(T, {"broker-a": 1}))}
        c.namesrv = servers.__getitem__  # type: ignore[method-assign, assignment]
        assert brokers_of(c.route(T)) == ["broker-a"]
        servers["ns-up:9876"].route = None
        with pytest.raises(MQClientError, match="TOPIC_NOT_EXIST"):
            c.route("Unknown")
    finally:
        c.close()

"""A route the name servers stop knowing is kept for a grace period (a name server restarted a moment ago knows no
topic until the brokers register again), then forgotten everywhere the client keeps something of it: before, a
deleted topic's route was kept for the client's life (a proxy answered QueryRoute OK for it for ever, and grew by a
route per deleted topic). Routes not asked for in a long while are forgotten too, but never while no name server
answers. In memory (a fake name server), then with real daemons."""

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Admin, Message, MQClientError, Producer, client_instance
from client.client_instance import ClientInstance
from tests.client.fakes import FakeCluster, FlakyNameServer, normal_route
from tests.cluster import make_cluster, start_namesrv, wait_until

T = "ForgottenT"


@pytest.fixture
def client() -> Iterator[ClientInstance]:
    c = ClientInstance("fake-namesrv:9876")
    yield c
    c.close()


def caches_naming(client: ClientInstance, topic: str) -> list[str]:
    """The names of the client's per-topic caches that still hold ``topic``."""
    names = ("_routes", "_route_locks", "_groups", "_publish_queues", "_static_views", "_route_failed_at",
             "_stale_routes", "_unknown_since", "_borrowed")
    return [name for name in names if topic in getattr(client, name, {})]


def use(client: ClientInstance, topic: str) -> None:
    """What a send reads of a route: its writable queues and a master."""
    client.publish_queues(topic)
    client.master_addr(topic, "broker-a", for_publish=True)


def test_a_route_the_name_servers_stop_knowing_is_kept_for_the_grace_then_forgotten(
        client: ClientInstance, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="client")
    forgotten: list[str] = []
    client.on_route_forgotten.append(forgotten.append)
    fake = FakeCluster("broker-a")
    fake.routes[T] = normal_route(T, {"broker-a": 2})
    fake.install(client)
    use(client, T)
    del fake.routes[T]  # deleted (or the name server restarted: nobody can tell yet)
    client.invalidate_route(T)
    assert len(client.publish_queues(T)) == 2  # kept: within the grace
    assert client._unknown_since[T]
    client._unknown_since[T] -= client_instance.UNKNOWN_TOPIC_GRACE_S  # the first such answer, a grace ago
    client.invalidate_route(T)
    with pytest.raises(MQClientError, match="TOPIC_NOT_EXIST"):
        client.publish_queues(T)
    assert caches_naming(client, T) == []
    assert forgotten == [T]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("route_forgotten")]
    assert lines == [f"route_forgotten topic={T} why='the name servers have not known the topic for 60 s (deleted, "
                     "or all its brokers gone)'"]
    with pytest.raises(MQClientError, match="TOPIC_NOT_EXIST"):
        client.route(T)  # as for a name never routed: nothing kept again
    assert caches_naming(client, T) == [] and forgotten == [T]


def test_a_name_server_restart_keeps_the_route_and_a_later_one_gets_a_grace_of_its_own(client: ClientInstance):
    fake = FakeCluster("broker-a")
    fake.routes[T] = normal_route(T, {"broker-a": 1})
    namesrv = FlakyNameServer(fake)
    client._fetch_route = namesrv.fetch_route  # type: ignore[method-assign]
    client.route(T)
    saved = fake.routes.pop(T)  # the name server restarted
    client.invalidate_route(T)
    assert client.route(T).queue_datas[0].write_queue_nums == 1
    first = client._unknown_since[T]
    fake.routes[T] = normal_route(T, {"broker-a": 2})  # the brokers registered again, within the grace
    client.invalidate_route(T)
    assert client.route(T).queue_datas[0].write_queue_nums == 2
    assert T not in client._unknown_since
    time.sleep(0.01)
    del fake.routes[T]  # restarted again much later: the grace counts from this first answer, not the old one
    client.invalidate_route(T)
    assert client.route(T).queue_datas[0].write_queue_nums == 2
    assert client._unknown_since[T] > first
    namesrv.down = True  # nor does an outage end the grace or forget the route
    client.invalidate_route(T)
    client._unknown_since[T] -= client_instance.UNKNOWN_TOPIC_GRACE_S
    assert client.route(T).queue_datas[0].write_queue_nums == 2
    fake.routes[T] = saved
    namesrv.down = False
    client.invalidate_route(T)
    assert client.route(T).queue_datas[0].write_queue_nums == 1
    assert T not in client._unknown_since


def test_routes_not_used_for_long_are_forgotten_but_not_while_no_name_server_answers(client: ClientInstance):
    fake = FakeCluster("broker-a")
    for name in ("Idle", "Busy", "Other"):
        fake.routes[name] = normal_route(name, {"broker-a": 1})
    namesrv = FlakyNameServer(fake)
    client._fetch_route = namesrv.fetch_route  # type: ignore[method-assign]
    for name in ("Idle", "Busy"):
        use(client, name)
    idle_for = client_instance.IDLE_ROUTE_FORGET_S + 1
    for name in ("Idle", "Busy"):
        at, route = client._routes[name]
        client._routes[name] = (at - idle_for, route)
    client._route_failed_at["Busy"] = time.monotonic()  # kept through a failed lookup a moment ago: in use
    client._idle_swept_at -= client_instance.ROUTE_TTL_S
    namesrv.down = True
    with pytest.raises(MQClientError):
        client.route("Other")  # no name server answers: the cached routes are all there is
    assert set(client._routes) == {"Idle", "Busy"}
    namesrv.down = False
    client.route("Other")
    assert set(client._routes) == {"Busy", "Other"}
    assert caches_naming(client, "Idle") == []


@pytest.fixture
def fast_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_instance, "UNKNOWN_TOPIC_GRACE_S", 1.0, raising=False)


def test_a_deleted_topics_route_is_forgotten_by_a_producer(tmp_path: Path, fast_grace: None,
                                                           caplog: pytest.LogCaptureFixture):
    """Real daemons: the producer's sends to the deleted topic are refused by its broker, each refusal has the route
    asked for again, and once the grace is over the route is gone and the name server's answer is the send's."""
    caplog.set_level(logging.INFO, logger="client")
    cluster = make_cluster(tmp_path, ["broker-a"])
    try:
        cluster.create_topic(T, queues=2)
        with Producer(cluster.addr) as producer, Admin(cluster.addr) as admin:
            producer.send(Message(T, b"before"))
            assert T in producer.client._routes
            admin.delete_topic(T, "DefaultCluster")
            wait_until(lambda: T not in admin.topic_list(), what="the name server to forget the topic")
            errors: list[str] = []

            def forgotten() -> bool:
                try:
                    producer.send(Message(T, b"after"))
                except MQClientError as exc:
                    errors.append(str(exc))
                return not caches_naming(producer.client, T)

            wait_until(forgotten, timeout=30, interval=0.2, what="the deleted topic's route to be forgotten")
            assert errors, "a send to the deleted topic succeeded"
            with pytest.raises(MQClientError, match=f"route of {T}.*TOPIC_NOT_EXIST"):
                producer.send(Message(T, b"after"))
            assert not caches_naming(producer.client, T)
        assert any(r.getMessage().startswith(f"route_forgotten topic={T} why='the name servers have not known")
                   for r in caplog.records)
    finally:
        cluster.stop()


def test_a_restarted_name_server_does_not_make_routes_forgotten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture):
    """Real daemons: a name server restarted on its port knows no topic until the broker registers again (here
    within 3 s, a grace of 6 s): the route is kept meanwhile, every send goes on, and nothing is forgotten."""
    monkeypatch.setattr(client_instance, "UNKNOWN_TOPIC_GRACE_S", 6.0, raising=False)
    caplog.set_level(logging.INFO, logger="client")
    cluster = make_cluster(tmp_path, ["broker-a"], registerNameServerPeriod=3000)
    port = cluster.addr.rsplit(":", 1)[1]
    try:
        cluster.create_topic(T, queues=2)
        with Producer(cluster.addr) as producer:
            producer.send(Message(T, b"before"))
            cluster.namesrv.stop()
            cluster.namesrv = start_namesrv(tmp_path / "namesrv-again", "-p", port)
            sent = 0

            def refreshed() -> bool:
                nonlocal sent
                producer.client.invalidate_route(T)  # each send asks the name server
                producer.send(Message(T, b"during"))
                sent += 1
                return "route_refreshed" in caplog.text and "_unknown_since" not in caches_naming(producer.client, T)

            wait_until(refreshed, timeout=20, interval=0.2, what="the route from the restarted name server")
            assert sent > 1
        assert f"route_kept topic={T}" in caplog.text  # the restarted name server did not know it at first
        assert "route_forgotten" not in caplog.text
    finally:
        cluster.stop()

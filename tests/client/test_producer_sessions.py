"""ProducerSessions (a transactional producer's sessions with its topics' masters): which brokers it keeps
sessions with while the refresher and add_topic look routes up at once. In process: routes from a stand-in, and
sessions that open no stream (the daemons' side is in ``tests/transaction/test_transactions.py``)."""

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from client import producer_sessions
from client.producer_sessions import ProducerSessions
from client.transaction import TransactionResolution

MASTERS = {"A": "broker-a:10911", "B": "broker-b:10911"}


class Session:
    """A session that opens no stream: notes whether it was closed."""

    def __init__(self, owner: ProducerSessions, addr: str) -> None:
        self.addr = addr
        self.closed = False

    def beat(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Routes:
    """Each topic's master; a lookup afresh (the refresher's) waits for ``release`` once ``hold`` is set."""

    def __init__(self) -> None:
        self.hold = False
        self.held = threading.Event()
        self.release = threading.Event()

    def route(self, topic: str, refresh: bool, for_publish: bool) -> SimpleNamespace:
        if refresh and self.hold:
            self.held.set()
            assert self.release.wait(10)
        return SimpleNamespace(broker_datas=[SimpleNamespace(broker_addrs={0: MASTERS[topic]})])


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Routes]:
    monkeypatch.setattr(producer_sessions, "_BrokerSession", Session)
    monkeypatch.setattr(producer_sessions, "REFRESH_S", 60.0)  # the refresher runs when the test says
    yield Routes()


def test_a_refresh_from_an_older_topic_list_does_not_close_the_session_add_topic_just_opened(routes: Routes):
    sessions = ProducerSessions(routes, "g", "client-1", lambda msg: TransactionResolution.UNKNOWN)  # type: ignore[arg-type]
    keeps_done = threading.Semaphore(0)
    keep = sessions._keep

    def counted_keep(refresh: bool) -> None:
        keep(refresh)
        keeps_done.release()

    sessions._keep = counted_keep  # type: ignore[method-assign]
    try:
        sessions.set_topics(["A"])
        assert keeps_done.acquire(timeout=0)
        routes.hold = True
        sessions.on_broken()  # the refresher looks A up afresh, from the list [A], and is held there
        assert routes.held.wait(5)
        adding = threading.Thread(target=sessions.add_topic, args=("B",))
        adding.start()
        time.sleep(0.3)  # add_topic, unserialized, would open broker-b's session meanwhile
        routes.release.set()
        adding.join(5)
        assert keeps_done.acquire(timeout=5) and keeps_done.acquire(timeout=5)  # both _keeps applied
        opened = dict(sessions._sessions)
        assert set(opened) == set(MASTERS.values())
        assert not any(s.closed for s in opened.values())  # type: ignore[attr-defined]
    finally:
        sessions.close()

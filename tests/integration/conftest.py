"""A real cluster for integration tests: a name server and two brokers on port 0 with temp dirs."""

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from client import Admin
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until


@dataclass
class Cluster:
    workdir: Path
    namesrv: Daemon
    brokers: dict[str, Daemon] = field(default_factory=dict)
    broker_settings: dict[str, object] = field(default_factory=dict)

    @property
    def addr(self) -> str:
        return self.namesrv.addr

    def start_broker(self, name: str) -> Daemon:
        self.brokers[name] = start_broker(self.workdir, name, self.addr, **self.broker_settings)
        return self.brokers[name]

    def create_topic(self, topic: str, queues: int = 4) -> None:
        with Admin(self.addr) as admin:
            admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=queues, write_queue_nums=queues)
            expected = {n for n, d in self.brokers.items() if d.alive}
            wait_until(lambda: {q.broker_name for q in admin.topic_route(topic).queue_datas} >= expected
                       if topic in admin.topic_list() else False, what=f"route of {topic}")

    def stop(self) -> None:
        for daemon in [*self.brokers.values(), self.namesrv]:
            if daemon.alive:
                daemon.stop()


def make_cluster(workdir: Path, namesrv_args: tuple[str, ...] = (), **broker_settings: object) -> Cluster:
    cluster = Cluster(workdir, start_namesrv(workdir / "namesrv", *namesrv_args), broker_settings=broker_settings)
    try:
        for name in ("broker-a", "broker-b"):
            cluster.start_broker(name)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("cluster"), registerNameServerPeriod=1000)
    yield c
    c.stop()

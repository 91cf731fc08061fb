"""Real daemons for integration tests (the launcher is ``cluster/daemon_process.py``), and a cluster of them."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cluster.daemon_process import (
    REPO,
    Daemon,
    DaemonStartError,
    start_broker,
    start_daemon,
    start_namesrv,
    wait_until,
    write_broker_conf,
)

__all__ = ["REPO", "Cluster", "Daemon", "DaemonStartError", "make_cluster", "start_broker", "start_daemon",
           "start_namesrv", "wait_until", "write_broker_conf"]


@dataclass
class Cluster:
    """A name server and brokers started by a test; ``settings`` are broker.conf keys for every broker."""

    workdir: Path
    namesrv: Daemon
    brokers: dict[str, Daemon] = field(default_factory=dict)
    settings: dict[str, object] = field(default_factory=dict)

    @property
    def addr(self) -> str:
        return self.namesrv.addr

    def start_broker(self, name: str) -> Daemon:
        self.brokers[name] = start_broker(self.workdir, name, self.addr, **self.settings)
        return self.brokers[name]

    def create_topic(self, topic: str, queues: int = 4) -> None:
        """A normal topic on every live broker, returned once the name server routes it to all of them."""
        from client import Admin

        with Admin(self.addr) as admin:
            admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=queues, write_queue_nums=queues)
            expected = {n for n, d in self.brokers.items() if d.alive}
            wait_until(lambda: {q.broker_name for q in admin.topic_route(topic).queue_datas} >= expected
                       if topic in admin.topic_list() else False, what=f"route of {topic}")

    def stop(self) -> None:
        for daemon in [*self.brokers.values(), self.namesrv]:
            if daemon.alive:
                daemon.stop()


def make_cluster(workdir: Path, broker_names: Iterable[str] = ("broker-a", "broker-b"),
                 namesrv_args: Iterable[str] = (), cls: type[Cluster] = Cluster, **settings: object) -> Cluster:
    cluster = cls(workdir, start_namesrv(workdir / "namesrv", *namesrv_args), settings=settings)
    try:
        for name in broker_names:
            cluster.start_broker(name)
    except BaseException:
        cluster.stop()
        raise
    return cluster

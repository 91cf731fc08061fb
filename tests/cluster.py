"""Real daemons for integration tests (the launcher is ``cluster/daemon_process.py``), and a cluster of them."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from client import Admin, PullConsumer, SendResult
    from common.message_queue import MessageQueue
    from proto.common_pb2 import TopicQueueMappingInfo, TopicRouteData

__all__ = ["REPO", "Cluster", "Daemon", "DaemonStartError", "acked_ends", "make_cluster", "start_broker",
           "start_daemon", "start_namesrv", "static_route_epoch", "static_route_mappings", "wait_dispatched",
           "wait_static_route", "wait_until", "write_broker_conf"]


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


def _static_route(admin: "Admin", topic: str) -> "TopicRouteData | None":
    """The topic's route; None until the first broker registered it (TOPIC_NOT_EXIST: brokers register a new topic
    on their own threads, after the admin call returned)."""
    from client import MQClientError

    try:
        return admin.topic_route(topic)
    except MQClientError:
        return None


def static_route_mappings(admin: "Admin", topic: str) -> dict[str, "TopicQueueMappingInfo"]:
    """The static topic's mapping of each broker the name server routes it to; empty while it routes none."""
    route = _static_route(admin, topic)
    return {} if route is None else dict(route.topic_queue_mapping_by_broker)


def static_route_epoch(admin: "Admin", topic: str) -> int:
    """The lowest epoch among the routed mappings; -1 while none is routed or a logic queue has no leader in the
    route (every broker of the cluster holds a mapping, and the leaders' may register after the others')."""
    from client.static_route import VIRTUAL_BROKER_NAME, logic_queue_leaders

    route = _static_route(admin, topic)
    if route is None:
        return -1
    total, leaders = logic_queue_leaders(route)  # total 0: no mapping routed (or none consistent)
    if total == 0 or VIRTUAL_BROKER_NAME in leaders.values():
        return -1
    return min(i.epoch for i in route.topic_queue_mapping_by_broker.values())


def wait_static_route(namesrv_addr: str, topic: str, epoch: int, timeout: float = 15.0) -> None:
    """Until the name server routes the static topic with every broker's mapping at ``epoch`` or later and a
    leader for each logic queue."""
    from client import Admin

    with Admin(namesrv_addr) as admin:
        wait_until(lambda: static_route_epoch(admin, topic) >= epoch, timeout=timeout,
                   what=f"route of {topic} at epoch {epoch}")


def wait_dispatched(consumer: "PullConsumer", ends: "Mapping[MessageQueue, int]", timeout: float = 10.0) -> None:
    """Until each queue's max offset reaches its end in ``ends`` (one past its last acknowledged message; see
    :func:`acked_ends`). A broker acknowledges a send once its commitlog holds it and dispatches it to the consume
    queue a moment later, so a read right after the last acknowledgement may not see it yet (a consumer that stops
    at the first empty pull would miss it)."""
    wait_until(lambda: all(consumer.max_offset(mq) >= end for mq, end in ends.items()), timeout=timeout,
               what=f"the acknowledged sends dispatched: {dict(ends)}")


def acked_ends(sent: Iterable["SendResult"]) -> "dict[MessageQueue, int]":
    """Per queue, one past the last message of ``sent`` (a static topic's undecided offset, -1, counts nothing)."""
    ends: dict[MessageQueue, int] = {}
    for r in sent:
        if r.queue_offset >= 0:
            ends[r.queue] = max(ends.get(r.queue, 0), r.queue_offset + max(1, len(r.physical_offsets)))
    return ends

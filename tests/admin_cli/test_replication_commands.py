"""mqadmin getSyncStateSet and electMaster end to end: the real CLI against a name server running the controller
(replicas are gRPC sessions of this test) and a plain name server without it."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from proto import controller_pb2, controller_pb2_grpc
from tests.admin_cli.helpers import fails, free_port, ok, ok_json, table_lines
from tests.cluster import Daemon, start_namesrv
from tests.namesrv.controller_helpers import ReplicaSession, sessions, start_controller

BROKER = "broker-r"
SWITCHED = "broker-s"  # the group electMaster switches; BROKER stays as it started
SYNC_STATE_KEYS = {"cluster_name", "broker_name", "master_id", "master_addr", "master_ha_addr", "master_epoch",
                   "sync_state_set", "sync_state_set_epoch", "replicas"}
REPLICA_KEYS = {"broker_id", "broker_addr", "alive", "master_epoch", "max_offset", "confirm_offset",
                "last_heartbeat_age_ms", "in_sync_state_set"}
NO_CONTROLLER = "runs the controller (start one with --enable-controller)"


@dataclass
class Servers:
    controller: Daemon
    plain: Daemon
    replicas: list[ReplicaSession]

    @property
    def addr(self) -> str:
        return self.controller.addr


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    tmp: Path = tmp_path_factory.mktemp("replication-cli")
    controller = start_controller(tmp / "controller", tmp / "controller-store")
    plain = start_namesrv(tmp / "plain")
    replicas: list[ReplicaSession] = []
    try:
        replicas += sessions(controller.addr, BROKER, 1, 2)
        replicas[1].beat(max_offset=2048, master_epoch=1)
        replicas[1].wait_for(lambda a: len(replicas[1].received) >= 2, what="the second answer")
        replicas += sessions(controller.addr, SWITCHED, 1, 2, 3)
        with grpc.insecure_channel(controller.addr) as channel:
            controller_pb2_grpc.ControllerServiceStub(channel).AlterSyncStateSet(
                controller_pb2.AlterSyncStateSetRequest(broker_name=SWITCHED, master_id=1, master_epoch=1,
                                                        sync_state_set_epoch=1, new_sync_state_set=[1, 2]),
                timeout=10)
        yield Servers(controller, plain, replicas)
    finally:
        for session in replicas:
            session.close()
        plain.stop(strict=False)
        controller.stop(strict=False)


def record(text: str) -> dict[str, str]:
    """The ``Header: value`` lines of a human record."""
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.strip().splitlines())}


def test_get_sync_state_set_json(servers: Servers):
    data = ok_json(servers.addr, "getSyncStateSet", "-b", BROKER)
    assert set(data) == SYNC_STATE_KEYS
    assert {k: data[k] for k in SYNC_STATE_KEYS - {"replicas"}} == {
        "cluster_name": "DefaultCluster", "broker_name": BROKER, "master_id": 1, "master_addr": "127.0.0.1:20901",
        "master_ha_addr": "127.0.0.1:20951", "master_epoch": 1, "sync_state_set": [1], "sync_state_set_epoch": 1}
    assert all(set(r) == REPLICA_KEYS for r in data["replicas"])
    assert [(r["broker_id"], r["broker_addr"], r["alive"], r["master_epoch"], r["max_offset"], r["confirm_offset"],
             r["in_sync_state_set"]) for r in data["replicas"]] == [
        (1, "127.0.0.1:20901", True, 0, 0, 0, True), (2, "127.0.0.1:20902", True, 1, 2048, 2048, False)]
    assert all(0 <= r["last_heartbeat_age_ms"] < 60_000 for r in data["replicas"])


def test_get_sync_state_set_table(servers: Servers):
    out = ok(servers.addr, "getSyncStateSet", "-b", BROKER)
    assert record(out.split("\n\n")[0]) == {
        "Broker Name": BROKER, "Cluster": "DefaultCluster", "Master ID": "1", "Master Address": "127.0.0.1:20901",
        "Master HA Address": "127.0.0.1:20951", "Master Epoch": "1", "Sync State Set": "1", "Set Epoch": "1"}
    assert table_lines(out, "BID", "Address", "Alive", "Epoch", "Max", "Confirm", "In", "Set")
    assert table_lines(out, "1", "127.0.0.1:20901", "yes", "0")[0].split()[-1] == "yes"
    assert table_lines(out, "2", "127.0.0.1:20902", "yes", "2048")[0].split()[-1] == "no"


def test_elect_master(servers: Servers):
    out = ok(servers.addr, "electMaster", "-b", SWITCHED, "-i", "2")
    assert record(out) == {"Broker Name": SWITCHED, "Master ID": "2", "Master Address": "127.0.0.1:20902",
                           "Master HA Address": "127.0.0.1:20952", "Master Epoch": "2", "Sync State Set": "2",
                           "Set Epoch": "3"}
    switched = servers.replicas[3].wait_for(lambda a: a.master_id == 2, timeout=2, what="the push")
    assert (switched.master_epoch, list(switched.sync_state_set)) == (2, [2])
    again = ok_json(servers.addr, "electMaster", "-b", SWITCHED, "-i", "2")  # already master: unchanged
    assert (again["master_id"], again["master_epoch"], again["sync_state_set"]) == (2, 2, [2])
    chosen = ok_json(servers.addr, "electMaster", "-b", SWITCHED, "-i", "0")  # keeps the alive master
    assert (chosen["master_id"], chosen["master_epoch"]) == (2, 2)


def test_elect_master_refusals(servers: Servers):
    line = fails(servers.addr, "electMaster", "-b", BROKER, "-i", "2")
    assert line.startswith(f"mqadmin electMaster: election of {BROKER}/2 failed at {servers.addr}: "
                           "FAILED_PRECONDITION: ")
    assert "replica 2 is not in the sync state set [1]" in line
    assert "NOT_FOUND: broker broker-r has no replica 9" in fails(servers.addr, "electMaster", "-b", BROKER,
                                                                  "-i", "9")
    assert "-1" in fails(servers.addr, "electMaster", "-b", BROKER, "-i", "-1")
    assert "NOT_FOUND: the controller knows no broker group nope" in fails(servers.addr, "getSyncStateSet",
                                                                           "-b", "nope")


def test_name_server_list(servers: Servers):
    both = f"{servers.plain.addr};{servers.addr}"
    assert ok_json(both, "getSyncStateSet", "-b", BROKER)["master_id"] == 1
    line = fails(servers.plain.addr, "getSyncStateSet", "-b", BROKER)
    assert line == f"mqadmin getSyncStateSet: no name server in {servers.plain.addr} {NO_CONTROLLER}"
    nowhere = f"127.0.0.1:{free_port()}"
    line = fails(f"{nowhere};{servers.plain.addr}", "electMaster", "-b", BROKER, "-i", "1")
    assert line.startswith(f"mqadmin electMaster: no reachable name server in {nowhere};{servers.plain.addr} runs "
                           f"the controller; election of {BROKER}/1 failed at {nowhere}: UNAVAILABLE")
    assert ok_json(f"{nowhere};{servers.addr}", "getSyncStateSet", "-b", BROKER)["master_id"] == 1
    assert "no name server address" in fails(None, "getSyncStateSet", "-b", BROKER)


def test_elect_master_signs_with_the_credentials_given(tmp_path: Path):
    """electMaster opened its own channel to the controller and never signed it: refused UNAUTHENTICATED ("the
    request is not signed") by every name server with ACL on, credentials or not."""
    from tests.acl.test_acl_cluster import NAMESRV_ARGS, ROOT

    ns = start_controller(tmp_path / "ns", tmp_path / "controller", *NAMESRV_ARGS)
    try:
        unsigned = fails(ns.addr, "electMaster", "-b", "nope", "-i", "1")
        assert "UNAUTHENTICATED" in unsigned, unsigned
        signed = fails(ns.addr, "--access-key", ROOT[0], "--secret-key", ROOT[1], "electMaster", "-b", "nope",
                       "-i", "1")
        assert "UNAUTHENTICATED" not in signed and "nope" in signed, signed
    finally:
        ns.stop()

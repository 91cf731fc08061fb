"""The controller inside a real ``mqnamesrv --enable-controller`` subprocess, driven by gRPC replica sessions."""

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from proto import controller_pb2, controller_pb2_grpc
from tests.cluster import REPO, Daemon, start_namesrv, wait_until
from tests.namesrv.controller_helpers import ReplicaSession, heartbeat, sessions, start_controller

BROKER = "broker-a"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "controller-store"


@pytest.fixture
def controller(tmp_path: Path, store: Path) -> Iterator[Daemon]:
    daemon = start_controller(tmp_path / "namesrv", store)
    yield daemon
    daemon.stop(strict=False)


@pytest.fixture
def stub(controller: Daemon) -> Iterator[controller_pb2_grpc.ControllerServiceStub]:
    with grpc.insecure_channel(controller.addr) as channel:
        yield controller_pb2_grpc.ControllerServiceStub(channel)


@pytest.fixture
def replicas() -> Iterator[list[ReplicaSession]]:
    opened: list[ReplicaSession] = []
    yield opened
    for session in opened:
        session.close()


def sync_state(stub: controller_pb2_grpc.ControllerServiceStub) -> controller_pb2.SyncStateData:
    return stub.GetSyncStateData(controller_pb2.GetSyncStateDataRequest(broker_name=BROKER), timeout=10)


def failover(stub: controller_pb2_grpc.ControllerServiceStub, addr: str,
             replicas: list[ReplicaSession]) -> tuple[ReplicaSession, ReplicaSession]:
    """Replicas 1 (master) and 2 in sync; 1's stream is reset and 2 must hear it is master within 2 s."""
    first, second = sessions(addr, BROKER, 1, 2)
    replicas += [first, second]
    assert [(a.master_id, a.master_epoch, list(a.sync_state_set)) for a in (first.received[0], second.received[0])] \
        == [(1, 1, [1]), (1, 1, [1])]
    altered = stub.AlterSyncStateSet(controller_pb2.AlterSyncStateSetRequest(
        broker_name=BROKER, master_id=1, master_epoch=1, sync_state_set_epoch=1, new_sync_state_set=[1, 2]),
        timeout=10)
    assert (list(altered.sync_state_set), altered.sync_state_set_epoch) == ([1, 2], 2)
    second.wait_for(lambda a: list(a.sync_state_set) == [1, 2], what="the pushed set")

    first.cancel()
    # A push, not the scan of silent masters: that would take the heartbeat timeout (tens of seconds) to elect.
    elected = second.wait_for(lambda a: a.master_id == 2, timeout=10.0, what="the push naming it master")
    assert (elected.master_addr, elected.master_ha_addr, elected.master_epoch, list(elected.sync_state_set),
            elected.sync_state_set_epoch) == ("127.0.0.1:20902", "127.0.0.1:20952", 2, [2], 3)
    return first, second


def test_failover_when_the_master_stream_ends(controller: Daemon, stub: controller_pb2_grpc.ControllerServiceStub,
                                              replicas: list[ReplicaSession]):
    failover(stub, controller.addr, replicas)
    data = sync_state(stub)
    assert data.cluster_name == "DefaultCluster"
    assert (data.assignment.master_id, data.assignment.master_epoch) == (2, 2)
    assert [(r.broker_id, r.broker_addr, r.alive) for r in data.replicas] == [
        (1, "127.0.0.1:20901", False), (2, "127.0.0.1:20902", True)]
    assert 0 <= data.replicas[1].last_heartbeat_age_ms < 60_000
    wait_until(lambda: "controller_elected broker=broker-a master_id=2 epoch=2 reason=master_session_ended "
                       "candidates=[2]" in controller.log(), what="the election's log line")


def test_a_silent_master_is_replaced_by_the_scan(controller: Daemon, stub: controller_pb2_grpc.ControllerServiceStub,
                                                 replicas: list[ReplicaSession]):
    # The master's stream stays open but it stops heartbeating: only the scan (every 500 ms) can notice.
    master = ReplicaSession(controller.addr, BROKER, 1)
    replicas.append(master)
    assert master.wait_for(lambda a: True).master_id == 1
    slave = ReplicaSession(controller.addr, BROKER, 2)
    replicas.append(slave)
    slave.wait_for(lambda a: True)
    stub.AlterSyncStateSet(controller_pb2.AlterSyncStateSetRequest(
        broker_name=BROKER, master_id=1, master_epoch=1, sync_state_set_epoch=1, new_sync_state_set=[1, 2]),
        timeout=10)
    # Only now a short timeout (each heartbeat names its own): a slow machine cannot make the master silent
    # before the set above includes the slave.
    master.beat(heartbeat_timeout_ms=1000)
    elected = slave.wait_for(lambda a: a.master_id == 2, timeout=5.0, what="the push naming it master")
    assert (elected.master_epoch, list(elected.sync_state_set)) == (2, [2])
    # The silent master's stream is still open: it is told too, and learns it is no longer master.
    assert master.wait_for(lambda a: a.master_id == 2, timeout=2.0).master_epoch == 2
    assert not master.ended.is_set()
    assert "reason=master_silent candidates=[2]" in controller.log()


def test_heartbeats_are_answered_and_sync_state_data_shows_both(controller: Daemon,
                                                                stub: controller_pb2_grpc.ControllerServiceStub,
                                                                replicas: list[ReplicaSession]):
    replicas += sessions(controller.addr, BROKER, 1, 2)
    replicas[1].beat(max_offset=4096, master_epoch=1)
    wait_until(lambda: len(replicas[1].received) >= 2, what="the second heartbeat's answer")
    data = sync_state(stub)
    assert [(r.broker_id, r.alive, r.max_offset, r.confirm_offset, r.master_epoch) for r in data.replicas] == [
        (1, True, 0, 0, 0), (2, True, 4096, 4096, 1)]
    assert (data.assignment.master_id, data.assignment.master_addr) == (1, "127.0.0.1:20901")


def test_restart_keeps_the_assignment(tmp_path: Path, store: Path, replicas: list[ReplicaSession]):
    daemon = start_controller(tmp_path / "namesrv", store)
    try:
        with grpc.insecure_channel(daemon.addr) as channel:
            failover(controller_pb2_grpc.ControllerServiceStub(channel), daemon.addr, replicas)
        back = ReplicaSession(daemon.addr, BROKER, 1)  # the old master returns as a slave
        replicas.append(back)
        assert back.wait_for(lambda a: True).master_id == 2
        # Stopping must end the sessions itself (no grace period wasted) and must not count them as gone.
        assert daemon.stop(timeout=10) == 0
        assert all(r.ended.wait(5) for r in replicas)
    finally:
        daemon.stop(strict=False)

    again = start_controller(tmp_path / "namesrv", store)
    try:
        assert f"controller_started store={store} groups=1" in again.log()
        with grpc.insecure_channel(again.addr) as channel:
            data = sync_state(controller_pb2_grpc.ControllerServiceStub(channel))
        assert (data.assignment.master_id, data.assignment.master_addr, data.assignment.master_epoch,
                list(data.assignment.sync_state_set), data.assignment.sync_state_set_epoch) == (
            2, "127.0.0.1:20902", 2, [2], 3)
        assert [(r.broker_id, r.alive, r.last_heartbeat_age_ms) for r in data.replicas] == [(1, False, -1),
                                                                                            (2, False, -1)]
        master = ReplicaSession(again.addr, BROKER, 2)
        replicas.append(master)
        answer = master.wait_for(lambda a: True)
        assert (answer.master_id, answer.master_epoch) == (2, 2)
    finally:
        again.stop(strict=False)


def test_grpc_statuses(controller: Daemon, stub: controller_pb2_grpc.ControllerServiceStub,
                       replicas: list[ReplicaSession]):
    for bad in [heartbeat(BROKER, 0), heartbeat("", 1)]:
        with pytest.raises(grpc.RpcError) as info:
            list(stub.ControllerSession(iter([bad]), timeout=10))
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    replicas += sessions(controller.addr, BROKER, 1, 2)

    def status(call: Callable[..., object], request: object) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.RpcError) as info:
            call(request, timeout=10)
        return info.value.code(), info.value.details() or ""

    stale = controller_pb2.AlterSyncStateSetRequest(broker_name=BROKER, master_id=1, master_epoch=1,
                                                    sync_state_set_epoch=0, new_sync_state_set=[1, 2])
    code, details = status(stub.AlterSyncStateSet, stale)
    assert (code, "sync state set epoch 0 is stale" in details) == (grpc.StatusCode.FAILED_PRECONDITION, True)
    code, details = status(stub.ElectMaster, controller_pb2.ElectMasterRequest(broker_name=BROKER, broker_id=2))
    assert (code, "not in the sync state set" in details) == (grpc.StatusCode.FAILED_PRECONDITION, True)
    code, _ = status(stub.ElectMaster, controller_pb2.ElectMasterRequest(broker_name="nope", broker_id=1))
    assert code is grpc.StatusCode.NOT_FOUND
    code, _ = status(stub.GetSyncStateData, controller_pb2.GetSyncStateDataRequest(broker_name="nope"))
    assert code is grpc.StatusCode.NOT_FOUND
    code, _ = status(stub.GetSyncStateData, controller_pb2.GetSyncStateDataRequest(broker_name=""))
    assert code is grpc.StatusCode.INVALID_ARGUMENT


def test_a_plain_name_server_has_no_controller(tmp_path: Path):
    daemon = start_namesrv(tmp_path / "plain")
    try:
        with grpc.insecure_channel(daemon.addr) as channel, pytest.raises(grpc.RpcError) as info:
            controller_pb2_grpc.ControllerServiceStub(channel).GetSyncStateData(
                controller_pb2.GetSyncStateDataRequest(broker_name=BROKER), timeout=10)
        assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED
    finally:
        daemon.stop()


def test_default_store_path_is_under_home(tmp_path: Path):
    # No --controller-store-path, and HOME is the temp dir: the store must land in $HOME/store/controller.
    proc = subprocess.Popen([sys.executable, "-m", "namesrv.main", "-p", "0", "--enable-controller"], cwd=REPO,
                            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "mqnamesrv ready on 127.0.0.1:" in proc.stdout.readline()
        assert (tmp_path / "store" / "controller" / "lock").exists()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_an_unreadable_store_stops_the_name_server_with_one_line(store: Path):
    store.mkdir()
    (store / "replicas.json").write_text("{torn")
    proc = subprocess.run([sys.executable, "-m", "namesrv.main", "-p", "0", "--enable-controller",
                           "--controller-store-path", str(store)], cwd=REPO, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"mqnamesrv: error: controller store file {store}/replicas.json "
                                                   "is unreadable")

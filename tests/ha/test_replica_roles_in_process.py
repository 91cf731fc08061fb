"""The replica's side of controller mode in one process: the real ReplicasManager and ControllerLink against the
real controller (ReplicasInfoManager with a fake clock, ControllerService over gRPC on loopback), with the broker
around them faked (store, replication, role hooks). The fake clock lets a test make the controller find the
master silent without waiting out a timeout.

Seen against real daemons: a deposed master kept heartbeating while it restarted itself, so the controller elected
it again, shrank the in-sync set to it and pushed the up-to-date replica out; a master told "no master" restarted
rather than wait for the election it would win. Also: controllerAddr with two controllers that share nothing let
the second elect a second master (refused at start now).
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import grpc
import pytest

from broker.broker_config import ConfigError, load_broker_config
from broker.ha.epoch_file import EpochFile
from broker.ha.ha_service import HAService
from broker.ha.replicas_manager import ReplicaIdentity, ReplicasManager
from broker.store.message_store import MessageStore
from namesrv.controller.controller_service import ControllerService
from namesrv.controller.controller_servicer import ControllerServicer
from namesrv.controller.controller_store import ControllerStore
from namesrv.controller.replica_models import Heartbeat
from namesrv.controller.replicas_info_manager import ReplicasInfoManager
from proto import controller_pb2, controller_pb2_grpc
from tests.namesrv.test_replicas_info_manager import FakeClock

CLUSTER, BROKER = "DefaultCluster", "broker-a"
TIMEOUT = 3000


class Hooks:
    """The broker's role changes, recorded."""

    def __init__(self) -> None:
        self.fences: list[str | None] = []
        self.follows: list[tuple[str, int]] = []
        self.rejoins: list[str] = []

    def fence(self, reason: str | None) -> None:
        self.fences.append(reason)

    def follow(self, master_ha_addr: str, master_epoch: int) -> None:
        self.follows.append((master_ha_addr, master_epoch))

    def stop_following(self) -> None:
        pass

    def start_master_services(self) -> None:
        pass

    def promoted(self) -> None:
        pass

    def register_as(self, broker_id: int, master_epoch: int) -> None:
        pass

    def rejoin(self, why: str) -> None:
        self.rejoins.append(why)  # the broker would stop its services now, then exec itself


class FakeHA:
    def __init__(self) -> None:
        self.lease_valid: Callable[[], bool] = lambda: True
        self.master_epochs: list[int] = []

    def become_master(self, epoch: int, ids: list[int], set_epoch: int) -> None:
        self.master_epochs.append(epoch)

    def accept_sync_state_set(self, ids: list[int], set_epoch: int) -> None:
        pass

    def resettle(self) -> None:
        pass

    def check_sync_state_set(self, now_ms: int) -> None:
        return None


def fake_store() -> MessageStore:
    commit_log = SimpleNamespace(max_offset=lambda: 0, confirm_offset=0, topic_queue_table={})
    return cast(MessageStore, SimpleNamespace(
        commit_log=commit_log, wait_dispatched=lambda end, timeout: True, cut_partial_record=lambda: 0,
        consume_queue_store=SimpleNamespace(queue_max_offsets=dict), reput=SimpleNamespace(reput_from_offset=0)))


def replica(tmp_path: Path, controller_addr: str, broker_id: int = 1) -> tuple[ReplicasManager, Hooks, EpochFile]:
    hooks, epochs = Hooks(), EpochFile(tmp_path / f"epochs-{broker_id}")
    identity = ReplicaIdentity(CLUSTER, BROKER, broker_id, f"127.0.0.1:{10910 + broker_id}", 0)
    manager = ReplicasManager(identity, fake_store(), cast(HAService, FakeHA()), epochs, [controller_addr], TIMEOUT,
                              hooks, lambda: f"127.0.0.1:{10950 + broker_id}")
    return manager, hooks, epochs


class Controller:
    """The real controller on a loopback port; its scan runs only when a test calls it."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock()
        self.manager = ReplicasInfoManager(ControllerStore(tmp_path / "controller"), clock=self.clock)
        self.service = ControllerService(self.manager, scan_interval_s=3600)
        self.server = grpc.aio.server()
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(ControllerServicer(self.service), self.server)
        self.addr = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"

    async def start(self) -> None:
        await self.server.start()
        await self.service.start()

    async def stop(self) -> None:
        await self.service.stop()
        await self.server.stop(0)
        self.manager.close()

    def beat(self, broker_id: int, epoch: int = 0) -> None:
        """A replica that is not this process's: alive for the controller, no stream of its own."""
        self.manager.heartbeat(Heartbeat(CLUSTER, BROKER, broker_id, f"127.0.0.1:{10910 + broker_id}",
                                         f"127.0.0.1:{10950 + broker_id}", epoch, 0, 0, 0, TIMEOUT),
                               session_id=1000 + broker_id)

    def alive(self, broker_id: int) -> bool:
        return next(r.alive for r in self.manager.get_sync_state_data(BROKER).replicas if r.broker_id == broker_id)


async def until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def with_controller(tmp_path: Path, scenario: Callable[[Controller], Awaitable[Any]]) -> None:
    async def run() -> None:
        controller = Controller(tmp_path)
        await controller.start()
        try:
            await scenario(controller)
        finally:
            await controller.stop()

    asyncio.run(run())


async def elected_first(tmp_path: Path, controller: Controller) -> tuple[ReplicasManager, Hooks, EpochFile]:
    manager, hooks, epochs = replica(tmp_path, controller.addr)
    manager.start()
    await until(lambda: manager.role == "MASTER", "replica 1 to be elected the group's first master")
    return manager, hooks, epochs


def test_a_master_told_another_is_master_hangs_up_before_it_restarts(tmp_path: Path):
    async def scenario(controller: Controller) -> None:
        r1, hooks, _ = await elected_first(tmp_path, controller)
        controller.beat(2, epoch=1)
        controller.manager.alter_sync_state_set(BROKER, 1, 1, 1, [1, 2])
        controller.manager.elect_master(BROKER, 2)
        await until(lambda: bool(hooks.rejoins), "replica 1 to restart as replica 2's")
        assert r1.role == "REJOINING"
        # Gone for the controller at once, not when the process finally exits: it is never elected meanwhile.
        await until(lambda: 1 not in controller.service.open_sessions().get(BROKER, []), "its session to end",
                    timeout=2)
        # (the controller marks it gone on a thread of its own once the session closed: a loaded run saw it late)
        await until(lambda: not controller.alive(1), "the controller to count it gone", timeout=2)
        await r1.close()

    with_controller(tmp_path, scenario)


def test_a_master_told_the_group_has_no_master_waits_and_is_elected_again_in_place(tmp_path: Path):
    async def scenario(controller: Controller) -> None:
        r1, hooks, epochs = await elected_first(tmp_path, controller)
        # The controller finds it silent (a stall of its own, say) and has nobody else: no master at epoch 2.
        controller.manager.scan(now=controller.clock.now + TIMEOUT + 1)
        assert controller.manager.assignment(BROKER).master_id == 0
        await until(lambda: r1.role == "MASTER" and r1.master_epoch == 3,
                    "replica 1 to be elected again (epoch 3) on its next heartbeat")
        assert hooks.rejoins == []  # no restart: it never left the election
        assert epochs.last_epoch() == 3
        assert any(reason and "has no master (epoch 2)" in reason for reason in hooks.fences)
        assert hooks.fences[-1] is None  # taking writes again
        await r1.close()

    with_controller(tmp_path, scenario)


def assignment(master_id: int, epoch: int, *members: int) -> controller_pb2.ReplicaAssignment:
    return controller_pb2.ReplicaAssignment(
        broker_name=BROKER, master_id=master_id, master_addr=f"127.0.0.1:{10910 + master_id}" if master_id else "",
        master_ha_addr=f"127.0.0.1:{10950 + master_id}" if master_id else "", master_epoch=epoch,
        sync_state_set=members, sync_state_set_epoch=epoch)


def test_a_deposed_master_restarts_once_another_is_elected(tmp_path: Path):
    async def scenario() -> None:
        r1, hooks, _ = replica(tmp_path, "127.0.0.1:1")  # its link never starts: assignments are handed in
        await r1._on_assignment(assignment(1, 1, 1, 2))
        assert r1.role == "MASTER"
        await r1._on_assignment(assignment(0, 2, 1, 2))
        assert (r1.role, r1.master_epoch, hooks.rejoins) == ("DEPOSED", 2, [])
        assert not r1.ha.lease_valid()  # nothing acknowledged while deposed
        await r1._on_assignment(assignment(2, 3, 2))
        assert r1.role == "REJOINING"
        assert hooks.rejoins == ["the controller moved the master to 2 at epoch 3"]
        assert not r1.link.lease_valid()

    asyncio.run(scenario())


def test_an_assignment_older_than_the_epoch_file_is_not_followed(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    async def scenario() -> None:
        r2, hooks, epochs = replica(tmp_path, "127.0.0.1:1", broker_id=2)
        epochs.assign(3, 0)  # this replica saw epoch 3: the controller answering below is behind
        await r2._on_assignment(assignment(1, 1, 1, 2))
        await r2._on_assignment(assignment(1, 1, 1, 2))
        assert (r2.role, hooks.follows) == ("FENCED", [])
        await r2._on_assignment(assignment(1, 3, 1, 2))
        assert (r2.role, hooks.follows) == ("SLAVE", [("127.0.0.1:10951", 3)])

    asyncio.run(scenario())
    said = [r.getMessage() for r in caplog.records if "assignment_ignored" in r.getMessage()]
    assert len(said) == 1 and "epoch=1 epoch_file_epoch=3" in said[0], said


@pytest.mark.parametrize("addrs", ["127.0.0.1:9876;127.0.0.1:9877", "127.0.0.1:9876; 127.0.0.1:9877;"])
def test_controller_mode_takes_one_controller(addrs: str):
    with pytest.raises(ConfigError) as raised:
        load_broker_config(f"enableControllerMode=true\nbrokerId=1\ncontrollerAddr={addrs}")
    message = str(raised.value)
    assert message.startswith(f"controllerAddr={addrs}: one controller only") and "\n" not in message, message
    assert load_broker_config("enableControllerMode=true\nbrokerId=1\ncontrollerAddr=127.0.0.1:9876;").controller_addr

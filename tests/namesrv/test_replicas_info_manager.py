"""The controller's decisions (ReplicasInfoManager) with a fake clock and a real store in a temp directory."""

import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from common.request_error import RequestError
from namesrv.controller.controller_store import STATE_FILE, ControllerStore, ControllerStoreError
from namesrv.controller.elect_policy import elect
from namesrv.controller.replica_models import Assignment, GroupState, Heartbeat, ReplicaLiveness
from namesrv.controller.replicas_info_manager import ControllerNotFound, ControllerRefusal, ReplicasInfoManager

BROKER = "broker-a"
TIMEOUT = 3000


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class FailingStore(ControllerStore):
    """A store whose writes fail once ``broken`` is set (a full disk)."""

    broken = False

    def save(self, groups: Mapping[str, GroupState]) -> None:
        if self.broken:
            raise OSError(28, "No space left on device")
        super().save(groups)


class Controller:
    """A manager with its clock and everything it announced."""

    def __init__(self, path: Path, clock: FakeClock, unclean: bool = False, store: ControllerStore | None = None):
        self.path = path
        self.clock = clock
        self.store = store or ControllerStore(path)
        self.manager = ReplicasInfoManager(self.store, enable_elect_unclean_master=unclean, clock=clock)
        self.announced: list[Assignment] = []
        self.manager.add_listener(self.announced.append)

    def beat(self, broker_id: int, *, epoch: int = 0, offset: int = 0, priority: int = 0, session: int = 0,
             broker: str = BROKER, cluster: str = "DefaultCluster") -> Assignment:
        return self.manager.heartbeat(Heartbeat(cluster, broker, broker_id, f"127.0.0.1:{10900 + broker_id}",
                                                f"127.0.0.1:{10950 + broker_id}", epoch, offset, offset, priority,
                                                TIMEOUT), session)

    def state(self) -> tuple[int, int, tuple[int, ...], int]:
        a = self.manager.assignment(BROKER)
        return a.master_id, a.master_epoch, a.sync_state_set, a.sync_state_set_epoch

    def set_members(self, *ids: int) -> Assignment:
        a = self.manager.assignment(BROKER)
        return self.manager.alter_sync_state_set(BROKER, a.master_id, a.master_epoch, a.sync_state_set_epoch, ids)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ctl(tmp_path: Path, clock: FakeClock) -> Iterator[Controller]:
    c = Controller(tmp_path / "controller", clock)
    yield c
    c.manager.close()


def two_in_sync(ctl: Controller) -> None:
    """Replica 1 master, 2 its in-sync slave: master epoch 1, set {1,2} at set epoch 2."""
    ctl.beat(1)
    ctl.beat(2)
    ctl.set_members(1, 2)
    assert ctl.state() == (1, 1, (1, 2), 2)


# ---- the first master and heartbeats -------------------------------------------------------------------------


def test_first_heartbeating_broker_becomes_master(ctl: Controller):
    first = ctl.beat(1)
    assert (first.master_id, first.master_addr, first.master_ha_addr, first.master_epoch, first.sync_state_set,
            first.sync_state_set_epoch) == (1, "127.0.0.1:10901", "127.0.0.1:10951", 1, (1,), 1)
    assert ctl.announced == [first]
    second = ctl.beat(2)
    assert second == first  # a new slave changes nothing the replicas are told
    assert ctl.announced == [first]
    data = ctl.manager.get_sync_state_data(BROKER)
    assert data.cluster_name == "DefaultCluster"
    assert [(r.broker_id, r.broker_addr, r.alive, r.last_heartbeat_age_ms) for r in data.replicas] == [
        (1, "127.0.0.1:10901", True, 0), (2, "127.0.0.1:10902", True, 0)]


def test_first_master_epoch_passes_what_the_broker_has_seen(ctl: Controller):
    # A controller that lost its store must not hand out an epoch the broker's epoch file already holds.
    assert ctl.beat(1, epoch=7).master_epoch == 8


def test_bad_heartbeats_are_request_errors(ctl: Controller):
    for bad in [Heartbeat("c", "", 1, "a:1"), Heartbeat("c", BROKER, 0, "a:1"), Heartbeat("c", BROKER, 1, ""),
                Heartbeat("c", BROKER, 1, "a:1", heartbeat_timeout_ms=-1)]:
        with pytest.raises(RequestError):
            ctl.manager.heartbeat(bad)
    assert ctl.manager.group_count == 0


def test_a_broker_name_belongs_to_one_cluster(ctl: Controller):
    ctl.beat(1)
    with pytest.raises(ControllerRefusal, match="belongs to cluster DefaultCluster, not Other"):
        ctl.beat(2, cluster="Other")


# ---- elections -------------------------------------------------------------------------------------------------


def test_master_session_end_elects_the_in_sync_slave(ctl: Controller):
    two_in_sync(ctl)
    ctl.manager.session_ended(BROKER, 1)
    assert ctl.state() == (2, 2, (2,), 3)
    last = ctl.announced[-1]
    assert (last.master_id, last.master_addr, last.master_epoch) == (2, "127.0.0.1:10902", 2)


def test_a_stale_session_end_is_ignored(ctl: Controller):
    ctl.beat(1, session=5)
    ctl.beat(2, session=6)
    ctl.beat(1, session=7)  # replica 1 reconnected before its old stream's end was noticed
    ctl.manager.session_ended(BROKER, 1, session_id=5)
    assert ctl.state()[0] == 1
    ctl.manager.session_ended(BROKER, 1, session_id=7)
    assert ctl.state()[:2] == (0, 2)  # replica 2 is not in the set


def test_silent_master_is_replaced_by_the_scan(ctl: Controller, clock: FakeClock):
    two_in_sync(ctl)
    clock.now += TIMEOUT
    ctl.beat(2)
    ctl.manager.scan()
    assert ctl.state() == (1, 1, (1, 2), 2)  # exactly its timeout: still alive
    clock.now += 1
    ctl.manager.scan()
    assert ctl.state() == (2, 2, (2,), 3)
    assert [(r.broker_id, r.alive) for r in ctl.manager.get_sync_state_data(BROKER).replicas] == [(1, False), (2, True)]


def test_a_silent_slave_is_not_elected(ctl: Controller, clock: FakeClock):
    two_in_sync(ctl)
    clock.now += TIMEOUT + 1
    ctl.manager.scan()
    # Both silent: no candidate, no master, the set kept.
    assert ctl.state() == (0, 2, (1, 2), 2)


def test_policy_prefers_epoch_then_offset_then_priority_then_id():
    def live(epoch: int, offset: int, priority: int) -> ReplicaLiveness:
        return ReplicaLiveness(True, 0, TIMEOUT, epoch, offset, offset, priority)

    assert elect({}) is None
    assert elect({1: live(1, 900, 0), 2: live(2, 100, 0)}) == 2
    assert elect({1: live(2, 100, 0), 2: live(2, 900, 0)}) == 2
    assert elect({1: live(2, 900, 5), 2: live(2, 900, 1)}) == 2
    assert elect({3: live(2, 900, 1), 2: live(2, 900, 1)}) == 2


def test_election_uses_the_policy_among_in_sync_members(ctl: Controller):
    for broker_id, offset in [(1, 500), (2, 300), (3, 400), (4, 999)]:
        ctl.beat(broker_id, epoch=1, offset=offset)
    ctl.set_members(1, 2, 3)
    ctl.manager.session_ended(BROKER, 1)
    assert ctl.state()[0] == 3  # 4 has the longest log but is not in the set


def test_slave_outside_the_set_is_never_elected(ctl: Controller):
    ctl.beat(1)
    ctl.beat(2)
    ctl.manager.session_ended(BROKER, 1)
    assert ctl.state() == (0, 2, (1,), 1)
    ctl.beat(2)
    ctl.manager.scan()
    assert ctl.state() == (0, 2, (1,), 1)
    with pytest.raises(ControllerRefusal, match="not in the sync state set"):
        ctl.manager.elect_master(BROKER, 2)


def test_unclean_election_takes_any_alive_replica(tmp_path: Path, clock: FakeClock):
    ctl = Controller(tmp_path / "c", clock, unclean=True)
    ctl.beat(1)
    ctl.beat(2)
    ctl.manager.session_ended(BROKER, 1)
    # Not at once: with no in-sync set to fence the old master, the election waits out its lease.
    assert ctl.state()[0] == 1
    clock.now += TIMEOUT + 1
    ctl.beat(2)
    ctl.manager.scan()
    assert ctl.state() == (2, 2, (2,), 2)
    ctl.manager.close()


def test_no_candidate_then_the_first_set_member_back_wins(ctl: Controller):
    for broker_id in (1, 2, 3):
        ctl.beat(broker_id)
    ctl.set_members(1, 2)
    ctl.manager.session_ended(BROKER, 2)
    assert ctl.state()[0] == 1  # a slave leaving changes nothing
    ctl.manager.session_ended(BROKER, 1)
    assert ctl.state() == (0, 2, (1, 2), 2)
    assert ctl.announced[-1].master_id == 0 and ctl.announced[-1].master_addr == ""
    ctl.beat(3)  # not in the set
    assert ctl.state()[0] == 0
    back = ctl.beat(2)
    assert (back.master_id, back.master_epoch, back.sync_state_set, back.sync_state_set_epoch) == (2, 3, (2,), 3)
    ctl.beat(1)
    assert ctl.state()[0] == 2


def test_a_whole_group_killed_at_once_waits_for_the_last_master_and_says_so(ctl: Controller,
                                                                              caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="namesrv.controller")
    two_in_sync(ctl)
    ctl.manager.session_ended(BROKER, 1)  # both SIGKILLed: 2 is elected before its own session ends
    ctl.manager.session_ended(BROKER, 2)
    assert ctl.state() == (0, 3, (2,), 3)
    ctl.beat(1, epoch=1, session=7)  # 1 restarts first: it may lack what 2 acknowledged as master
    ctl.beat(1, epoch=1, session=7)
    ctl.manager.scan()
    assert ctl.state()[0] == 0
    waits = [r.getMessage() for r in caplog.records if "controller_replica_not_electable" in r.getMessage()]
    assert len(waits) == 1, waits  # once per return, not per heartbeat
    assert waits[0].startswith("controller_replica_not_electable broker=broker-a id=1 epoch=3 sync_state_set=[2]")
    assert "--enable-elect-unclean-master" in waits[0]
    assert ctl.beat(2, epoch=2, session=8).master_id == 2  # the last master back: elected, 1 follows it
    assert ctl.beat(1, epoch=1, session=7).master_id == 2


# ---- AlterSyncStateSet -------------------------------------------------------------------------------------------


def test_alter_sync_state_set(ctl: Controller):
    two_in_sync(ctl)
    assert ctl.announced[-1].sync_state_set == (1, 2)
    shrunk = ctl.manager.alter_sync_state_set(BROKER, 1, 1, 2, [1])
    assert (shrunk.sync_state_set, shrunk.sync_state_set_epoch) == ((1,), 3)
    same = ctl.manager.alter_sync_state_set(BROKER, 1, 1, 3, [1])
    assert (same.sync_state_set, same.sync_state_set_epoch) == ((1,), 3)


@pytest.mark.parametrize(("master_id", "master_epoch", "ss_epoch", "members", "message"), [
    (1, 1, 1, [1, 2], "sync state set epoch 1 is stale"),
    (1, 0, 2, [1, 2], "1 at epoch 0 is not the master, 1 at epoch 1 is"),
    (2, 1, 2, [1, 2], "2 at epoch 1 is not the master"),
    (1, 1, 2, [2], "lacks the master 1"),
    (1, 1, 2, [1, 9], r"unknown replicas \[9\]"),
    (1, 1, 2, [1, 3], r"replicas \[3\] are not alive"),
])
def test_alter_sync_state_set_refusals(ctl: Controller, master_id: int, master_epoch: int, ss_epoch: int,
                                       members: list[int], message: str):
    two_in_sync(ctl)
    ctl.beat(3)
    ctl.manager.session_ended(BROKER, 3)
    with pytest.raises(ControllerRefusal, match=message):
        ctl.manager.alter_sync_state_set(BROKER, master_id, master_epoch, ss_epoch, members)
    assert ctl.state() == (1, 1, (1, 2), 2)


def test_alter_sync_state_set_without_master_or_group(ctl: Controller):
    ctl.beat(1)
    ctl.manager.session_ended(BROKER, 1)
    with pytest.raises(ControllerRefusal, match="has no master"):
        ctl.manager.alter_sync_state_set(BROKER, 1, 1, 1, [1])
    with pytest.raises(ControllerNotFound, match="no broker group broker-x"):
        ctl.manager.alter_sync_state_set("broker-x", 1, 1, 1, [1])


# ---- ElectMaster -----------------------------------------------------------------------------------------------


def test_elect_master_admin_rules(ctl: Controller):
    for broker_id in (1, 2, 3):
        ctl.beat(broker_id)
    ctl.set_members(1, 2, 3)
    with pytest.raises(ControllerNotFound, match="no broker group broker-x"):
        ctl.manager.elect_master("broker-x", 1)
    with pytest.raises(ControllerNotFound, match="has no replica 9"):
        ctl.manager.elect_master(BROKER, 9)
    with pytest.raises(RequestError):
        ctl.manager.elect_master(BROKER, -1)
    announced = len(ctl.announced)
    assert ctl.manager.elect_master(BROKER, 1).master_epoch == 1  # already master: unchanged
    assert ctl.manager.elect_master(BROKER, 0).master_id == 1  # the controller keeps an alive master
    assert len(ctl.announced) == announced
    ctl.manager.session_ended(BROKER, 3)  # not the master: no election
    with pytest.raises(ControllerRefusal, match="replica 3 is not alive"):
        ctl.manager.elect_master(BROKER, 3)
    switched = ctl.manager.elect_master(BROKER, 2)
    assert (switched.master_id, switched.master_epoch, switched.sync_state_set) == (2, 2, (2,))
    assert ctl.announced[-1] == switched


def test_elect_master_zero_chooses_when_the_master_is_gone(ctl: Controller, clock: FakeClock):
    for broker_id in (1, 2, 3):
        ctl.beat(broker_id)
    ctl.set_members(1, 2)
    clock.now += TIMEOUT + 1  # the master fell silent; no scan noticed yet
    ctl.beat(2)
    ctl.beat(3)
    chosen = ctl.manager.elect_master(BROKER, 0)
    assert (chosen.master_id, chosen.master_epoch, chosen.sync_state_set) == (2, 2, (2,))


def test_elect_master_zero_without_an_alive_set_member_is_refused(ctl: Controller):
    for broker_id in (1, 2, 3):
        ctl.beat(broker_id)
    ctl.set_members(1, 2)
    ctl.manager.session_ended(BROKER, 2)
    ctl.manager.session_ended(BROKER, 1)
    assert ctl.state()[0] == 0
    with pytest.raises(ControllerRefusal, match=r"no alive replica in the sync state set \[1,2\] to elect"):
        ctl.manager.elect_master(BROKER, 0)  # replica 3 is alive, but outside the set


# ---- persistence -------------------------------------------------------------------------------------------------


def test_a_new_manager_over_the_same_store_has_the_same_assignments(tmp_path: Path, clock: FakeClock):
    ctl = Controller(tmp_path / "c", clock)
    two_in_sync(ctl)
    ctl.beat(1, broker="broker-b")
    ctl.manager.session_ended(BROKER, 1)
    before = {name: ctl.manager.assignment(name) for name in (BROKER, "broker-b")}
    ctl.manager.close()

    again = Controller(tmp_path / "c", clock)
    assert again.manager.group_count == 2
    for name, assignment in before.items():
        a = again.manager.assignment(name)
        assert (a.master_id, a.master_addr, a.master_epoch, a.sync_state_set, a.sync_state_set_epoch) == (
            assignment.master_id, assignment.master_addr, assignment.master_epoch, assignment.sync_state_set,
            assignment.sync_state_set_epoch)
    # Liveness is not persisted: nobody has spoken to the new controller yet.
    assert [(r.alive, r.last_heartbeat_age_ms) for r in again.manager.get_sync_state_data(BROKER).replicas] == [
        (False, -1), (False, -1)]
    again.manager.close()


def test_decisions_are_persisted_before_they_are_announced(ctl: Controller):
    seen: list[tuple[tuple[int, int, list[int], int], tuple[int, int, list[int], int]]] = []

    def compare(a: Assignment) -> None:
        group = json.loads((ctl.path / STATE_FILE).read_text())["groups"][0]
        on_disk = (group["master_id"], group["master_epoch"], group["sync_state_set"], group["sync_state_set_epoch"])
        seen.append(((a.master_id, a.master_epoch, list(a.sync_state_set), a.sync_state_set_epoch), on_disk))

    ctl.manager.add_listener(compare)
    two_in_sync(ctl)
    ctl.manager.session_ended(BROKER, 1)
    assert [announced for announced, _ in seen] == [(1, 1, [1], 1), (1, 1, [1, 2], 2), (2, 2, [2], 3)]
    assert all(announced == on_disk for announced, on_disk in seen)


def test_a_failed_write_changes_and_announces_nothing(tmp_path: Path, clock: FakeClock,
                                                      caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="namesrv.controller")
    store = FailingStore(tmp_path / "c")
    ctl = Controller(tmp_path / "c", clock, store=store)
    two_in_sync(ctl)
    announced = list(ctl.announced)
    store.broken = True
    with pytest.raises(OSError):
        ctl.manager.session_ended(BROKER, 1)
    assert ctl.state() == (1, 1, (1, 2), 2) and ctl.announced == announced
    ctl.manager.scan()  # still failing: logged, nothing changes
    assert ctl.state()[0] == 1
    assert "controller_persist_failed broker=broker-a" in caplog.text
    assert "master_id=2" not in caplog.text  # an election that was not persisted is not logged as one
    store.broken = False
    ctl.manager.scan()  # the scan retries the election of the gone master
    assert ctl.state() == (2, 2, (2,), 3)
    assert "controller_elected broker=broker-a master_id=2 epoch=2 reason=master_session_ended" in caplog.text
    ctl.manager.close()


def test_a_master_not_heard_from_after_a_restart_gets_its_groups_own_timeout(tmp_path: Path, clock: FakeClock):
    """It got the fixed default (10 s): a group with a 3 s timeout waited 10 s for its new master, and one with a
    longer timeout had its master replaced while that master's lease (90 % of its timeout) could still run."""
    ctl = Controller(tmp_path / "c", clock)
    two_in_sync(ctl)
    ctl.manager.close()
    again = Controller(tmp_path / "c", clock)
    again.beat(2)  # replica 2 reports the group's timeout (TIMEOUT, 3 s)
    clock.now += TIMEOUT
    again.beat(2)
    again.manager.scan()
    assert again.state()[0] == 1
    clock.now += 1
    again.manager.scan()
    assert again.state() == (2, 2, (2,), 3)  # after 3 s, not 10
    again.manager.close()


def test_store_errors_are_one_line(tmp_path: Path, clock: FakeClock):
    ctl = Controller(tmp_path / "c", clock)
    with pytest.raises(ControllerStoreError, match=f"in use by pid {os.getpid()}"):
        ControllerStore(tmp_path / "c").open()
    ctl.manager.close()
    (tmp_path / "c" / STATE_FILE).write_text("{not json")
    with pytest.raises(ControllerStoreError, match="unreadable"):
        ControllerStore(tmp_path / "c").open()


def test_a_heartbeat_of_an_ended_session_does_not_revive_it_but_a_silent_one_comes_back(ctl: Controller):
    ctl.beat(1, session=7)
    ctl.beat(2, session=8)
    ctl.manager.session_ended(BROKER, 2, 8)
    ctl.beat(2, session=8)  # computed in a worker thread after the stream had ended
    assert not ctl.manager.get_sync_state_data(BROKER).replicas[1].alive
    ctl.clock.now += TIMEOUT + 1
    ctl.beat(2, session=8)
    ctl.manager.scan()  # replica 1 fell silent: gone; the group has no other member in its set
    ctl.beat(1, session=7)  # the same session speaks again (a paused process resumed): alive, master again
    assert ctl.manager.get_sync_state_data(BROKER).replicas[0].alive

"""A controller whose record of a group is behind what a replica reports decides nothing for that group.

Two controllers that do not share state (or one restarted on an old copy of its store) saw, against real daemons:
the replicas failed over to the second controller, which elected replica 2 at epoch 2 and replica 1 at epoch 3; the
first came back with its store (master 1 at epoch 1), replica 2 opened its session there, and the first controller,
not hearing from "its" master, elected replica 2 at epoch 2 again: two masters acknowledged sends, five of them were
lost. The manager's rules, with a fake clock and a real store (tests/namesrv/test_replicas_info_manager.py).
"""

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from namesrv.controller.replicas_info_manager import ControllerRefusal
from tests.namesrv.test_replicas_info_manager import BROKER, Controller, FakeClock, two_in_sync

STARTUP_GRACE_MS = 10_000  # a master persisted by an earlier run gets the default timeout to come back


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def restarted(path: Path, clock: FakeClock) -> Controller:
    """A controller started again over the store at ``path`` (liveness is not persisted)."""
    return Controller(path, clock)


@pytest.fixture
def stale(tmp_path: Path, clock: FakeClock) -> Iterator[Controller]:
    """A controller whose store says master 1 at epoch 1, set {1,2}: what ns1 held when it came back."""
    first = Controller(tmp_path / "c", clock)
    two_in_sync(first)
    first.manager.close()
    again = restarted(tmp_path / "c", clock)
    yield again
    again.manager.close()


def test_a_master_it_does_not_know_of_is_not_deposed_for_silence(stale: Controller, clock: FakeClock,
                                                                caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="namesrv.controller")
    stale.beat(2, epoch=2, session=7)  # replica 2 was master at epoch 2 under another controller
    clock.now += STARTUP_GRACE_MS + 1  # "its" master 1 never speaks: it is master at epoch 3 elsewhere
    stale.beat(2, epoch=2, session=7)
    stale.manager.scan()
    stale.manager.scan()
    assert stale.state() == (1, 1, (1, 2), 2)
    assert stale.announced == []
    said = [r.getMessage() for r in caplog.records if "controller_group_decided_elsewhere" in r.getMessage()]
    assert said == ["controller_group_decided_elsewhere broker=broker-a epoch=1 reported_epoch=2 reported_by=2 "
                    "action='no election and no sync state set change here: run one controller, on its current "
                    "store'"]


def test_a_group_without_master_is_not_given_an_epoch_a_replica_holds(tmp_path: Path, clock: FakeClock):
    first = Controller(tmp_path / "c", clock)
    two_in_sync(first)
    first.manager.session_ended(BROKER, 2)
    first.manager.session_ended(BROKER, 1)
    assert first.state() == (0, 2, (1, 2), 2)
    first.manager.close()
    again = restarted(tmp_path / "c", clock)
    # Replica 1 was elected at epoch 3 by another controller meanwhile: epoch 3 here would be a second epoch 3.
    answer = again.beat(1, epoch=3)
    assert (answer.master_id, answer.master_epoch) == (0, 2)
    again.manager.scan()
    assert again.state() == (0, 2, (1, 2), 2) and again.announced == []
    again.manager.close()


def test_a_session_end_elects_nobody_once_a_newer_epoch_was_reported(stale: Controller):
    stale.beat(1, epoch=1, session=7)
    stale.beat(2, epoch=5, session=8)
    stale.manager.session_ended(BROKER, 1, 7)
    assert stale.state() == (1, 1, (1, 2), 2) and stale.announced == []


def test_operator_and_master_requests_are_refused_with_the_reason(stale: Controller):
    stale.beat(1, epoch=1)
    stale.beat(2, epoch=4)
    for request in (lambda: stale.manager.elect_master(BROKER, 2), lambda: stale.manager.elect_master(BROKER, 0),
                    lambda: stale.manager.alter_sync_state_set(BROKER, 1, 1, 2, [1])):
        with pytest.raises(ControllerRefusal, match="reported master epoch 4, past this controller's 1: the group "
                                                    "is decided elsewhere"):
            request()
    assert stale.state() == (1, 1, (1, 2), 2)


def test_decisions_resume_when_no_report_is_newer(stale: Controller):
    stale.beat(1, epoch=1, session=7)
    stale.beat(2, epoch=2, session=8)
    stale.manager.session_ended(BROKER, 1, 7)
    assert stale.state()[0] == 1
    # Replica 2's store was emptied (an operator chose to copy it afresh): nothing newer is reported any more.
    stale.beat(2, epoch=0, session=9)
    stale.manager.scan()
    assert stale.state() == (2, 2, (2,), 3)

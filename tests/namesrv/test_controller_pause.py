"""A controller that stood still (SIGSTOP, a paused VM) does not take its own pause for the replicas' silence.

Seen against real daemons: the controller paused past the lease and resumed; its first scan found every replica
silent (their heartbeats were still unread in its sockets), declared the group masterless and so deposed a healthy
master, which restarted itself. The manager's rules with a fake clock (tests/namesrv/test_replicas_info_manager.py).
"""

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.namesrv.test_replicas_info_manager import BROKER, TIMEOUT, Controller, FakeClock, two_in_sync

PAUSE_MS = 5_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ctl(tmp_path: Path, clock: FakeClock) -> Iterator[Controller]:
    c = Controller(tmp_path / "controller", clock)
    two_in_sync(c)
    c.manager.scan()  # the scans ran every half second before the pause
    clock.now += 500
    c.manager.scan()
    yield c
    c.manager.close()


def alive(ctl: Controller) -> list[tuple[int, bool]]:
    return [(r.broker_id, r.alive) for r in ctl.manager.get_sync_state_data(BROKER).replicas]


def test_a_pause_longer_than_the_timeout_deposes_nobody(ctl: Controller, clock: FakeClock,
                                                        caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="namesrv.controller")
    announced = len(ctl.announced)
    clock.now += PAUSE_MS
    ctl.manager.scan()  # the scan ran before the heartbeats queued during the pause were read
    assert ctl.state() == (1, 1, (1, 2), 2)
    assert len(ctl.announced) == announced
    assert alive(ctl) == [(1, True), (2, True)]
    assert f"controller_resumed gap_ms={PAUSE_MS}" in caplog.text
    assert "controller_replica_gone" not in caplog.text
    ctl.beat(1)
    ctl.beat(2)  # the queued heartbeats
    ctl.manager.scan()
    assert ctl.state() == (1, 1, (1, 2), 2) and len(ctl.announced) == announced


def test_the_grace_is_one_timeout_from_the_resume(ctl: Controller, clock: FakeClock):
    clock.now += PAUSE_MS
    ctl.manager.scan()
    # Replica 1 really is gone (its heartbeats are not queued): it counts as silent one timeout after the resume.
    for _ in range(TIMEOUT // 500):
        clock.now += 500
        ctl.beat(2)
        ctl.manager.scan()
    assert ctl.state()[0] == 1  # exactly its timeout since the resume: still alive
    clock.now += 1
    ctl.beat(2)
    ctl.manager.scan()
    assert ctl.state() == (2, 2, (2,), 3)


def test_an_election_after_the_pause_counts_the_unread_members(ctl: Controller, clock: FakeClock):
    clock.now += PAUSE_MS
    ctl.manager.scan()
    # The master's stream ended during the pause (it was killed): replica 2, whose heartbeats are still unread,
    # is a live member of the set and is elected, rather than the group left without a master.
    ctl.manager.session_ended(BROKER, 1)
    assert ctl.state() == (2, 2, (2,), 3)


def test_a_slow_scan_is_not_a_pause(ctl: Controller, clock: FakeClock):
    clock.now += 900  # late, not stood still: silence is counted as before
    ctl.manager.scan()
    for step in (500, 500, 500, 101):  # replica 1 was last heard TIMEOUT + 1 ms ago at the last of these
        clock.now += step
        ctl.beat(2)
        ctl.manager.scan()
    assert ctl.state() == (2, 2, (2,), 3)


def test_scans_merely_slow_still_depose_a_silent_master(ctl: Controller, clock: FakeClock):
    """Every scan finding the last one a pause's gap ago re-granted the grace, so a busy controller (scans 1.1 s
    apart, on a worker pool its heartbeat decisions share) never counted a hung master silent: no failover, ever.
    The grace is given at most once a default heartbeat timeout."""
    for _ in range(60):  # the master hangs (its session stays open); replica 2 heartbeats; scans 1.6 s apart
        clock.now += 1_600
        ctl.beat(2)
        ctl.manager.scan()
    assert ctl.state()[0] == 2, ctl.state()  # replica 2 was elected

"""Controller mode against real daemons when the controller itself misbehaves (issue 16's controller reviews).

- A controller paused past the lease (SIGSTOP, then SIGCONT) used to find every replica silent on resuming, depose
  the healthy master (which restarted itself, and was elected again while it did, shrinking the in-sync set to
  itself): sends came back 5.6 s after the resume, and had the master died meanwhile, the group had no master at all.
- Two controllers in controllerAddr (they share no state) let the second elect a second master: refused at start.
"""

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.daemon_process import DaemonStartError
from tests.cluster import start_broker, wait_until
from tests.ha.test_controller_failover import (
    ReplicaGroup,
    all_acknowledged_consumable,
    first_acknowledged_send,
    send_acknowledged,
    started_group,
)
from tests.net_fault_proxy import net_fault_proxy

PAUSE_S = 5.5  # past the 3 s heartbeat timeout and the 2.7 s lease


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ReplicaGroup]:
    yield from started_group(tmp_path)


def test_a_paused_controller_deposes_nobody_and_the_group_can_still_fail_over(group: ReplicaGroup):
    g = group
    acked = send_acknowledged(g, 1, "before", 50)
    g.wait_replicas_reach_end_of(1)
    os.kill(g.ns.proc.pid, signal.SIGSTOP)
    time.sleep(PAUSE_S)
    os.kill(g.ns.proc.pid, signal.SIGCONT)
    took = first_acknowledged_send(g.replicas[1].addr, deadline_s=15)
    acked += [b"probe"]
    assert took < 3, f"sends came back {took:.1f} s after the controller resumed"
    info = g.info(1)
    assert info is not None
    assert (info["replicaRole"], info["masterEpoch"], info["syncStateSet"]) == ("MASTER", "1", "1,2"), info
    assert "replica_rejoining" not in g.replicas[1].log()
    # The master said when it stopped taking writes and when it took them again, once each (it said nothing).
    master_log = g.replicas[1].log()
    assert master_log.count("lease_lost broker=broker-a id=1 epoch=1 writes=refused") == 1, master_log[-3000:]
    assert master_log.count("lease_regained broker=broker-a id=1 epoch=1 writes=taken") == 1
    assert "controller_resumed gap_ms=" in g.ns.log()
    assert "controller_no_master" not in g.ns.log()

    # The up-to-date replica is still in the set: the master's death is a failover, not a group without master.
    acked += send_acknowledged(g, 1, "after", 20)
    g.replicas[1].kill()
    first_acknowledged_send(g.replicas[2].addr, deadline_s=10)
    acked += [b"probe"]
    all_acknowledged_consumable(g.ns.addr, acked, "every acknowledged message after the failover")


def test_a_master_the_controller_took_for_gone_goes_on_in_place(group: ReplicaGroup):
    """Master and replica both stall past the timeout (the replica first): the controller finds no live member and
    says the group has no master. The master, back first, is deposed but not restarted: it waits, keeps its session,
    and is elected again at the next epoch in place; the replica follows it again."""
    g = group
    acked = send_acknowledged(g, 1, "before", 50)
    g.wait_replicas_reach_end_of(1)
    os.kill(g.replicas[2].proc.pid, signal.SIGSTOP)
    time.sleep(1.5)  # the replica's last heartbeat is older than the master's: no election of the replica
    os.kill(g.replicas[1].proc.pid, signal.SIGSTOP)
    wait_until(lambda: "controller_no_master broker=broker-a old_master_id=1 epoch=2" in g.ns.log(), timeout=15,
               what="the controller to declare the group masterless")
    os.kill(g.replicas[1].proc.pid, signal.SIGCONT)
    wait_until(lambda: (g.info(1) or {}).get("masterEpoch") == "3" and g.role(1) == "MASTER", timeout=15,
               what="replica 1 to be elected again at epoch 3")
    log = g.replicas[1].log()
    assert "role_changed role=DEPOSED broker=broker-a id=1 epoch=2" in log
    assert "replica_rejoining" not in log
    os.kill(g.replicas[2].proc.pid, signal.SIGCONT)
    wait_until(lambda: g.in_sync(1, "1,2"), timeout=25, what="replica 2 to follow and rejoin the set")
    acked += send_acknowledged(g, 1, "after", 20)
    g.wait_replicas_reach_end_of(1)
    assert g.byte_identical(1, 2)
    all_acknowledged_consumable(g.ns.addr, acked, "every acknowledged message after the deposition")


def test_a_replica_whose_controller_session_died_without_a_word_is_still_elected(group: ReplicaGroup,
                                                                                 tmp_path: Path):
    """Replica 2 reaches the controller over a connection that then dies without a word (a NAT dropped it): the
    controller heard nothing more from it, and when the master died nobody was elected, until the kernel gave up on
    the connection (about 15 minutes). Keepalive finds the dead connection and the session is opened afresh."""
    g = group
    with net_fault_proxy(g.ns.addr) as proxy:
        g.replicas[2].stop()
        g.replicas[2] = start_broker(tmp_path / "r2", "broker-a", g.ns.addr, brokerId=2,
                                     **{**g.settings, "controllerAddr": proxy.addr})
        wait_until(lambda: g.in_sync(1, "1,2"), timeout=30, what="replica 2 back in the in-sync set")
        acked = send_acknowledged(g, 1, "before", 20)
        g.wait_replicas_reach_end_of(1)
        proxy.freeze()
        wait_until(lambda: "controller_session_restored" in g.replicas[2].log(), timeout=110,
                   what="replica 2's session with the controller opened afresh")
        assert proxy.accepted >= 2
        g.replicas[1].kill()
        first_acknowledged_send(g.replicas[2].addr, deadline_s=20)
        acked += [b"probe"]
    all_acknowledged_consumable(g.ns.addr, acked, "every acknowledged message after the failover")


def test_a_replica_given_two_controllers_does_not_start(tmp_path: Path):
    addrs = "127.0.0.1:9876;127.0.0.1:9877"
    with pytest.raises(DaemonStartError) as raised:
        started = start_broker(tmp_path, "broker-a", "127.0.0.1:9876", brokerId=1, enableControllerMode="true",
                               controllerAddr=addrs)
        started.stop(strict=False)
    lines = [line for line in str(raised.value).splitlines() if "bad configuration" in line]
    assert lines == [f"mqbroker: bad configuration: controllerAddr={addrs}: one controller only (controllers do not "
                     "share their decisions, so a second one could elect a second master)"], str(raised.value)

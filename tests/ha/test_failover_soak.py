"""Failover soak (issue 16, controller mode): ``bench/failover_bench.py``'s live load (a producer, a push consumer
group, a KV writer) through ``CYCLES`` SIGKILLs of broker-a's master, on ``test_controller_failover``'s replica
group. Nothing acknowledged may be lost, each failover must be short, and each old master, once back in the in-sync
set, must hold the new master's commitlog byte for byte (any divergent tail cut)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.failover_bench import KV_KEYS, Cycle, Outcome, prepare, soak
from tests.cluster import start_broker, wait_until
from tests.ha.test_controller_failover import ReplicaGroup, commit_log_bytes

CYCLES = 3
FAILOVER_LIMIT_S = 10.0
MIN_ACKED = 100  # the load must really have run through the cycles, or "nothing lost" proves nothing


class KvReplicaGroup(ReplicaGroup):
    """``ReplicaGroup`` with the KV store on every broker. It starts broker-b without KV, so broker-b is restarted
    with it: the shards are then split over the group that fails over and the one that does not, as in the bench."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, kvEnable="true")
        self.plain.stop()
        self.plain = start_broker(workdir / "plain", "broker-b", self.ns.addr, registerNameServerPeriod=1000,
                                  kvEnable="true")


@pytest.fixture
def group(tmp_path: Path) -> Iterator[KvReplicaGroup]:
    g = KvReplicaGroup(tmp_path)
    try:
        prepare(g)
        yield g
    finally:
        g.stop()


def same_commitlog_prefix(g: ReplicaGroup, old: int, new: int) -> None:
    """The rejoined old master holds the new master's bytes up to where both logs reach (the load goes on, so the
    ends move: the common part is what must match)."""
    end = min(g.end(old), g.end(new))
    assert end > 0, f"no commitlog end from replica {old} or {new}"
    assert commit_log_bytes(g.store(old), end) == commit_log_bytes(g.store(new), end), \
        f"replica {old} (old master) differs from replica {new} (new master) below offset {end}"


def test_nothing_acknowledged_is_lost_through_repeated_master_kills(group: KvReplicaGroup):
    g = group
    rejoined: list[tuple[int, int]] = []

    def check_rejoin(old: int, new: int) -> None:
        same_commitlog_prefix(g, old, new)
        rejoined.append((old, new))

    cycles, outcome = soak(g, CYCLES, after_rejoin=check_rejoin, log=print)

    assert len(cycles) == len(rejoined) == CYCLES
    assert_failovers_fast(cycles)
    assert_nothing_lost(outcome)
    # Load stopped: the two logs end at the same byte and are identical.
    wait_until(lambda: g.byte_identical(1, 2), timeout=15, what="the two commitlogs to be byte-identical")


def assert_failovers_fast(cycles: list[Cycle]) -> None:
    slow = [(n, c.failover_s) for n, c in enumerate(cycles) if c.failover_s > FAILOVER_LIMIT_S]
    assert not slow, f"failovers over {FAILOVER_LIMIT_S} s (cycle, seconds): {slow}"
    assert {c.killed for c in cycles} == {1, 2}, "each replica was master, killed and rejoined at least once"


def assert_nothing_lost(outcome: Outcome) -> None:
    assert outcome.acked >= MIN_ACKED and outcome.kv_acked == KV_KEYS, outcome
    assert outcome.lost == 0, f"{outcome.lost} of {outcome.acked} acknowledged messages never received, e.g. " \
        f"{outcome.lost_sample}; errors retried: {outcome.errors.most_common(5)}"
    assert outcome.kv_lost == 0, f"{outcome.kv_lost} keys do not read back their last acknowledged put " \
        f"(key, acked, read): {outcome.kv_lost_sample}; errors retried: {outcome.errors.most_common(5)}"

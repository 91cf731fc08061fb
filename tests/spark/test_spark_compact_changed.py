"""A compaction group whose parts changed since the run's snapshot (another run swapped them first) is refused by
the broker's compare-and-swap. That is no failure: the run counted it as one and exited 1, and it removed the
markers the other run had retired the parts with, so a third run could delete those parts at once, under readers
still reading them. Driven in process, without Spark (``merge`` is what an executor runs)."""

from pathlib import Path

from spark_jobs import compact, tier_objects
from spark_jobs.broker_tier import BrokerTier
from spark_jobs.tier_objects import RETIRED
from tests.spark.conftest import (
    Expected,
    broker_addr,
    check_broker_view,
    produce,
    snapshot,
    tiered_cluster,
    wait_uploaded,
)


def test_a_group_another_run_swapped_first_counts_as_changed_and_keeps_its_markers(tmp_path: Path) -> None:
    topic = "CompactChangedT"
    cluster = tiered_cluster(tmp_path)
    try:
        cluster.create_topic(topic, queues=2)
        expected: Expected = {}
        produce(cluster, topic, 8, expected)
        wait_uploaded(cluster, topic, expected)
        addr = broker_addr(cluster)
        snap = snapshot(addr, topic)
        root = str(snap.root)
        groups = compact.plan(snap, 1 << 20, 64 << 20)
        assert len(groups) >= 2, groups
        tasks = [compact.MergeTask(root, [p.SerializeToString() for p in g], tier_objects.merged_name(g[0].path))
                 for g in groups]
        results = [compact.merge(task) for task in tasks]
        assert not any(r.error for r in results), results
        first = groups[0]
        with BrokerTier(addr) as tier:
            other = compact.merge(compact.MergeTask(root, tasks[0].parts, tier_objects.merged_name(first[0].path)))
            assert compact.commit(tier, root, first, other.task.merged_path)  # another run, first
            counts = compact.commit_all(tier, root, root, results)
        assert (counts.changed, counts.failed, counts.merged) == (1, 0, len(groups) - 1), counts
        assert not (snap.root / results[0].task.merged_path).exists()  # the refused group's object went
        assert all((snap.root / (p.path + RETIRED)).exists() for p in first)  # the winner's markers stay
        check_broker_view(cluster, topic, snapshot(addr, topic))
    finally:
        cluster.stop()

"""The Spark jobs on a standalone Spark cluster (issue 18 item 6): a master and two workers started from PySpark's
own launcher (``cluster/spark_standalone.py``) on loopback, 1 core and 512 MB each, the brokers' tier in S3
(moto's server). The compaction, cleanup and read acceptance scenarios of ``test_spark_compact``,
``test_spark_cleanup`` and ``test_spark_read`` run unchanged but for the master and the tier: nothing is lost.
Each job prints the master, its application id and its UI's URL; the master's UI lists the finished applications
with both workers alive."""

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Admin
from cluster.spark_standalone import StandaloneCluster, standalone_cluster
from spark_jobs.read import tiered_dataframe
from tests.cluster import Cluster, wait_until
from tests.s3_server import S3Server
from tests.spark.conftest import (
    SUMMARY,
    Expected,
    TierBackend,
    broker_addr,
    parse_summary,
    produce,
    run_job,
    summary_fields,
    wait_uploaded,
)
from tests.spark.test_spark_cleanup import cleanup_scenario
from tests.spark.test_spark_compact import compaction_under_concurrent_reads
from tests.spark.test_spark_read import (  # the DataFrame acceptance, here on the cluster and the s3 tier
    cluster,
    test_dataframe_after_cleanup_and_compaction_starts_at_the_new_min_offset,
    test_dataframe_of_a_normal_topic_equals_what_a_consumer_reads,
    test_dataframe_of_a_static_topic_has_logic_queues_and_offsets,
)

__all__ = ["cluster", "test_dataframe_after_cleanup_and_compaction_starts_at_the_new_min_offset",
           "test_dataframe_of_a_normal_topic_equals_what_a_consumer_reads",
           "test_dataframe_of_a_static_topic_has_logic_queues_and_offsets"]

pytestmark = pytest.mark.slow

CLUSTER_BATCHES = 16  # per queue, for the compaction (test_spark_compact runs 100 on the posix tier)
SPARK_LINE = re.compile(r"^spark: master=(spark://\S+) app_id=(app-\S+) ui=(http://\S+)$", re.M)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-standalone"), workers=2) as c:
        yield c


@pytest.fixture(scope="module")
def tier_backend(s3_server: S3Server) -> TierBackend:
    """The s3 tier for the read tests imported above (they use posix in their own module)."""
    return TierBackend(s3_server)


@pytest.fixture
def spark(spark_cluster: StandaloneCluster):
    """An in-process session on the cluster (the read tests' DataFrames), its UI on; one per test: an
    application holds every worker's core until it stops, so a job started meanwhile would wait for it."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(spark_cluster.master_url).appName("tests-spark-standalone") \
        .config("spark.ui.enabled", "true").config("spark.ui.port", "0") \
        .config("spark.ui.showConsoleProgress", "false")
    for key, value in spark_cluster.spark_conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    assert session.sparkContext.master == spark_cluster.master_url
    try:
        yield session
    finally:
        session.stop()


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def job_app(result: subprocess.CompletedProcess, spark_cluster: StandaloneCluster) -> str:
    """The job said which master, application and UI it ran on; returns the application id."""
    lines = SPARK_LINE.findall(result.stdout)
    assert len(lines) == 1, f"want one 'spark: master=... app_id=... ui=...' line, stdout was:\n{result.stdout}"
    master, app_id, ui = lines[0]
    assert master == spark_cluster.master_url, lines[0]
    assert ui.startswith("http://127.0.0.1:"), lines[0]
    job = next(line.split(":", 1)[0] for line in result.stdout.splitlines()
               if not line.startswith("spark:") and SUMMARY.match(line))
    fields = summary_fields(result.stdout, job)  # the summary line names where it ran too
    assert (fields["master"], fields["app_id"]) == (master, app_id), fields
    return app_id


def master_lists_finished(spark_cluster: StandaloneCluster, app_id: str, name: str) -> dict:
    """The master's UI (its JSON) shows the application finished, and both workers alive."""
    def finished() -> dict:
        state = get_json(f"{spark_cluster.master_ui}/json/")
        assert isinstance(state, dict)
        return state if any(a["id"] == app_id for a in state["completedapps"]) else {}

    state = wait_until(finished, timeout=60, interval=0.2, what=f"{app_id} among the master's completed apps")
    app = next(a for a in state["completedapps"] if a["id"] == app_id)
    assert (app["name"], app["state"]) == (name, "FINISHED"), app
    assert app["cores"] == 2, app  # an executor on each worker
    assert state["status"] == "ALIVE", state
    assert [w["state"] for w in state["workers"]] == ["ALIVE", "ALIVE"], state["workers"]
    return app


def test_the_cluster_has_a_master_and_two_alive_workers(spark_cluster: StandaloneCluster) -> None:
    state = get_json(f"{spark_cluster.master_ui}/json/")
    assert isinstance(state, dict)
    assert state["url"] == spark_cluster.master_url and state["status"] == "ALIVE", state
    assert [(w["state"], w["cores"], w["memory"]) for w in state["workers"]] == [("ALIVE", 1, 512)] * 2, state
    assert sorted(w["webuiaddress"] for w in state["workers"]) == sorted(spark_cluster.worker_uis)


def test_compaction_on_the_cluster_and_the_s3_tier_loses_nothing(tmp_path: Path, spark_cluster: StandaloneCluster,
                                                                 tier_backend: TierBackend) -> None:
    """test_spark_compact's compaction under concurrent reads, the job on the cluster; 16 batches per queue
    (~320 segments in 16 groups, every group an executor task) rather than its 100: the scale is that test's
    (on the posix tier); here what counts is the cluster and the s3 tier, where moto's server, shared with
    the concurrent reader, answers each part's GET slowly on a busy 2-core machine."""
    result = compaction_under_concurrent_reads(tmp_path, tier_backend.broker_conf(), tier_backend.job_args,
                                               master=spark_cluster.master_url, env=spark_cluster.env(),
                                               batches=CLUSTER_BATCHES)
    app_id = job_app(result, spark_cluster)
    assert parse_summary(result.stdout, "compact")["groups_merged"] == 16
    master_lists_finished(spark_cluster, app_id, "tiered-compact")


def test_cleanup_on_the_cluster_and_the_s3_tier_deletes_exactly_the_expired(
        tmp_path: Path, spark_cluster: StandaloneCluster, tier_backend: TierBackend) -> None:
    """test_spark_cleanup's scenario, the job on the cluster (the second run has nothing to do: no Spark)."""
    first, again = cleanup_scenario(tmp_path, tier_backend.broker_conf(), tier_backend.job_args,
                                    master=spark_cluster.master_url, env=spark_cluster.env())
    app_id = job_app(first, spark_cluster)
    assert parse_summary(first.stdout, "cleanup")["deleted"] > 0
    assert not SPARK_LINE.search(again.stdout)
    master_lists_finished(spark_cluster, app_id, "tiered-cleanup")


def test_read_job_on_the_cluster_counts_every_message_and_the_ui_shows_progress(
        cluster: Cluster, spark_cluster: StandaloneCluster, tier_backend: TierBackend,
        request: pytest.FixtureRequest) -> None:
    """``python -m spark_jobs.read`` on the cluster reads every message of the s3 tier; then an in-process
    session's UI lists its DataFrame job as succeeded, one task per queue."""
    topic = "ReadOnCluster"
    with Admin(cluster.addr) as admin:  # on broker-a only (offsets per queue id)
        admin.create_topic(topic, brokers=["broker-a"], read_queue_nums=4, write_queue_nums=4)
        wait_until(lambda: topic in admin.topic_list(), what=f"route of {topic}")
    expected: Expected = {}
    produce(cluster, topic, 5, expected)
    wait_uploaded(cluster, topic, expected)
    total = sum(map(len, expected.values()))
    addr = broker_addr(cluster, "broker-a")
    result = run_job("spark_jobs.read", "--broker", addr, "-t", topic, "--master", spark_cluster.master_url,
                     "--show", "0", *tier_backend.job_args, env=spark_cluster.env())
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert summary_fields(result.stdout, "read")["messages"] == str(total), result.stdout
    master_lists_finished(spark_cluster, job_app(result, spark_cluster), "tiered-read")

    spark = request.getfixturevalue("spark")  # after the job: it would wait for this application's cores
    sc = spark.sparkContext
    sc.setJobGroup("read-on-cluster", "tiered_dataframe count")
    assert tiered_dataframe(spark, addr, topic, tier_backend.access).count() == total
    jobs = get_json(f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/jobs")
    assert isinstance(jobs, list)
    ours = [j for j in jobs if j.get("jobGroup") == "read-on-cluster"]
    assert ours and all(j["status"] == "SUCCEEDED" for j in ours), jobs
    assert sum(j["numCompletedTasks"] for j in ours) >= 4, ours
    executors = get_json(f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/executors")
    assert isinstance(executors, list)
    assert len([e for e in executors if e["id"] != "driver"]) == 2, executors

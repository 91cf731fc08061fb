"""The jobs' failure path as users see it: a broker that does not answer makes ``python -m spark_jobs.X`` exit
non-zero with one line on stderr naming the job and the broker (before any Spark session starts)."""

import json
import os
from collections.abc import Iterator

import pytest

from tests.spark.conftest import broker_addr, run_job, tiered_cluster


@pytest.mark.parametrize("job", ["compact", "cleanup"])
def test_unreachable_broker_fails_with_one_line(job: str) -> None:
    result = run_job(f"spark_jobs.{job}", "--broker", "127.0.0.1:1", "--master", "local[2]", timeout=120)
    assert result.returncode != 0
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{job}: failed: "), lines[0]
    assert "127.0.0.1:1" in lines[0], lines[0]


def test_a_spark_task_s_error_is_its_exception_on_one_line() -> None:
    """A job whose Spark task raised (cleanup on an S3 tier without its keys) printed the executor's whole traceback
    flattened into its one error line (5.8 KB); now the exception the task raised."""
    from spark_jobs.job_output import error_of

    task = RuntimeError("An exception was thrown from the Python worker. Please see the stack trace below.\n"
                        "Traceback (most recent call last):\n  File \"worker.py\", line 1, in main\n"
                        "    process()\n"
                        "botocore.exceptions.NoCredentialsError: Unable to locate credentials\n")
    assert error_of(task) == "botocore.exceptions.NoCredentialsError: Unable to locate credentials (in a Spark task)"
    assert error_of(ValueError("plain")) == "ValueError: plain"


ROOT = ("root", "root-secret")


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster = tiered_cluster(tmp_path_factory.mktemp("acl-tier"), authenticationEnabled="true",
                             authorizationEnabled="true",
                             initAuthenticationUser=json.dumps({"username": ROOT[0], "password": ROOT[1]}))
    try:
        yield broker_addr(cluster)
    finally:
        cluster.stop()


@pytest.mark.parametrize("job", ["compact", "cleanup"])
def test_jobs_sign_their_calls_to_a_broker_with_acl_on(acl_broker: str, job: str) -> None:
    """The jobs had no way to pass credentials: with ACL on, every run failed ("the request is not signed"), and
    expired tier objects were never deleted. They take --access-key/--secret-key (or the env, as mqadmin)."""
    unsigned = run_job(f"spark_jobs.{job}", "--broker", acl_broker, "--master", "local[2]", timeout=120,
                       env={k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")})
    assert unsigned.returncode == 1 and "UNAUTHENTICATED" in unsigned.stderr, unsigned.stderr
    half = run_job(f"spark_jobs.{job}", "--broker", acl_broker, "--access-key", ROOT[0], timeout=120)
    assert half.returncode == 1 and half.stderr.splitlines() == [
        f"{job}: failed: --access-key and --secret-key go together (or ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY)"]
    signed = run_job(f"spark_jobs.{job}", "--broker", acl_broker, "--master", "local[2]", timeout=240,
                     env={**os.environ, "ROCKETMQ_ACCESS_KEY": ROOT[0], "ROCKETMQ_SECRET_KEY": ROOT[1]})
    assert signed.returncode == 0, signed.stderr
    assert signed.stdout.startswith(f"{job}: "), signed.stdout

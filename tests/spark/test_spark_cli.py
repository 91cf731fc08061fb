"""The jobs' failure path as users see it: a broker that does not answer makes ``python -m spark_jobs.X`` exit
non-zero with one line on stderr naming the job and the broker (before any Spark session starts)."""

import pytest

from tests.spark.conftest import run_job


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

"""What a crashed pytest-xdist worker leaves behind, in the crash's report.

A worker that dies (a segfault or an abort in a C extension, or a kill from outside) is reported by xdist as
"worker 'gwN' crashed" and nothing more: its stderr, where Python's fault handler writes, does not reach the
report. Each worker writes its fault handler's output, and the test it runs with its peak RSS, to a file of its
own; the controller adds that file to the crash's report.
"""

import faulthandler
import os
import resource
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any

import pytest

# PySpark forks to launch its JVM (a preexec_fn), and gRPC's fork handlers, running in that child of a process with
# channels open, can end it before its exec: "epoll_wait error", then JAVA_GATEWAY_EXITED (seen once in the Spark
# tests). spark_jobs turns them off for its own processes (spark_jobs/__init__.py); a test process imports gRPC long
# before spark_jobs, so it is done here, before any test module imports gRPC. No test forks a gRPC user.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

FAULT_DIR_ENV = "RMQ_TEST_FAULT_DIR"
_open_files: list[IO[str]] = []


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler plugin, which points it at stderr
def pytest_configure(config: pytest.Config) -> None:
    worker = getattr(config, "workerinput", None)
    if worker is None:
        if config.pluginmanager.hasplugin("xdist") and FAULT_DIR_ENV not in os.environ:
            os.environ[FAULT_DIR_ENV] = tempfile.mkdtemp(prefix="rmq-test-faults-")  # workers inherit it
        return
    fault_dir = os.environ.get(FAULT_DIR_ENV)
    if fault_dir:
        fault_file = open(Path(fault_dir) / f"{worker['workerid']}.faults", "w")  # noqa: SIM115 (open for life)
        _open_files.append(fault_file)
        faulthandler.enable(fault_file, all_threads=True)


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    fault_dir, worker = os.environ.get(FAULT_DIR_ENV), os.environ.get("PYTEST_XDIST_WORKER")
    if fault_dir and worker:
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        (Path(fault_dir) / f"{worker}.running").write_text(f"running {nodeid}; worker peak RSS {peak_mib} MiB\n")


@pytest.hookimpl(optionalhook=True)  # an xdist hook
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    fault_dir = os.environ.get(FAULT_DIR_ENV)
    worker = getattr(getattr(report, "node", None), "gateway", None)
    if not fault_dir or worker is None:
        return
    parts = [str(report.longrepr)]
    for suffix in ("running", "faults"):
        path = Path(fault_dir) / f"{worker.id}.{suffix}"
        text = path.read_text(errors="replace").strip() if path.exists() else ""
        parts.append(text or f"({path.name}: empty: no Python fault recorded, e.g. a kill from outside)")
    report.longrepr = "\n".join(parts)


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is not None:
        if _open_files:
            faulthandler.disable()
        return
    fault_dir = os.environ.pop(FAULT_DIR_ENV, None)
    if fault_dir:
        shutil.rmtree(fault_dir, ignore_errors=True)

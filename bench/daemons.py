"""Real daemons for the benchmarks, through the shared launcher in ``cluster/daemon_process.py`` (nothing
from the test tree). Scenarios stop their daemons in ``finally`` blocks."""

from collections.abc import Iterable
from pathlib import Path

from cluster.daemon_process import (
    REPO,
    Daemon,
    DaemonStartError,
    process_rss_mib,
    start_broker,
    start_daemon,
    wait_until,
)
from cluster.daemon_process import start_namesrv as _start_namesrv

__all__ = ["REPO", "Daemon", "DaemonStartError", "process_rss_mib", "start_broker", "start_daemon", "start_echo",
           "start_namesrv", "stop_all", "wait_until"]


def start_echo(workdir: Path) -> Daemon:
    return start_daemon("echo", "bench.echo_server", [], workdir / "echo")


def start_namesrv(workdir: Path) -> Daemon:
    return _start_namesrv(workdir / "namesrv")


def stop_all(daemons: Iterable[Daemon]) -> None:
    for d in daemons:
        d.stop(strict=False)

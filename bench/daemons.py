"""Real daemons for the benchmarks, through the shared launcher in ``cluster/daemon_process.py`` (nothing
from the test tree). Scenarios stop their daemons in ``finally`` blocks."""

from collections.abc import Iterable
from pathlib import Path

from cluster.daemon_process import (
    REPO,
    Daemon,
    DaemonStartError,
    broker_conf,
    process_rss_mib,
    start_broker,
    start_daemon,
    wait_until,
)
from cluster.daemon_process import start_namesrv as _start_namesrv

__all__ = ["REPO", "Daemon", "DaemonStartError", "broker_conf", "process_rss_mib", "start_broker", "start_daemon",
           "start_echo", "start_namesrv", "start_proxy", "stop_all", "wait_until"]


def start_echo(workdir: Path) -> Daemon:
    return start_daemon("echo", "bench.echo_server", [], workdir / "echo")


def start_namesrv(workdir: Path) -> Daemon:
    return _start_namesrv(workdir / "namesrv")


def start_proxy(workdir: Path, namesrv_addr: str) -> Daemon:
    """mqproxy (the v2 gRPC proxy) for the cluster of ``namesrv_addr``, as the proxy's tests start it."""
    return start_daemon("mqproxy", "proxy.main", ["-n", namesrv_addr, "--host", "127.0.0.1", "-p", "0"],
                        workdir / "mqproxy")


def stop_all(daemons: Iterable[Daemon]) -> None:
    for d in daemons:
        d.stop(strict=False)

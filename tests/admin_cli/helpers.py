"""Running the real mqadmin as a subprocess and checking the shape of what it prints."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cluster import REPO, Cluster, make_cluster, wait_until

CLUSTER = "DefaultCluster"


def mqadmin(addr: str | None, *args: str, env: dict[str, str] | None = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``python -m admin_cli.main [-n addr] args``; NAMESRV_ADDR comes only from ``env``."""
    full_env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"} | (env or {})
    cmd = [sys.executable, "-m", "admin_cli.main", *(["-n", addr] if addr is not None else []), *args]
    return subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def ok(addr: str | None, *args: str, env: dict[str, str] | None = None) -> str:
    """Stdout of a command that must succeed quietly."""
    proc = mqadmin(addr, *args, env=env)
    assert proc.returncode == 0, f"mqadmin {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
    assert proc.stderr == "", f"mqadmin {' '.join(args)} wrote to stderr: {proc.stderr}"
    return proc.stdout


def ok_json(addr: str, *args: str) -> Any:
    return json.loads(ok(addr, "--json", *args))


def fails(addr: str | None, *args: str, env: dict[str, str] | None = None) -> str:
    """The one stderr line of a command that must fail with exit 1 and no traceback."""
    proc = mqadmin(addr, *args, env=env)
    assert proc.returncode == 1, f"mqadmin {' '.join(args)} exited {proc.returncode}: {proc.stdout}{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"want exactly one stderr line, got {proc.stderr!r}"
    assert proc.stdout == "", f"a failure printed to stdout: {proc.stdout!r}"
    return lines[0]


def succeeds(addr: str, *args: str) -> bool:
    return mqadmin(addr, *args).returncode == 0


def route_brokers(addr: str, topic: str) -> list[str]:
    proc = mqadmin(addr, "--json", "topicRoute", "-t", topic)
    if proc.returncode != 0:
        return []
    return sorted(q["broker_name"] for q in json.loads(proc.stdout)["queue_datas"])


def wait_route(addr: str, topic: str, brokers: list[str], timeout: float = 15.0) -> None:
    """Registration is asynchronous: poll until the name server routes ``topic`` to exactly ``brokers``."""
    wait_until(lambda: route_brokers(addr, topic) == sorted(brokers), timeout=timeout, interval=0.1,
               what=f"route of {topic} on {brokers}")


def free_port() -> int:
    """A port where nothing listens (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def table_lines(text: str, *cells: str) -> list[str]:
    """Lines of a human table whose whitespace-split cells include all of ``cells``."""
    return [line for line in text.splitlines() if set(cells) <= set(line.split())]


def registered_cluster(workdir: Path, brokers: list[str], **settings: object) -> Cluster:
    """make_cluster's cluster once the name server lists every one of ``brokers`` (stopped if it never does)."""
    from client import Admin

    c = make_cluster(workdir, brokers, **settings)
    try:
        with Admin(c.addr) as admin:
            wait_until(lambda: sorted(b.broker_name for b in admin.all_brokers()) == sorted(brokers), timeout=15,
                       what="every broker registered")
    except BaseException:
        c.stop()
        raise
    return c

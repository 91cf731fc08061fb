"""Real daemons for the benchmarks: ``python -m MODULE`` subprocesses on port 0, ready when they print
``ready on HOST:PORT``. Stderr goes to a log file under the work dir; stdout is drained so a child never blocks.

A small launcher of its own (rather than ``tests.cluster``) so that ``python -m bench`` needs nothing from the
test tree. Children get SIGTERM if the benchmark process dies, so an interrupted run leaves no daemons behind.
"""

import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
READY = re.compile(r"ready on (\S+):(\d+)")
T = TypeVar("T")


try:
    _PRCTL = ctypes.CDLL(None).prctl
except (OSError, AttributeError):  # not Linux
    _PRCTL = None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    addr: str
    log_path: Path

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def rss_mib(self) -> float:
        return process_rss_mib(self.proc.pid)

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


def process_rss_mib(pid: int | str = "self") -> float:
    """Resident set size of a process, from /proc (0.0 where there is no /proc)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def start_daemon(name: str, module: str, args: Iterable[str], workdir: Path, ready_timeout: float = 30.0) -> Daemon:
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log_path.open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=log, stdin=subprocess.DEVNULL, text=True, preexec_fn=_die_with_parent)
    found: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = READY.search(line)
            if m and not found:
                found.append(f"{m.group(1)}:{m.group(2)}")
                ready.set()
        ready.set()

    threading.Thread(target=drain, name=f"drain-{name}", daemon=True).start()
    if not ready.wait(ready_timeout) or not found:
        proc.kill()
        proc.wait()
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{name} ({module}) not ready within {ready_timeout}s (exit {proc.returncode}):\n{tail}")
    return Daemon(name, proc, found[0], log_path)


def start_echo(workdir: Path) -> Daemon:
    return start_daemon("echo", "bench.echo_server", [], workdir / "echo")


def start_namesrv(workdir: Path) -> Daemon:
    return start_daemon("namesrv", "namesrv.main", ["--host", "127.0.0.1", "-p", "0"], workdir / "namesrv")


def start_broker(workdir: Path, broker_name: str, namesrv_addr: str, **settings: object) -> Daemon:
    """A master broker with its store under ``workdir/broker_name``; ``settings`` are extra broker.conf keys."""
    conf = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": broker_name,
        "brokerId": 0,
        "brokerIP1": "127.0.0.1",
        "listenPort": 0,
        "storePathRootDir": workdir / broker_name / "store",
        "namesrvAddr": namesrv_addr,
        **settings,
    }
    conf_path = workdir / broker_name / "broker.conf"
    conf_path.parent.mkdir(parents=True, exist_ok=True)
    conf_path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    return start_daemon(broker_name, "broker.main", ["-c", str(conf_path)], workdir / broker_name)


def stop_all(daemons: Iterable[Daemon]) -> None:
    for d in daemons:
        d.stop()


def wait_until(predicate: Callable[[], T], timeout: float = 15.0, interval: float = 0.05,
               what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)

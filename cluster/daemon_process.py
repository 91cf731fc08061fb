"""Daemons as child processes: ``python -m MODULE ...`` on port 0, ready once it prints ``ready on HOST:PORT``.

Shared by the tests and the benchmarks. Stderr goes to ``<workdir>/<name>.log``; stdout is drained so a child
never blocks on a full pipe. No ``preexec_fn``: it would force a real fork() of a process that holds gRPC
channels (gRPC's fork handlers then run in the child); callers stop their daemons in ``finally`` blocks.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
READY = re.compile(r"ready on (\S+):(\d+)")
T = TypeVar("T")

class DaemonStartError(RuntimeError):
    """The daemon exited, or did not print its ready line in time; the message holds its log's tail."""


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    addr: str
    log_path: Path
    stdout_lines: list[str] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0, strict: bool = True) -> int:
        """Send ``sig`` and return the exit code. One that outlives ``timeout`` is killed, and then ``strict``
        raises (a test wants to know), otherwise its code is returned (cleanup just wants it gone)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
            if strict:
                raise RuntimeError(f"{self.name} did not exit within {timeout}s of signal {sig}") from None
            return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def rss_mib(self) -> float:
        return process_rss_mib(self.proc.pid)


def process_rss_mib(pid: int | str = "self") -> float:
    """Resident set size of a process, from /proc (0.0 where there is no /proc)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def start_daemon(name: str, module: str, args: Iterable[str], workdir: Path, ready_timeout: float = 30.0,
                 env: dict[str, str] | None = None) -> Daemon:
    """Run ``python -m module args``; return once it prints ``ready on HOST:PORT``."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                                stderr=log, text=True, stdin=subprocess.DEVNULL)
    lines: list[str] = []
    found: list[str] = []
    got_ready = threading.Event()

    def drain() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            m = READY.search(line)
            if m and not found:
                found.append(f"{m.group(1)}:{m.group(2)}")
                got_ready.set()
        got_ready.set()

    threading.Thread(target=drain, name=f"drain-{name}", daemon=True).start()
    if not got_ready.wait(ready_timeout):
        proc.kill()
        proc.wait()
        raise DaemonStartError(f"{name} not ready within {ready_timeout}s:\n{log_path.read_text()[-3000:]}")
    if not found:
        raise DaemonStartError(f"{name} exited ({proc.wait()}) before ready:\n{log_path.read_text()[-3000:]}")
    return Daemon(name, proc, found[0], log_path, lines)


def start_namesrv(workdir: Path, *extra: str) -> Daemon:
    return start_daemon("namesrv", "namesrv.main", ["--host", "127.0.0.1", "-p", "0", *extra], workdir)


def write_broker_conf(path: Path, settings: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def start_broker(workdir: Path, broker_name: str, namesrv_addr: str, env: dict[str, str] | None = None,
                 **settings: object) -> Daemon:
    """A master broker with its store under ``workdir/broker_name``; ``settings`` are broker.conf keys, ``env``
    extra environment (e.g. injected faults)."""
    conf = broker_conf(workdir, broker_name, namesrv_addr, **settings)
    return start_daemon(broker_name, "broker.main", ["-c", str(conf)], workdir / broker_name, env=env)


def broker_conf(workdir: Path, broker_name: str, namesrv_addr: str, **settings: object) -> Path:
    """The broker.conf of :func:`start_broker`, written under ``workdir/broker_name``."""
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
    return write_broker_conf(workdir / broker_name / "broker.conf", conf)


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
               what: str = "condition") -> T:
    """Poll ``predicate`` until it returns a truthy value; TimeoutError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)

"""Real daemons for integration tests: subprocesses on port 0, ready when they print their ready line."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
READY = re.compile(r"ready on (\S+):(\d+)")


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    addr: str
    log_path: Path
    stdout_lines: list[str] = field(default_factory=list)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` and wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"{self.name} did not exit within {timeout}s of signal {sig}") from None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_daemon(name: str, module: str, args: Iterable[str], workdir: Path, ready_timeout: float = 30.0,
                 env: dict[str, str] | None = None) -> Daemon:
    """Run ``python -m module args``; return once it prints ``ready on HOST:PORT`` (stderr goes to a log)."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                            stderr=log_path.open("ab"), text=True, stdin=subprocess.DEVNULL)
    lines: list[str] = []
    found: list[str] = []
    got_ready = threading.Event()

    def drain() -> None:  # keep reading so the child never blocks on a full pipe
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            m = READY.search(line)
            if m and not found:
                found.append(f"{m.group(1)}:{m.group(2)}")
                got_ready.set()
        got_ready.set()

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + ready_timeout
    while not got_ready.wait(0.05):
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{name} not ready within {ready_timeout}s:\n{log_path.read_text()[-3000:]}")
    if not found:
        raise AssertionError(f"{name} exited ({proc.wait()}) before ready:\n{log_path.read_text()[-3000:]}")
    return Daemon(name, proc, found[0], log_path, lines)


def start_namesrv(workdir: Path, *extra: str) -> Daemon:
    return start_daemon("namesrv", "namesrv.main", ["--host", "127.0.0.1", "-p", "0", *extra], workdir)


def write_broker_conf(path: Path, settings: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def start_broker(workdir: Path, broker_name: str, namesrv_addr: str, **settings: object) -> Daemon:
    """A broker with its store under ``workdir/broker_name``; ``settings`` are broker.conf keys."""
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
    conf_path = write_broker_conf(workdir / broker_name / "broker.conf", conf)
    return start_daemon(broker_name, "broker.main", ["-c", str(conf_path)], workdir / broker_name)


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Cluster:
    """A name server and brokers started by a test; ``settings`` are broker.conf keys for every broker."""

    workdir: Path
    namesrv: Daemon
    brokers: dict[str, Daemon] = field(default_factory=dict)
    settings: dict[str, object] = field(default_factory=dict)

    @property
    def addr(self) -> str:
        return self.namesrv.addr

    def start_broker(self, name: str) -> Daemon:
        self.brokers[name] = start_broker(self.workdir, name, self.addr, **self.settings)
        return self.brokers[name]

    def create_topic(self, topic: str, queues: int = 4) -> None:
        """A normal topic on every live broker, returned once the name server routes it to all of them."""
        from client import Admin

        with Admin(self.addr) as admin:
            admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=queues, write_queue_nums=queues)
            expected = {n for n, d in self.brokers.items() if d.alive}
            wait_until(lambda: {q.broker_name for q in admin.topic_route(topic).queue_datas} >= expected
                       if topic in admin.topic_list() else False, what=f"route of {topic}")

    def stop(self) -> None:
        for daemon in [*self.brokers.values(), self.namesrv]:
            if daemon.alive:
                daemon.stop()


def make_cluster(workdir: Path, broker_names: Iterable[str] = ("broker-a", "broker-b"),
                 namesrv_args: Iterable[str] = (), cls: type[Cluster] = Cluster, **settings: object) -> Cluster:
    cluster = cls(workdir, start_namesrv(workdir / "namesrv", *namesrv_args), settings=settings)
    try:
        for name in broker_names:
            cluster.start_broker(name)
    except BaseException:
        cluster.stop()
        raise
    return cluster

"""Real daemons (a name server, two brokers and mqproxy, on port 0 with temp dirs) and the official RocketMQ 5 Python
client, installed by pip into a venv of its own and run in subprocesses: its generated modules clash with this
repository's copy of the same protos in one process, and it writes its logs under ``~/logs`` (HOME is a temp dir).

The client's venv lives in pytest's cache (``.pytest_cache/d/``, git-ignored), made once and reused while its
stamp names the same version; ``pytest --cache-clear`` or ``make clean`` makes it again. How it is made is shared
with the proxy's benchmark: ``cluster/official_client.py``."""

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cluster.official_client import CLIENT_REQUIREMENT, ClientInstallError, client_env
from cluster.official_client import install_client as _install_client
from tests.cluster import Cluster, Daemon, make_cluster, start_daemon

__all__ = ["CLIENT_REQUIREMENT", "OfficialClient", "ProxyCluster", "RunningScript", "install_client",
           "running_proxy_cluster", "start_proxy"]

SCRIPTS = Path(__file__).resolve().parent / "official_client"


@dataclass
class RunningScript:
    """An ``official_client/`` script still running: its ``@@ {json}`` lines as they come, a way to wait for one,
    and ``finish`` (a line ``exit`` on its stdin, then its end)."""

    client: "OfficialClient"
    name: str
    proc: subprocess.Popen
    lines: list[dict] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _drainer: threading.Thread | None = None

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.raw.append(line)
                if line.startswith("@@ "):
                    self.lines.append(json.loads(line[3:]))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[dict], bool], timeout: float, what: str) -> dict:
        """The first line ``predicate`` accepts, waiting up to ``timeout`` s; fails with the script's output."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((line for line in self.lines if predicate(line)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    break
                self._changed.wait(min(left, 0.5))
        raise AssertionError(f"{self.name}: no line for {what} within {timeout}s\n{self.output()}")

    def finish(self, timeout: float = 30.0) -> list[dict]:
        """Tell the script to end and wait for it; its lines (the last one ``done``)."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.write("exit\n")
            self.proc.stdin.close()
        code = self.proc.wait(timeout)
        if self._drainer is not None:
            self._drainer.join(5)  # its last lines
        if code != 0 or not self.lines or not self.lines[-1].get("done"):
            raise AssertionError(f"{self.name} exited {code}\n{self.output()}")
        return list(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def output(self) -> str:
        err = self.client.home / f"{self.name}.stderr"
        stderr = err.read_text(errors="replace") if err.exists() else ""
        return (f"stdout:\n{''.join(self.raw)[-3000:]}\nstderr:\n{stderr[-3000:]}\n"
                f"client log:\n{self.client.log_tail()}")


@dataclass
class OfficialClient:
    """The official client's interpreter, and a way to run one of ``official_client/``'s scripts with it."""

    python: Path
    home: Path

    @contextlib.contextmanager
    def start(self, script: str, *args: object) -> Iterator[RunningScript]:
        """Run ``script`` in the background while the block runs; it is killed if the block leaves before
        ``finish``."""
        name = Path(script).stem
        with (self.home / f"{name}.stderr").open("w") as stderr:
            proc = subprocess.Popen([str(self.python), "-u", str(SCRIPTS / script), *map(str, args)], cwd=self.home,
                                    env=client_env(self.home), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=stderr, text=True)
        running = RunningScript(self, name, proc)
        running._drainer = threading.Thread(target=running._drain, name=f"drain-{name}", daemon=True)
        running._drainer.start()
        try:
            yield running
        finally:
            running.kill()

    def run(self, script: str, *args: object, timeout: float = 120.0) -> list[dict]:
        """Run ``script`` to its end; returns its ``@@ {json}`` lines. A failure shows its output."""
        proc = subprocess.run([str(self.python), str(SCRIPTS / script), *map(str, args)], cwd=self.home,
                              env=client_env(self.home), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        lines = [json.loads(line[3:]) for line in proc.stdout.splitlines() if line.startswith("@@ ")]
        if proc.returncode != 0 or not lines or not lines[-1].get("done"):
            raise AssertionError(f"{script} {' '.join(map(str, args))} exited {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}\n"
                                 f"client log:\n{self.log_tail()}")
        return lines

    def log_tail(self, chars: int = 3000) -> str:
        logs = sorted((self.home / "logs").rglob("*.log"))
        return "".join(p.read_text(errors="replace") for p in logs)[-chars:]


def install_client(cache_dir: Path) -> Path:
    """A venv with the official client; made once (a stamp names the requirement it holds)."""
    try:
        return _install_client(cache_dir)
    except ClientInstallError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def official_client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> OfficialClient:
    assert request.config.cache is not None, "the client's venv lives in pytest's cache (-p no:cacheprovider)"
    python = install_client(request.config.cache.mkdir("rocketmq-python-client"))
    return OfficialClient(python, tmp_path_factory.mktemp("client-home"))


@dataclass
class ProxyCluster:
    cluster: Cluster
    proxy: Daemon

    @property
    def namesrv(self) -> str:
        return self.cluster.addr

    @property
    def endpoint(self) -> str:
        return self.proxy.addr


def start_proxy(workdir: Path, namesrv_addr: str, *extra: str) -> Daemon:
    return start_daemon("mqproxy", "proxy.main", ["-n", namesrv_addr, "--host", "127.0.0.1", "-p", "0", *extra],
                        workdir)


@contextlib.contextmanager
def running_proxy_cluster(workdir: Path, proxy_args: tuple[str, ...] = (), namesrv_args: tuple[str, ...] = (),
                          **settings: object) -> Iterator[ProxyCluster]:
    """A name server, two brokers (``settings``: broker.conf keys for both, or make_cluster's own arguments) and
    mqproxy (``proxy_args``: more of its flags; ``namesrv_args``: the name server's), stopped on the way out."""
    conf: dict[str, Any] = {"registerNameServerPeriod": 1000, **settings}
    cluster = make_cluster(workdir, namesrv_args=namesrv_args, **conf)
    try:
        proxy = start_proxy(workdir / "mqproxy", cluster.addr, *proxy_args)
        try:
            yield ProxyCluster(cluster, proxy)
        finally:
            assert proxy.stop() == 0, proxy.log()[-3000:]
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def proxy_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    with running_proxy_cluster(tmp_path_factory.mktemp("proxy-cluster")) as cluster:
        yield cluster

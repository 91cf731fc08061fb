"""Real daemons (a name server, two brokers and mqproxy, on port 0 with temp dirs) and the official RocketMQ 5 Python
client, installed by pip into a venv of its own and run in subprocesses: its generated modules clash with this
repository's copy of the same protos in one process, and it writes its logs under ``~/logs`` (HOME is a temp dir).

The client's venv lives in pytest's cache (``.pytest_cache/d/``, git-ignored), made once and reused while its
stamp names the same version; ``pytest --cache-clear`` or ``make clean`` makes it again."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster import Cluster, Daemon, make_cluster, start_daemon

CLIENT_REQUIREMENT = "rocketmq-python-client==5.1.2"
SCRIPTS = Path(__file__).resolve().parent / "official_client"
INSTALL_TIMEOUT_S = 600


@dataclass
class OfficialClient:
    """The official client's interpreter, and a way to run one of ``official_client/``'s scripts with it."""

    python: Path
    home: Path

    def run(self, script: str, *args: object, timeout: float = 120.0) -> list[dict]:
        """Run ``script`` to its end; returns its ``@@ {json}`` lines. A failure shows its output."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env["HOME"] = str(self.home)
        proc = subprocess.run([str(self.python), str(SCRIPTS / script), *map(str, args)], cwd=self.home, env=env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
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
    venv = cache_dir / "venv"
    python = venv / "bin" / "python"
    stamp = cache_dir / "installed"
    if stamp.exists() and stamp.read_text() == CLIENT_REQUIREMENT and python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          CLIENT_REQUIREMENT], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if pip.returncode != 0:
        pytest.fail(f"pip install {CLIENT_REQUIREMENT} failed:\n{pip.stdout[-2000:]}\n{pip.stderr[-2000:]}")
    stamp.write_text(CLIENT_REQUIREMENT)
    return python


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


def start_proxy(workdir: Path, namesrv_addr: str) -> Daemon:
    return start_daemon("mqproxy", "proxy.main", ["-n", namesrv_addr, "--host", "127.0.0.1", "-p", "0"], workdir)


@pytest.fixture(scope="module")
def proxy_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    workdir = tmp_path_factory.mktemp("proxy-cluster")
    cluster = make_cluster(workdir, registerNameServerPeriod=1000)
    try:
        proxy = start_proxy(workdir / "mqproxy", cluster.addr)
        try:
            yield ProxyCluster(cluster, proxy)
        finally:
            assert proxy.stop() == 0, proxy.log()[-3000:]
    finally:
        cluster.stop()

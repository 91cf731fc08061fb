"""The official RocketMQ 5 Python client (``rocketmq-python-client``) in a venv of its own, for what speaks to
mqproxy the way users do: the proxy's tests (``tests/proxy/``) and its benchmark (``bench/proxy_bench.py``).

Its generated modules clash with this repository's copy of the same protos in one process, so it only ever runs in
subprocesses, with ``HOME`` set to a directory of the caller's (it writes its logs under ``~/logs``). The venv is
made once, where pytest keeps its cache (``.pytest_cache/d/rocketmq-python-client``, git-ignored), and reused
while its stamp names the same requirement; ``pytest --cache-clear`` or ``make clean`` makes it again.
"""

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from cluster.daemon_process import REPO

CLIENT_REQUIREMENT = "rocketmq-python-client==5.1.2"
DEFAULT_CACHE_DIR = REPO / ".pytest_cache" / "d" / "rocketmq-python-client"  # pytest's cache.mkdir of that name
INSTALL_TIMEOUT_S = 600


class ClientInstallError(RuntimeError):
    """The venv could not be made or pip could not install the client; the message holds pip's output."""


def installed_python(cache_dir: Path = DEFAULT_CACHE_DIR) -> Path | None:
    """The venv's interpreter when the venv holds the client already, else None."""
    python = cache_dir / "venv" / "bin" / "python"
    stamp = cache_dir / "installed"
    if stamp.exists() and stamp.read_text() == CLIENT_REQUIREMENT and python.exists():
        return python
    return None


def install_client(cache_dir: Path = DEFAULT_CACHE_DIR) -> Path:
    """The interpreter of a venv with the client, made (once) if needed; ClientInstallError when it cannot be.
    Several processes may ask at once (the suite's workers): one makes the venv while the others wait on a lock."""
    python = installed_python(cache_dir)
    if python is not None:
        return python
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / "install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return installed_python(cache_dir) or _make_venv(cache_dir)


def _make_venv(cache_dir: Path) -> Path:
    venv = cache_dir / "venv"
    python = venv / "bin" / "python"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=120,
                       capture_output=True, text=True)
        pip = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                              CLIENT_REQUIREMENT], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClientInstallError(f"making a venv for {CLIENT_REQUIREMENT} failed: {exc}") from None
    if pip.returncode != 0:
        raise ClientInstallError(f"pip install {CLIENT_REQUIREMENT} failed:\n{pip.stdout[-2000:]}\n"
                                 f"{pip.stderr[-2000:]}")
    (cache_dir / "installed").write_text(CLIENT_REQUIREMENT)
    return python


def client_env(home: Path) -> dict[str, str]:
    """The environment of a client subprocess: this one's, without this interpreter's venv, HOME at ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["HOME"] = str(home)
    return env

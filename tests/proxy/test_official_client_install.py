"""The official client's venv is made once even when the suite's workers ask for it at the same time: the first
holds a lock while it installs, and the others then find the venv it made."""

import contextlib
import fcntl
import subprocess
import sys
from pathlib import Path

from cluster.daemon_process import REPO
from cluster.official_client import CLIENT_REQUIREMENT

INSTALL = "import sys; from pathlib import Path; from cluster.official_client import install_client; " \
          "print(install_client(Path(sys.argv[1])))"


def test_a_worker_waiting_on_the_install_uses_the_venv_the_other_made(tmp_path: Path) -> None:
    python = tmp_path / "venv" / "bin" / "python"
    with (tmp_path / "install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # this test is the worker installing
        waiter = subprocess.Popen([sys.executable, "-c", INSTALL, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:  # a failed check must not leave the waiter to install the real client once the lock is free
            with contextlib.suppress(subprocess.TimeoutExpired):  # it should still be waiting after 3 s
                waiter.wait(3)
            assert waiter.poll() is None, f"a second worker must wait while the first installs: {waiter.communicate()}"
            python.parent.mkdir(parents=True)
            python.write_text("")  # what the first worker's install leaves
            (tmp_path / "installed").write_text(CLIENT_REQUIREMENT)
        except BaseException:
            waiter.kill()
            waiter.wait()
            raise
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    assert out.strip() == str(python), "the waiter must take the venv made, not make its own"
    assert python.read_text() == "", "the waiter must not have remade the venv"

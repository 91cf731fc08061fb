"""The SDK lowers the interpreter's switch interval once, when the process still has Python's default; each case
runs in a process of its own, as the setting is the whole process's."""

import subprocess
import sys

import pytest

from cluster.daemon_process import REPO


def interval_after(setup: str) -> float:
    script = (f"import sys\nfrom client import PullConsumer, Producer\n{setup}\n"
              "Producer('127.0.0.1:1').close()\nPullConsumer('127.0.0.1:1', group='g').close()\n"
              "print(sys.getswitchinterval())")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


@pytest.mark.parametrize(("setup", "expected"), [
    ("", 0.0005),  # Python's default: lowered by the first client
    ("sys.setswitchinterval(0.002)", 0.002),  # the application's own: kept
    ("from client.switch_interval import keep_switch_interval\nkeep_switch_interval()", 0.005),  # a daemon's
])
def test_the_first_client_lowers_only_the_default(setup: str, expected: float):
    assert interval_after(setup) == pytest.approx(expected)


def test_an_application_may_set_its_own_after_creating_clients():
    assert interval_after("") == pytest.approx(0.0005)
    assert interval_after("import client.switch_interval as s\ns.lower_switch_interval()\n"
                          "sys.setswitchinterval(0.005)") == pytest.approx(0.005)

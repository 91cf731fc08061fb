"""Two consumer processes with one host address and one pid (PID 1 of two containers on the host's network, or
two PID namespaces) had one client id: the broker took them for one member, both consumed every queue of their
share (every message handled twice; orderly queues by two members at once), and consumerConnection showed one."""

import subprocess
import sys

from cluster.daemon_process import REPO

AS_PID_1 = "import os; os.getpid = lambda: 1; from client.push_consumer import new_client_id; print(new_client_id())"


def test_two_processes_with_one_pid_get_different_client_ids():
    ids = [subprocess.run([sys.executable, "-c", AS_PID_1], cwd=REPO, capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip() for _ in range(2)]
    assert all("@1#0" in i for i in ids), ids
    assert ids[0] != ids[1], ids

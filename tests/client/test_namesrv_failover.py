"""A client given several name servers asks the next when one does not answer. With two, the index moved twice a
failure (the loop's and the client's own), so the client asked the dead first one again and never the second: one
dead name server of two broke every client, mqadmin and the proxy (UNAVAILABLE, or DEADLINE_EXCEEDED when paused)."""

from pathlib import Path

import pytest

from client import Admin
from tests.admin_cli.helpers import free_port
from tests.cluster import start_namesrv


@pytest.mark.parametrize("dead_first", [1, 2, 3])
def test_the_live_name_server_answers_whatever_dead_ones_come_first(tmp_path: Path, dead_first: int):
    ns = start_namesrv(tmp_path / "namesrv")
    try:
        dead = [f"127.0.0.1:{free_port()}" for _ in range(dead_first)]
        with Admin(";".join([*dead, ns.addr])) as admin:
            assert admin.topic_list() == admin.topic_list()  # twice: the second starts at the one that answered
            assert admin.client.namesrv_addrs[admin.client._namesrv_index] == ns.addr
    finally:
        ns.stop()

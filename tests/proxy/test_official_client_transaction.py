"""Transactional messages through the proxy, sent by the official client: a committed one is delivered, a rolled
back one never is."""

import time

from tests.cluster import wait_until
from tests.proxy.conftest import OfficialClient, ProxyCluster
from tests.proxy.test_official_client_send import fresh_topic, pull_all


def test_commit_is_delivered_and_rollback_is_not(proxy_cluster: ProxyCluster, official_client: OfficialClient):
    topic = fresh_topic(proxy_cluster)
    lines = official_client.run("transact.py", proxy_cluster.endpoint, topic)
    sent = {line["outcome"]: line for line in lines if "outcome" in line}
    assert set(sent) == {"commit", "rollback"}
    assert all(s["transaction_id"] for s in sent.values())

    stored = wait_until(lambda: pull_all(proxy_cluster.namesrv, topic), timeout=15, what="the commit delivered")
    time.sleep(1)
    stored = pull_all(proxy_cluster.namesrv, topic)
    assert [m.body for m in stored] == [b"tx-commit"]
    assert stored[0].msg_id == sent["commit"]["message_id"]

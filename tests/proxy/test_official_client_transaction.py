"""Transactional messages through the proxy, sent by the official client: a committed one is delivered, a rolled
back one never is; one left open is checked back by a broker, through the proxy's check sessions, as a Telemetry
``RecoverOrphanedTransactionCommand`` to the client's ``TransactionChecker``, whose answer decides it.

The brokers check a half message after ``transactionTimeOut`` (1 s here) and every ``transactionCheckInterval``."""

from collections.abc import Iterator

import pytest

from client import Admin
from proto.v2 import definition_pb2
from tests.cluster import wait_until
from tests.proxy.conftest import OfficialClient, ProxyCluster, running_proxy_cluster
from tests.proxy.test_official_client_send import fresh_topic, pull_all

CHECKS = {"transactionTimeOut": 1000, "transactionCheckInterval": 500}
CHECK_DEADLINE_S = 30  # the first check comes 1-2 s after the send; slack for a loaded machine


@pytest.fixture(scope="module")
def proxy_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    """This module's own cluster: brokers that check open transactions within seconds."""
    with running_proxy_cluster(tmp_path_factory.mktemp("proxy-tx-cluster"), **CHECKS) as cluster:
        yield cluster


def pending(proxy_cluster: ProxyCluster) -> int:
    """Half messages nobody ended yet, on every broker."""
    with Admin(proxy_cluster.namesrv) as admin:
        return sum(int(admin.broker_runtime_info(d.addr)["transactionHalfPending"])
                   for d in proxy_cluster.cluster.brokers.values())


def test_commit_is_delivered_and_rollback_is_not(proxy_cluster: ProxyCluster, official_client: OfficialClient):
    topic = fresh_topic(proxy_cluster)
    lines = official_client.run("transact.py", proxy_cluster.endpoint, topic)
    sent = {line["outcome"]: line for line in lines if "outcome" in line}
    assert set(sent) == {"commit", "rollback"}
    assert all(s["transaction_id"] for s in sent.values())

    wait_until(lambda: pull_all(proxy_cluster.namesrv, topic), timeout=15, what="the commit delivered")
    wait_until(lambda: pending(proxy_cluster) == 0, timeout=15, what="both transactions ended")
    stored = pull_all(proxy_cluster.namesrv, topic)  # nothing pending: what is delivered is all there will be
    assert [m.body for m in stored] == [b"tx-commit"]
    assert stored[0].msg_id == sent["commit"]["message_id"]


@pytest.mark.parametrize("answer", ["commit", "rollback"])
def test_open_transaction_is_checked_through_the_proxy_and_the_checker_decides(
        proxy_cluster: ProxyCluster, official_client: OfficialClient, answer: str):
    topic = fresh_topic(proxy_cluster)
    body = f"tx-open-{answer}"
    with official_client.start("transact.py", proxy_cluster.endpoint, topic, "--leave-open", answer,
                               "--budget", CHECK_DEADLINE_S + 30) as script:
        sent = script.wait_for(lambda line: line.get("outcome") == "open", timeout=30, what="the half message sent")
        assert sent["transaction_id"]
        checked = script.wait_for(lambda line: line.get("event") == "checked", timeout=CHECK_DEADLINE_S,
                                  what="the broker's check at the client's checker")
        if answer == "commit":
            (stored,) = wait_until(lambda: pull_all(proxy_cluster.namesrv, topic), timeout=15,
                                   what="the checked transaction's commit delivered")
        wait_until(lambda: pending(proxy_cluster) == 0, timeout=15, what="the checked transaction ended")
        lines = script.finish()

    # what the checker was shown: the half message as the client sent it, with its id, and a body digest that holds
    assert checked["topic"] == topic and checked["body"] == body
    assert checked["message_id"] == sent["message_id"]
    assert checked["tag"] == "TagT" and checked["keys"] == [f"key-{body}"]
    assert checked["properties"] == {"color": "blue"}  # no broker-side transaction properties among the user's
    assert checked["message_type"] == definition_pb2.TRANSACTION
    assert not checked["corrupted"]
    assert {line["body"] for line in lines if line.get("event") == "checked"} == {body}  # no other was checked
    assert not [line for line in lines if line.get("event") == "budget-spent"]

    delivered = pull_all(proxy_cluster.namesrv, topic)  # the transaction ended: nothing more can come
    if answer == "commit":
        assert [m.body for m in delivered] == [body.encode()]
        assert stored.msg_id == sent["message_id"]
        assert stored.tags == "TagT" and stored.keys == [f"key-{body}"] and stored.properties["color"] == "blue"
        assert "TRAN_MSG" not in stored.properties
    else:
        assert delivered == []

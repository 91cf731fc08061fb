"""Auto-renew through mqproxy with the official client's PushConsumer: a listener that takes longer than the
invisible time keeps its message (the proxy renews it), consumes it once, and its ack (with the handle it
received, void at the broker since the renews) lands: nothing comes again. On a normal topic and on a static one
(whose renews and ack go to the logic queue's leader, in logic offsets)."""

import uuid
from collections.abc import Iterator

import pytest

from client import Admin
from tests.cluster import wait_static_route
from tests.proxy.conftest import OfficialClient, ProxyCluster, running_proxy_cluster
from tests.proxy.test_official_client_receive import deliveries, fresh_topic, send

INVISIBLE_MS = 4000
SLOW_S = 9  # more than two invisible times: renewed at least twice


@pytest.fixture(scope="module")
def renew_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    with running_proxy_cluster(tmp_path_factory.mktemp("renew-cluster"),
                               proxy_args=("--default-invisible-ms", str(INVISIBLE_MS), "--renew-ahead-ms",
                                           "2000")) as cluster:  # margin for a loaded machine
        yield cluster


def static_topic(proxy_cluster: ProxyCluster) -> str:
    topic = f"ProxyRenewStatic_{uuid.uuid4().hex[:8]}"
    with Admin(proxy_cluster.namesrv) as admin:
        admin.update_static_topic(topic, 2, brokers=["broker-a", "broker-b"])
        wait_static_route(proxy_cluster.namesrv, topic, 0)
    return topic


@pytest.mark.parametrize("make_topic", [fresh_topic, static_topic], ids=["normal", "static"])
def test_a_slow_listener_keeps_its_message_and_consumes_it_once(renew_cluster: ProxyCluster,
                                                                official_client: OfficialClient, make_topic):
    topic = make_topic(renew_cluster)
    sent = send(official_client, renew_cluster, topic, 6)
    group = f"renew_{uuid.uuid4().hex[:8]}"
    # lingers past the slow message's end by more than an invisible time: an ack that failed would show it again
    lines = official_client.run("push_consume.py", renew_cluster.endpoint, group, topic, "--expect", len(sent),
                                "--slow-suffix", "-3", "--slow-s", SLOW_S, "--linger", INVISIBLE_MS / 1000 + 2,
                                "--budget", 60, timeout=120)
    delivered = deliveries(lines, "delivered")
    assert sorted(d["message_id"] for d in delivered) == sorted(sent), "a message came again (or never)"
    assert all(d["attempt"] == 1 and d["result"] == "success" for d in delivered)
    (slow,) = [d for d in delivered if d["body"].endswith("-3")]
    (started,) = deliveries(lines, "slow-start")
    assert slow["t"] - started["t"] >= SLOW_S - 0.5
    log = renew_cluster.proxy.log()
    assert "auto_renew_failed" not in log and "Traceback" not in log
    assert "reason=client_offline" not in log  # its Telemetry stream is what keeps its messages renewed

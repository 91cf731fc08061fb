"""ACL through the proxy: the official RocketMQ 5 client's signed sends (``Credentials(ak, sk)``) with ACL on in the
name server, both brokers and mqproxy (which asks a broker to verify each call: proxy/proxy_acl.py)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Admin
from client.acl_admin import AclAdmin
from tests.acl.test_acl_cluster import INNER, NAMESRV_ARGS, ROOT, SETTINGS
from tests.cluster import wait_until
from tests.proxy.conftest import OfficialClient, ProxyCluster, running_proxy_cluster

TOPIC = "ProxyAclTopic"
PROXY_ARGS = ("--authentication-enabled", "--authorization-enabled", "--inner-client-authentication-credentials",
              str(SETTINGS["innerClientAuthenticationCredentials"]))


@pytest.fixture(scope="module")
def acl_proxy_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    with running_proxy_cluster(Path(tmp_path_factory.mktemp("proxy-acl")), proxy_args=PROXY_ARGS,
                               namesrv_args=NAMESRV_ARGS, **SETTINGS) as pc:
        with Admin(pc.namesrv, credentials=ROOT) as admin:
            wait_until(lambda: len(admin.all_masters()) == 2, what="both brokers registered (signed)")
            admin.create_topic(TOPIC, cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)
            wait_until(lambda: TOPIC in admin.topic_list(), what="topic routed")
            acl = AclAdmin(admin)
            acl.create_user("alice", "alice-secret", cluster="DefaultCluster")
            acl.create_user("bob", "bob-secret", cluster="DefaultCluster")
            acl.create_acl("User:alice", [f"Topic:{TOPIC}"], ["Pub"], "Allow", cluster="DefaultCluster")
        yield pc


def _produce(client: OfficialClient, pc: ProxyCluster, *args: str) -> list[dict]:
    return client.run("produce.py", pc.endpoint, TOPIC, 2, *args, timeout=90)


def test_a_user_with_pub_sends_through_the_proxy(official_client: OfficialClient,
                                                 acl_proxy_cluster: ProxyCluster) -> None:
    lines = _produce(official_client, acl_proxy_cluster, "--ak", "alice", "--sk", "alice-secret")
    assert [line["body"] for line in lines if "body" in line] == ["body-0", "body-1"]


@pytest.mark.parametrize(("credentials", "expected"), [
    (("bob", "bob-secret"), f"no Pub permission on Topic:{TOPIC}"),  # authentic, not allowed: FORBIDDEN
    (("alice", "not-alice-secret"), "wrong signature for access key 'alice'"),  # UNAUTHORIZED
    (("", ""), "authentication failed"),  # unsigned: UNAUTHORIZED
], ids=["no-pub", "wrong-secret", "unsigned"])
def test_refused_sends_say_why_and_never_the_secret(official_client: OfficialClient, acl_proxy_cluster: ProxyCluster,
                                                    credentials: tuple[str, str], expected: str) -> None:
    ak, sk = credentials
    args = ["--expect-error", *(("--ak", ak, "--sk", sk) if ak else ())]
    lines = _produce(official_client, acl_proxy_cluster, *args)
    errors = [line["error"] for line in lines if "error" in line]
    assert errors, f"the send was not refused: {lines}"
    assert not any("body" in line for line in lines)
    # The client's exception may be generic ("failed to fetch topic route"): its log has the proxy's status.
    seen = errors[0] + official_client.log_tail(1_000_000)
    assert expected in seen, errors[0]
    code = "FORBIDDEN" if ak == "bob" else "UNAUTHORIZED"  # v2 40300 / 40100
    proxy_log = acl_proxy_cluster.proxy.log()
    assert any(f"code={code}" in line and expected in line for line in proxy_log.splitlines()), proxy_log[-2000:]
    for secret in (sk, INNER[1], ROOT[1]):
        if secret:
            assert secret not in seen
            assert secret not in proxy_log

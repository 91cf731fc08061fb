"""A replica whose fsync fails stops: the store fail-stops and replication ends, saying why. Before, the flusher
thread died with a traceback and the replica went on appending (and dispatching) what it could no longer make
durable, acknowledging nothing, with no reason given anywhere an operator looks."""

from pathlib import Path

from broker.ha.ha_client import HAClient
from broker.ha.ha_service import GroupIdentity
from broker.store import fault_points
from broker.store.message_store import MessageStore
from tests.cluster import wait_until
from tests.store.conftest import store_config


def test_a_failed_fsync_of_the_replicated_log_fail_stops_the_store_and_replication(tmp_path: Path):
    store = MessageStore(store_config(tmp_path / "store"))
    reasons: list[str] = []
    # nobody listens there: the stream fails and is tried again, while the flusher runs on its own
    client = HAClient("127.0.0.1:1", GroupIdentity("c", "broker-a", 1, "127.0.0.1:2", 1 << 20), store.commit_log,
                      fail_stop=reasons.append)
    fault_points.arm("fsync")
    try:
        client.start()
        wait_until(lambda: reasons, timeout=10, what="the replica to fail-stop")
        client.join(10)
    finally:
        fault_points.disarm()
        client.shutdown()
    assert not client.is_alive() and not client._flusher.is_alive()
    assert reasons == [client.refusal] and "injected fsync failure" in client.refusal, client.refusal

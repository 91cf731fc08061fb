"""A dead broker leaves the routes within the expiry window; producers keep sending through the others."""

from pathlib import Path

from client import Admin, Message, Producer
from tests.cluster import wait_until
from tests.integration.conftest import make_cluster


def test_killed_broker_is_dropped_and_producer_fails_over(tmp_path: Path, store_type: str):
    cluster = make_cluster(tmp_path, namesrv_args=("--broker-expiry-ms", "3000", "--scan-interval-ms", "200"),
                           registerNameServerPeriod=500, brokerNotActiveTimeoutMillis=3000, storeType=store_type)
    try:
        topic = "FailoverT"
        cluster.create_topic(topic, queues=4)
        with Producer(cluster.addr, send_timeout_ms=1000) as producer, Admin(cluster.addr) as admin:
            results = [producer.send(Message(topic, f"before-{i}".encode())) for i in range(40)]
            assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}

            cluster.brokers["broker-a"].kill()
            # The route still lists broker-a: every send that picks it must be retried on broker-b, unseen.
            after = [producer.send(Message(topic, f"after-{i}".encode())) for i in range(40)]
            assert {r.queue.broker_name for r in after} == {"broker-b"}

            def route_brokers() -> set[str]:
                return {q.broker_name for q in admin.topic_route(topic).queue_datas}

            wait_until(lambda: route_brokers() == {"broker-b"}, timeout=6, what="broker-a expired from the route")
            brokers = {b.broker_name for b in admin.all_brokers()}
            assert brokers == {"broker-b"}
    finally:
        cluster.stop()

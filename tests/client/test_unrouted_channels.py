"""A client never closed its channel to a broker address no route names any more (a broker restarted on a new port,
a scale-in): gRPC reconnects a failed channel by itself every second, so a long-running client (mqproxy too) made
one connect a second to every old address for the rest of its life. Such a channel is closed once no route has
named it for a while and it is not connected."""

import time
from pathlib import Path

from client import Message, Producer
from client.client_instance import UNROUTED_CHANNEL_CLOSE_S
from tests.cluster import make_cluster, start_broker, wait_until

TOPIC = "UnroutedT"


def test_a_dead_brokers_channel_is_closed_and_the_live_ones_kept(tmp_path: Path) -> None:
    cluster = make_cluster(tmp_path, broker_names=("broker-a",), registerNameServerPeriod=1000)
    try:
        cluster.create_topic(TOPIC, queues=1)
        with Producer(cluster.addr, send_timeout_ms=1000) as producer:
            producer.send(Message(TOPIC, b"before"))
            old = cluster.brokers["broker-a"].addr
            cluster.brokers["broker-a"].kill()
            new = start_broker(tmp_path, "broker-a", cluster.addr, registerNameServerPeriod=1000)
            cluster.brokers["broker-a"] = new

            def sent() -> bool:
                try:
                    return producer.send(Message(TOPIC, b"after")).queue.broker_name == "broker-a"
                except Exception:
                    return False

            wait_until(sent, timeout=30, what="a send to the restarted broker")
            client = producer.client
            assert old in client._channels and new.addr in client._channels
            t0 = time.monotonic()
            assert client.close_unrouted_channels(t0) == []  # not yet: unrouted only since now
            assert client.close_unrouted_channels(t0 + UNROUTED_CHANNEL_CLOSE_S) == [old]
            assert old not in client._channels and not any(key[0] == old for key in client._streams)
            assert new.addr in client._channels
            assert producer.send(Message(TOPIC, b"still")).queue.broker_name == "broker-a"
    finally:
        cluster.stop()

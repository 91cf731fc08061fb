"""mqproxy forwards sends on the brokers' send streams from its event loop (``proxy/loop_producer.py``,
``proxy/broker_send_streams.py``). What a v2 client sees when a broker fails under it must not change: a send
in flight on a stream that breaks (SIGKILL) or goes silent (SIGSTOP) is retried on the other broker and
answered OK, and every message answered OK is stored. Real daemons; the v2 client is the v2 stubs."""

import signal
import time
import uuid
from collections import deque
from pathlib import Path

import grpc

from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from tests.cluster import Cluster, make_cluster, wait_until
from tests.proxy.conftest import start_proxy
from tests.proxy.test_official_client_send import pull_all

WINDOW = 8
CLIENT_ID = [("x-mq-client-id", "failure-sender")]


def send_request(topic: str, body: bytes) -> tuple[str, service_pb2.SendMessageRequest]:
    message_id = uuid.uuid4().hex.upper()
    return message_id, service_pb2.SendMessageRequest(messages=[definition_pb2.Message(
        topic=definition_pb2.Resource(name=topic), body=body,
        system_properties=definition_pb2.SystemProperties(message_id=message_id))])


def send_all(stub: service_pb2_grpc.MessagingServiceStub, topic: str, count: int, during: int,
             fault: callable) -> dict[str, float]:
    """``count`` sends, ``WINDOW`` in flight; ``fault`` runs once ``during`` of them were answered. Returns the
    seconds each send took, by message id; fails on any answer but OK."""
    took: dict[str, float] = {}
    in_flight: deque = deque()
    for i in range(count):
        message_id, request = send_request(topic, f"m{i}".encode())
        in_flight.append((message_id, time.monotonic(), stub.SendMessage.future(request, metadata=CLIENT_ID,
                                                                              timeout=30)))
        if len(in_flight) == WINDOW or i == count - 1:
            while in_flight:
                message_id, started, future = in_flight.popleft()
                response = future.result()
                assert response.status.code == definition_pb2.Code.OK, response.status.message
                assert response.entries[0].message_id == message_id
                took[message_id] = time.monotonic() - started
                if len(took) == during:
                    fault()
                if len(in_flight) < WINDOW // 2:
                    break
    return took


def run_with_fault(cluster: Cluster, tmp_path: Path, fault_signal: signal.Signals, count: int) -> dict[str, float]:
    topic = f"ProxyFailover_{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 4)
    proxy = start_proxy(tmp_path / "mqproxy", cluster.addr)
    victim = cluster.brokers["broker-b"]
    try:
        with grpc.insecure_channel(proxy.addr) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            took = send_all(stub, topic, count, 150, lambda: victim.proc.send_signal(fault_signal))
        assert proxy.alive, proxy.log()[-3000:]
    finally:
        if victim.alive:
            victim.proc.send_signal(signal.SIGCONT)
        proxy.stop(strict=False)
    return took


def stored_ids(cluster: Cluster, topic_prefix: str = "ProxyFailover_") -> set[str]:
    from client import Admin

    with Admin(cluster.addr) as admin:
        (topic,) = [t for t in admin.topic_list() if t.startswith(topic_prefix)]
    return {m.msg_id for m in pull_all(cluster.addr, topic)}


def test_sends_in_flight_on_a_killed_broker_are_retried_and_every_answered_one_is_stored(tmp_path: Path):
    cluster = make_cluster(tmp_path, registerNameServerPeriod=1000)
    try:
        took = run_with_fault(cluster, tmp_path, signal.SIGKILL, 400)
        cluster.brokers["broker-b"].proc.wait(10)
        cluster.start_broker("broker-b")  # what it stored before the kill is read back from its store
        stored = wait_until(lambda: (ids := stored_ids(cluster)) >= set(took) and ids, timeout=30,
                            what="every message answered OK stored")
        assert set(took) <= stored
    finally:
        cluster.stop()


def test_sends_to_a_silent_broker_time_out_and_are_retried_on_the_other(tmp_path: Path):
    cluster = make_cluster(tmp_path, registerNameServerPeriod=1000)
    try:
        # a send written to the stopped broker waits out the proxy's send timeout (3 s), then goes elsewhere; the
        # broker is slow, not gone (its connection stays up), so later sends go there too: only a few follow
        took = run_with_fault(cluster, tmp_path, signal.SIGSTOP, 166)
        assert max(took.values()) > 2.5, "no send was in flight on the stopped broker: the test proved nothing"
        assert max(took.values()) < 20
        stored = wait_until(lambda: (ids := stored_ids(cluster)) >= set(took) and ids, timeout=30,
                            what="every message answered OK stored")
        assert set(took) <= stored
    finally:
        cluster.stop()

"""A client given several name servers, the first hung (it takes connections and answers nothing): after a lookup
found it so, the first send to each new topic (answered TOPIC_NOT_EXIST, the others asked for a second opinion)
waited the whole RPC timeout on it again, every time (the namesrv review: a timeout per new topic)."""

import socket
import time
from collections.abc import Iterator

import pytest

from client import Message, Producer
from tests.cluster import Cluster, make_cluster

TIMEOUT_MS = 4000


@pytest.fixture
def hung_addr() -> Iterator[str]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # connections queue up, and nothing ever answers them
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    c = make_cluster(tmp_path, broker_names=("broker-a",), autoCreateTopicEnable="true")
    try:
        yield c
    finally:
        c.stop()


def test_a_hung_name_server_costs_one_timeout_not_one_per_new_topic(cluster: Cluster, hung_addr: str) -> None:
    with Producer(f"{hung_addr};{cluster.addr}", send_timeout_ms=TIMEOUT_MS) as producer:
        producer.send(Message("HungNsT0", b"x"))  # the first lookup waits the hung one out, once
        started = time.monotonic()
        for i in range(1, 4):
            assert producer.send(Message(f"HungNsT{i}", b"x")).queue_offset == 0
        assert time.monotonic() - started < TIMEOUT_MS / 1000  # (before: at least one timeout each)

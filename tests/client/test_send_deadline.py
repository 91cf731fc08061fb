"""send_timeout_ms bounds the whole send, retries included (upstream's rule): against a hung broker (SIGSTOP) each
of the 1 + retry_times attempts waited the full timeout, so a send with a 2 s timeout failed after 6 s. Real
daemons."""

import os
import signal
import time
from pathlib import Path

import pytest

from client import Message, MQClientError, Producer
from tests.cluster import make_cluster


def test_a_send_to_a_hung_broker_fails_within_its_timeout(tmp_path: Path) -> None:
    c = make_cluster(tmp_path, ("broker-a",), registerNameServerPeriod=1000)
    broker = c.brokers["broker-a"]
    try:
        c.create_topic("HungT", 2)
        with Producer(c.addr, send_timeout_ms=2000, retry_times=2) as producer:
            producer.send(Message("HungT", b"warm"))  # route and stream up
            os.kill(broker.proc.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                with pytest.raises(MQClientError, match="DEADLINE_EXCEEDED"):
                    producer.send(Message("HungT", b"hung"))
                took = time.monotonic() - started
            finally:
                os.kill(broker.proc.pid, signal.SIGCONT)
        assert took < 4.0, f"the send took {took:.1f} s with a 2 s timeout"  # was 6 s: three attempts of 2 s
    finally:
        c.stop()

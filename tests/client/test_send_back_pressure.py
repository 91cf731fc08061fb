"""A producer bounds the sends it has on their way (``client/send_back_pressure.py``): ``send_async`` never waited,
and a loop of 200,000 (1 KiB) took a client to 1 GiB with 13 % of them failing DEADLINE_EXCEEDED behind the others.
Real daemons for the producer; the bound itself in process."""

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from client import Message, MQClientError, Producer, PullConsumer
from client.send_back_pressure import SendBackPressure
from tests.cluster import make_cluster


def test_a_send_waits_for_room_and_a_send_larger_than_the_bound_goes_alone() -> None:
    bound = SendBackPressure(max_messages=4, max_bytes=100)
    assert bound.acquire(3, 10, 0)
    assert not bound.acquire(2, 10, 0.05)  # 5 messages
    assert not bound.acquire(1, 91, 0.05)  # 101 bytes
    threading.Timer(0.1, bound.release, (3, 10)).start()
    started = time.monotonic()
    assert bound.acquire(4, 100, 2)  # waits for the release
    assert time.monotonic() - started >= 0.05
    bound.release(4, 100)
    assert bound.acquire(50, 10_000, 0)  # larger than the bound: alone
    assert not bound.acquire(1, 1, 0)
    bound.release(50, 10_000)
    assert (bound.messages, bound.bytes) == (0, 0)


def test_the_producer_settings_are_checked() -> None:
    with pytest.raises(MQClientError, match="max_in_flight_messages"):
        Producer("127.0.0.1:1", max_in_flight_messages=-1)


def test_send_async_past_the_bound_waits_for_room(tmp_path: Path) -> None:
    c = make_cluster(tmp_path, ("broker-a",), registerNameServerPeriod=1000)
    broker = c.brokers["broker-a"]
    try:
        c.create_topic("BoundT", 1)
        with Producer(c.addr, send_timeout_ms=1500, retry_times=0, max_in_flight_messages=4) as producer:
            producer.send(Message("BoundT", b"warm"))  # route and stream up
            os.kill(broker.proc.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                first = [producer.send_async(Message("BoundT", b"in-flight-%d" % i)) for i in range(4)]
                assert time.monotonic() - started < 1.0, "the sends within the bound waited"
                fifth = producer.send_async(Message("BoundT", b"fifth"))  # room: once the first ones time out
                waited = time.monotonic() - started
            finally:
                os.kill(broker.proc.pid, signal.SIGCONT)
            assert waited >= 1.4, f"the send past the bound returned after {waited:.2f} s, without waiting"
            for future in [*first, fifth]:  # timed out on the stopped broker, or answered once it went on
                with contextlib.suppress(MQClientError):
                    future.result(10)
            assert producer._in_flight is not None and producer._in_flight.messages == 0
            assert producer.send_async(Message("BoundT", b"after")).result(10).queue_offset >= 1
    finally:
        c.stop()


def test_a_send_that_finds_no_room_within_its_timeout_fails_unsent(tmp_path: Path) -> None:
    c = make_cluster(tmp_path, ("broker-a",), registerNameServerPeriod=1000)
    try:
        c.create_topic("NoRoomT", 1)
        with Producer(c.addr, send_timeout_ms=800, max_in_flight_messages=4) as producer:
            bound = producer._in_flight
            assert bound is not None and bound.acquire(4, 0, 0)  # as if 4 sends were on their way for ever
            started = time.monotonic()
            refused = producer.send_async(Message("NoRoomT", b"over"))
            assert time.monotonic() - started >= 0.7
            with pytest.raises(MQClientError, match="send not made: 4 messages"):
                refused.result(5)
            bound.release(4, 0)
            producer.send(Message("NoRoomT", b"after"))
        with PullConsumer(c.addr, group="NoRoomG") as consumer:
            bodies = [m.body for m in consumer.pull(consumer.queues("NoRoomT")[0], 0, 64).messages]
        assert bodies == [b"after"], bodies
    finally:
        c.stop()


def test_a_flood_of_send_async_is_held_to_the_bound_and_every_send_succeeds(tmp_path: Path) -> None:
    c = make_cluster(tmp_path, ("broker-a",), registerNameServerPeriod=1000)
    try:
        c.create_topic("FloodT", 2)
        peak = 0
        with Producer(c.addr, send_timeout_ms=3000, max_in_flight_messages=64) as producer:
            futures = []
            for i in range(2000):
                futures.append(producer.send_async(Message("FloodT", b"%05d" % i)))
                assert producer._in_flight is not None
                peak = max(peak, producer._in_flight.messages)
            offsets = [f.result(10).queue_offset for f in futures]
        assert len(offsets) == 2000
        assert peak <= 64
    finally:
        c.stop()

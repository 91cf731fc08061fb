"""Callbacks on the SDK's futures run on its callback pool, not on the stream reader that settled the future: an
SDK call that waits, made in a callback (a send in a send's callback, an ack in an ack's, a pull in a pull's), waited
for an answer only that reader could give: the send timed out and was retried (stored three times, its caller told
it failed), the ack hung for good with every later ack to that broker. Real daemons."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from client import Message, Producer, PullConsumer, SimpleConsumer
from tests.cluster import REPO, Cluster, make_cluster, wait_until

TOPIC = "CallbackT"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("callbacks"), ("broker-a",), registerNameServerPeriod=1000)
    try:
        c.create_topic(TOPIC, 1)
        yield c
    finally:
        c.stop()


def bodies(cluster: Cluster) -> list[bytes]:
    with PullConsumer(cluster.addr, group="callbacks-reader") as consumer:
        mq = consumer.queues(TOPIC)[0]
        return [m.body for m in consumer.pull(mq, 0, 256).messages]


def test_a_send_in_a_send_callback_goes_once(cluster: Cluster) -> None:
    outcome: Future[str] = Future()
    with Producer(cluster.addr, send_timeout_ms=3000) as producer:
        def callback(_done: Future) -> None:
            try:
                producer.send(Message(TOPIC, b"from-callback"))
                outcome.set_result("ok")
            except Exception as exc:  # reported to the test thread
                outcome.set_result(f"{type(exc).__name__}: {exc}")

        producer.send_async(Message(TOPIC, b"first")).add_done_callback(callback)
        assert outcome.result(30) == "ok"  # was: DEADLINE_EXCEEDED after 9 s
    wait_until(lambda: b"from-callback" in bodies(cluster), what="the callback's message stored")
    assert bodies(cluster).count(b"from-callback") == 1  # was 3


def test_an_ack_in_an_ack_callback_returns_and_later_acks_go_on(cluster: Cluster) -> None:
    with Producer(cluster.addr) as producer:
        for i in range(4):
            producer.send(Message(TOPIC, b"ack-%d" % i))
    with SimpleConsumer(cluster.addr, group="callbacks-acks", topic=TOPIC) as consumer:
        received: list = []
        wait_until(lambda: received.extend(consumer.receive(16, 60_000, wait_ms=200)) or len(received) >= 4,
                   what="the topic's messages received")
        outcome: Future[str] = Future()

        def callback(_done: Future) -> None:
            try:
                consumer.ack(received[1])
                outcome.set_result("ok")
            except Exception as exc:
                outcome.set_result(f"{type(exc).__name__}: {exc}")

        consumer.ack_async(received[0]).add_done_callback(callback)
        assert outcome.result(20) == "ok"  # was: hung
        consumer.ack(received[2:])  # later acks to the broker are not held up either


# After os.fork() (multiprocessing's default start on Linux, gunicorn --preload, celery prefork) the child has only
# the forking thread. Run in processes of their own (a fork of the test worker would copy pytest's threads too).
INHERITED_CLIENT = """
import os, sys, time
from client import Message, MQClientError, Producer
inherited = Producer(sys.argv[1])
inherited.send(Message(sys.argv[2], b"open at the fork"))
pid = os.fork()
if pid == 0:
    started = time.monotonic()
    try:
        inherited.send(Message(sys.argv[2], b"inherited"))
        print("sent", flush=True)
    except MQClientError as exc:
        print(f"refused {time.monotonic() - started < 5} {exc}", flush=True)
    os._exit(0)
os.waitpid(pid, 0)
inherited.send(Message(sys.argv[2], b"the parent's goes on"))
inherited.close()
"""

# An ack in flight at the fork (the broker is stopped meanwhile): the child's ack queued behind it, for good.
ACK_IN_FLIGHT_AT_FORK = """
import os, signal, sys, time
from client import Message, MQClientError, Producer, SimpleConsumer
addr, topic, broker_pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Producer(addr) as producer:
    producer.send_batch([Message(topic, b"acked across a fork")] * 2)
consumer = SimpleConsumer(addr, group="fork-acks", topic=topic)
got = []
while len(got) < 2:
    got += consumer.receive(2, invisible_ms=60_000, wait_ms=1000)
os.kill(broker_pid, signal.SIGSTOP)
try:
    consumer.ack_async(got[:1])  # in flight: nobody answers it while the broker is stopped
    pid = os.fork()
    if pid == 0:
        signal.alarm(10)  # a child that waits for good is ended, and said so below
        started = time.monotonic()
        try:
            consumer.ack(got[1:])
            print("acked", flush=True)
        except MQClientError as exc:
            print(f"refused {time.monotonic() - started < 5} {exc}", flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        print("the child's ack waited for good", flush=True)
finally:
    os.kill(broker_pid, signal.SIGCONT)
consumer.close()
"""

CALLBACKS_IN_CHILD = """
import os, threading
from client.callback_future import CallbackFuture
def settle() -> bool:
    ran = threading.Event()
    future = CallbackFuture()
    future.add_done_callback(lambda _: ran.set())
    future.set_result(1)
    return ran.wait(5)
assert all(settle() for _ in range(8))  # the pool's threads started, as a parent's sends start them
pid = os.fork()
if pid == 0:
    print("child", all(settle() for _ in range(8)), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def run_script(script: str, *args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (proc.stdout, proc.stderr[-2000:])
    return proc.stdout.splitlines()


def test_a_client_inherited_by_a_forked_child_refuses_calls_at_once(cluster: Cluster) -> None:
    """Its readers, reaper and retry threads are the parent's: a send on it waited for good, past its timeout."""
    (line,) = run_script(INHERITED_CLIENT, cluster.addr, TOPIC)
    assert line.startswith("refused True the client was made before os.fork()"), line
    assert b"the parent's goes on" in bodies(cluster)


def test_an_ack_in_a_forked_child_is_refused_at_once_while_the_parents_was_in_flight(cluster: Cluster) -> None:
    """The child's ack batcher was the parent's, busy with an ack whose answer no thread of the child reads: the
    child's ack queued behind it and waited for good (the SDK review)."""
    broker = cluster.brokers["broker-a"]
    try:
        lines = run_script(ACK_IN_FLIGHT_AT_FORK, cluster.addr, TOPIC, str(broker.proc.pid))
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    assert len(lines) == 1 and lines[0].startswith("refused True the client was made before os.fork()"), lines


def test_callbacks_run_in_a_forked_child() -> None:
    """The inherited callback pool never started threads again: no callback ran in the child (asyncio.wrap_future
    of a send waited for good)."""
    assert run_script(CALLBACKS_IN_CHILD) == ["child True"]


def test_what_a_callback_raises_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A callback added while the future was pending (the usual case) ran on the pool, whose own future swallowed
    what it raised: no log line at all (the SDK review)."""
    from client.callback_future import CallbackFuture

    future: CallbackFuture[int] = CallbackFuture()
    ran: Future[bool] = Future()

    def callback(_done: Future) -> None:
        ran.set_result(True)
        raise RuntimeError("the application's bug")

    future.add_done_callback(callback)
    future.set_result(1)
    assert ran.result(5)
    wait_until(lambda: "exception calling callback" in caplog.text and "the application's bug" in caplog.text,
               what="the callback's exception in the log")

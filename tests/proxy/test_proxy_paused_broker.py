"""mqproxy while a broker stands still or is gone (real daemons, raw v2 stubs).

A SIGSTOPped broker keeps its connections open, so its calls only time out: they must hold none of the proxy's
shared threads (receives, acks and sends of topics on healthy brokers go on at once), nor outlast the client's
deadline (an end of transaction is answered before the client gives up; an empty receive of a topic spanning the
paused broker answers MESSAGE_NOT_FOUND in time). A killed broker is answered with a retriable code, not
INTERNAL_SERVER_ERROR."""

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from common.receipt_handle import ReceiptHandle
from proto.v2 import definition_pb2 as d
from proto.v2 import service_pb2 as s
from proto.v2 import service_pb2_grpc as sg
from tests.cluster import Daemon, wait_until
from tests.proxy.conftest import ProxyCluster, running_proxy_cluster

GROUP = "PausedBrokerG"
MD = [("x-mq-client-id", "paused-broker-client")]
# More than asyncio's default thread pool has (min(32, cpu + 4)): the ends would hold every one of them.
CONCURRENT_ENDS = min(32, (os.cpu_count() or 1) + 4) + 2
PROMPT_S = 1.5  # a call that touches no paused broker answers within this (held up, it took 3 s or more)
T = TypeVar("T")


@dataclass
class Topics:
    spanning: str  # on broker-a and broker-b
    healthy: str  # on broker-a only
    paused: str  # on broker-b only


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProxyCluster]:
    with running_proxy_cluster(tmp_path) as cluster:
        yield cluster


@pytest.fixture
def stub(cluster: ProxyCluster) -> Iterator[sg.MessagingServiceStub]:
    with grpc.insecure_channel(cluster.endpoint) as channel:
        yield sg.MessagingServiceStub(channel)


@pytest.fixture
def topics(cluster: ProxyCluster) -> Topics:
    suffix = uuid.uuid4().hex[:6]
    names = Topics(f"Spanning_{suffix}", f"Healthy_{suffix}", f"Paused_{suffix}")
    for topic, brokers in ((names.spanning, ["broker-a", "broker-b"]), (names.healthy, ["broker-a"]),
                           (names.paused, ["broker-b"])):
        create_topic(cluster.namesrv, topic, brokers)
    return names


def create_topic(namesrv: str, topic: str, brokers: list[str]) -> None:
    from client import Admin

    with Admin(namesrv) as admin:
        admin.create_topic(topic, brokers=brokers, read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: topic in admin.topic_list()
                   and {q.broker_name for q in admin.topic_route(topic).queue_datas} >= set(brokers),
                   timeout=20, what=f"route of {topic}")


@contextmanager
def paused(broker: Daemon) -> Iterator[None]:
    broker.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        broker.proc.send_signal(signal.SIGCONT)


def send(stub: sg.MessagingServiceStub, topic: str, body: bytes = b"x",
         transactional: bool = False) -> s.SendResultEntry:
    system = d.SystemProperties(message_id=uuid.uuid4().hex.upper())
    if transactional:
        system.message_type = d.TRANSACTION
    response = stub.SendMessage(s.SendMessageRequest(messages=[d.Message(
        topic=d.Resource(name=topic), body=body, system_properties=system)]), metadata=MD, timeout=10)
    return response.entries[0]


def receive(stub: sg.MessagingServiceStub, topic: str, broker: str = "", poll_s: float = 0,
            deadline_s: float = 3) -> tuple[d.Status, list[d.Message]]:
    """One receive as the official clients make it: its deadline is the long polling plus a request timeout."""
    request = s.ReceiveMessageRequest(
        group=d.Resource(name=GROUP), message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=-1,
                                                                   broker=d.Broker(name=broker)),
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"), batch_size=32,
        invisible_duration=Duration(seconds=60))
    request.long_polling_timeout.FromMilliseconds(int(poll_s * 1000))
    answers = list(stub.ReceiveMessage(request, metadata=MD, timeout=deadline_s))
    return answers[0].status, [a.message for a in answers if a.HasField("message")]


def ack(stub: sg.MessagingServiceStub, topic: str, handle: str) -> d.Status:
    return stub.AckMessage(s.AckMessageRequest(group=d.Resource(name=GROUP), topic=d.Resource(name=topic), entries=[
        s.AckMessageEntry(message_id="m", receipt_handle=handle)]), metadata=MD, timeout=10).entries[0].status


def change_invisible(stub: sg.MessagingServiceStub, topic: str, handle: str) -> d.Status:
    return stub.ChangeInvisibleDuration(s.ChangeInvisibleDurationRequest(
        group=d.Resource(name=GROUP), topic=d.Resource(name=topic), receipt_handle=handle, message_id="m",
        invisible_duration=Duration(seconds=5)), metadata=MD, timeout=10).status


def end(stub: sg.MessagingServiceStub, topic: str, entry: s.SendResultEntry, deadline_s: float,
        commit: bool = True) -> str:
    """The code of an end's answer, or the gRPC status the client saw when none came in time."""
    try:
        response = stub.EndTransaction(s.EndTransactionRequest(
            topic=d.Resource(name=topic), message_id=entry.message_id, transaction_id=entry.transaction_id,
            resolution=d.COMMIT if commit else d.ROLLBACK), metadata=MD, timeout=deadline_s)
    except grpc.RpcError as exc:
        return f"gRPC {exc.code().name}"
    return d.Code.Name(response.status.code)


def received(stub: sg.MessagingServiceStub, topic: str, count: int, broker: str = "") -> list[d.Message]:
    """``count`` messages of ``topic`` received (each invisible for a minute), naming ``broker`` first."""
    got: list[d.Message] = []

    def more() -> bool:
        got.extend(receive(stub, topic, broker, poll_s=1, deadline_s=4)[1])
        return len(got) >= count

    wait_until(more, timeout=20, what=f"{count} messages of {topic}")
    return got


def timed(call: Callable[[], T]) -> tuple[T, float]:
    """What ``call`` returned, and the seconds it took."""
    started = time.monotonic()
    outcome = call()
    return outcome, time.monotonic() - started


def test_transactions_commit_and_roll_back_through_the_proxy(stub: sg.MessagingServiceStub, topics: Topics):
    """Half messages (the first one's route not cached yet: looked up off the loop, in the transactions' threads)
    and their ends (on the proxy's own channels): the committed message is delivered, the rolled back one never."""
    committed = send(stub, topics.healthy, b"commit-me", transactional=True)
    rolled_back = send(stub, topics.healthy, b"roll-me-back", transactional=True)
    assert (committed.status.code, rolled_back.status.code) == (d.OK, d.OK), (committed.status, rolled_back.status)
    assert end(stub, topics.healthy, committed, 5) == "OK"
    assert end(stub, topics.healthy, rolled_back, 5, commit=False) == "OK"
    assert end(stub, topics.healthy, rolled_back, 5) == "BAD_REQUEST"  # decided already
    send(stub, topics.healthy, b"after")
    assert sorted(m.body for m in received(stub, topics.healthy, 2)) == [b"after", b"commit-me"]


def test_calls_on_a_healthy_broker_go_on_while_ends_of_transactions_wait_on_a_paused_one(
        cluster: ProxyCluster, stub: sg.MessagingServiceStub, topics: Topics):
    """More ends of transactions on the paused broker than the default thread pool has threads, each retried up to
    the client's deadline: meanwhile a receive, an ack, a change of invisible time and a transactional send on the
    healthy broker's topic answer at once, and each end is answered before its client gives up."""
    halves = [send(stub, topics.paused, b"half-%d" % i, transactional=True) for i in range(CONCURRENT_ENDS)]
    assert all(h.status.code == d.OK and h.transaction_id for h in halves), halves[0]
    for i in range(3):
        send(stub, topics.healthy, b"healthy-%d" % i)
    held = received(stub, topics.healthy, 3)
    send(stub, topics.healthy, b"to-receive")
    with paused(cluster.cluster.brokers["broker-b"]), ThreadPoolExecutor(CONCURRENT_ENDS) as pool:
        ends = [pool.submit(end, stub, topics.paused, h, 2.0) for h in halves]
        time.sleep(0.5)  # every end is waiting on broker-b
        (status, messages), receive_s = timed(lambda: receive(stub, topics.healthy))
        first, second = (m.system_properties.receipt_handle for m in held[:2])
        acked, ack_s = timed(lambda: ack(stub, topics.healthy, first))
        changed, change_s = timed(lambda: change_invisible(stub, topics.healthy, second))
        half, half_s = timed(lambda: send(stub, topics.healthy, b"tx-on-a", transactional=True))
        answers = [f.result() for f in ends]
    assert (status.code, [m.body for m in messages], receive_s < PROMPT_S) == (d.OK, [b"to-receive"], True), (
        status, receive_s)
    assert (acked.code, ack_s < PROMPT_S) == (d.OK, True), (acked, ack_s)
    assert (changed.code, change_s < PROMPT_S) == (d.OK, True), (changed, change_s)
    assert (half.status.code, half_s < PROMPT_S) == (d.OK, True), (half.status, half_s)
    assert set(answers) == {"PROXY_TIMEOUT"}, answers  # answered in time, not left to the client's deadline
    assert cluster.proxy.alive, cluster.proxy.log()[-3000:]


@pytest.mark.parametrize("first", ["broker-a", "broker-b"])
def test_an_empty_receive_of_a_topic_on_a_paused_broker_answers_within_the_clients_deadline(
        cluster: ProxyCluster, stub: sg.MessagingServiceStub, topics: Topics, first: str):
    """The receive names either broker first; the paused one's pop takes its time, the long poll only what is left:
    MESSAGE_NOT_FOUND before the client gives up, every time. A message on the healthy broker is handed out."""
    assert receive(stub, topics.spanning, first)[0].code == d.MESSAGE_NOT_FOUND  # routes and channels open
    with paused(cluster.cluster.brokers["broker-b"]):
        for _ in range(2):  # the first finds broker-b silent, the next skips it
            (status, _), took = timed(lambda: receive(stub, topics.spanning, first, poll_s=2, deadline_s=4.5))
            assert (status.code, took < 4.5) == (d.MESSAGE_NOT_FOUND, True), (status, took)
        assert handed_out_while_paused(stub, topics) == [b"stored-on-a"]


def handed_out_while_paused(stub: sg.MessagingServiceStub, topics: Topics) -> list[bytes]:
    """A message sent to the spanning topic while broker-b is paused (stored on broker-a), received naming
    broker-b first."""
    entry = send(stub, topics.spanning, b"stored-on-a")
    assert entry.status.code == d.OK, entry.status
    status, messages = receive(stub, topics.spanning, "broker-b", poll_s=2, deadline_s=5)
    assert status.code == d.OK, status
    return [m.body for m in messages]


def test_a_killed_broker_is_answered_with_a_retriable_code(cluster: ProxyCluster, stub: sg.MessagingServiceStub,
                                                           topics: Topics):
    """Acks and changes of invisible time naming the killed broker: PROXY_TIMEOUT (the clients retry), not
    INTERNAL_SERVER_ERROR; a receive naming it first pops on the other broker."""
    for i in range(4):
        send(stub, topics.paused, b"on-b-%d" % i)
    held = received(stub, topics.paused, 2)
    assert {ReceiptHandle.decode(m.system_properties.receipt_handle).broker_name for m in held} == {"broker-b"}
    cluster.cluster.brokers["broker-b"].kill()
    acked = ack(stub, topics.paused, held[0].system_properties.receipt_handle)
    assert acked.code == d.PROXY_TIMEOUT, acked
    changed = change_invisible(stub, topics.paused, held[1].system_properties.receipt_handle)
    assert changed.code == d.PROXY_TIMEOUT, changed
    status, _ = receive(stub, topics.spanning, "broker-b")
    assert status.code == d.MESSAGE_NOT_FOUND, status

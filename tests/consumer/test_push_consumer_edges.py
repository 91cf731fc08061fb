"""Push consumers where the review of consumer groups found them wrong: a handler that holds one message (the queue's
pulls and memory were unbounded behind it), a handler raising an exception that is no Exception (the rest of its
task was never handled and the offset stayed), and broadcasting orderly members (one got everything)."""

import asyncio
import collections
import threading
from collections.abc import Iterator

import pytest

from client import Admin, Message, Producer, PushConsumer
from tests.cluster import Cluster, make_cluster, wait_until

MAX_SPAN = 2000  # upstream's consumeConcurrentlyMaxSpan (PullSettings.max_span)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("push-edges"), ("broker-a",), registerNameServerPeriod=1000)
    try:
        yield c
    finally:
        c.stop()


def _send(cluster: Cluster, topic: str, n: int) -> None:
    with Producer(cluster.addr) as producer:
        for i in range(0, n, 100):
            producer.send_batch([Message(topic, b"m%d" % j) for j in range(i, min(i + 100, n))])


def test_a_held_message_stops_its_queues_pulls_at_the_span_limit(cluster: Cluster) -> None:
    """Behind a message its handler held, the queue was pulled and handled on and on (450,000 messages, 433 MiB kept
    for one queue in the review's run) with the committed offset at the held one."""
    cluster.create_topic("SpanT", queues=1)
    n = MAX_SPAN + 1000
    _send(cluster, "SpanT", n)
    release, handled = threading.Event(), collections.Counter()

    def handler(m) -> None:  # type: ignore[no-untyped-def]
        if m.queue_offset == 0:
            release.wait(60)
        handled[m.queue_offset] += 1

    with PushConsumer(cluster.addr, group="SpanG", topic="SpanT", handler=handler, consume_from_first=True):
        def settled() -> bool:  # nothing more handled for a second
            before = len(handled)
            threading.Event().wait(1.0)
            return len(handled) == before > 0

        wait_until(settled, timeout=60, what="the messages behind the held one to be handled")
        assert len(handled) <= MAX_SPAN + 64, len(handled)  # (the held one's task: 64 messages)
        release.set()
        wait_until(lambda: len(handled) == n, timeout=30, what="every message once the held one is done")


def test_a_handler_raising_a_cancelled_error_fails_that_message_only(cluster: Cluster) -> None:
    """asyncio.CancelledError (as asyncio.run in a handler can let out) is no Exception: it left its task's other
    messages unhandled and the queue's committed offset held for good."""
    cluster.create_topic("CancelT", queues=1)
    _send(cluster, "CancelT", 100)
    handled = collections.Counter()

    def handler(m) -> None:  # type: ignore[no-untyped-def]
        handled[m.body] += 1
        if m.body == b"m5" and handled[m.body] == 1:
            raise asyncio.CancelledError()

    with PushConsumer(cluster.addr, group="CancelG", topic="CancelT", handler=handler, consume_from_first=True), \
            Admin(cluster.addr) as admin:
        wait_until(lambda: len(handled) == 100, what="every message handled")
        wait_until(lambda: [r.consumer_offset for r in admin.consumer_progress("CancelG", "CancelT")] == [100],
                   what="the committed offset past the failed message (sent back to the retry topic)")


def test_broadcasting_orderly_members_each_get_every_message(cluster: Cluster) -> None:
    cluster.create_topic("BcastT", queues=4)
    got: list[collections.Counter] = [collections.Counter(), collections.Counter()]
    members = [PushConsumer(cluster.addr, group="BcastOrderlyG", topic="BcastT", orderly=True,
                            message_model="BROADCASTING", handler=lambda m, k=k: got[k].update([m.body]))
               for k in range(2)]
    try:
        for member in members:
            member.start()
        wait_until(lambda: all(len(m.assigned_queues()) == 4 for m in members), what="every queue on both members")
        # no lease renewal either: the first one's leases suspended every other member 20 s after it started
        assert not [t.name for m in members for t in m._threads if t.name.startswith("push-lease")]
        _send(cluster, "BcastT", 200)
        wait_until(lambda: all(len(g) == 200 for g in got), timeout=30,
                   what=f"every message on both members (got {[len(g) for g in got]})")
    finally:
        for member in members:
            member.close()

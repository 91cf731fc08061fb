"""Members in their own processes: one killed (SIGKILL) and one added while 20,000 messages flow; orderly queues keep
their order across a kill; broadcasting gives every member everything."""

import signal
import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from client import Message, Producer
from tests.cluster import Cluster, Daemon, make_cluster, start_daemon, wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("members"), registerNameServerPeriod=1000)
    yield c
    c.stop()


def member(cluster: Cluster, name: str, group: str, topic: str, *flags: str) -> Daemon:
    return start_daemon(name, "tests.consumer.member_process",
                        ["--namesrv", cluster.addr, "--group", group, "--topic", topic, *flags],
                        cluster.workdir / "members")


def received(m: Daemon) -> list[tuple[str, int, str]]:
    out = []
    for line in list(m.stdout_lines):
        if line.startswith("got "):
            queue, offset, body = line[4:].split(" ", 2)
            out.append((queue, int(offset), body))
    return out


def produce(cluster: Cluster, topic: str, n: int, pace: threading.Event | None = None,
            sharding: bool = False) -> list[str]:
    bodies = [f"m{i}" for i in range(n)]
    with Producer(cluster.addr) as producer:
        for i in range(0, n, 50):
            if sharding:
                for j, body in enumerate(bodies[i:i + 50], i):
                    producer.send(Message(topic, body.encode()), sharding_key=str(j % 8))
            else:
                producer.send_batch([Message(topic, b.encode()) for b in bodies[i:i + 50]])
            if pace is not None:
                pace.wait(0.02)  # spread the run over a few seconds so the changes happen mid-flow
    return bodies


def stop_all(members: list[Daemon]) -> None:
    for m in members:
        if m.alive:
            m.stop(strict=False)


def test_a_member_killed_and_one_added_mid_run_lose_nothing(cluster: Cluster):
    topic, group = "MembersKillT", "members-kill"
    cluster.create_topic(topic, queues=8)
    members = [member(cluster, f"member-{i}", group, topic) for i in range(3)]
    try:
        pace = threading.Event()
        result: list[list[str]] = []
        producer = threading.Thread(target=lambda: result.append(produce(cluster, topic, 20_000, pace)))
        producer.start()
        wait_until(lambda: sum(len(received(m)) for m in members) > 3000, timeout=30, what="the run to be under way")
        members[0].stop(signal.SIGKILL)
        members.append(member(cluster, "member-3", group, topic))
        producer.join()
        sent = set(result[0])
        wait_until(lambda: {b for m in members for _, _, b in received(m)} >= sent, timeout=60,
                   what="every message to be handled by some member")
        counts = Counter(b for m in members for _, _, b in received(m))
        duplicates = sum(c - 1 for c in counts.values())
        print(f"\nmembers: 3 + 1 added, 1 killed; messages 20000; duplicates {duplicates}")
        assert set(counts) == sent
        assert duplicates <= 2000, "duplicates only for messages in flight at the changes"
        assert received(members[3]), "the member added mid-run took a share"
    finally:
        stop_all(members)


def test_orderly_queues_keep_their_order_across_a_member_kill(cluster: Cluster):
    topic, group = "OrderlyKillT", "orderly-kill"
    cluster.create_topic(topic, queues=4)
    members = [member(cluster, f"orderly-{i}", group, topic, "--orderly") for i in range(2)]
    try:
        pace = threading.Event()
        result: list[list[str]] = []
        producer = threading.Thread(target=lambda: result.append(produce(cluster, topic, 4000, pace, sharding=True)))
        producer.start()
        wait_until(lambda: sum(len(received(m)) for m in members) > 500, timeout=30, what="the run to be under way")
        members[0].stop(signal.SIGKILL)
        producer.join()
        sent = set(result[0])
        survivor = members[1]
        wait_until(lambda: {b for m in members for _, _, b in received(m)} >= sent, timeout=60,
                   what="every message")
        for m in members:  # each member saw each queue's messages in offset order (a retake may repeat a tail)
            by_queue: dict[str, list[int]] = {}
            for queue, offset, _ in received(m):
                by_queue.setdefault(queue, []).append(offset)
            for offsets in by_queue.values():
                firsts = list(dict.fromkeys(offsets))
                assert firsts == sorted(firsts)
        assert received(survivor)
    finally:
        stop_all(members)


def test_broadcasting_gives_every_member_every_message_once(cluster: Cluster):
    topic, group = "BroadcastT", "broadcast"
    cluster.create_topic(topic, queues=4)
    members = [member(cluster, f"broadcast-{i}", group, topic, "--broadcasting") for i in range(2)]
    try:
        sent = produce(cluster, topic, 1000)
        wait_until(lambda: all(len(received(m)) >= len(sent) for m in members), timeout=30, what="both to get all")
        for m in members:
            assert sorted(b for _, _, b in received(m)) == sorted(sent)
    finally:
        stop_all(members)

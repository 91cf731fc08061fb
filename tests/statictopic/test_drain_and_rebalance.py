"""Seed 004 through real daemons and the real mqadmin: drain a broker under live traffic until it can be removed,
add a broker and rebalance logic queue leaders onto it, drain the KV store's shards, and the CLI's refusals."""

import json
import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Admin, KVClient, Message, MQClientError, Producer, PullConsumer, PullStatus, SendResult
from common.kv_shard import KV_TOPIC
from common.message_queue import MessageQueue
from tests.admin_cli.helpers import fails, mqadmin, ok
from tests.cluster import acked_ends, make_cluster, wait_dispatched, wait_until
from tests.statictopic.cluster_fixture import StaticCluster, make_static_cluster

SHORT_RETENTION = {"mappedFileSizeCommitLog": 65536, "fileReservedTime": 0, "deleteWhen": "*",
                   "cleanResourceInterval": 200, "staticTopicCleanInterval": 200}


# -- helpers --------------------------------------------------------------------------------------------------
def cli_json(addr: str, *args: str) -> dict:
    """``mqadmin --json args`` that must exit 0 with JSON on stdout."""
    proc = mqadmin(addr, "--json", *args)
    assert proc.returncode == 0, f"mqadmin {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def leaders(admin: Admin, topic: str) -> dict[int, str]:
    status = admin.static_topic_status(topic)
    assert status is not None, f"no broker holds a mapping for {topic}"
    return {q.logic_id: q.leader_broker for q in status.queues}


def routed_leaders(consumer: PullConsumer, topic: str) -> dict[int, str]:
    return dict(consumer.client.logic_leaders(topic, refresh=True))


def pull_all(consumer: PullConsumer, mq: MessageQueue, start: int) -> tuple[list[tuple[int, bytes]], int]:
    """Every message of ``mq`` from ``start`` to its end (hopping drained items), and the offset after them."""
    out, offset = [], start
    for _ in range(10_000):
        result = consumer.pull(mq, offset, 64)
        if result.status is PullStatus.FOUND:
            out += [(m.queue_offset, m.body) for m in result.messages]
        elif result.status is PullStatus.NO_NEW_MSG:
            return out, result.next_begin_offset
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            raise AssertionError(f"{mq}: offset {offset} reported illegal (next {result.next_begin_offset})")
        offset = result.next_begin_offset
    raise AssertionError(f"{mq}: pulling from {start} did not reach the end")


def wait_pulled(consumer: PullConsumer, mq: MessageQueue, start: int) -> list[tuple[int, bytes]]:
    """What ``mq`` holds from ``start``, once it holds something (the store dispatches a moment after the ack)."""
    got: list[tuple[int, bytes]] = []

    def arrived() -> bool:
        got[:] = pull_all(consumer, mq, start)[0]
        return bool(got)

    wait_until(arrived, timeout=10, what=f"a message on {mq} from {start}")
    return got


class KeyedProducer(threading.Thread):
    """Sends ``topic|key|seq`` bodies with ``sharding_key=key`` round robin over topics and keys; a failed send is
    retried with the same sequence number (so a key's order holds and a retry may store a duplicate)."""

    def __init__(self, addr: str, topics: list[str], keys: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.addr, self.topics, self.keys, self.stop = addr, topics, keys, stop
        self.acked: dict[tuple[str, str], int] = defaultdict(int)  # next sequence number per (topic, key)
        self.unacked: dict[tuple[str, str], int] = {}  # a seq whose send failed and was never acknowledged
        self.results: list[SendResult] = []  # every acknowledged send
        self.failures: list[str] = []
        self.sent = 0
        self.sent_event = threading.Event()
        self.target = 0

    def run(self) -> None:
        with Producer(self.addr) as producer:
            i = 0
            while not self.stop.is_set():
                topic, key = self.topics[i % len(self.topics)], f"key-{(i // len(self.topics)) % self.keys}"
                i += 1
                seq = self.acked[(topic, key)]
                while not self.stop.is_set():
                    try:
                        sent = producer.send(Message(topic, f"{topic}|{key}|{seq}".encode()), sharding_key=key)
                    except MQClientError as exc:
                        self.failures.append(str(exc))
                        self.unacked[(topic, key)] = seq
                        self.stop.wait(0.05)  # back off before retrying the same message
                        continue
                    self.unacked.pop((topic, key), None)
                    self.results.append(sent)
                    self.acked[(topic, key)] = seq + 1
                    self.sent += 1
                    if self.sent >= self.target:
                        self.sent_event.set()
                    break
                self.stop.wait(0.004)  # a steady trickle: a few hundred messages a second over both topics

    def wait_for(self, more: int, timeout: float = 30) -> None:
        self.sent_event.clear()
        self.target = self.sent + more
        assert self.sent_event.wait(timeout), f"producer stuck at {self.sent} sends; failures {self.failures[-3:]}"


class LoopConsumer(threading.Thread):
    """Pulls every logic queue of ``topics`` round and round, committing as it goes, until told to finish and
    every queue has reached its max offset."""

    def __init__(self, addr: str, group: str, topics: list[str]) -> None:
        super().__init__(daemon=True)
        self.addr, self.group, self.topics = addr, group, topics
        self.finish = threading.Event()
        self.got: dict[tuple[str, int], list[tuple[int, bytes]]] = defaultdict(list)
        self.errors: list[str] = []
        self.illegal: list[str] = []
        self.done = False

    def run(self) -> None:
        with PullConsumer(self.addr, group=self.group) as consumer:
            queues = [mq for t in self.topics for mq in consumer.queues(t)]
            offsets = dict.fromkeys(queues, 0)
            while True:
                idle = True
                for mq in queues:
                    try:
                        result = consumer.pull(mq, offsets[mq], 64)
                    except MQClientError as exc:
                        self.errors.append(str(exc))
                        continue
                    if result.status is PullStatus.FOUND:
                        idle = False
                        self.got[(mq.topic, mq.queue_id)] += [(m.queue_offset, m.body) for m in result.messages]
                    elif result.status is PullStatus.OFFSET_ILLEGAL:
                        self.illegal.append(f"{mq} {offsets[mq]} -> {result.next_begin_offset}")
                    elif result.status is PullStatus.NO_MATCHED_MSG:
                        idle = False  # a drained item: hop to the next one
                    offsets[mq] = result.next_begin_offset
                    try:
                        consumer.commit(mq, offsets[mq])
                    except MQClientError as exc:
                        self.errors.append(str(exc))
                if idle and self.finish.is_set():
                    try:
                        if all(offsets[mq] >= consumer.max_offset(mq) for mq in queues):
                            self.done = True
                            return
                    except MQClientError as exc:
                        self.errors.append(str(exc))
                if idle:
                    self.finish.wait(0.02)


# -- 1. drain under live traffic --------------------------------------------------------------------------------
def test_drain_under_live_traffic_until_the_broker_is_removable(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="client.producer")  # its send_retry lines: attempts that may have stored
    cluster = make_static_cluster(tmp_path, **SHORT_RETENTION)
    topics = ["DrainLiveA", "DrainLiveB"]
    stop = threading.Event()
    producer = KeyedProducer(cluster.addr, topics, keys=12, stop=stop)
    consumer = LoopConsumer(cluster.addr, "drain-live", topics)
    try:
        with Admin(cluster.addr) as admin:
            for t in topics:
                admin.update_static_topic(t, 6, cluster="DefaultCluster")
                assert sorted(leaders(admin, t).values()) == sorted(["broker-a", "broker-b", "broker-c"] * 2)
            before = {t: leaders(admin, t) for t in topics}
            with PullConsumer(cluster.addr) as probe:
                wait_until(lambda: all(routed_leaders(probe, t) == before[t] for t in topics), what="routes")
        producer.start()
        consumer.start()
        producer.wait_for(300)

        moved = cli_json(cluster.addr, "drainBroker", "-b", "broker-c")
        assert moved["topics"] == 2
        rows = moved["moved"]
        assert sorted((r["topic"], r["logic_id"]) for r in rows) == sorted(
            (t, g) for t in topics for g, b in before[t].items() if b == "broker-c")
        assert {r["from_broker"] for r in rows} == {"broker-c"}
        assert {r["to_broker"] for r in rows} <= {"broker-a", "broker-b"}
        assert all(r["logic_offset"] > 0 and r["logic_offset"] % 10_000 == 0 for r in rows), rows  # block jump

        producer.wait_for(300)  # more traffic after the drain, onto the new leaders
        stop.set()
        producer.join(timeout=30)
        assert not producer.is_alive(), "producer did not stop"
        with PullConsumer(cluster.addr) as probe:  # the max offsets the consumer finishes at count every ack
            wait_dispatched(probe, acked_ends(producer.results))
        consumer.finish.set()
        consumer.join(timeout=60)
        assert consumer.done, f"consumer did not reach the end; errors {consumer.errors[-3:]}"
        assert not consumer.illegal, consumer.illegal

        with Admin(cluster.addr) as admin:
            for t in topics:
                after = leaders(admin, t)
                assert "broker-c" not in after.values(), after
                assert {g: b for g, b in after.items() if before[t][g] != "broker-c"} == {
                    g: b for g, b in before[t].items() if b != "broker-c"}, "only broker-c's queues moved"
                assert sorted(after.values()) == ["broker-a"] * 3 + ["broker-b"] * 3

        # no loss, per-key order, duplicates only from retried sends
        per_key: dict[tuple[str, str], list[int]] = defaultdict(list)
        for (topic, qid), msgs in consumer.got.items():
            offsets = [o for o, _ in msgs]
            assert offsets == sorted(set(offsets)), f"{topic}/{qid}: logic offsets not strictly increasing"
            for _, body in msgs:
                t, key, seq = body.decode().split("|")
                assert t == topic
                per_key[(t, key)].append(int(seq))
        duplicates = 0
        for tk, acked in producer.acked.items():
            seqs = per_key.get(tk, [])
            assert seqs == sorted(seqs), f"{tk}: order broken {seqs}"
            allowed = set(range(acked)) | ({producer.unacked[tk]} if tk in producer.unacked else set())
            missing = set(range(acked)) - set(seqs)
            assert not missing, f"{tk}: lost {sorted(missing)[:10]} of {acked}"
            assert set(seqs) <= allowed, f"{tk}: unknown sequence numbers {sorted(set(seqs) - allowed)}"
            duplicates += len(seqs) - len(set(seqs))
        # each attempt beyond a message's first may have stored it (a timed-out one, on a busy machine): the test's
        # own retries after a failed send, and the SDK's within a send
        retries = sum(r.getMessage().startswith("send_retry") for r in caplog.records)
        assert duplicates <= len(producer.failures) + retries, (duplicates, retries, producer.failures[:3])
        assert not consumer.errors, f"pulls or commits failed during the drain: {consumer.errors[:3]}"
        assert sum(producer.acked.values()) >= 600

        # broker-c still holds readable data of the moved queues: not removable yet
        status = cli_json(cluster.addr, "drainStatus", "-b", "broker-c")
        assert status["removable"] is False and status["leads"] == {}
        held = {(h["topic"], h["logic_id"]) for h in status["held"]}
        assert held == {(r["topic"], r["logic_id"]) for r in rows}
        assert {h["status"] for h in status["held"]} == {"ReadOnly"}
        assert all(h["max_offset"] > h["min_offset"] for h in status["held"]), status["held"]
        assert all(h["expires_after_ms"] is not None for h in status["held"])
        assert "cannot be removed" in status["verdict"]

        # roll broker-c's commitlog: its old segments are deleted, the items expire and the leaders forget them
        with Admin(cluster.addr) as admin:
            admin.create_topic("FillerT", brokers=["broker-c"], read_queue_nums=1, write_queue_nums=1)
            wait_until(lambda: "FillerT" in admin.topic_list(), what="filler topic routed")
            with Producer(cluster.addr) as filler:
                for _ in range(150):
                    filler.send(Message("FillerT", b"f" * 1000))
            wait_until(lambda: admin.drain_status("broker-c").removable, timeout=30, what="broker-c removable")
        status = cli_json(cluster.addr, "drainStatus", "-b", "broker-c")
        assert status["removable"] is True and status["held"] == [] and status["leads"] == {}, status

        cluster.brokers["broker-c"].stop()
        with Producer(cluster.addr) as p, PullConsumer(cluster.addr, group="after-removal") as c:
            for t in topics:
                for mq in c.queues(t):
                    low, high = c.min_offset(mq), c.max_offset(mq)
                    assert 0 <= low <= high
                    body = f"after-removal-{t}-{mq.queue_id}".encode()
                    sent = p.send(Message(t, body), queue=mq)
                    assert sent.queue.queue_id == mq.queue_id
                    assert sent.queue_offset >= high, (mq, sent, high)
                    got = wait_pulled(c, mq, high)
                    assert got == [(sent.queue_offset, body)], (mq, got, sent)
                    assert c.max_offset(mq) == sent.queue_offset + 1
    finally:
        stop.set()
        consumer.finish.set()
        cluster.stop()


# -- 2. add a broker and rebalance ------------------------------------------------------------------------------
def test_new_broker_takes_its_share_with_fewest_moves(tmp_path: Path) -> None:
    cluster = make_cluster(tmp_path, ("broker-a", "broker-b"), cls=StaticCluster, registerNameServerPeriod=1000)
    topic, n = "RebalanceT", 8
    bodies: dict[int, list[bytes]] = defaultdict(list)
    try:
        with Admin(cluster.addr) as admin, Producer(cluster.addr) as producer:
            admin.update_static_topic(topic, n, cluster="DefaultCluster")
            before = leaders(admin, topic)
            with PullConsumer(cluster.addr) as probe:
                wait_until(lambda: routed_leaders(probe, topic) == before, what="route of the new topic")
            assert sorted(before.values()) == ["broker-a"] * 4 + ["broker-b"] * 4

            def produce(tag: str) -> None:
                with PullConsumer(cluster.addr) as probe:
                    for mq in probe.queues(topic):
                        for i in range(5):
                            body = f"{tag}-{mq.queue_id}-{i}".encode()
                            assert producer.send(Message(topic, body), queue=mq).queue.queue_id == mq.queue_id
                            bodies[mq.queue_id].append(body)

            produce("before")
            cluster.start_broker("broker-c")
            wait_until(lambda: "broker-c" in admin.cluster_info().cluster_addr_table["DefaultCluster"].broker_names,
                       what="broker-c in cluster info")

            result = cli_json(cluster.addr, "rebalanceLogicalQueues", "-c", "DefaultCluster")
            after = leaders(admin, topic)
            on_c = sorted(g for g, b in after.items() if b == "broker-c")
            assert len(on_c) in (2, 3), after
            rows = result["moved"]
            assert len(rows) == len(on_c) and result["topics"] == 1
            assert sorted(r["logic_id"] for r in rows) == on_c, "each moved queue moved once, onto broker-c"
            assert {r["to_broker"] for r in rows} == {"broker-c"}
            for b in ("broker-a", "broker-b"):  # an over-share broker gives up its highest logic ids
                mine = sorted(g for g, x in before.items() if x == b)
                lost = sorted(g for g in on_c if before[g] == b)
                assert lost == mine[len(mine) - len(lost):], (b, mine, lost)
            assert all(before[g] == b for g, b in after.items() if g not in on_c), "nothing else moved"
            assert sorted(Counter(after.values()).values()) == [2, 3, 3], after

            again = cli_json(cluster.addr, "rebalanceLogicalQueues", "-c", "DefaultCluster")
            assert again["moved"] == [], again
            assert leaders(admin, topic) == after

            with PullConsumer(cluster.addr) as probe:
                wait_until(lambda: routed_leaders(probe, topic) == after, what="route shows the new leaders")
            produce("after")
        with PullConsumer(cluster.addr, group="rebalance") as consumer:
            for mq in consumer.queues(topic):
                got, end = pull_all(consumer, mq, 0)
                assert [b for _, b in got] == bodies[mq.queue_id], mq
                offsets = [o for o, _ in got]
                assert offsets == sorted(set(offsets)) and end == consumer.max_offset(mq)
    finally:
        cluster.stop()


# -- 3. the KV store's shards are drained too -------------------------------------------------------------------
def test_drain_moves_kv_shards_and_keeps_them_held(tmp_path: Path) -> None:
    cluster = make_cluster(tmp_path, ("broker-a", "broker-b", "broker-c"), cls=StaticCluster,
                           registerNameServerPeriod=1000, kvEnable="true")
    keys = [b"drain-key-%03d" % i for i in range(60)]
    try:
        with Admin(cluster.addr) as admin:
            admin.kv_init(6, cluster="DefaultCluster")
            with KVClient(cluster.addr) as kv:
                wait_until(lambda: kv.shards(refresh=True) == 6, what="KV route")
                for k in keys:
                    kv.put(k, b"v1-" + k)
            before = leaders(admin, KV_TOPIC)
            assert "broker-c" in before.values()
            result = admin.drain_broker("broker-c")
            assert sorted(m.move.logic_id for m in result.moves) == sorted(
                g for g, b in before.items() if b == "broker-c")
            assert {m.topic for m in result.moves} == {KV_TOPIC}
            after = leaders(admin, KV_TOPIC)
            assert "broker-c" not in after.values(), after
            assert admin.drain_broker("broker-c").moves == [], "a second drain moves nothing"

            status = admin.drain_status("broker-c")
            assert status.leads == {}, status.leads
            kv_held = [h for h in status.held if h.topic == KV_TOPIC]
            assert sorted(h.logic_id for h in kv_held) == sorted(g for g, b in before.items() if b == "broker-c")
            assert {h.status for h in kv_held} == {"ReadOnly"}
            assert all(h.expires_after_ms is None for h in kv_held), kv_held
            assert not status.removable
        with KVClient(cluster.addr) as kv:
            assert kv.get_batch(keys) == [b"v1-" + k for k in keys]
            for k in keys:
                kv.put(k, b"v2-" + k)
            assert kv.get_batch(keys) == [b"v2-" + k for k in keys]
            kv.put(b"drain-new-key", b"new")
            assert kv.get(b"drain-new-key") == b"new"
        cli = cli_json(cluster.addr, "drainStatus", "-b", "broker-c")
        assert cli["removable"] is False
        assert {h["status"] for h in cli["held"] if h["topic"] == KV_TOPIC} == {"ReadOnly"}
        assert all(h["expires_after_ms"] is None for h in cli["held"])
        table = ok(cluster.addr, "drainStatus", "-b", "broker-c")  # the human table renders no expiry too
        assert "cannot be removed" in table and "ReadOnly" in table
    finally:
        cluster.stop()


# -- 4. migrateLogicalQueue refusals ----------------------------------------------------------------------------
@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[StaticCluster]:
    c = make_cluster(tmp_path, ("broker-a", "broker-b"), cls=StaticCluster, registerNameServerPeriod=1000)
    yield c
    c.stop()


def test_migrate_logical_queue_cli_refusals(two_brokers: StaticCluster) -> None:
    addr, topic = two_brokers.addr, "MigrateCliT"
    with Admin(addr) as admin:
        admin.update_static_topic(topic, 2, cluster="DefaultCluster")
        current = leaders(admin, topic)
    line = fails(addr, "migrateLogicalQueue", "-t", topic, "-q", "0", "-b", current[0])
    assert "nothing to do" in line and current[0] in line, line
    line = fails(addr, "migrateLogicalQueue", "-t", topic, "-q", "7", "-b", "broker-a")
    assert "logic queue 7" in line and "does not exist" in line, line
    other = "broker-b" if current[0] == "broker-a" else "broker-a"
    moved = cli_json(addr, "migrateLogicalQueue", "-t", topic, "-q", "0", "-b", other)
    assert [(r["logic_id"], r["to_broker"]) for r in moved["moved"]] == [(0, other)]
    # the other logic queue commands refuse unknown names the same way
    assert "broker-z" in fails(addr, "drainBroker", "-b", "broker-z")
    assert "broker-z" in fails(addr, "drainStatus", "-b", "broker-z")
    assert "NoSuchCluster" in fails(addr, "rebalanceLogicalQueues", "-c", "NoSuchCluster")
    assert "broker-z" in fails(addr, "rebalanceLogicalQueues", "-c", "DefaultCluster", "-x", "broker-z")
    # excluding a broker: it gives up what it leads
    result = cli_json(addr, "rebalanceLogicalQueues", "-c", "DefaultCluster", "-x", "broker-a")
    with Admin(addr) as admin:
        assert set(leaders(admin, topic).values()) == {"broker-b"}
    assert {r["to_broker"] for r in result["moved"]} <= {"broker-b"}


def test_a_drained_broker_holding_delayed_messages_is_not_removable_until_they_are_delivered(
        two_brokers: StaticCluster) -> None:
    """drainStatus said "can be removed" over acknowledged delayed messages of a static topic still in the broker's
    timer; removing the broker then lost them (the static topics review: 0 of 10 delivered)."""
    addr, topic = two_brokers.addr, "DrainDelayT"
    with Admin(addr) as admin:
        admin.update_static_topic(topic, 1, brokers=["broker-a"])
    two_brokers.wait_route_epoch(topic, 1)
    with Producer(addr) as producer:
        due = int(time.time() * 1000) + 6_000
        assert producer.send(Message(topic, b"later", deliver_at_ms=due)).queue_offset == -1
    ok(addr, "drainBroker", "-b", "broker-a")
    status = cli_json(addr, "drainStatus", "-b", "broker-a")
    assert status["timer_pending"] == 1 and status["removable"] is False, status
    assert "its timer still holds 1 delayed messages" in status["verdict"], status["verdict"]
    wait_until(lambda: cli_json(addr, "drainStatus", "-b", "broker-a")["timer_pending"] == 0, timeout=30,
               what="the delayed message to be delivered")
    with PullConsumer(addr, group="drain-delay") as consumer:
        mq = consumer.queues(topic)[0]
        got = wait_pulled(consumer, mq, consumer.min_offset(mq))
    assert [body for _, body in got] == [b"later"]

"""Every feature at once, then both brokers SIGKILLed together and restarted: what was acknowledged is all there
and every feature goes on from where it was. One cluster per (flush mode, store type), the feature matrix's
settings (KV, tiered storage, static topics, timer, transactions, POP on the same two brokers).

Recovery of one feature was tested alone before; here they recover together from one commitlog each, in one
start: the consume queues (RocksDB's without a write-ahead log, rebuilt from the commitlog), KV's apply, the
timer's pending messages, the half messages, POP's in-flight state and the tier's upload checkpoint."""

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from client import (
    Admin,
    KVClient,
    Message,
    MessageQueue,
    MQClientError,
    Producer,
    PullConsumer,
    SimpleConsumer,
    TransactionResolution,
)
from client.results import SendResult
from common.message import MessageExt
from tests.cluster import Cluster, make_cluster, wait_static_route, wait_until
from tests.matrix.test_feature_matrix import (
    BROKERS,
    COMBOS,
    create_topic,
    matrix_settings,
    read_all,
    record,
    send_by_message_group,
    unique,
)

COMMITTED = 3  # what the group commits on every queue of the normal topic before the kill


@pytest.fixture(scope="module", params=COMBOS, ids=lambda c: f"{c[0]}-{c[1]}")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    flush, store_type = request.param
    c = make_cluster(tmp_path_factory.mktemp(f"restart-{flush}-{store_type}"), BROKERS,
                     **matrix_settings(flush, store_type))
    try:
        yield c
    finally:
        c.stop()


class Workload:
    """What was acknowledged before the kill, per feature."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.topic, self.static_topic = unique("RsNormal"), unique("RsStatic")
        self.pop_topic, self.delay_topic, self.tx_topic = unique("RsPop"), unique("RsDelay"), unique("RsTx")
        self.auto_topic = unique("RsAuto")  # single sends of an auto_batch producer
        self.gone_topic = unique("RsGone")  # deleted and made again before the kill
        self.group = unique("rs-group")
        self.sent: dict[MessageQueue, dict[int, bytes]] = {}
        self.static_sent: dict[int, list[tuple[int, bytes]]] = {}
        self.auto_sent: dict[MessageQueue, dict[int, bytes]] = {}
        self.gone_sent: dict[MessageQueue, dict[int, bytes]] = {}  # the topic made again
        self.kv: dict[bytes, bytes | None] = {}
        self.pop_bodies = [b"pop-%03d" % i for i in range(200)]
        self.pop_acked: set[bytes] = set()
        self.due_ms = 0
        self.checks: Counter[bytes] = Counter()
        self._lock = threading.Lock()

    def checker(self, msg: MessageExt) -> TransactionResolution:
        with self._lock:
            self.checks[msg.body] += 1
        return TransactionResolution.COMMIT

    def run(self, producer: Producer) -> None:
        c = self.cluster
        for topic in (self.topic, self.pop_topic, self.delay_topic, self.tx_topic, self.auto_topic, self.gone_topic):
            create_topic(c, topic, 4)
        with Admin(c.addr) as admin:
            created = admin.update_static_topic(self.static_topic, 4, brokers=["broker-a"])
        wait_static_route(c.addr, self.static_topic, created.epoch)

        for i in range(30):
            batch = [Message(self.topic, b"n-%03d-%02d-" % (i, j) + bytes([i]) * 500) for j in range(10)]
            record(self.sent, batch, producer.send_batch(batch))
        self._auto_batched()
        self._static(producer, "first")
        with Admin(c.addr) as admin:
            moved = admin.remap_static_topic(self.static_topic, brokers=["broker-b"])
        wait_static_route(c.addr, self.static_topic, moved.epoch)
        self._static(producer, "second")
        with KVClient(c.addr) as kv:
            prefix = unique("rs-kv/").encode()
            entries = {prefix + b"%03d" % i: b"v-%03d-" % i + bytes(range(200)) for i in range(100)}
            for key, value in entries.items():
                kv.put(key, value)
            self.kv.update(entries)
            keys = list(self.kv)
            for key in keys[:10]:
                kv.delete(key)
                self.kv[key] = None
            for key in keys[10:20]:
                assert kv.cas(key, self.kv[key], b"cas-" + key).applied
                self.kv[key] = b"cas-" + key
        for body in self.pop_bodies:
            producer.send(Message(self.pop_topic, body))
        tx = producer.begin_transaction()
        tx.send(Message(self.tx_topic, b"tx-commit"))
        tx.commit()
        tx = producer.begin_transaction()
        tx.send(Message(self.tx_topic, b"tx-rollback"))
        tx.rollback()
        self._pop_some()
        self._delete_and_make_again(producer)
        with PullConsumer(c.addr, group=self.group) as consumer:
            for mq in consumer.queues(self.topic):
                consumer.commit(mq, COMMITTED)

    def last_moment(self, producer: Producer) -> None:
        """Just before the kill: delayed messages due after the restart, and a transaction left open, first
        checked (transactionTimeOut: a second) only after the restart."""
        self.due_ms = int(time.time() * 1000) + 4000
        for i in range(6):
            producer.send(Message(self.delay_topic, b"delay-%d" % i, deliver_at_ms=self.due_ms))
        producer.begin_transaction().send(Message(self.tx_topic, b"tx-open"))

    def _auto_batched(self) -> None:
        """600 single sends at once from one thread: they leave in batches, each answered on its own."""
        with Producer(self.cluster.addr, auto_batch=True) as batching:
            msgs = [Message(self.auto_topic, b"a-%04d-" % i + bytes(300)) for i in range(600)]
            futures = [batching.send_async(msg) for msg in msgs]
            for msg, future in zip(msgs, futures, strict=True):
                record(self.auto_sent, [msg], future.result(timeout=30))

    def _static(self, producer: Producer, tag: str) -> None:
        for body, r in send_by_message_group(producer, self.static_topic, tag, 40):
            self.static_sent.setdefault(r.queue.queue_id, []).append((r.queue_offset, body))

    def _delete_and_make_again(self, producer: Producer) -> None:
        """A topic sent to, popped and committed, then deleted and made again with new messages: after the kill it
        holds the new ones alone, from offset 0, in the consume queues, the tier and POP (the deletion is a record
        in the commitlog, which the restart's replay may start below)."""
        c = self.cluster
        for i in range(4):
            producer.send_batch([Message(self.gone_topic, b"gone-old-%d-%d" % (i, j)) for j in range(10)])
        with SimpleConsumer(c.addr, group=self.group, topic=self.gone_topic) as consumer:
            consumer.ack(consumer.receive(16, invisible_ms=30_000, wait_ms=500))
        with PullConsumer(c.addr, group=self.group) as consumer:
            for mq in consumer.queues(self.gone_topic):
                consumer.commit(mq, 2)
        with Admin(c.addr) as admin:
            admin.delete_topic(self.gone_topic, "DefaultCluster")
            wait_until(lambda: self.gone_topic not in admin.topic_list(), what=f"{self.gone_topic} deleted")
        create_topic(c, self.gone_topic, 4)
        for i in range(4):
            batch = [Message(self.gone_topic, b"gone-new-%d-%d" % (i, j)) for j in range(3)]
            record(self.gone_sent, batch, producer.send_batch(batch))
        assert all(min(offsets) == 0 for offsets in self.gone_sent.values()), self.gone_sent

    def _pop_some(self) -> None:
        """120 received: half of them acked, the rest left in flight (invisible for 4 s) across the kill."""
        with SimpleConsumer(self.cluster.addr, group=self.group, topic=self.pop_topic) as consumer:
            got: list[MessageExt] = []
            deadline = time.monotonic() + 20
            while len(got) < 120:
                assert time.monotonic() < deadline, f"POP: {len(got)} of 120 received"
                got += consumer.receive(32, invisible_ms=4000, wait_ms=200)
            consumer.ack(got[:60])
        self.pop_acked = {m.body for m in got[:60]}


def tier_caught_up(cluster: Cluster, topic: str) -> dict[tuple[str, int], int] | None:
    """Each queue's tiered max offset once the tier has all of the queue (None until then)."""
    with Admin(cluster.addr) as admin:
        status = admin.tiered_status(topic)
    maxes = {(s.broker_name, q.queue_id): q.tiered_max_offset for s in status for q in s.queues}
    caught_up = all(q.upload_lag == 0 and q.tiered_max_offset == q.local_max_offset for s in status for q in s.queues)
    return maxes if caught_up else None


def kill_and_restart(cluster: Cluster) -> None:
    for name in BROKERS:  # both at once: neither sees the other stop
        cluster.brokers[name].proc.kill()
    for name in BROKERS:
        cluster.brokers[name].proc.wait(10)
    for name in BROKERS:
        cluster.start_broker(name)
    addrs = {d.addr for d in cluster.brokers.values()}
    with Admin(cluster.addr) as admin:
        wait_until(lambda: {b.addr for b in admin.brokers("DefaultCluster")} == addrs, timeout=20,
                   what="both brokers registered at their new addresses")


def test_every_feature_recovers_from_a_sigkill_of_both_brokers(cluster: Cluster) -> None:
    work = Workload(cluster)
    store_type = cluster.settings["storeType"]
    with Producer(cluster.addr, group=unique("rs-tx"), transaction_checker=work.checker) as producer:
        work.run(producer)
        uploaded = wait_until(lambda: tier_caught_up(cluster, work.topic), timeout=20, what="tier caught up")
        work.last_moment(producer)
        kill_and_restart(cluster)

        with PullConsumer(cluster.addr, group=unique("rs-reader")) as reader:
            for mq in reader.queues(work.topic):  # every acknowledged message, at its offset, once
                want = work.sent.get(mq, {})
                got = read_all(reader, mq)
                assert [o for o, _ in got] == list(range(len(want))), mq
                assert dict(got) == want, f"bytes differ on {mq}"
            for mq in reader.queues(work.auto_topic):  # each auto-batched send where its own result said
                assert dict(read_all(reader, mq)) == work.auto_sent.get(mq, {}), mq
            for mq in reader.queues(work.static_topic):  # both links
                assert read_all(reader, mq) == sorted(work.static_sent[mq.queue_id]), mq
            for mq in reader.queues(work.gone_topic):  # the topic made again, none of the deleted one's
                assert dict(read_all(reader, mq)) == work.gone_sent.get(mq, {}), mq
        with PullConsumer(cluster.addr, group=work.group) as consumer:
            for mq in consumer.queues(work.topic):
                # RocksDB metadata writes a commit through its write-ahead log; the file store persists offsets
                # every flushConsumerOffsetInterval, so a kill may take the last commits (upstream's contract)
                allowed = {COMMITTED} if store_type == "defaultRocksDB" else {COMMITTED, -1}
                assert consumer.committed(mq) in allowed, (mq, consumer.committed(mq))
        # the tier's checkpoint survived: nothing uploaded again from 0, nothing claimed that was not uploaded
        assert tier_caught_up(cluster, work.topic) == uploaded

        with KVClient(cluster.addr) as kv:
            assert kv.get_batch(list(work.kv)) == list(work.kv.values())
            after = unique("rs-kv-after/").encode()
            kv.put(after, b"after")
            assert kv.get(after) == b"after"

        check_pop(cluster, work)
        check_made_again(cluster, work)

        with PullConsumer(cluster.addr, group=unique("rs-delay")) as reader:
            def delivered() -> list[tuple[bytes, int]] | None:
                got = [(m.body, m.store_timestamp) for mq in reader.queues(work.delay_topic)
                       for m in reader.pull(mq, 0, 16).messages]
                return got if len(got) >= 6 else None

            delayed = wait_until(delivered, timeout=20, what="the delayed messages")
            assert sorted(b for b, _ in delayed) == [b"delay-%d" % i for i in range(6)]
            assert all(stored >= work.due_ms for _, stored in delayed), delayed  # never early

        with PullConsumer(cluster.addr, group=unique("rs-tx-reader")) as reader:
            def resolved() -> list[bytes] | None:
                bodies = sorted(body for mq in reader.queues(work.tx_topic) for _, body in read_all(reader, mq))
                return bodies if b"tx-open" in bodies else None

            assert wait_until(resolved, timeout=20, what="the open transaction checked back") == \
                [b"tx-commit", b"tx-open"]
        assert set(work.checks) == {b"tx-open"}

        for mq in sorted(work.sent, key=str):  # sends go on at the next offset, and reach the tier
            r = send_retrying_once(producer, Message(work.topic, b"after-restart"), mq)
            assert r.queue_offset == len(work.sent[mq]), mq

        def tier_took_the_sends() -> bool:
            maxes = tier_caught_up(cluster, work.topic)
            return maxes is not None and all(maxes[(mq.broker_name, mq.queue_id)] == len(work.sent[mq]) + 1
                                             for mq in work.sent)

        wait_until(tier_took_the_sends, timeout=20, what="the tier to take the sends after the restart")


def check_pop(cluster: Cluster, work: Workload) -> None:
    """Nothing acked comes back; everything else comes (the in-flight ones once their invisible time passed),
    once each."""
    wanted = set(work.pop_bodies) - work.pop_acked
    seen: Counter[bytes] = Counter()
    with SimpleConsumer(cluster.addr, group=work.group, topic=work.pop_topic) as consumer:
        deadline = time.monotonic() + 25
        while set(seen) != wanted:
            assert time.monotonic() < deadline, f"POP after the restart: {len(wanted - set(seen))} never came"
            batch = consumer.receive(32, invisible_ms=30_000, wait_ms=300)
            if batch:
                consumer.ack(batch)
            seen.update(m.body for m in batch)
            again = sorted(set(seen) & work.pop_acked)
            assert not again, f"{len(again)} acked before the kill and delivered again, e.g. {again[:3]}"
        stray = consumer.receive(32, invisible_ms=30_000, wait_ms=500)
    assert stray == [] and max(seen.values()) == 1, (stray, seen.most_common(3))


def check_made_again(cluster: Cluster, work: Workload) -> None:
    """The deleted topic's group state is gone and the tier holds the topic made again alone."""
    new = sorted(body for queue in work.gone_sent.values() for body in queue.values())
    with PullConsumer(cluster.addr, group=work.group) as consumer:
        assert {consumer.committed(mq) for mq in consumer.queues(work.gone_topic)} == {-1}
    got: list[bytes] = []
    with SimpleConsumer(cluster.addr, group=work.group, topic=work.gone_topic) as consumer:
        deadline = time.monotonic() + 20
        while len(got) < len(new):
            assert time.monotonic() < deadline, f"POP of the topic made again: {sorted(got)} of {new}"
            batch = consumer.receive(32, invisible_ms=30_000, wait_ms=300)
            if batch:
                consumer.ack(batch)
            got += [m.body for m in batch]
    assert sorted(got) == new
    wanted = {(mq.broker_name, mq.queue_id): len(offsets) for mq, offsets in work.gone_sent.items()}

    def tiered() -> dict[tuple[str, int], int]:  # queues the tier holds messages of (-1: none)
        with Admin(cluster.addr) as admin:
            status = admin.tiered_status(work.gone_topic)
        return {(s.broker_name, q.queue_id): q.tiered_max_offset for s in status for q in s.queues
                if q.tiered_max_offset > 0}

    wait_until(lambda: tiered() == wanted, timeout=20, what=f"the tier to hold the topic made again, {wanted}")


def send_retrying_once(producer: Producer, msg: Message, mq: MessageQueue) -> SendResult:
    """A send to an explicit queue is not retried (RocketMQ's contract); the first one to a restarted broker may
    find its old address, which marks it down and makes the next look take a fresh route."""
    try:
        return producer.send(msg, queue=mq)
    except MQClientError:
        return producer.send(msg, queue=mq)

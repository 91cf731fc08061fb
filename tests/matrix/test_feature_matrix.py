"""The feature matrix (issue 13, item 7): every feature end to end under both flush modes and both store types.

{ASYNC_FLUSH, SYNC_FLUSH} x {default, defaultRocksDB} x {normal topic, static topic across a remap, KV, tiered read
after local expiry, query by key, delayed messages and a recall, a consumer group with a retry and a dead letter,
POP consumption (SimpleConsumer) on a normal and a static topic, transactions with a check-back}. One cluster per
(flush, store type) — a name server and two brokers with KV, tiered storage (posix) and static topics all on at
once, since features meeting in the same broker is the point — and one test function per feature (query by key and
POP have a second one, on a static topic across a remap). Local commitlog segments are small and expire about a
second after they are sealed, so the tiered cell can drive its data out of the local store within seconds.
"""

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from client import (
    Admin,
    KVClient,
    Message,
    MessageQueue,
    MQClientError,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SimpleConsumer,
    TransactionResolution,
)
from client.results import SendResult, SendStatus
from common.message import MessageExt
from common.receipt_handle import ReceiptHandle
from common.statictopic.logic_queue_mapping_item import BLOCK_SIZE, LOGICAL_QUEUE_MOCK_BROKER_NAME, block_round_up
from tests.cluster import Cluster, make_cluster, wait_dispatched, wait_static_route, wait_until

BROKERS = ("broker-a", "broker-b")
SEGMENT_BYTES = 256 * 1024
COMBOS = [(flush, store) for flush in ("ASYNC_FLUSH", "SYNC_FLUSH") for store in ("default", "defaultRocksDB")]


def matrix_settings(flush: str, store_type: str) -> dict[str, object]:
    return {
        "flushDiskType": flush,
        "storeType": store_type,
        "registerNameServerPeriod": 1000,
        "kvEnable": "true",
        "tieredStoreEnable": "true",
        "tieredBackendServiceProvider": "posix",  # under <storePathRootDir>/tiered, i.e. the test's temp dir
        "mappedFileSizeCommitLog": SEGMENT_BYTES,
        "fileReservedTime": "0.0003",  # ~1 s: a sealed segment expires about a second after its last write
        "deleteWhen": "*",
        "cleanResourceInterval": 200,
        "tieredStoreGroupCommitAge": 100,
        "tieredStoreCommitLogMaxSize": 1024 * 1024,
        "tieredStoreConsumeQueueMaxSize": 28 * 1024,
        "staticTopicCleanInterval": 500,  # the clean service runs while the tier serves expired links
        "messageDelayLevel": "1s 1s 1s 2s",  # retries (level 3 + n) wait a second, not 10 s
        "transactionTimeOut": 1000,  # an unresolved half message is first checked a second after its send, not 6 s
        "transactionCheckInterval": 500,  # and again every half second, not every 30 s
    }


@pytest.fixture(scope="module", params=COMBOS, ids=lambda c: f"{c[0]}-{c[1]}")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    flush, store_type = request.param
    c = make_cluster(tmp_path_factory.mktemp(f"matrix-{flush}-{store_type}"), BROKERS,
                     **matrix_settings(flush, store_type))
    try:
        with Admin(c.addr) as admin:  # a silently ignored key would make every cell test less than it claims
            brokers = wait_until(lambda: (lambda bs: bs if len(bs) == len(BROKERS) else None)(
                admin.brokers("DefaultCluster")), what="both brokers registered")
            for b in brokers:
                info = admin.broker_runtime_info(b.addr)
                assert (info["flushDiskType"], info["storeType"], info["kvEnable"]) == (flush, store_type, "true")
        yield c
    finally:
        c.stop()


# -- helpers ------------------------------------------------------------------------------------------------
def unique(name: str) -> str:
    return f"{name}{uuid.uuid4().hex[:6]}"


def create_topic(cluster: Cluster, topic: str, queues: int, brokers: tuple[str, ...] = BROKERS) -> None:
    """A normal topic on ``brokers``, returned once the name server routes it to all of them."""
    with Admin(cluster.addr) as admin:
        admin.create_topic(topic, brokers=list(brokers), read_queue_nums=queues, write_queue_nums=queues)
        wait_until(lambda: topic in admin.topic_list()
                   and {q.broker_name for q in admin.topic_route(topic).queue_datas} >= set(brokers),
                   what=f"route of {topic}")


def record(sent: dict[MessageQueue, dict[int, bytes]], batch: list[Message], result: SendResult) -> None:
    """Remember where the broker says each message of ``batch`` went; an offset acknowledged twice fails."""
    assert result.status is SendStatus.SEND_OK, result
    queue = sent.setdefault(result.queue, {})
    for i, msg in enumerate(batch):
        assert result.queue_offset + i not in queue, f"{result.queue} offset {result.queue_offset + i} sent twice"
        queue[result.queue_offset + i] = msg.body


def send_by_message_group(producer: Producer, topic: str, tag: str, n: int, pad: bytes = b"",
                          ) -> list[tuple[bytes, SendResult]]:
    """``n`` messages to a static topic, spread by message group (seven users): each answered with a logic
    queue and offset."""
    out: list[tuple[bytes, SendResult]] = []
    for i in range(n):
        body = f"{tag}-{i}".encode() + pad
        r = producer.send(Message(topic, body, keys=[f"{tag}-{i}"]), sharding_key=f"user-{i % 7}")
        assert r.status is SendStatus.SEND_OK and r.queue.broker_name == LOGICAL_QUEUE_MOCK_BROKER_NAME
        out.append((body, r))
    return out


def read_all(consumer: PullConsumer, mq: MessageQueue, start: int = 0) -> list[tuple[int, bytes]]:
    """(offset, body) of every message of ``mq`` from ``start`` until the queue says there is nothing more."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while True:
        result = consumer.pull(mq, offset=offset, max_nums=64)
        if result.status is not PullStatus.FOUND:
            assert result.status is PullStatus.NO_NEW_MSG, (mq, offset, result.status)
            return out
        out += [(m.queue_offset, m.body) for m in result.messages]
        assert result.next_begin_offset > offset, (mq, offset, result.next_begin_offset)
        offset = result.next_begin_offset


# -- 1. normal topic: send, pull ----------------------------------------------------------------------------
def test_normal_topic_send_and_pull(cluster: Cluster) -> None:
    topic, queues = unique("MxNormal"), 4
    create_topic(cluster, topic, queues)
    sent: dict[MessageQueue, dict[int, bytes]] = {}
    with Producer(cluster.addr) as producer:
        for i in range(60):  # single sends, round robin over both brokers' queues
            msg = Message(topic, b"single-%03d-" % i + bytes(range(256)), tags="A")
            record(sent, [msg], producer.send(msg))
        for i in range(20):  # batches
            batch = [Message(topic, b"batch-%03d-%02d" % (i, j) + b"\x00\xff" * j) for j in range(10)]
            record(sent, batch, producer.send_batch(batch))
    assert sum(map(len, sent.values())) == 260
    assert {mq.broker_name for mq in sent} == set(BROKERS)

    with PullConsumer(cluster.addr, group=unique("mx-normal")) as consumer:
        mqs = consumer.queues(topic)
        assert len(mqs) == queues * len(BROKERS) and set(sent) <= set(mqs)
        wait_dispatched(consumer, {mq: len(v) for mq, v in sent.items()})
        for mq in mqs:
            want = sent.get(mq, {})
            got = read_all(consumer, mq)
            assert [o for o, _ in got] == list(range(len(want))), mq  # contiguous from 0
            assert dict(got) == want, f"bytes differ on {mq}"
            assert (consumer.min_offset(mq), consumer.max_offset(mq)) == (0, len(want))
            consumer.commit(mq, len(want))
        for mq in mqs:  # committed offsets read back (the broker writes them every flushConsumerOffsetInterval)
            assert consumer.committed(mq) == len(sent.get(mq, {}))


# -- 2. static topic: send, pull across a remap -------------------------------------------------------------
def test_static_topic_offsets_continue_across_a_remap(cluster: Cluster) -> None:
    topic, queues = unique("MxStatic"), 4
    with Admin(cluster.addr) as admin:
        created = admin.update_static_topic(topic, queues, brokers=["broker-a"])
    wait_static_route(cluster.addr, topic, created.epoch)
    sent: dict[int, list[tuple[int, bytes]]] = {q: [] for q in range(queues)}  # logic queue -> (offset, body)

    def produce(producer: Producer, tag: str, n: int) -> None:
        for body, r in send_by_message_group(producer, topic, tag, n, pad=b"x" * 100):
            sent[r.queue.queue_id].append((r.queue_offset, body))

    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group=unique("mx-static")) as consumer:
        produce(producer, "before", 60)
        before = {q: len(v) for q, v in sent.items()}
        assert all(sent[q] and [o for o, _ in sent[q]] == list(range(before[q])) for q in range(queues)), sent
        mqs = consumer.queues(topic)
        assert mqs == [MessageQueue(topic, LOGICAL_QUEUE_MOCK_BROKER_NAME, q) for q in range(queues)]
        half = {mq: before[mq.queue_id] // 2 for mq in mqs}
        for mq in mqs:  # a group consumed half of each queue before the remap
            consumer.commit(mq, half[mq])

        with Admin(cluster.addr) as admin:
            moved = admin.remap_static_topic(topic, brokers=["broker-b"])
        assert {leader.broker_name for leader in moved.leaders()} == {"broker-b"}
        wait_static_route(cluster.addr, topic, moved.epoch)
        produce(producer, "after", 60)
        wait_dispatched(consumer, {mq: sent[mq.queue_id][-1][0] + 1 for mq in mqs})

        for mq in mqs:
            q = mq.queue_id
            offsets = [o for o, _ in sent[q]]
            after = offsets[before[q]:]
            assert after, f"no message went to logic queue {q} after the remap"
            # the new link starts at the next block of logic offsets and continues from there
            assert after == list(range(block_round_up(before[q]), block_round_up(before[q]) + len(after))), q
            got = read_all(consumer, mq)
            assert got == sent[q], f"logic queue {q}: not every message exactly once, in order"
            assert consumer.max_offset(mq) == after[-1] + 1
            assert consumer.min_offset(mq) == 0
            # the group resumes where it committed (the old link) and reads the rest exactly once
            assert consumer.committed(mq) == half[mq]
            assert read_all(consumer, mq, half[mq]) == sent[q][half[mq]:]
    with Admin(cluster.addr) as admin:
        status = admin.static_topic_status(topic)
    assert status is not None and status.total_queues == queues and not status.missing


# -- 3. KV: put, get, compare-and-set -----------------------------------------------------------------------
def test_kv_put_get_and_cas(cluster: Cluster) -> None:
    prefix = unique("mx-kv/").encode()
    entries = {prefix + b"key-%03d" % i: b"value-%03d-" % i + bytes(range(256)) for i in range(64)}
    with KVClient(cluster.addr) as kv:  # the first use provisions the shards (kvEnable=true, no kvInit)
        for key, value in entries.items():
            kv.put(key, value)
        assert kv.shards() == 8
        for key, value in entries.items():
            assert kv.get(key) == value
        assert kv.get_batch(list(entries)) == list(entries.values())
        assert kv.scan(prefix, limit=1000) == sorted(entries.items())
        assert kv.get(prefix + b"absent") is None

        key = prefix + b"cas"
        assert kv.cas(key, None, b"v1").applied  # expect-absent on an absent key
        absent_again = kv.cas(key, None, b"other")
        assert (absent_again.applied, absent_again.current) == (False, b"v1")
        wrong = kv.cas(key, b"not-v1", b"v2")
        assert (wrong.applied, wrong.current) == (False, b"v1")
        assert kv.get(key) == b"v1"
        right = kv.cas(key, b"v1", b"v2")
        assert (right.applied, right.current) == (True, b"v2")
        assert kv.compare_and_set(key, expected=b"v2", value=b"v3") is True
        assert kv.compare_and_set(key, expected=b"v2", value=b"v4") is False
        assert kv.get(key) == b"v3"

        kv.put(key, b"overwritten")
        assert kv.get(key) == b"overwritten"
        kv.delete(key)
        assert kv.get(key) is None
        assert kv.compare_and_set(key, expected=None, value=b"again") is True  # absent after the delete
        assert kv.get(key) == b"again"
    with Admin(cluster.addr) as admin:  # shards on both brokers: the keys above went to both
        status = admin.static_topic_status("rmq_sys_KV")
    assert status is not None and status.total_queues == 8
    assert {q.leader_broker for q in status.queues} == set(BROKERS)


# -- 4. query by key ----------------------------------------------------------------------------------------
def test_query_by_key_returns_exactly_the_sent_messages(cluster: Cluster) -> None:
    topic = unique("MxQuery")
    create_topic(cluster, topic, 2)
    shared, other = unique("shared-"), unique("other-")
    with Producer(cluster.addr) as producer:
        results = [producer.send(Message(topic, b"query-%02d" % i, tags="Q", keys=[f"{shared}-{i}", shared]))
                   for i in range(12)]
        decoys = [producer.send(Message(topic, b"decoy-%02d" % i, keys=[other])) for i in range(3)]
    assert {r.queue.broker_name for r in results} == set(BROKERS)
    by_id = {r.msg_id: (r, b"query-%02d" % i) for i, r in enumerate(results)}

    with Admin(cluster.addr) as admin:
        # the index is built by the dispatch chain, asynchronously: poll until all are there
        found = wait_until(lambda: (lambda m: m if len(m) >= len(results) else None)(
            admin.query_msg_by_key(topic, shared)), timeout=15, what=f"{len(results)} messages indexed by {shared}")
        assert sorted(m.msg_id for m in found) == sorted(by_id), "query by key: not exactly the sent messages"
        for m in found:
            result, body = by_id[m.msg_id]
            i = int(body[-2:])
            assert (m.topic, m.body, m.tags, m.keys) == (topic, body, "Q", [f"{shared}-{i}", shared])
            assert (m.queue_id, m.queue_offset, m.offset_msg_id) == \
                (result.queue.queue_id, result.queue_offset, result.offset_msg_id)
        for i, r in enumerate(results):  # each own key: exactly its message
            (one,) = admin.query_msg_by_key(topic, f"{shared}-{i}")
            assert (one.msg_id, one.body) == (r.msg_id, b"query-%02d" % i)
            for msg_id in (r.msg_id, r.offset_msg_id):  # and both ids find it
                assert admin.query_msg_by_id(msg_id).body == b"query-%02d" % i
        assert sorted(m.msg_id for m in admin.query_msg_by_key(topic, other)) == sorted(d.msg_id for d in decoys)
        assert admin.query_msg_by_key(topic, unique("nobody-")) == []


def test_query_by_key_on_a_static_topic_across_a_remap(cluster: Cluster) -> None:
    """Both links of a static topic are searched, and what comes back carries logic queues and offsets (the
    contract: messages returned to users always carry logic offsets)."""
    topic, key = unique("MxQueryStatic"), unique("static-key-")
    with Admin(cluster.addr) as admin:
        created = admin.update_static_topic(topic, 2, brokers=["broker-a"])
    wait_static_route(cluster.addr, topic, created.epoch)
    results: list[SendResult] = []
    with Producer(cluster.addr) as producer:
        results += [producer.send(Message(topic, b"first-%d" % i, keys=[key])) for i in range(4)]
        with Admin(cluster.addr) as admin:
            moved = admin.remap_static_topic(topic, brokers=["broker-b"])
        wait_static_route(cluster.addr, topic, moved.epoch)
        results += [producer.send(Message(topic, b"second-%d" % i, keys=[key])) for i in range(4)]
    want = sorted((r.msg_id, r.queue.queue_id, r.queue_offset) for r in results)
    assert {o for _, _, o in want} & set(range(BLOCK_SIZE)) and max(o for _, _, o in want) >= BLOCK_SIZE

    with Admin(cluster.addr) as admin:
        found = wait_until(lambda: (lambda m: m if len(m) >= len(results) else None)(
            admin.query_msg_by_key(topic, key)), timeout=15, what=f"{len(results)} messages indexed by {key}")
        assert sorted((m.msg_id, m.queue_id, m.queue_offset) for m in found) == want
        for r in results:  # by either id too
            for msg_id in (r.msg_id, r.offset_msg_id):
                m = admin.query_msg_by_id(msg_id)
                assert (m.msg_id, m.queue_id, m.queue_offset) == (r.msg_id, r.queue.queue_id, r.queue_offset)


# -- 5. tiered storage: read after local expiry -------------------------------------------------------------
def local_segments(cluster: Cluster, broker: str) -> list[int]:
    """Base offsets of the broker's local commitlog segments."""
    return sorted(int(p.name) for p in (cluster.workdir / broker / "store" / "commitlog").iterdir())


def test_tiered_read_after_local_expiry(cluster: Cluster) -> None:
    """broker-a's commitlog segments holding a normal topic, the first link of a static topic (remapped to
    broker-b since) and KV records all expire locally; everything still reads, the old data from the tier."""
    topic, static_topic, queues = unique("MxTiered"), unique("MxTieredStatic"), 2
    create_topic(cluster, topic, queues, brokers=("broker-a",))
    with Admin(cluster.addr) as admin:
        created = admin.update_static_topic(static_topic, 2, brokers=["broker-a"])
    wait_static_route(cluster.addr, static_topic, created.epoch)

    sent: dict[MessageQueue, dict[int, bytes]] = {}
    static_sent: dict[MessageQueue, dict[int, bytes]] = {}
    kv_entries = {unique("mx-tiered-kv/").encode() + b"%02d" % i: b"kv-%02d" % i for i in range(16)}
    group = unique("mx-tiered")
    with Producer(cluster.addr) as producer, KVClient(cluster.addr) as kv:
        for i in range(3 * SEGMENT_BYTES // (20 * 1000)):  # ~3 segments of data, batches of 20 x 1 KB
            batch = [Message(topic, b"tiered-%04d-%02d-" % (i, j) + bytes([i % 251]) * 1000, tags="T",
                             keys=[f"t-{i}-{j}"]) for j in range(20)]
            record(sent, batch, producer.send_batch(batch))
        for i in range(20):  # the static topic's first link, on broker-a
            msg = Message(static_topic, b"static-first-%02d" % i)
            record(static_sent, [msg], producer.send(msg))
        for key, value in kv_entries.items():
            kv.put(key, value)
        with PullConsumer(cluster.addr, group=group) as consumer:  # a commit inside the first link
            for mq in consumer.queues(static_topic):
                consumer.commit(mq, 1)
        with Admin(cluster.addr) as admin:
            moved = admin.remap_static_topic(static_topic, brokers=["broker-b"])
        wait_static_route(cluster.addr, static_topic, moved.epoch)
        for i in range(10):  # the second link, on broker-b (stays local)
            msg = Message(static_topic, b"static-second-%02d" % i)
            record(static_sent, [msg], producer.send(msg))
        with Admin(cluster.addr) as admin:
            (a,) = [b for b in admin.brokers("DefaultCluster") if b.broker_name == "broker-a"]
            written = int(admin.broker_runtime_info(a.addr)["commitLogMaxOffset"])
        # roll broker-a past everything above: once sealed, those segments expire locally
        filler = unique("MxFiller")
        create_topic(cluster, filler, 1, brokers=("broker-a",))
        for _ in range(2 * SEGMENT_BYTES // (16 * 4000) + 1):
            producer.send_batch([Message(filler, b"f" * 4000) for _ in range(16)])
    assert len(sent) == queues and len(static_sent) == 2
    assert all(min(v) < BLOCK_SIZE <= max(v) for v in static_sent.values()), "a logic queue missed a link"

    # every local segment holding a byte written before the filler is gone (the upload checkpoint bounds
    # expiry, so the tier has all of it); the clean service meanwhile runs over the static topic's chains
    wait_until(lambda: local_segments(cluster, "broker-a")[0] >= written, timeout=60, interval=0.2,
               what=f"local expiry of broker-a's commitlog below {written}")
    assert all(base >= written for base in local_segments(cluster, "broker-a"))
    with Admin(cluster.addr) as admin:
        (status,) = admin.tiered_status(topic)
    assert all(q.local_min_offset > 0 and q.tiered_min_offset == 0 for q in status.queues), status

    with PullConsumer(cluster.addr, group=group) as consumer:
        for mq in consumer.queues(topic):
            want = sent[mq]
            assert consumer.min_offset(mq) == 0 and consumer.max_offset(mq) == len(want)
            got = read_all(consumer, mq)
            assert [o for o, _ in got] == list(range(len(want))), mq
            assert dict(got) == want, f"tiered bytes differ on {mq}"
        for mq in consumer.queues(static_topic):  # old link from broker-a's tier, new link local on broker-b
            want = static_sent[mq]
            assert consumer.min_offset(mq) == 0, mq
            assert read_all(consumer, mq) == sorted(want.items()), mq
            assert consumer.committed(mq) == 1
            assert read_all(consumer, mq, 1) == sorted(want.items())[1:], mq
    with KVClient(cluster.addr) as kv:  # KV state outlives the records it was built from
        assert kv.get_batch(list(kv_entries)) == list(kv_entries.values())


# -- 6. delayed messages: a level and a time, on both brokers, and a recalled one that never comes -----------
def test_delayed_messages_arrive_no_earlier_than_asked(cluster: Cluster) -> None:
    topic = unique("MxDelay")
    create_topic(cluster, topic, 2)
    sent_at = int(time.time() * 1000)
    with Producer(cluster.addr) as producer:
        for broker in BROKERS:
            queue = MessageQueue(topic, broker, 1)
            # due before the others, on the same queue: delivered first, had it not been recalled
            recalled = producer.send(Message(topic, b"recalled-" + broker.encode(), deliver_at_ms=sent_at + 1100),
                                     queue=queue)
            assert producer.recall(topic, recalled.recall_handle) == recalled.msg_id
            by_level = producer.send(Message(topic, b"level-" + broker.encode(), delay_level=1), queue=queue)
            by_time = producer.send(Message(topic, b"time-" + broker.encode(), deliver_at_ms=sent_at + 1200),
                                    queue=queue)
            assert by_level.status is by_time.status is recalled.status is SendStatus.SEND_OK
    with PullConsumer(cluster.addr, group=unique("mx-delay")) as consumer:
        got: dict[bytes, int] = {}

        def arrived() -> bool:
            for broker in BROKERS:
                mq = MessageQueue(topic, broker, 1)
                got.update((m.body, m.store_timestamp) for m in consumer.pull(mq, 0, 16, suspend_ms=200).messages)
            return len(got) == 4

        wait_until(arrived, timeout=10, what="4 delayed messages")
    assert all(stored >= sent_at + 1000 for stored in got.values()), got  # never early, by the broker's store time
    assert not any(body.startswith(b"recalled") for body in got), got


def test_consumer_group_shares_retries_and_dead_letters(cluster: Cluster) -> None:
    topic, group = unique("MxGroup"), unique("mx-group")
    create_topic(cluster, topic, 2)
    seen: list[bytes] = []
    lock = threading.Lock()

    def handler(msg) -> None:
        with lock:
            seen.append(msg.body)
        if msg.body == b"bad":
            raise RuntimeError("always fails")

    members = [PushConsumer(cluster.addr, group=group, topic=topic, handler=handler, consume_from_first=True,
                            max_reconsume_times=1) for _ in range(2)]
    for m in members:
        m.start()
    try:
        def held() -> list[list]:
            return [[q for q in m.assigned_queues() if q.topic == topic] for m in members]

        def split() -> bool:
            a, b = held()
            return len(a) == len(b) > 0 and not set(a) & set(b)

        # An even split, not merely some queues each: a member that has not yet dropped a queue the other took
        # would deliver its messages twice (allowed by at-least-once, but not what this test counts).
        wait_until(split, what="the members to split the queues between them")
        bodies = [f"ok-{i}".encode() for i in range(100)]
        with Producer(cluster.addr) as producer:
            producer.send(Message(topic, b"bad", keys="mx-bad"))
            for body in bodies:
                producer.send(Message(topic, body))
        wait_until(lambda: set(bodies) <= set(seen) and seen.count(b"bad") == 2, timeout=20,
                   what="every message, and the bad one retried once")

        def dead() -> list:
            with PullConsumer(cluster.addr, group=unique("mx-dlq")) as reader:
                try:
                    queues = reader.queues(f"%DLQ%{group}")
                except MQClientError:
                    return []
                return [m for mq in queues for m in reader.pull(mq, 0, 8).messages]

        [dead_letter] = wait_until(dead, timeout=20, what="the dead letter")
        assert dead_letter.body == b"bad" and dead_letter.keys == ["mx-bad"]
        assert sorted(b for b in seen if b != b"bad") == sorted(bodies)  # each once
    finally:
        for m in members:
            m.close()


# -- 7. POP (SimpleConsumer): receive, ack, redelivery after the invisible time -----------------------------
def receive(consumer: SimpleConsumer, count: int, invisible_ms: int = 30_000, ack: bool = False,
            timeout: float = 15) -> list[MessageExt]:
    """Receive until ``count`` messages came (each batch acked when ``ack``); a route moment (a remap) is asked
    again."""
    got: list[MessageExt] = []
    errors: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} received; last error: {errors[-1:]}"
        try:
            batch = consumer.receive(32, invisible_ms=invisible_ms, wait_ms=200)
        except MQClientError as exc:  # (a remap: the route names the old leader for a moment)
            errors.append(str(exc))
            time.sleep(0.1)
            continue
        if batch and ack:
            consumer.ack(batch)
        got += batch
    return got


def assert_nothing_comes_back(consumer: SimpleConsumer, window_s: float) -> None:
    """Every receive for ``window_s`` (longer than the invisible time of what was received before, so an ack lost
    would show) comes back empty."""
    deadline = time.monotonic() + window_s
    while time.monotonic() < deadline:
        stray = consumer.receive(32, invisible_ms=30_000, wait_ms=300)
        assert stray == [], [(m.body, m.reconsume_times) for m in stray]


def test_pop_receive_ack_and_redelivery(cluster: Cluster) -> None:
    topic, group = unique("MxPop"), unique("mx-pop")
    create_topic(cluster, topic, 4)
    sent: dict[bytes, SendResult] = {}
    with Producer(cluster.addr) as producer:
        for i in range(200):
            body = b"pop-%03d-" % i + bytes(range(64))
            sent[body] = producer.send(Message(topic, body, tags="P", keys=[f"pop-{i}"]))
    assert {r.queue.broker_name for r in sent.values()} == set(BROKERS)
    # three of each broker's messages are held: never acked on their first delivery
    held = {body for broker in BROKERS for body in [b for b, r in sent.items() if r.queue.broker_name == broker][:3]}

    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        first = receive(consumer, len(sent))
        assert sorted(m.body for m in first) == sorted(sent), "not every message exactly once"
        for m in first:
            r = sent[m.body]
            assert (m.topic, m.msg_id, m.tags, m.keys, m.reconsume_times) == \
                (topic, r.msg_id, "P", [f"pop-{int(m.body[4:7])}"], 0)
            assert (ReceiptHandle.decode(m.receipt_handle).broker_name, m.queue_id, m.queue_offset) == \
                (r.queue.broker_name, r.queue.queue_id, r.queue_offset)
        acks: list[Future[None]] = [consumer.ack_async([m for m in first[i:i + 32] if m.body not in held])
                                    for i in range(0, len(first), 32)]
        for ack in acks:
            ack.result(timeout=10)
        kept = [m for m in first if m.body in held]
        for m in kept:  # was invisible for 30 s: come back in a second instead
            old = m.receipt_handle
            consumer.change_invisible(m, 1000)
            assert m.receipt_handle != old

        again = receive(consumer, len(held), invisible_ms=3000)  # time enough to ack all under SYNC_FLUSH
        assert sorted(m.body for m in again) == sorted(held)
        assert all(m.reconsume_times == 1 for m in again), [(m.body, m.reconsume_times) for m in again]
        assert {m.msg_id for m in again} == {sent[b].msg_id for b in held}
        consumer.ack(again)
        assert_nothing_comes_back(consumer, 4.0)  # past the redelivery's invisible time: the acks held

    with PullConsumer(cluster.addr, group=group) as reader:  # the group's progress: every queue consumed
        per_queue = Counter(r.queue for r in sent.values())
        wait_until(lambda: all(reader.committed(mq) == per_queue[mq] for mq in reader.queues(topic)), timeout=10,
                   what="the group's committed offsets at the end of every queue")


def test_pop_on_a_static_topic_across_a_remap(cluster: Cluster) -> None:
    topic, group, queues = unique("MxPopStatic"), unique("mx-pop-static"), 4
    with Admin(cluster.addr) as admin:
        created = admin.update_static_topic(topic, queues, brokers=["broker-a"])
    wait_static_route(cluster.addr, topic, created.epoch)
    sent: dict[bytes, SendResult] = {}

    with Producer(cluster.addr) as producer, SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        sent.update(send_by_message_group(producer, topic, "before", 60))
        # Invisible for 2 s: a lost ack would hand its message out again within the check at the end.
        got = receive(consumer, 20, invisible_ms=2000, ack=True)  # some before the remap, the rest left on broker-a
        with Admin(cluster.addr) as admin:
            moved = admin.remap_static_topic(topic, brokers=["broker-b"])
        assert {leader.broker_name for leader in moved.leaders()} == {"broker-b"}
        wait_static_route(cluster.addr, topic, moved.epoch)
        sent.update(send_by_message_group(producer, topic, "after", 60))
        got += receive(consumer, len(sent) - len(got), invisible_ms=2000, ack=True, timeout=20)
        assert_nothing_comes_back(consumer, 3.0)

    counts = Counter(m.body for m in got)
    assert set(counts) == set(sent) and max(counts.values()) == 1, "not every message exactly once"
    assert {r.queue_offset for r in sent.values()} & set(range(BLOCK_SIZE)), "nothing on the first link"
    assert max(r.queue_offset for r in sent.values()) >= BLOCK_SIZE, "nothing on the second link"
    for m in got:  # logic queues and logic offsets, as the send results said, on both links
        r = sent[m.body]
        assert (m.queue_id, m.queue_offset, m.msg_id, m.reconsume_times) == \
            (r.queue.queue_id, r.queue_offset, r.msg_id, 0), m.body


# -- 8. transactions: commit, rollback, and one resolved by the check-back ----------------------------------
def test_transaction_commit_rollback_and_check(cluster: Cluster) -> None:
    topic, group = unique("MxTx"), unique("mx-tx")
    create_topic(cluster, topic, 4)
    checks: dict[bytes, list[int]] = {}  # body -> TRANSACTION_CHECK_TIMES of each check
    lock = threading.Lock()

    def checker(msg: MessageExt) -> TransactionResolution:
        with lock:
            times = checks.setdefault(msg.body, [])
            times.append(int(msg.properties["TRANSACTION_CHECK_TIMES"]))
            # undecided at the first check, committed at the next
            return TransactionResolution.UNKNOWN if len(times) == 1 else TransactionResolution.COMMIT

    def delivered() -> list[bytes]:
        with PullConsumer(cluster.addr, group=unique("mx-tx-reader")) as reader:
            return sorted(body for mq in reader.queues(topic) for _, body in read_all(reader, mq))

    def pending() -> int:
        with Admin(cluster.addr) as admin:
            return sum(int(admin.broker_runtime_info(b.addr)["transactionHalfPending"])
                       for b in admin.brokers("DefaultCluster"))

    committed = [b"committed-%d" % i for i in range(4)]
    rolled_back = [b"rolled-back-%d" % i for i in range(4)]
    checked = [b"checked-%d" % i for i in range(2)]
    brokers: set[str] = set()
    with Producer(cluster.addr, group=group, transaction_checker=checker) as producer:
        for body in committed:
            tx = producer.begin_transaction()
            r = tx.send(Message(topic, body, keys=[body.decode()]))
            assert r.status is SendStatus.SEND_OK and r.queue_offset == -1
            brokers.add(r.queue.broker_name)
            tx.commit()
        for body in rolled_back:
            tx = producer.begin_transaction()
            brokers.add(tx.send(Message(topic, body)).queue.broker_name)
            tx.rollback()
        for body in checked:  # left open: the brokers ask the checker
            brokers.add(producer.begin_transaction().send(Message(topic, body)).queue.broker_name)
        assert brokers == set(BROKERS)
        wait_until(lambda: set(checked) <= set(delivered()) and pending() == 0, timeout=10, interval=0.2,
                   what="the open transactions checked back and committed")
    assert delivered() == sorted(committed + checked)  # committed and checked ones once; rolled back ones never
    with lock:
        assert {body: times[:2] for body, times in checks.items()} == {body: [1, 2] for body in checked}

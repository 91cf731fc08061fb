"""A real broker whose commitlog was damaged on disk while it was stopped (a zeroed page in an older segment, which
a clean start does not scan): reads skip the damaged record, name it once in the log, and serve the ones around it.
Served as it was, it stopped a pull consumer at every retry (the SDK refused the whole answer) and sent POP's scan
back to offset 1 (the header's zeroed queue offset), handing out acked messages again without end."""

import os
import shutil
import time
from pathlib import Path

import pytest

from broker.store.checkpoint import OffsetCheckpoint
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
)
from cluster.daemon_process import DaemonStartError, start_broker
from tests.cluster import Cluster, make_cluster, wait_until
from tests.kv.test_kv_acceptance import KvMode, start_kv_cluster
from tests.pop.test_pop_consumption import create, drain, produce

TOPIC = "DamagedT"
SEGMENT = 64 * 1024
COUNT = 150  # about 1.1 KiB records: three segments, the damage in the first
DAMAGED = 10


def zero_record(store: Path, index: int, at: int = 0, damage: bytes = bytes(256)) -> None:
    """Write ``damage`` (256 zeros: a bad page) at byte ``at`` of the ``index``-th record of the first commitlog
    segment."""
    path = min((store / "commitlog").iterdir())
    data = path.read_bytes()
    pos = 0
    for _ in range(index):
        pos += int.from_bytes(data[pos:pos + 4], "big")
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, damage, pos + at)
    finally:
        os.close(fd)


def stopped_with_records(tmp_path: Path, **settings: object) -> Cluster:
    """A cluster whose one broker holds COUNT records of TOPIC in three segments, stopped (to be damaged)."""
    c = make_cluster(tmp_path, broker_names=("broker-a",), registerNameServerPeriod=1000,
                     mappedFileSizeCommitLog=SEGMENT, **settings)
    try:
        create(c, TOPIC, queues=1, brokers=("broker-a",))
        produce(c, TOPIC, [f"{i:04d}".encode() * 256 for i in range(COUNT)])
        c.brokers["broker-a"].stop()
    except BaseException:
        c.stop()
        raise
    return c


@pytest.fixture
def damaged(tmp_path: Path, request: pytest.FixtureRequest) -> Cluster:
    c = stopped_with_records(tmp_path, **request.param)
    request.addfinalizer(c.stop)
    zero_record(tmp_path / "broker-a" / "store", DAMAGED)
    c.start_broker("broker-a")
    return c


EXPECTED = [f"{i:04d}".encode() * 256 for i in range(COUNT) if i != DAMAGED]


@pytest.mark.parametrize("damaged", [{}, {"storeType": "defaultRocksDB"}], ids=["files", "rocksdb"], indirect=True)
def test_pull_and_pop_skip_a_damaged_record_and_serve_the_rest(damaged: Cluster):
    with PullConsumer(damaged.addr, group="damaged-pull") as consumer:
        mq = MessageQueue(TOPIC, "broker-a", 0)
        bodies, offsets, offset = [], [], 0
        while offset < COUNT:
            result = consumer.pull(mq, offset, 32)
            assert result.status is PullStatus.FOUND, (offset, result)
            bodies += [m.body for m in result.messages]
            offsets += [m.queue_offset for m in result.messages]
            offset = result.next_begin_offset
        assert bodies == EXPECTED and offsets == [i for i in range(COUNT) if i != DAMAGED]
    with SimpleConsumer(damaged.addr, group="damaged-pop", topic=TOPIC) as consumer:
        got = drain(consumer, COUNT - 1, restarted=True)
        assert sorted(m.body for m in got) == sorted(EXPECTED)  # each once: acked ones are not handed out again
        assert consumer.receive(32, invisible_ms=1000, wait_ms=500) == []
    log = damaged.brokers["broker-a"].log()
    assert log.count("record_damaged") == 1 and f"queue_offset={DAMAGED} " in log


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_a_push_consumer_skips_a_record_whose_body_was_damaged_and_goes_on(tmp_path: Path, orderly: bool, caplog):
    """Eight bytes of a body flipped under an intact header: the broker serves the record (reads check headers),
    and the SDK's CRC check refuses it. Handled as a failure, it stopped the queue for good: its offset was never
    committed, and every member met it again."""
    c = stopped_with_records(tmp_path)
    try:
        zero_record(tmp_path / "broker-a" / "store", DAMAGED, at=600, damage=b"\xff" * 8)
        c.start_broker("broker-a")
        got: list[bytes] = []
        group = f"damaged-push-{int(orderly)}"
        with PushConsumer(c.addr, group=group, topic=TOPIC, handler=lambda m: got.append(m.body),
                          consume_from_first=True, orderly=orderly), Admin(c.addr) as admin:
            wait_until(lambda: len(got) == COUNT - 1, timeout=30, what="every record but the damaged one")
            wait_until(lambda: [r.consumer_offset for r in admin.consumer_progress(group, TOPIC)] == [COUNT],
                       timeout=15, what="the group's offset committed past the damaged record")
        assert got == EXPECTED if orderly else sorted(got) == sorted(EXPECTED)
        assert f"pulled_record_corrupt queue={TOPIC}@broker-a:0 offset={DAMAGED} " in caplog.text
    finally:
        c.stop()


def test_a_damaged_rocksdb_consume_queue_is_said_and_rebuilt_once_removed(tmp_path: Path):
    """16 bytes of the RocksDB consume queue's table flipped: the read that meets them fails naming the store and
    the remedy (it answered "no matched message" at that offset for good, in silence); removed, it is rebuilt."""
    c = make_cluster(tmp_path, broker_names=("broker-a",), registerNameServerPeriod=1000,
                     storeType="defaultRocksDB")
    try:
        create(c, TOPIC, queues=1, brokers=("broker-a",))
        bodies = [f"{i:04d}".encode() * 64 for i in range(2000)]
        produce_batches(c, bodies)
        c.brokers["broker-a"].stop()
        cq_dir = tmp_path / "broker-a" / "store" / "consumequeue_rocksdb"
        table = max(cq_dir.glob("*.sst"), key=lambda p: p.stat().st_size)
        with table.open("r+b") as f:
            f.seek(table.stat().st_size // 3)
            flipped = bytes(b ^ 0xFF for b in f.read(16))
            f.seek(table.stat().st_size // 3)
            f.write(flipped)
        c.start_broker("broker-a")
        with PullConsumer(c.addr, group="damaged-cq") as consumer, \
                pytest.raises(MQClientError, match=r"is damaged.*rebuilds it from the commitlog"):
            pull_all(consumer, len(bodies))
        c.brokers["broker-a"].stop()
        shutil.rmtree(cq_dir)
        c.start_broker("broker-a")
        with PullConsumer(c.addr, group="damaged-cq") as consumer:
            assert pull_all(consumer, len(bodies)) == bodies
    finally:
        c.stop()


def produce_batches(c: Cluster, bodies: list[bytes]) -> None:
    with Producer(c.addr) as producer:
        for i in range(0, len(bodies), 64):
            producer.send_batch([Message(TOPIC, b) for b in bodies[i:i + 64]])


def pull_all(consumer: PullConsumer, count: int, deadline_s: float = 10.0, topic: str = TOPIC,
             queue_id: int = 0) -> list[bytes]:
    """Every body of a queue, from offset 0 (fails if a pull stops moving before ``count``)."""
    mq = MessageQueue(topic, "broker-a", queue_id)
    bodies: list[bytes] = []
    offset, deadline = 0, time.monotonic() + deadline_s
    while offset < count and time.monotonic() < deadline:
        result = consumer.pull(mq, offset, 32)
        bodies += [m.body for m in result.messages]
        offset = result.next_begin_offset
    return bodies


def test_the_replay_after_a_crash_skips_a_damaged_record_and_serves_the_rest(tmp_path: Path):
    """SIGKILLed, then a page zeroed in a segment below the flushed checkpoint (not scanned at start) that the KV
    store's replay must cross: the replay stopped there, the store fail-stopped at every start for good, and KV
    reads said "not found" for every stored key, as a success. Now the damaged record alone is lost, said in the
    log; the replay goes on after it, and the broker serves."""
    c = start_kv_cluster(tmp_path, KvMode("rocksdb", "ASYNC_FLUSH", "default", kv_init=True), ("broker-a",),
                         mappedFileSizeCommitLog=SEGMENT)
    try:
        with KVClient(c.addr) as kv:
            for i in range(20):
                kv.put(b"key%d" % i, b"v%d" % i)
        c.create_topic(TOPIC, queues=1)
        bodies = [f"{i:04d}".encode() * 256 for i in range(300)]
        produce_batches(c, bodies)
        flushed = OffsetCheckpoint(tmp_path / "broker-a" / "store" / "checkpoint" / "commitlog_flushed")
        wait_until(lambda: (flushed.read() or 0) > 2 * SEGMENT, what="the flushed checkpoint past two segments")
        c.brokers["broker-a"].kill()
        zero_record(tmp_path / "broker-a" / "store", 5)  # a KV put's record, in the first segment
        c.start_broker("broker-a")
        log = c.brokers["broker-a"].log()
        assert "store_fail_stop" not in log and "commitlog_damaged_skipped" in log
        with KVClient(c.addr) as kv:
            found = kv.get_batch([b"key%d" % i for i in range(20)])
            assert 1 <= sum(v is None for v in found) <= 3  # the puts the 256 zeroed bytes covered
            assert all(v == b"v%d" % i for i, v in enumerate(found) if v is not None)
            kv.put(b"after", b"x")
            assert kv.get(b"after") == b"x"
        with PullConsumer(c.addr, group="replayed") as consumer:
            assert pull_all(consumer, len(bodies), topic=TOPIC, queue_id=0) == bodies
    finally:
        c.stop()


def test_kv_reads_are_refused_while_a_fail_stop_left_writes_unapplied(tmp_path: Path):
    """A dispatch failure (injected) fail-stops the store with a put's record in the commitlog, not applied: a read
    answered its key "not found", as a success, where the next start applies it. Refused now, saying why."""
    c = start_kv_cluster(tmp_path, KvMode("rocksdb", "ASYNC_FLUSH", "default", kv_init=True), ("broker-a",))
    try:
        with KVClient(c.addr) as kv:
            kv.put(b"before", b"b")
        c.brokers["broker-a"].stop()
        c.brokers["broker-a"] = start_broker(tmp_path, "broker-a", c.addr, env={"PYROCKETMQ_FAULTS": "dispatch@0"},
                                             **c.settings)
        with KVClient(c.addr, retry_timeout_ms=1000) as kv:
            with pytest.raises(MQClientError):
                kv.put(b"late", b"l")  # stored, not applied: the store fail-stops
            for key in (b"late", b"before"):
                with pytest.raises(MQClientError, match="reads would miss writes"):
                    kv.get(key)
    finally:
        c.stop()


@pytest.mark.parametrize("damage", ["emptied", "removed"])
def test_a_segment_missing_between_others_stops_the_start_with_one_line(tmp_path: Path, damage: str):
    """(An emptied one was made full size again, 948 messages of zeros served in silence; a removed one stopped the
    start with a traceback.)"""
    c = stopped_with_records(tmp_path)
    try:
        middle = sorted((tmp_path / "broker-a" / "store" / "commitlog").iterdir())[1]
        if damage == "emptied":
            os.truncate(middle, 0)
        else:
            middle.unlink()
        with pytest.raises(DaemonStartError):
            c.start_broker("broker-a")
        tail = (tmp_path / "broker-a" / "broker-a.log").read_text()
        assert "Traceback" not in tail and "mqbroker: cannot start: segment" in tail and middle.name in tail
    finally:
        c.stop()

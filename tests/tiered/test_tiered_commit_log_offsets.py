"""A message read from the tier carries its commitlog offset, so its offset message id (store host and commitlog
offset) is the one its send returned, in every read path: before, each tiered record's physical offset field was
overwritten with its position in the queue's tiered commitlog, and a message read back from the tier showed that
position and an id naming another message (``queryMsgById`` of it returned a message of another queue).

Against real daemons (the reviewer's case: posix and memory backends, read after local expiry and with FORCE),
then store units: records an older version uploaded (their field overwritten) get their commitlog offset back from
the local consume queue while it has their unit, and -1 (unknown) after, never another message's offset."""

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.broker_config import BrokerConfig
from broker.store.get_message_result import GetMessageStatus
from broker.tiered.fetcher.tiered_message_store import UNKNOWN_COMMIT_LOG_OFFSET, TieredMessageStore
from broker.tiered.file.flat_message_file import PHYSICAL_OFFSET_AT, RECORD_OFFSET, UNIT, FlatMessageFile
from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.metadata.tiered_metadata_store import QueueMetadata
from broker.tiered.provider.file_segment import FileSegmentType
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider
from broker.tiered.tiered_storage_level import TieredStorageLevel
from client import Admin, Message, MessageExt, MQClientError, Producer, PullConsumer, PushConsumer, SimpleConsumer
from client.results import SendResult
from common.message_codec import decode_record, encode_record
from common.message_id import make_message_id
from tests.cluster import Cluster, wait_until
from tests.tiered.test_tiered_acceptance import (
    BROKER,
    queue_status,
    read_queue,
    tiered_cluster,
    wait_expired_and_uploaded,
)
from tests.tiered.test_tiered_unit_dispatcher_fetcher import HOUR, TOPIC, Node

QUEUES, MESSAGES = 2, 300
Sent = dict[tuple[int, int], SendResult]  # (queue id, queue offset) -> the send's result


# -- against real daemons --------------------------------------------------------------------------------------
def send_all(cluster: Cluster, topic: str) -> Sent:
    cluster.create_topic(topic, queues=QUEUES)
    sent: Sent = {}
    with Producer(cluster.addr) as producer:
        for i in range(MESSAGES):
            result = producer.send(Message(topic, b"%05d-" % i + b"x" * 2000, keys=[f"key{i}"]))
            sent[(result.queue.queue_id, result.queue_offset)] = result
    assert len(sent) == MESSAGES
    return sent


def wait_uploaded(cluster: Cluster, topic: str) -> None:
    """Every message is in the tier (and, with nothing expired yet, still local too)."""
    def done() -> bool:
        status = queue_status(cluster, topic)
        return len(status) == QUEUES and all(q.upload_lag == 0 and q.tiered_max_offset == q.local_max_offset > 0
                                             for q in status.values())

    wait_until(done, timeout=60, interval=0.2, what=f"upload of {topic}")


def assert_sent_id(m: MessageExt, sent: Sent, how: str) -> None:
    want = sent[(m.queue_id, m.queue_offset)]
    assert (m.offset_msg_id, m.physical_offset, m.msg_id) == (want.offset_msg_id, want.physical_offsets[0],
                                                              want.msg_id), (how, m.queue_id, m.queue_offset)


def pop_all(cluster: Cluster, topic: str) -> list[MessageExt]:
    got: dict[tuple[int, int], MessageExt] = {}
    with SimpleConsumer(cluster.addr, group="ids-pop", topic=topic) as consumer:
        deadline = time.monotonic() + 60
        while len(got) < MESSAGES:
            assert time.monotonic() < deadline, f"POP received {len(got)} of {MESSAGES}"
            for m in consumer.receive(32, invisible_ms=300_000):
                got[(m.queue_id, m.queue_offset)] = m
    return list(got.values())


def push_all(cluster: Cluster, topic: str) -> list[MessageExt]:
    got: dict[tuple[int, int], MessageExt] = {}
    with PushConsumer(cluster.addr, group="ids-push", topic=topic, consume_from_first=True,
                      handler=lambda m: got.setdefault((m.queue_id, m.queue_offset), m)):
        wait_until(lambda: len(got) >= MESSAGES, timeout=60, interval=0.2, what="push consumer got every message")
    return list(got.values())


@pytest.mark.parametrize(("backend", "level"), [("posix", "NOT_IN_DISK"), ("memory", "NOT_IN_DISK"),
                                                ("posix", "FORCE"), ("memory", "FORCE")])
def test_a_message_read_from_the_tier_has_the_offset_message_id_its_send_returned(tmp_path: Path, backend: str,
                                                                                 level: str) -> None:
    """300 messages of 2 KB over 2 queues, 256 KiB local segments; read from the tier after local expiry
    (NOT_IN_DISK) or while local still has them (FORCE): pulls, POP, a push consumer and queryMsgByOffset show the
    commitlog offset and ids the send returned; queryMsgById of it finds that message while the local commitlog
    holds it, and after (by id: the local commitlog only) is refused, never answered with another message."""
    topic = "TierIds"
    cluster = tiered_cluster(tmp_path, tieredBackendServiceProvider=backend, tieredStorageLevel=level,
                             mappedFileSizeCommitLog=256 * 1024)
    try:
        sent = send_all(cluster, topic)
        if level == "FORCE":
            wait_uploaded(cluster, topic)
        else:
            wait_expired_and_uploaded(cluster, topic, QUEUES, timeout=90)
        with PullConsumer(cluster.addr, group="ids-pull") as consumer:
            for mq in consumer.queues(topic):
                for m in read_queue(consumer, mq, max(q + 1 for qid, q in sent if qid == mq.queue_id)):
                    assert_sent_id(m, sent, "pull")
        for m in pop_all(cluster, topic):
            assert_sent_id(m, sent, "pop")
        for m in push_all(cluster, topic):
            assert_sent_id(m, sent, "push")
        reviewed = sent[(1, 5)]  # the reviewer's message: queue 1, offset 5
        with Admin(cluster.addr) as admin:
            assert_sent_id(admin.query_msg_by_offset(topic, BROKER, 1, 5).message, sent, "queryMsgByOffset")
            if level == "FORCE":
                for (queue_id, offset), result in [*sorted(sent.items())[::37], ((1, 5), reviewed)]:
                    m = admin.query_msg_by_id(result.offset_msg_id)  # before: another queue's message
                    assert (m.queue_id, m.queue_offset, m.msg_id) == (queue_id, offset, result.msg_id)
            else:  # expired locally: by id is the local commitlog's (the tier has no index by commitlog offset)
                with pytest.raises(MQClientError, match="QUERY_NOT_FOUND"):
                    admin.query_msg_by_id(reviewed.offset_msg_id)
    finally:
        cluster.stop()


# -- store units: records an older version uploaded --------------------------------------------------------
@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    opened: list[Node] = []

    def start(**kwargs: object) -> Node:
        node = Node(tmp_path / "store", TieredBackendServiceProvider.POSIX, **kwargs)
        opened.append(node)
        return node

    yield start
    for node in opened:
        node.stop()


def overwrite_as_an_older_version_did(root: Path) -> None:
    """The tier as an older version left it: each record's physical offset field holds its tiered position, and
    the queue's record has no ``commit_log_offsets_from`` (the broker is stopped)."""
    metadata = RocksDBTieredMetadataStore(root / "tiered_metadata")
    factory = FileSegmentFactory(TieredBackendServiceProvider.POSIX, root / "tiered")
    try:
        for queue in list(metadata.iterate_queues()):
            flat = FlatMessageFile(factory, metadata, BrokerConfig().broker_name, queue.topic, queue.queue_id,
                                   16 * 1024, UNIT * 64)
            flat.load(queue.min_offset)
            segments = list(metadata.iterate_segments(queue.topic, queue.queue_id, FileSegmentType.COMMIT_LOG))
            for position, _, _, _ in flat.units(queue.min_offset, queue.max_offset - queue.min_offset):
                owner = max((s for s in segments if s.base_offset <= position), key=lambda s: s.base_offset)
                with open(root / "tiered" / owner.path, "r+b") as f:
                    f.seek(position - owner.base_offset + PHYSICAL_OFFSET_AT)
                    f.write(RECORD_OFFSET.pack(position))
            metadata.update_queue(QueueMetadata(queue.topic, queue.queue_id, queue.min_offset, queue.max_offset))
    finally:
        metadata.close()


def expire_oldest_local_segments(node: Node, count: int) -> None:
    for segment in sorted((node.root / "commitlog").iterdir())[:count]:
        t = time.time() - 2 * HOUR
        os.utime(segment, (t, t))
    assert node.local.delete_expired_files() == count


def read_offsets(store: TieredMessageStore, queue_id: int, end: int) -> list[int]:
    """The commitlog offset each message of the queue below ``end`` shows, read one at a time."""
    out = []
    for q in range(end):
        r = store.get_message(TOPIC, queue_id, q, 1)
        assert r.status is GetMessageStatus.FOUND, (queue_id, q, r.status)
        m = decode_record(r.messages[0], verify_crc=True)
        assert m.queue_offset == q
        out.append(m.physical_offset)
    return out


def test_records_an_older_version_uploaded_get_their_commitlog_offset_back_while_the_local_queue_knows_it(nodes):
    node = nodes()
    for i in range(400):
        node.put(i % 2, f"{i:05d}".encode() * 120)
    node.dispatcher.upload_due(force=True)
    sent = dict(node.sent)
    node.stop()  # (as an older version's broker stops)
    overwrite_as_an_older_version_did(node.root)

    node = nodes()
    flat = node.tiered.flat_files.get(TOPIC, 0)
    assert flat is not None and flat.commit_log_offsets_from == flat.max_offset == 200  # all of them old
    old = flat.units(0, 1)[0][0]
    assert decode_record(flat.messages(0, 1, 1 << 20, None)[0][0]).physical_offset == old  # as it was uploaded
    for i in range(400, 600):  # today's records after the older version's
        node.put(i % 2, f"{i:05d}".encode() * 120)
    node.dispatcher.upload_due(force=True)
    node.dispatcher.flush()  # the checkpoint: local segments may expire
    recorded = node.tiered.metadata.get_queue(TOPIC, 0)
    assert recorded is not None and (recorded.commit_log_offsets_from, recorded.max_offset) == (200, 300)
    sent.update(node.sent)

    force = TieredMessageStore(node.local, node.tiered.flat_files, TieredStorageLevel.FORCE)
    for queue_id in range(QUEUES):  # every local unit still here: every offset restored
        assert read_offsets(force, queue_id, 300) == [sent[(queue_id, q)] for q in range(300)]

    expire_oldest_local_segments(node, 2)
    local_min = node.local.min_offset(TOPIC, 0)
    assert 0 < local_min < 200
    for store in (force, node.tiered.store):  # FORCE, and NOT_IN_DISK (from the tier below the local min)
        got = read_offsets(store, 0, 300)
        assert got[:local_min] == [UNKNOWN_COMMIT_LOG_OFFSET] * local_min  # known nowhere any more: never a guess
        assert got[local_min:] == [sent[(0, q)] for q in range(local_min, 300)]
    # runs read at once: across the local min (unknown, then restored), and across today's first record
    run = force.get_message(TOPIC, 0, local_min - 3, 6).messages
    assert [decode_record(m).physical_offset for m in run] == \
        [UNKNOWN_COMMIT_LOG_OFFSET] * 3 + [sent[(0, q)] for q in range(local_min, local_min + 3)]
    run = force.get_message(TOPIC, 0, 197, 6).messages
    assert [decode_record(m).physical_offset for m in run] == [sent[(0, q)] for q in range(197, 203)]


def test_where_kept_offsets_begin_is_stored_before_a_unit_of_today_is_committed(tmp_path: Path):
    """A restart between the commit of today's first units and the queue's record would take them for an older
    version's: the record is written first. A queue cut below it (the local commitlog lost its tail) takes what
    comes again as today's."""
    metadata = RocksDBTieredMetadataStore(tmp_path / "meta")
    factory = FileSegmentFactory(TieredBackendServiceProvider.POSIX, tmp_path / "tier")

    def opened() -> FlatMessageFile:
        flat = FlatMessageFile(factory, metadata, "b", TOPIC, 0, 4096, UNIT * 16)
        flat.load(0)
        return flat

    def record(q: int) -> bytes:
        return encode_record(TOPIC.encode(), 0, b"m%d" % q, b"", queue_offset=q, physical_offset=10**6 + 100 * q,
                             store_timestamp=1_000 + q)

    try:
        flat = opened()
        for q in range(10):
            flat.append(record(q), q, 0, 1_000 + q)
        flat.commit()
        metadata.update_queue(QueueMetadata(TOPIC, 0, 0, 10))  # as an older version wrote it
        flat = opened()
        assert (flat.commit_log_offsets_from, flat.max_offset) == (10, 10)
        flat.append(record(10), 10, 0, 1_010)

        def crash() -> None:
            raise OSError(5, "crashed before the commit")

        flat.commit_log.commit = crash  # type: ignore[method-assign]
        with pytest.raises(OSError):
            flat.commit()
        recorded = metadata.get_queue(TOPIC, 0)
        assert recorded is not None and recorded.commit_log_offsets_from == 10

        flat = opened()
        assert flat.commit_log_offsets_from == 10
        flat.cut_to(6)
        assert flat.commit_log_offsets_from == 6
        for q in range(6, 8):
            flat.append(record(q), q, 0, 1_000 + q)
        flat.commit()
        assert opened().commit_log_offsets_from == 6
        assert [decode_record(m).physical_offset for m in opened().messages(6, 2, 1 << 20, None)[0]] == \
            [10**6 + 600, 10**6 + 700]
    finally:
        metadata.close()


def test_the_offset_message_id_of_a_tiered_record_is_its_put_s(nodes):
    """The store's own view of the daemons' case: the record the tier serves is byte for byte the local one."""
    node = nodes(level=TieredStorageLevel.FORCE)
    for i in range(40):
        node.put(i % 2, b"m%d" % i)
    node.dispatcher.upload_due(force=True)
    store = node.tiered.store
    before = store.tier_reads
    for queue_id in range(QUEUES):
        result = store.get_message(TOPIC, queue_id, 0, 32)
        assert [decode_record(m).physical_offset for m in result.messages] == \
            [node.sent[(queue_id, q)] for q in range(20)]
        for raw in result.messages:
            m = decode_record(raw)
            assert m.offset_msg_id == make_message_id(m.raw_store_host, node.sent[(queue_id, m.queue_offset)])
            assert store.select_one_message_by_offset(m.physical_offset) == raw  # by id: this very message
    assert store.tier_reads - before == 40  # all from the tier


def test_a_marker_set_too_high_leaves_todays_records_their_offsets(nodes):
    """A promoted replica loads its master's tier from a copy taken before the master's first commit of today's
    records, with no marker: it takes them all for an older version's, and once their local units expired they
    read -1. An older version wrote only the tiered position there, so a field that is not the position is kept."""
    node = nodes()
    for i in range(400):
        node.put(i % 2, f"{i:05d}".encode() * 120)
    node.dispatcher.upload_due(force=True)
    node.dispatcher.flush()
    sent = dict(node.sent)
    flat = node.tiered.flat_files.get(TOPIC, 0)
    assert flat is not None and flat.commit_log_offsets_from == 0
    flat.commit_log_offsets_from = flat.max_offset  # as a load from a copy without the marker sets it
    positions = [unit[0] for unit in flat.units(0, 200)]
    expire_oldest_local_segments(node, 2)
    local_min = node.local.min_offset(TOPIC, 0)
    assert local_min > 0
    force = TieredMessageStore(node.local, node.tiered.flat_files, TieredStorageLevel.FORCE)
    # (a record whose offset happens to equal its position is the one that cannot be told apart: restored or -1)
    assert read_offsets(force, 0, 200) == [
        sent[(0, q)] if sent[(0, q)] != positions[q] or q >= local_min else UNKNOWN_COMMIT_LOG_OFFSET
        for q in range(200)]
    assert sum(sent[(0, q)] != positions[q] for q in range(local_min)) > 0

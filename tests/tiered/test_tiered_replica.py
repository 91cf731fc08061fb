"""A controller-mode replica's tier (broker/tiered/replica/tier_role.py): it follows a master on its backend or
uploads to its own, and promoted it takes over the tier it shared from its last copy of the master's metadata: the
master went on after the copy (expired the oldest segments, filled and rolled the newest), and the take-over must
serve exactly what the backend holds and append after it."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.tiered_processor import TieredProcessor
from broker.tiered.file.flat_append_file import LoadMode
from broker.tiered.file.flat_message_file import UNIT, FlatMessageFile
from broker.tiered.metadata.change_journal import ChangeJournal
from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.metadata.tiered_metadata_store import (
    FileSegmentMetadata,
    QueueMetadata,
    TieredMetadataCopy,
    TopicMetadata,
)
from broker.tiered.provider.file_segment import FileSegmentType
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider
from broker.tiered.replica.tier_id import read_tier_id
from broker.tiered.replica.tier_role import MasterTier, TierRole
from common.message_codec import decode_record
from common.refusal import Refusal
from common.response_code import ResponseCode
from proto import tiered_pb2
from tests.cluster import wait_until
from tests.tiered.test_tiered_unit_dispatcher_fetcher import TOPIC as NODE_TOPIC
from tests.tiered.test_tiered_unit_dispatcher_fetcher import Node
from tests.tiered.test_tiered_unit_flat_message_file import TOPIC, add, assert_consistent, check_messages

CL_SIZE, CQ_SIZE = 512, UNIT * 4
POSIX = TieredBackendServiceProvider.POSIX


class Broker:
    """One replica's view of a backend both share: its own metadata store, flat files of its own."""

    def __init__(self, factory: FileSegmentFactory, root: Path) -> None:
        self.factory = factory
        self.metadata = RocksDBTieredMetadataStore(root)

    def open(self, mode: LoadMode = LoadMode.RECOVER) -> FlatMessageFile:
        queue = self.metadata.get_queue(TOPIC, 0)
        flat = FlatMessageFile(self.factory, self.metadata, "b", TOPIC, 0, CL_SIZE, CQ_SIZE)
        flat.load(queue.min_offset if queue else 0, mode)
        return flat


@pytest.fixture(params=[TieredBackendServiceProvider.POSIX, TieredBackendServiceProvider.MEMORY])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Broker, Broker]]:
    factory = FileSegmentFactory(request.param, tmp_path / "tier")
    master, replica = Broker(factory, tmp_path / "m"), Broker(factory, tmp_path / "r")
    yield master, replica
    master.metadata.close()
    replica.metadata.close()


def test_metadata_copies_install_every_record_but_the_replicas_own_checkpoint(tmp_path: Path):
    master, replica = (RocksDBTieredMetadataStore(tmp_path / name) for name in ("m", "r"))
    master.update_topic(TopicMetadata(TOPIC, 5))
    master.update_queue(QueueMetadata(TOPIC, 0, 3, 10))
    master.set_checkpoint(700)
    master.set_uploaded_end(900)
    replica.set_checkpoint(50)
    replica.update_queue(QueueMetadata("Gone", 1, 0, 3))  # the master no longer has it
    copy = master.copy()
    assert (copy.checkpoint, copy.uploaded_end) == (700, 900)
    assert replica.install(copy) == {(TOPIC, 0), ("Gone", 1)}  # the queues whose records changed
    assert replica.get_checkpoint() == 50 and replica.get_uploaded_end() == 900
    assert replica.install(copy) == set()  # nothing changed: nothing to load again
    assert list(replica.iterate_queues()) == [QueueMetadata(TOPIC, 0, 3, 10)]
    assert replica.get_topic(TOPIC) == TopicMetadata(TOPIC, 5)
    with pytest.raises(ValueError, match="tier metadata copy cut short"):
        replica.install(TieredMetadataCopy(0, 0, copy.records[:-1]))
    master.close()
    replica.close()


def test_a_copy_since_the_replicas_version_carries_only_what_changed(tmp_path: Path):
    master, replica = (RocksDBTieredMetadataStore(tmp_path / name) for name in ("m", "r"))
    for queue_id in range(3):
        master.update_queue(QueueMetadata(TOPIC, queue_id, 0, 10))
        master.update_segment(FileSegmentMetadata(f"p{queue_id}", FileSegmentType.COMMIT_LOG, TOPIC, queue_id, 0, 100))
    master.update_queue(QueueMetadata("Other", 0, 0, 1))
    first = master.copy()
    assert first.whole and len(replica.install(first)) == 4
    master.update_segment(FileSegmentMetadata("p1", FileSegmentType.COMMIT_LOG, TOPIC, 1, 0, 250))
    master.delete_topic("Other")
    master.set_checkpoint(300)
    second = master.copy(first.version)
    assert not second.whole and len(second.records) < len(first.records) // 2 and second.checkpoint == 300
    assert replica.install(second) == {(TOPIC, 1), ("Other", 0)}
    assert master.copy().records == replica.copy().records  # the same records as a whole copy would give
    assert replica.get_checkpoint() == 0  # the replica's own
    third = master.copy(second.version)
    assert (third.records, third.whole) == (b"", False) and replica.install(third) == set()
    assert master.copy("another-epoch:1").whole and master.copy("").whole  # not this journal's: whole
    master.close()
    replica.close()


def test_a_journal_that_forgot_the_changes_asked_since_answers_none():
    journal = ChangeJournal(limit=2)
    start = journal.version
    journal.record([b"a"])
    journal.record([b"b"])
    assert journal.since(start) == [b"b", b"a"]
    journal.record([b"c"])  # "a" is forgotten: a copy since ``start`` must be whole
    assert journal.since(start) is None and journal.since(journal.version) == []


def test_a_take_over_serves_what_the_master_did_after_the_copy_and_appends_after_it(pair: tuple[Broker, Broker]):
    master, replica = pair
    flat = master.open()
    originals = add(flat, 0, 20, t0=10_000, step=1_000, body_size=60)
    flat.commit()
    copy = master.metadata.copy()
    # After the copy the master expires its oldest segments (objects deleted) and fills and rolls new ones.
    originals |= add(flat, 20, 20, t0=10_000, step=1_000, body_size=60)
    flat.commit()
    cutoff = flat.consume_queue.segments[2].end_ms + 1
    assert flat.expire(cutoff, delete=True) > 3
    served = (flat.min_offset, flat.max_offset, flat.commit_log.min_offset, flat.commit_log.commit_offset)

    replica.metadata.install(copy)
    taken = replica.open(LoadMode.TAKE_OVER)
    assert (taken.min_offset, taken.max_offset, taken.commit_log.min_offset,
            taken.commit_log.commit_offset) == served
    assert_consistent(taken)
    check_messages(taken, originals, served[0], served[1] - served[0])
    # Appends go after the master's bytes (opening its last segment anew would have truncated them).
    originals |= add(taken, 40, 15, t0=60_000, step=1_000, body_size=60)
    taken.commit()
    again = replica.open()  # as after a restart of the new master
    assert (again.min_offset, again.max_offset) == (served[0], 55)
    assert_consistent(again)
    check_messages(again, originals, served[0], 55 - served[0])


def test_a_follower_reads_the_copy_as_recorded_and_writes_nothing(pair: tuple[Broker, Broker]):
    master, replica = pair
    flat = master.open()
    originals = add(flat, 0, 12)
    flat.commit()
    replica.metadata.install(master.metadata.copy())
    follower = replica.open(LoadMode.FOLLOW)
    assert (follower.min_offset, follower.max_offset) == (0, 12)
    check_messages(follower, originals, 0, 12)


# -- a replica's role: follow a master on its backend, or upload to its own -----------------------------------
def _prepared(node: Node) -> None:
    wait_until(lambda: node.tiered.dispatcher.prepared, timeout=10, what="the upload thread's first pass")


def _put_same(nodes: list[Node], first: int, count: int) -> None:
    """The same records into each node's log (as replication makes them): the same physical offsets."""
    for i in range(first, first + count):
        for node in nodes:
            node.put(i % 2, b"m%d" % i)


def test_a_replica_follows_a_master_on_its_backend_and_takes_the_tier_over_when_promoted(tmp_path: Path):
    master = Node(tmp_path / "m", POSIX, backend=tmp_path / "tier")
    replica = Node(tmp_path / "r", POSIX, backend=tmp_path / "tier", role=TierRole.WAITING)
    try:
        master.tiered.start()
        _prepared(master)
        assert replica.tiered.copy_for_replica().tier_id == ""  # not master: replicas ask their master only
        _put_same([master, replica], 0, 10)
        assert replica.dispatcher.pending_records() == 10
        assert master.dispatcher.upload_due(force=True) == 10
        master.dispatcher.flush()
        _put_same([master, replica], 10, 4)  # not uploaded yet

        replica.tiered.follow_master(MasterTier("", master.tiered.metadata.copy()))  # the master's id not written
        assert replica.tiered.role is TierRole.WAITING and replica.dispatcher.pending_records() == 14
        replica.tiered.follow_master(master.tiered.copy_for_replica())
        assert replica.tiered.role is TierRole.SHARED
        # what the master uploaded is dropped here: the local commitlog may expire below the master's checkpoint
        assert replica.dispatcher.pending_records() == 4
        assert replica.dispatcher.current_checkpoint() == master.dispatcher.checkpoint()
        assert replica.tiered.flat_files.get(NODE_TOPIC, 0).max_offset == 5  # reads follow the master's records
        assert master.dispatcher.upload_due(force=True) == 4
        master.dispatcher.flush()
        since = master.tiered.copy_for_replica(replica.tiered.copied_version())
        assert not since.copy.whole  # what changed since the replica's copy, as SlaveSynchronize asks
        replica.tiered.follow_master(since)
        assert replica.dispatcher.pending_records() == 0
        assert replica.tiered.flat_files.get(NODE_TOPIC, 0).max_offset == 7  # the queues that changed, again

        _put_same([master, replica], 14, 2)
        assert master.dispatcher.upload_due(force=True) == 2  # after the last copy; then the master dies
        master.stop(upload=False)
        replica.tiered.start()  # promoted: takes the tier over in the upload thread, then uploads what is left
        _prepared(replica)
        assert replica.tiered.role is TierRole.MASTER and replica.tiered.tier_id == master.tiered.tier_id
        replica.dispatcher.upload_due(force=True)
        flat = replica.tiered.flat_files.get(NODE_TOPIC, 0)
        records = flat.messages(0, 10, 1 << 20, None)[0]
        assert [decode_record(r).body for r in records] == [b"m%d" % i for i in range(0, 16, 2)]
    finally:
        master.stop(upload=False)
        replica.stop()


@pytest.mark.parametrize("master_has_tier", [True, False])
def test_a_replica_with_a_backend_of_its_own_uploads_its_copy(tmp_path: Path, master_has_tier: bool):
    master = Node(tmp_path / "m", POSIX)
    replica = Node(tmp_path / "r", POSIX, role=TierRole.WAITING)  # each tier under its own store
    try:
        master.tiered.start()
        _prepared(master)
        replica.tiered.follow_master(master.tiered.copy_for_replica() if master_has_tier else None)
        assert replica.tiered.role is TierRole.OWN and not replica.tiered.follows_master()
        _prepared(replica)
        replica.put(0, b"own")
        replica.dispatcher.upload_due(force=True)
        assert replica.tiered.flat_files.get(NODE_TOPIC, 0).max_offset == 1
        assert read_tier_id(replica.tiered.factory, "broker-a") == ""  # only a master writes the id
    finally:
        master.stop()
        replica.stop()


def _following(tmp_path: Path) -> tuple[Node, Node]:
    """A master and a replica on one posix backend, both holding 10 records the master uploaded, the replica
    following the master's copy."""
    master = Node(tmp_path / "m", POSIX, backend=tmp_path / "tier")
    replica = Node(tmp_path / "r", POSIX, backend=tmp_path / "tier", role=TierRole.WAITING)
    master.tiered.start()
    _prepared(master)
    _put_same([master, replica], 0, 10)
    master.dispatcher.upload_due(force=True)
    master.dispatcher.flush()
    replica.tiered.follow_master(master.tiered.copy_for_replica())
    return master, replica


def test_a_replica_restarted_beside_its_master_on_one_backend_leaves_the_masters_records_alone(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """Its start cannot know yet whether the backend is its master's: it loads its copy as recorded, not as after a
    crash of its own (which took the master's newer bytes for a torn upload and cut its units)."""
    master, replica = _following(tmp_path)
    try:
        _put_same([master, replica], 10, 6)
        master.dispatcher.upload_due(force=True)  # the backend is ahead of the replica's copy now
        copied = sorted(replica.tiered.segments(), key=lambda m: m.path)
        replica.stop()
        caplog.clear()
        replica = Node(tmp_path / "r", POSIX, backend=tmp_path / "tier", role=TierRole.WAITING)
        assert sorted(replica.tiered.segments(), key=lambda m: m.path) == copied
        assert "tiered_units_dangling" not in caplog.text and "tiered_segment_size_reconciled" not in caplog.text
        assert replica.tiered.flat_files.get(NODE_TOPIC, 0).max_offset == 5
    finally:
        master.stop(upload=False)
        replica.stop()


def test_the_spark_jobs_change_no_tier_a_replica_follows(tmp_path: Path):
    """A job pointed at a replica (an address that was the master's before a failover) would swap or drop records
    the next copy from the master replaces, and delete objects the master still reads."""
    master = Node(tmp_path / "m", POSIX, backend=tmp_path / "tier")
    replica = Node(tmp_path / "r", POSIX, backend=tmp_path / "tier", role=TierRole.WAITING)
    try:
        master.tiered.start()
        _prepared(master)
        replica.tiered.follow_master(master.tiered.copy_for_replica())
        processor = TieredProcessor("broker-a", replica.tiered, TopicConfigManager(tmp_path / "topics.json"))
        for call, request in ((processor.mark_expired, tiered_pb2.MarkExpiredRequest()),
                              (processor.drop_segments, tiered_pb2.DropSegmentsRequest()),
                              (processor.replace_segments, tiered_pb2.ReplaceSegmentsRequest())):
            with pytest.raises(Refusal, match="follows its master's tier \\(tieredRole=shared\\)") as refused:
                call(request)
            assert refused.value.code is ResponseCode.NO_PERMISSION
        assert processor.metadata(tiered_pb2.TieredMetadataRequest()).code == ResponseCode.SUCCESS  # reads: fine
    finally:
        master.stop(upload=False)
        replica.stop()


def test_a_replica_that_follows_its_master_drops_a_cut_its_own_recovery_found_due(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """A replica whose log ended below its master's uploaded end at a restart (an OS crash, or still catching up)
    kept that cut due while it followed the master; promoted days later, it cut the shared tier back to it (every
    queue's objects the master had written correctly, then uploaded them again)."""
    master, replica = _following(tmp_path)
    try:
        replica.dispatcher.truncate_dirty(1)  # what its recovery found after an OS crash: its log ended there
        replica.tiered.follow_master(master.tiered.copy_for_replica())  # caught up again, it follows the master
        assert replica.tiered.metadata.get_reconcile_end() is None
        caplog.clear()
        replica.tiered.start()  # promoted: it takes the tier over
        _prepared(replica)
        assert "tiered_truncated" not in caplog.text
        assert [replica.tiered.flat_files.get(NODE_TOPIC, q).max_offset for q in (0, 1)] == [5, 5]
    finally:
        master.stop(upload=False)
        replica.stop()

"""A promoted replica takes over the tier it shared with its master from its last copy of the master's metadata
(broker/tiered/replica/tier_role.py): the master went on after the copy (expired the oldest segments, filled and
rolled the newest), and the take-over must serve exactly what the backend holds and append after it."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.tiered.file.flat_append_file import LoadMode
from broker.tiered.file.flat_message_file import UNIT, FlatMessageFile
from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.metadata.tiered_metadata_store import QueueMetadata, TieredMetadataCopy, TopicMetadata
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider
from tests.tiered.test_tiered_unit_flat_message_file import TOPIC, add, assert_consistent, check_messages

CL_SIZE, CQ_SIZE = 512, UNIT * 4


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
    replica.install(copy)
    assert replica.get_checkpoint() == 50 and replica.get_uploaded_end() == 900
    assert list(replica.iterate_queues()) == [QueueMetadata(TOPIC, 0, 3, 10)]
    assert replica.get_topic(TOPIC) == TopicMetadata(TOPIC, 5)
    with pytest.raises(AssertionError, match="mid-record"):
        replica.install(TieredMetadataCopy(0, 0, copy.records[:-1]))
    master.close()
    replica.close()


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

"""A master's frames end anywhere (``CommitLog.read_replica``, as upstream's), so a replica's log may end inside a
record or a batch. Its dispatch served such a record (a CRC failure to consumers), and a replica promoted so stopped
taking writes at the first send ("no record at commitlog offset ...") and lost the sends it had acknowledged, or
served part of a batch its producer was told failed (the batch mark review). A replica dispatches only whole
records, and one promoted cuts what it holds of an unfinished append. In process: two real stores."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.store.message_store import MessageStore
from common.message_codec import decode_record
from tests.store.conftest import store_config

TOPIC = "FramesT"


def _copy(master: MessageStore, slave: MessageStore, max_bytes: int) -> list[int]:
    """What a slave's HA client does, frame by frame; the frames' sizes."""
    sizes = []
    end = master.commit_log.max_offset()
    while (at := slave.commit_log.max_offset()) < end:
        frame = bytes(master.commit_log.read_replica(at, max_bytes))
        assert frame, f"no frame at {at} below the master's end {end}"
        slave.commit_log.append_replica(at, frame)
        sizes.append(len(frame))
    return sizes


def test_frames_cut_anywhere_make_a_replica_that_serves_every_record_whole(tmp_path: Path) -> None:
    master = MessageStore(store_config(tmp_path / "master"))
    slave = MessageStore(store_config(tmp_path / "slave"))
    master.start()
    slave.start()
    try:
        for i in range(6):
            assert master.put_messages(TOPIC, 0, [bytes([i]) * 700] * 5, [b""] * 5).ok
        assert master.put_messages(TOPIC, 0, [b"x" * 9000] * 3, [b""] * 3).ok  # larger than a frame
        sizes = _copy(master, slave, 1000)
        assert len(sizes) > 30 and max(sizes) <= 1000
        end = master.commit_log.max_offset()
        assert slave.wait_dispatched(end)
        assert slave.max_offset(TOPIC, 0) == 33
        bodies = [decode_record(m).body for m in slave.get_message(TOPIC, 0, 0, 64, max_total_bytes=10**9).messages]
        assert bodies == [bytes([i]) * 700 for i in range(6) for _ in range(5)] + [b"x" * 9000] * 3
    finally:
        master.shutdown()
        slave.shutdown()


@contextmanager
def replica_ending_inside_a_record(tmp_path: Path) -> Iterator[tuple[MessageStore, MessageStore, int, int]]:
    """A master with two records, and a replica holding the first and 200 bytes of the second (as an older master's
    frames, cut at any byte, left it): (master, replica, the first record's end, the cut)."""
    master = MessageStore(store_config(tmp_path / "master"))
    replica = MessageStore(store_config(tmp_path / "replica"))
    master.start()
    replica.start()
    try:
        first = master.put_messages(TOPIC, 0, [b"a" * 500], [b""])
        second = master.put_messages(TOPIC, 0, [b"b" * 500], [b""])
        cut = second.append.physical_offsets[0] + 200
        replica.commit_log.append_replica(0, bytes(master.commit_log.read_at(0, cut)))
        assert replica.wait_dispatched(first.append.end_offset)
        yield master, replica, first.append.end_offset, cut
    finally:
        master.shutdown()
        replica.shutdown()


def test_a_replica_whose_log_ends_inside_a_record_does_not_dispatch_it(tmp_path: Path) -> None:
    """A replica an older master cut inside a record (or a log cut so otherwise): the record is not dispatched, nor
    served, until its end arrives."""
    with replica_ending_inside_a_record(tmp_path) as (master, slave, _first_end, cut):
        assert not slave.wait_dispatched(cut, 0.5)
        assert slave.max_offset(TOPIC, 0) == 1
        end = master.commit_log.max_offset()
        slave.commit_log.append_replica(cut, bytes(master.commit_log.read_at(cut, end - cut)))
        assert slave.wait_dispatched(end)
        assert [decode_record(m).body for m in slave.get_message(TOPIC, 0, 0, 8).messages] == [b"a" * 500, b"b" * 500]


def test_a_replica_promoted_with_a_log_ending_inside_a_record_cuts_it_and_takes_writes(tmp_path: Path) -> None:
    """An older master's frames ended anywhere: promoted so, a replica waited for dispatch to reach its log end,
    which it never does now (the record is not whole), and its group had no master (the diff review)."""
    with replica_ending_inside_a_record(tmp_path) as (_master, replica, first_end, _cut):
        end = replica.cut_partial_record()  # what a promotion does first
        assert end == first_end == replica.commit_log.max_offset()
        assert replica.wait_dispatched(end)
        replica.commit_log.topic_queue_table = replica.consume_queue_store.queue_max_offsets()  # as promotion does
        taken = replica.put_messages(TOPIC, 0, [b"c" * 500], [b""])  # as the new master
        assert taken.ok and taken.queue_offset == 1 and taken.append.physical_offsets == [end]
        assert replica.wait_dispatched(taken.append.end_offset)
        assert [decode_record(m).body for m in replica.get_message(TOPIC, 0, 0, 8).messages] == [b"a" * 500,
                                                                                               b"c" * 500]


def test_a_replica_promoted_holding_part_of_a_batch_cuts_the_batch(tmp_path: Path) -> None:
    """Whole records of a batch whose rest never came were kept by a promoted replica and served: part of a batch
    its producer was told failed (the batch mark review)."""
    master = MessageStore(store_config(tmp_path / "master"))
    replica = MessageStore(store_config(tmp_path / "replica"))
    master.start()
    replica.start()
    try:
        first = master.put_messages(TOPIC, 0, [b"a" * 300] * 3, [b""] * 3)
        batch = master.put_messages(TOPIC, 0, [b"b" * 300] * 3, [b""] * 3)
        cut = batch.append.physical_offsets[2] + 100  # two records of the batch whole, the third in part
        replica.commit_log.replication_gated = True  # a slave shows what its master confirmed: whole appends
        replica.commit_log.set_replicated_offset(first.append.end_offset)
        replica.commit_log.append_replica(0, bytes(master.commit_log.read_at(0, cut)))
        assert replica.wait_dispatched(first.append.end_offset)
        assert replica.cut_partial_record() == first.append.end_offset == replica.commit_log.max_offset()
        assert replica.wait_dispatched(first.append.end_offset)
        assert replica.max_offset(TOPIC, 0) == 3
    finally:
        master.shutdown()
        replica.shutdown()

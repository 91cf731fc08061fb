"""A slave's copy of its master's POP state (``PopService.snapshot`` / ``install``), on real RocksDB stores: the
promoted copy hands out only what the master had not, accepts the master's receipt handles, redelivers what the
master had in flight once its invisible time passes, keeps it across a restart, and never takes a copy once it no
longer follows. At promotion, a copy that names messages the new master never received is fitted to the ends of
its queues."""

import dataclasses

import pytest

from broker.pop.pop_service import PopService
from broker.pop.pop_state_store import PopStateStore, decode_snapshot, encode_snapshot
from tests.pop.test_pop_service import TOPIC, Clock, Reader, offsets, query, record


def broker(tmp_path, name: str, clock: Clock) -> PopService:
    return PopService("broker-a", PopStateStore(tmp_path / name, sync=False), lambda *a: None, lambda *a: None,
                      clock_ms=clock)


def following() -> bool:
    return True


def test_a_promoted_copy_hands_out_only_what_its_master_had_not_and_takes_the_masters_handles(tmp_path):
    clock = Clock()
    master, slave = broker(tmp_path, "master", clock), broker(tmp_path, "slave", clock)
    reader = Reader([record(o) for o in range(10)])
    popped = master.pop(query(reader, n=6), lambda q: 0).popped  # 0..5 in flight
    assert master.ack("g", TOPIC, [p.handle for p in popped[:3]]) == [None] * 3  # 0..2 done
    assert slave.install(master.snapshot(), following)

    assert offsets(slave.pop(query(reader), lambda q: 0)) == [6, 7, 8, 9]  # not 0..5 again
    assert slave.ack("g", TOPIC, [popped[3].handle]) == [None]  # the master's handle
    clock.now += 2000  # 4 and 5 were never acked: handed out again once their invisible time passed
    again = slave.pop(query(reader), lambda q: 0).popped
    assert [(p.handle.queue_offset, p.handle.reconsume_times) for p in again] == [(4, 1), (5, 1), (6, 1), (7, 1),
                                                                                    (8, 1), (9, 1)]


def test_an_installed_copy_is_durable_and_replaces_what_the_slave_had(tmp_path):
    clock = Clock()
    master, slave = broker(tmp_path, "master", clock), broker(tmp_path, "slave", clock)
    reader = Reader([record(o) for o in range(4)])
    slave.pop(dataclasses.replace(query(reader), group="stale-group"), lambda q: 0)  # one the master has not
    master.pop(query(reader, n=2), lambda q: 0)
    assert slave.install(master.snapshot(), following)
    assert slave.snapshot() == master.snapshot()
    slave.close()
    reopened = broker(tmp_path, "slave", clock)
    assert reopened.snapshot() == master.snapshot()
    assert reopened.in_flight_count("g", TOPIC) == 2 and reopened.in_flight_count("stale-group", TOPIC) == 0


def test_a_copy_that_arrives_once_the_slave_no_longer_follows_changes_nothing(tmp_path):
    clock = Clock()
    master, slave = broker(tmp_path, "master", clock), broker(tmp_path, "slave", clock)
    reader = Reader([record(o) for o in range(4)])
    master.pop(query(reader, n=4), lambda q: 0)
    assert offsets(slave.pop(query(reader, n=1), lambda q: 0)) == [0]  # promoted, and popping on its own
    before = slave.snapshot()
    assert not slave.install(master.snapshot(), lambda: False)
    assert slave.snapshot() == before and slave.in_flight_count("g", TOPIC) == 1


def test_a_promoted_copy_naming_messages_it_never_received_is_fitted_to_its_queues(tmp_path):
    """Asynchronous replication: the master popped 0..5, the promoted slave has only 0..2 (and nothing of another
    queue). Fitted at promotion, before any send: the next messages take offsets 3.. and are handed out fresh, and a
    handle the master gave for offset 3 acks nothing (it named a message this broker never had)."""
    clock = Clock()
    master, slave = broker(tmp_path, "master", clock), broker(tmp_path, "slave", clock)
    old = master.pop(query(Reader([record(o) for o in range(6)])), lambda q: 0).popped
    master.pop(dataclasses.replace(query(Reader([record(o) for o in range(2)])), queue_ids=[1]), lambda q: 0)
    assert slave.install(master.snapshot(), following)
    slave.clamp(lambda topic, queue_id: {0: 3, 1: 0}[queue_id])
    assert slave.in_flight_count("g", TOPIC) == 3  # 0..2 of queue 0, which it has

    reader = Reader([record(o) for o in range(5)])  # sends after the promotion: 3 and 4
    assert offsets(slave.pop(query(reader), lambda q: 0)) == [3, 4]
    assert slave.ack("g", TOPIC, [old[3].handle]) != [None]
    empty_queue = dataclasses.replace(query(Reader([record(0)])), queue_ids=[1])
    assert offsets(slave.pop(empty_queue, lambda q: 0)) == [0]  # its first message, though the copy said 0..1
    reopened_state = slave.snapshot()
    slave.close()
    assert broker(tmp_path, "slave", clock).snapshot() == reopened_state  # fitted durably


def test_fitting_leaves_queues_whose_end_is_unknown_or_not_passed(tmp_path):
    clock = Clock()
    master, slave = broker(tmp_path, "master", clock), broker(tmp_path, "slave", clock)
    master.pop(query(Reader([record(o) for o in range(4)])), lambda q: 0)
    assert slave.install(master.snapshot(), following)
    before = slave.snapshot()
    slave.clamp(lambda topic, queue_id: None)
    slave.clamp(lambda topic, queue_id: 4)
    assert slave.snapshot() == before


def test_a_snapshot_cut_short_or_of_foreign_keys_is_refused():
    good = encode_snapshot([(b"Sg\x00T\x00\x00\x00\x00\x00", b"\x00" * 8)])
    assert decode_snapshot(good) == {b"Sg\x00T\x00\x00\x00\x00\x00": b"\x00" * 8}
    with pytest.raises(ValueError, match="cut short"):
        decode_snapshot(good[:-1])
    with pytest.raises(ValueError, match="no POP record"):
        decode_snapshot(encode_snapshot([(b"Xjunk", b"")]))


def test_a_state_unchanged_since_the_slaves_copy_is_neither_read_nor_sent_again(tmp_path):
    """The slave names the version of its copy; the master answers "unchanged" until POP changes its state. Any
    write on the slave (a forget as it follows another master) makes its copy no copy: the next one is whole."""
    clock = Clock()
    master, slave = broker(tmp_path, "master", clock), broker(tmp_path, "slave", clock)
    reader = Reader([record(o) for o in range(6)])
    master.pop(query(reader, n=2), lambda q: 0)
    assert slave.copied_from() == ""
    version, records = master.snapshot_since(slave.copied_from())
    assert records == master.snapshot()
    assert slave.install(records, following, version)
    assert slave.copied_from() == version
    assert master.snapshot_since(version) == (version, None)  # nothing changed: nothing sent

    master.pop(query(reader, n=2), lambda q: 0)
    newer, records = master.snapshot_since(version)
    assert newer != version and records == master.snapshot()
    assert slave.install(records, following, newer) and slave.copied_from() == newer

    slave.forget("follows another master")
    assert slave.copied_from() == ""
    assert master.snapshot_since(slave.copied_from())[1] == master.snapshot()


def test_a_reopened_master_has_a_version_no_slave_copied(tmp_path):
    clock = Clock()
    master = broker(tmp_path, "master", clock)
    master.pop(query(Reader([record(0)])), lambda q: 0)
    version, _ = master.snapshot_since("")
    master.close()
    reopened = broker(tmp_path, "master", clock)
    assert reopened.snapshot_since(version)[1] == reopened.snapshot()  # same records, but sent: a new opening


def test_a_copy_that_failed_to_load_is_not_taken_for_current(tmp_path, monkeypatch):
    clock = Clock()
    master, slave = broker(tmp_path, "master", clock), broker(tmp_path, "slave", clock)
    master.pop(query(Reader([record(o) for o in range(2)])), lambda q: 0)
    version, records = master.snapshot_since("")

    def unreadable() -> None:
        raise OSError("read error")

    monkeypatch.setattr(slave.db, "load", unreadable)
    with pytest.raises(OSError):
        slave.install(records, following, version)
    assert slave.copied_from() == ""  # asked for whole again next time

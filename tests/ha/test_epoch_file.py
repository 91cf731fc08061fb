"""The epoch file and the leader-epoch rule (pure: a file in a temp dir), and the in-sync set's rules."""

from pathlib import Path

import pytest

from broker.ha.epoch_file import EpochEntry, EpochFile
from broker.ha.sync_state_set import SyncStateSet


def epochs(tmp_path: Path, *entries: tuple[int, int]) -> EpochFile:
    f = EpochFile(tmp_path / "epochFileCheckpoint")
    for epoch, start in entries:
        f.assign(epoch, start)
    return f


def test_entries_survive_a_restart_and_a_damaged_file_is_refused(tmp_path: Path):
    f = epochs(tmp_path, (1, 0), (2, 300), (4, 900))
    assert EpochFile(f.path).entries() == [EpochEntry(1, 0), EpochEntry(2, 300), EpochEntry(4, 900)]
    f.path.write_text(f.path.read_text().replace("900", "901"))
    with pytest.raises(ValueError, match="checksum"):
        EpochFile(f.path)


def test_the_leader_epoch_rule_says_where_a_replica_stops_agreeing(tmp_path: Path):
    master = epochs(tmp_path, (1, 0), (2, 300), (4, 900))
    assert master.end_offset_for(1, 1200) == 300  # a replica of epoch 1 agrees only below epoch 2's start
    assert master.end_offset_for(2, 1200) == 900
    assert master.end_offset_for(3, 1200) == 900  # an epoch the master never had: its newest older one ends at 900
    assert master.end_offset_for(4, 1200) == 1200  # the current epoch: the master's end
    assert master.end_offset_for(0, 1200) == 0  # older than any epoch: only what precedes the first


def test_a_new_epoch_replaces_entries_it_supersedes_and_a_cut_drops_later_epochs(tmp_path: Path):
    f = epochs(tmp_path, (1, 0), (2, 300), (3, 300))  # epoch 2 wrote nothing: epoch 3 starts where it did
    assert f.entries() == [EpochEntry(1, 0), EpochEntry(3, 300)]
    f.assign(4, 700)
    f.truncate_from(700)  # the log was cut at 700: epoch 4 wrote nothing that remains
    assert f.entries() == [EpochEntry(1, 0), EpochEntry(3, 300)]
    assert f.epoch_at(299) == EpochEntry(1, 0) and f.epoch_at(300) == EpochEntry(3, 300)
    assert f.next_start_after(1) == 300 and f.next_start_after(3) is None
    with pytest.raises(AssertionError, match="never decrease"):
        f.assign(2, 800)


def test_a_replica_adopts_the_masters_epochs_only_as_far_as_its_log_goes(tmp_path: Path):
    f = epochs(tmp_path, (1, 0))
    f.replace([EpochEntry(1, 0), EpochEntry(2, 500), EpochEntry(5, 2000)], log_end=500)
    assert f.entries() == [EpochEntry(1, 0), EpochEntry(2, 500)]
    assert EpochFile(f.path).last_epoch() == 2


def test_a_joiner_counts_at_once_is_proposed_once_it_holds_everything_confirmed():
    s = SyncStateSet(master_id=1, max_not_catchup_ms=15_000)
    s.accept([1], epoch=1)
    assert s.counted() == frozenset()
    assert s.check(0, {2: 0}, end=100, epoch_start=0, confirm=100) is None  # the first check only records the end
    # Caught up with the end of the last check: counted from now on, but it lacks what was confirmed since.
    assert s.check(1000, {2: 100}, end=150, epoch_start=0, confirm=150) is None
    assert s.counted() == {2}
    proposal = s.check(2000, {2: 150}, end=150, epoch_start=0, confirm=150)  # it holds everything confirmed
    assert proposal is not None and proposal.members == {2} and s.counted() == {2}
    s.accept([1], epoch=1)  # a heartbeat answer computed before the proposal: it still counts
    assert s.counted() == {2}
    s.accept([1, 2], epoch=2)
    assert s.counted() == {2} and s.pending is None
    proposal = s.check(3000, {}, end=200, epoch_start=0, confirm=150)  # its stream closed
    assert proposal is not None and proposal.members == frozenset() and s.counted() == {2}
    s.accept([1], epoch=3)
    assert s.counted() == frozenset()


def test_a_proposal_whose_outcome_is_unknown_counts_until_the_controller_shows_it_was_not_applied():
    s = SyncStateSet(master_id=1, max_not_catchup_ms=15_000)
    s.accept([1], epoch=1)
    s.check(0, {2: 100}, end=100, epoch_start=0, confirm=100)
    s.check(1000, {2: 100}, end=100, epoch_start=0, confirm=100)
    assert s.pending is not None
    s.proposal_failed(1000, refused=False)  # a deadline: the controller may have applied it
    assert s.check(2000, {2: 100}, end=100, epoch_start=0, confirm=100) is None and s.counted() == {2}
    assert s.check(4500, {2: 100}, end=100, epoch_start=0, confirm=100) is not None  # still epoch 1: ask again
    s.proposal_failed(4500, refused=True)
    assert s.pending is None


def test_a_member_left_behind_too_long_is_proposed_for_removal():
    s = SyncStateSet(master_id=1, max_not_catchup_ms=5_000)
    s.accept([1, 2], epoch=1)
    assert s.check(0, {2: 100}, end=100, epoch_start=0, confirm=100) is None
    assert s.check(1000, {2: 100}, end=500, epoch_start=0, confirm=100) is None  # caught up to the last end
    for now in range(2000, 7000, 1000):
        assert s.check(now, {2: 120}, end=900 + now, epoch_start=0, confirm=120) is None  # not long enough yet
    proposal = s.check(7000, {2: 130}, end=9000, epoch_start=0, confirm=130)
    assert proposal is not None and proposal.members == frozenset()


def test_the_agreed_end_uses_both_logs_epochs(tmp_path: Path):
    master = epochs(tmp_path, (1, 0), (3, 500))
    # The replica led epoch 2 (an unclean election) from 400: only epoch 1's records below 400 are shared.
    assert master.agreed_end(800, [EpochEntry(1, 0), EpochEntry(2, 400)], replica_end=700) == 400
    assert master.agreed_end(800, [EpochEntry(1, 0)], replica_end=650) == 500  # its epoch-1 tail past 500 diverges
    assert master.agreed_end(800, [EpochEntry(1, 0), EpochEntry(3, 500)], replica_end=650) == 650  # a prefix
    assert master.agreed_end(800, [], replica_end=0) == 0

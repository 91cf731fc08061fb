"""The transaction table's pure logic, with the clock and the durable offset given: when a half message is due for
a check or a discard, how far the progress offsets move, what a repeated or contradicting end gets, and what a
restart rebuilds from the op queue."""

from broker.transaction.op_message import OpKind, OpMessage, Outcome
from broker.transaction.transaction_table import Due, EndDecision, HalfEntry, TransactionTable

TIMEOUT, INTERVAL, CHECK_MAX = 6000, 30_000, 3


def table() -> TransactionTable:
    t = TransactionTable(TIMEOUT, INTERVAL, CHECK_MAX)
    t.ready.set()
    return t


def half(q: int, stored_ms: int = 0, group: str = "pg") -> HalfEntry:
    return HalfEntry(q, 1000 + q * 100, stored_ms, group)


def remove(*qs: int, outcome: Outcome = Outcome.COMMIT) -> OpMessage:
    return OpMessage(OpKind.REMOVE, qs, outcome)


def check(*qs: int) -> OpMessage:
    return OpMessage(OpKind.CHECK, qs)


def offsets(entries: list[HalfEntry]) -> list[int]:
    return [e.queue_offset for e in entries]


def test_first_check_after_the_timeout_then_every_interval_then_discard():
    t = table()
    t.add_half(half(0, stored_ms=1000))
    assert t.next_due_ms() == 1000 + TIMEOUT
    assert offsets(t.due(1000 + TIMEOUT - 1, 100).checks) == []
    assert offsets(t.due(1000 + TIMEOUT, 100).checks) == [0]
    checked_at = 1000 + TIMEOUT
    for n in range(1, CHECK_MAX + 1):  # each check is an op message read back, stored at the check's time
        t.add_op(n - 1, check(0), checked_at, 10_000 + n)
        assert t.check_count(0) == n
        assert t.next_due_ms() == checked_at + INTERVAL
        assert t.due(checked_at + INTERVAL - 1, 100) == t.due(0, 100)  # nothing due
        checked_at += INTERVAL
        due = t.due(checked_at, 100)
        if n < CHECK_MAX:
            assert offsets(due.checks) == [0] and not due.discards
    assert offsets(due.discards) == [0] and not due.checks  # checked CHECK_MAX times and due again


def test_ended_half_messages_are_never_due():
    t = table()
    for q in range(3):
        t.add_half(half(q))
    t.add_op(0, remove(0), 5, 500)
    t.add_op(1, remove(2, outcome=Outcome.ROLLBACK), 6, 600)
    assert offsets(t.due(10**9, 100).checks) == [1]
    assert t.pending == 1


def test_an_op_read_before_its_half_message_still_ends_it():
    t = table()  # after a restart the op queue is read first
    t.add_op(0, remove(4), 5, 500)
    t.add_half(half(4))
    assert t.pending == 0


def test_half_progress_waits_for_pending_and_for_durable_ends():
    t = table()
    for q in range(4):
        t.add_half(half(q))
    t.add_op(0, remove(0), 5, op_end := 500)
    t.add_op(1, remove(1), 5, 700)
    # half message 2 is pending: H stops there; the ends of 0 and 1 must be flushed first
    assert t.progress(durable_offset=op_end - 1) == (0, 0)
    assert t.progress(durable_offset=op_end) == (1, 1)
    assert t.progress(durable_offset=700) == (2, 2)
    t.add_op(2, remove(3), 5, 900)
    assert t.progress(durable_offset=10**6) == (2, 2)  # 2 still pending holds H, and O at the op naming 3
    t.add_op(3, remove(2), 5, 1000)
    assert t.progress(durable_offset=10**6) == (4, 4)


def test_op_progress_never_passes_an_op_naming_a_half_message_at_or_after_h():
    t = table()
    for q in range(3):
        t.add_half(half(q))
    t.add_op(0, check(0, 2), 5, 500)  # names 2, which stays pending
    t.add_op(1, remove(0), 5, 600)
    t.add_op(2, remove(1), 5, 700)
    assert t.progress(durable_offset=10**6) == (2, 0)


def test_progress_reaches_the_read_end_when_nothing_is_pending():
    t = table()
    t.start_at(10, 20)
    t.skip_halves(15)  # nothing readable below 15 (expired)
    t.skip_ops(25)
    assert t.progress(durable_offset=0) == (15, 25)


def test_repeated_end_is_answered_and_a_contradicting_one_refused():
    t = table()
    t.add_half(half(0))
    claim = t.begin_end(0, Outcome.COMMIT)
    assert claim.decision is EndDecision.PROCEED
    assert t.begin_end(0, Outcome.ROLLBACK).decision is EndDecision.BUSY  # the commit is being written
    t.finish_end(0, Outcome.COMMIT, op_end=100)
    again = t.begin_end(0, Outcome.COMMIT)
    assert again.decision is EndDecision.ALREADY and again.outcome is Outcome.COMMIT
    other = t.begin_end(0, Outcome.ROLLBACK)
    assert other.decision is EndDecision.CONFLICT and other.outcome is Outcome.COMMIT


def test_a_discarded_transaction_may_be_rolled_back_not_committed():
    t = table()
    t.add_op(0, remove(0, outcome=Outcome.DISCARD), 5, 100)
    assert t.begin_end(0, Outcome.ROLLBACK).decision is EndDecision.ALREADY
    assert t.begin_end(0, Outcome.COMMIT).decision is EndDecision.CONFLICT


def test_a_commit_whose_op_failed_does_not_store_the_message_again():
    t = table()
    t.add_half(half(0))
    assert t.begin_end(0, Outcome.COMMIT).decision is EndDecision.PROCEED
    t.abort_end(0, real_written=True)
    assert t.begin_end(0, Outcome.ROLLBACK).decision is EndDecision.CONFLICT
    retry = t.begin_end(0, Outcome.COMMIT)
    assert retry.decision is EndDecision.PROCEED and retry.real_written


def test_the_discard_of_a_commit_whose_op_failed_finishes_it_as_commit():
    """Nobody answered its checks: its discard claims it to write the COMMIT op (the message is visible already),
    and once that is durable the half progress moves past it."""
    t = table()
    t.add_half(half(0))
    assert t.begin_end(0, Outcome.COMMIT).decision is EndDecision.PROCEED
    t.abort_end(0, real_written=True)
    for i in range(CHECK_MAX):
        t.add_op(i, check(0), TIMEOUT + i * INTERVAL, 200 + i)
    now = TIMEOUT + CHECK_MAX * INTERVAL
    assert offsets(t.due(now, 10).discards) == [0]
    claim = t.begin_end(0, Outcome.DISCARD)
    assert claim.decision is EndDecision.PROCEED and claim.real_written
    t.finish_end(0, Outcome.COMMIT, 300)
    assert t.due(now, 10) == Due([], []) and t.next_due_ms() is None
    assert t.progress(300) == (1, CHECK_MAX)
    assert t.begin_end(0, Outcome.COMMIT).decision is EndDecision.ALREADY


def test_an_end_below_the_progress_whose_outcome_is_gone_is_forgotten():
    t = TransactionTable(TIMEOUT, INTERVAL, CHECK_MAX, ended_kept=1)
    t.ready.set()
    for q in range(3):
        t.add_half(half(q))
        t.add_op(q, remove(q), 5, 100)
    assert t.progress(durable_offset=100) == (3, 3)
    assert t.begin_end(2, Outcome.COMMIT).decision is EndDecision.ALREADY  # the newest outcome kept
    assert t.begin_end(0, Outcome.COMMIT).decision is EndDecision.FORGOTTEN


def test_ends_wait_until_the_table_is_loaded():
    t = TransactionTable(TIMEOUT, INTERVAL, CHECK_MAX)
    assert t.begin_end(0, Outcome.COMMIT, wait_s=0.01).decision is EndDecision.BUSY


def test_a_restart_rebuilds_ends_and_check_counts_from_the_progress_offsets():
    """The op queue read again from O (committed before the crash) gives every half message at or after H its
    end or its check count and last check time: checks go on where they stopped."""
    before = table()
    ops: list[tuple[OpMessage, int]] = []  # (op, store time) as the op queue holds them
    for q in range(4):
        before.add_half(half(q, stored_ms=0))
    ops += [(remove(0), 10), (check(1, 2, 3), TIMEOUT), (remove(1), TIMEOUT + 5), (check(2, 3), TIMEOUT + INTERVAL)]
    for i, (op, at) in enumerate(ops):
        before.add_op(i, op, at, 100 * (i + 1))
    h, o = before.progress(durable_offset=10**6)
    assert (h, o) == (2, 1)

    after = table()  # a new process: reads from (H, O)
    after.start_at(h, o)
    for i, (op, at) in enumerate(ops[o:], o):
        after.add_op(i, op, at, 100 * (i + 1))
    for q in range(h, 4):
        after.add_half(half(q, stored_ms=0))
    assert after.check_count(2) == after.check_count(3) == 2
    assert after.next_due_ms() == TIMEOUT + 2 * INTERVAL
    assert after.begin_end(1, Outcome.COMMIT).decision is EndDecision.ALREADY
    assert offsets(after.due(TIMEOUT + 2 * INTERVAL, 100).checks) == [2, 3]

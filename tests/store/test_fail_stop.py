"""Fail-stop: a broken dispatch invariant or a failed fsync stops the store taking writes, acknowledges nothing it
could not make durable, keeps serving reads, and a restart recovers every acknowledged message."""

from collections.abc import Iterator

import pytest

from broker.store import fault_points
from broker.store.config import FlushDiskType
from broker.store.get_message_result import GetMessageStatus
from broker.store.put_message_result import PutMessageStatus
from tests.store.conftest import StoreFactory

TOPIC = "FailStop"


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    fault_points.disarm()


def _read_all(store, queue_id: int = 0) -> list[bytes]:
    result = store.get_message(TOPIC, queue_id, 0, 10_000, max_total_bytes=1 << 30)
    assert result.status in (GetMessageStatus.FOUND, GetMessageStatus.NO_MESSAGE)
    return [bytes(m) for m in result.messages]


def _put(store, body: bytes, **kwargs):
    return store.put_messages(TOPIC, 0, [body], [b""], **kwargs)


@pytest.mark.parametrize("flush", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH])
def test_failed_fsync_refuses_writes_and_acknowledges_nothing_after(open_store: StoreFactory,
                                                                   flush: FlushDiskType) -> None:
    store = open_store(flush_disk_type=flush, flush_interval_commit_log_ms=10)
    acked = []
    for i in range(20):
        result = _put(store, b"before-%d" % i)
        assert result.ok
        acked.append(result)
    store.commit_log.mapped_file_queue.flush()  # what was acknowledged is on disk before the fault
    assert store.wait_dispatched(acked[-1].append.end_offset, 5)
    fault_points.arm("fsync")
    outcomes = [_put(store, b"after-%d" % i) for i in range(20)]
    if flush is FlushDiskType.ASYNC_FLUSH:  # acknowledged before its fsync by design; the next flush fails
        store.flush_service.join(timeout=5)
        outcomes = [_put(store, b"late-%d" % i) for i in range(5)]
    else:
        assert not outcomes[0].ok, "a SYNC_FLUSH write whose fsync failed was acknowledged"
    assert all(not r.ok for r in outcomes[-5:])
    refused = outcomes[-1]
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "fsync" in refused.error and "restart" in refused.error
    assert store.running_flags.fail_stop_reason is not None
    reads = _read_all(store)  # reads keep working
    assert len(reads) >= 20
    store.shutdown()

    fault_points.disarm()
    reopened = open_store(flush_disk_type=flush)
    assert reopened.running_flags.writeable
    bodies = [m[-16:] for m in _read_all(reopened)]
    for i in range(20):
        assert any(b.endswith(b"before-%d" % i) for b in bodies), f"acknowledged message {i} lost"
    assert _put(reopened, b"again").ok


@pytest.mark.parametrize("flush", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH])
def test_dispatch_invariant_failure_refuses_writes(open_store: StoreFactory, flush: FlushDiskType) -> None:
    store = open_store(flush_disk_type=flush)
    for i in range(10):
        assert _put(store, b"ok-%d" % i).ok
    assert store.wait_dispatched(store.commit_log.max_offset(), 5)
    fault_points.arm("dispatch")
    written = _put(store, b"undispatched")
    assert written.ok or written.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert not store.wait_dispatched(store.commit_log.max_offset(), 5), "dispatch went on past the failure"
    assert not store.reput.is_alive() or store.reput.failed
    refused = _put(store, b"refused")
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "dispatch failed" in refused.error
    assert len(_read_all(store)) == 10  # what was dispatched is still served
    store.shutdown()

    fault_points.disarm()
    reopened = open_store(flush_disk_type=flush)
    bodies = _read_all(reopened)
    assert len(bodies) == 11 and bodies[-1].endswith(b"undispatched")  # replayed at restart
    assert _put(reopened, b"again").ok

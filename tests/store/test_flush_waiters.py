"""SYNC_FLUSH answers waiting on the event loop for their fsync (``broker/flush_waiters.py``), against a real
store: many waits share one fsync, a wait ends only once its offset is flushed, a failed fsync ends every wait
at once as failed, and a slow one ends a wait after its timeout."""

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from broker.flush_waiters import FlushWaiters
from broker.store import fault_points
from broker.store.config import FlushDiskType
from broker.store.message_store import MessageStore
from tests.store.conftest import StoreFactory

TOPIC = "FlushWaits"


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    fault_points.disarm()


def _append(store: MessageStore, body: bytes) -> int:
    """The end offset of a put that does not wait for its fsync."""
    result = store.put_messages(TOPIC, 0, [body], [b""], wait_flushed=False)
    assert result.ok and result.append is not None
    return result.append.end_offset


def test_waits_share_one_fsync_and_each_ends_once_its_offset_is_flushed(open_store: StoreFactory):
    """The fsync is held while 64 sends append and wait; once it goes, one or two fsyncs answer all of them (a
    thread per wait let six share one)."""
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    flushes: list[int] = []
    # Told before the waiters' own listener: a flush is recorded before the waits it ends can be answered.
    store.flush_service.add_flush_listener(lambda offset: flushes.append(-1 if offset is None else offset))
    waiters = FlushWaiters(store.flush_service)
    gate = threading.Event()
    real_flush = store.commit_log.mapped_file_queue.flush

    def held_flush() -> int:
        gate.wait(10)
        return real_flush()

    store.commit_log.mapped_file_queue.flush = held_flush  # type: ignore[method-assign]

    async def run() -> list[tuple[bool, int, int]]:
        async def one(i: int) -> tuple[bool, int, int]:
            end = _append(store, b"m-%d" % i)
            ok = await waiters.wait(end, 10.0)
            return ok, end, store.flush_service.flushed_offset

        tasks = [asyncio.ensure_future(one(i)) for i in range(64)]
        await asyncio.sleep(0)  # one loop turn: every task appended and waits (the fsync is held)
        assert not any(t.done() for t in tasks), "a wait ended before its fsync"
        gate.set()
        return await asyncio.gather(*tasks)

    try:
        outcomes = asyncio.run(run())
    finally:
        gate.set()
    assert all(ok and flushed >= end for ok, end, flushed in outcomes), outcomes
    assert 1 <= len(flushes) <= 2 and -1 not in flushes, flushes


def test_a_failed_fsync_ends_every_wait_at_once_as_failed(open_store: StoreFactory):
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    waiters = FlushWaiters(store.flush_service)
    fault_points.arm("fsync")

    async def run() -> tuple[list[bool], float]:
        started = time.monotonic()
        ends: list[int] = []
        for i in range(8):  # the first fsync may fail (and stop the store) before the later appends
            result = store.put_messages(TOPIC, 0, [b"doomed-%d" % i], [b""], wait_flushed=False)
            if not result.ok:
                break
            assert result.append is not None
            ends.append(result.append.end_offset)
        assert ends, "the first append came before any fsync and must have been taken"
        results = await asyncio.gather(*(waiters.wait(end, 30.0) for end in ends))
        return list(results), time.monotonic() - started

    results, took = asyncio.run(run())
    assert results and not any(results), results
    assert took < 5.0, f"the waits ended {took:.1f}s after the failed fsync, not at once"
    assert store.unflushed_refusal() is not None and "fsync" in store.unflushed_refusal()  # type: ignore[operator]
    # A wait that starts after the failure ends at once too.
    assert asyncio.run(waiters.wait(store.commit_log.max_offset() + 1, 30.0)) is False


def test_a_wait_ends_after_its_timeout_when_no_flush_comes(open_store: StoreFactory):
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    waiters = FlushWaiters(store.flush_service)
    gate = threading.Event()
    real_flush = store.commit_log.mapped_file_queue.flush

    def held_flush() -> int:  # a disk that takes its time
        gate.wait(10)
        return real_flush()

    store.commit_log.mapped_file_queue.flush = held_flush  # type: ignore[method-assign]
    try:
        async def run() -> tuple[bool, float]:
            end = _append(store, b"slow")
            started = time.monotonic()
            ok = await waiters.wait(end, 0.3)
            return ok, time.monotonic() - started

        ok, took = asyncio.run(run())
        assert ok is False and 0.25 <= took < 3.0, (ok, took)
        assert store.unflushed_refusal() is None  # only slow: a stored result (FLUSH_DISK_TIMEOUT), not a refusal
    finally:
        gate.set()

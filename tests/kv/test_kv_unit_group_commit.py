"""KvGroupCommit over a real MessageStore and KV store (as the broker attaches them): concurrent writes share
appends and are answered once applied, in arrival order per key; compare-and-set races have one winner; a lone
writer is not delayed; refusals, cancellations, timeouts and a fail-stop reach exactly the writers concerned."""

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.kv import kv_group_commit
from broker.kv.kv_apply_waiters import KvApplyWaiters, StoreFailStopped
from broker.kv.kv_group_commit import KvGroupCommit
from broker.kv.kv_record import MAX_BODY_BYTES, PRESENT_TAG, KvOp, KvRecord, present
from broker.kv.kv_state_store import KvStoreType
from broker.kv.kv_store import KvStore
from broker.store.config import FlushDiskType
from broker.store.message_store import MessageStore
from broker.store.put_message_result import AppendResult
from common.kv_shard import KV_TOPIC
from common.refusal import Refusal
from common.response_code import ResponseCode
from tests.store.conftest import store_config

QUEUES = 4
FLUSH_TYPES = (FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH)


def run(main: Callable[[], object], timeout: float = 30.0) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(main(), timeout)  # type: ignore[arg-type]

    asyncio.run(bounded())


class Node:
    """A message store with the broker's KV store attached; ``commit`` appends through it like the processor."""

    def __init__(self, root: Path, flush: FlushDiskType, refuse: set[int] | None = None) -> None:
        self.store = MessageStore(store_config(root / "store", flush_disk_type=flush))
        self.kv = KvStore(KvStoreType.MEMORY, root / "kv", 3600, "broker-test")
        self.kv.attach(self.store, asyncio.get_running_loop(), lambda: None,  # type: ignore[arg-type, return-value]
                       lambda: None)
        self.store.start()
        self.refuse = refuse or set()  # queues whose appends are refused
        self.appends: list[tuple[int, int]] = []  # (queue id, records) per append
        self.commit = KvGroupCommit(self.kv.waiters, self.append, apply_timeout_s=10)

    def append(self, shard: int, queue_id: int, properties: list[bytes], bodies: list[bytes]) -> AppendResult:
        if queue_id in self.refuse:
            raise Refusal(ResponseCode.SYSTEM_BUSY, f"queue {queue_id} refused")
        result = self.store.put_messages(KV_TOPIC, queue_id, bodies, properties, body_limit=MAX_BODY_BYTES,
                                         wait_flushed=False)
        assert result.ok and result.append is not None, result.error
        self.appends.append((queue_id, len(bodies)))
        return result.append

    def submit(self, queue_id: int, record: KvRecord) -> "asyncio.Future[int]":
        props, body = record.encode()
        return self.commit.submit(queue_id, queue_id, props, body)

    def state(self, queue_id: int, key: bytes) -> bytes | None:
        return self.kv.state.get(queue_id, [key])[0]

    def close(self) -> None:
        self.store.shutdown()
        self.kv.close()


@pytest.fixture(params=FLUSH_TYPES, ids=["async", "sync"])
def flush(request: pytest.FixtureRequest) -> FlushDiskType:
    return request.param


def test_concurrent_puts_share_appends_and_apply_in_arrival_order(tmp_path: Path, flush: FlushDiskType):
    async def main() -> None:
        node = Node(tmp_path, flush)
        try:
            rng = random.Random(7)
            last: dict[tuple[int, bytes], bytes] = {}
            futures = []
            for wave in range(20):  # arrivals spread over loop turns, as gRPC hands them over
                for n in range(rng.randint(1, 12)):
                    queue_id, key = rng.randrange(QUEUES), b"key-%d" % rng.randrange(6)
                    value = b"w%02d-%02d" % (wave, n)
                    futures.append((queue_id, node.submit(queue_id, KvRecord(KvOp.PUT, key, value))))
                    last[queue_id, key] = value
                    if rng.random() < 0.5:
                        await asyncio.sleep(0)
                await asyncio.sleep(rng.choice((0, 0.0003, 0.001)))
            offsets = [(queue_id, await future) for queue_id, future in futures]
            applied = node.kv.dispatcher.applied_offset
            assert all(offset < applied for _, offset in offsets), "answered before applied"
            for queue_id in range(QUEUES):  # one queue's records went to the commitlog in arrival order
                mine = [offset for q, offset in offsets if q == queue_id]
                assert mine == sorted(mine)
            for (queue_id, key), value in last.items():
                assert node.state(queue_id, key) == present(value), (queue_id, key)
            assert sum(n for _, n in node.appends) == len(futures)
            assert node.commit.records == len(futures)
            assert node.commit.groups < len(futures) // 2, f"{node.commit.groups} groups for {len(futures)} puts"
            assert len(node.appends) < len(futures), "every put was appended on its own"
        finally:
            node.close()

    run(main)


@pytest.mark.parametrize("expected", [None, b"0"], ids=["expect-absent", "expect-value"])
def test_concurrent_cas_on_one_key_has_one_winner(tmp_path: Path, flush: FlushDiskType, expected: bytes | None):
    async def main() -> None:
        node = Node(tmp_path, flush)
        try:
            key = b"contended"
            if expected is not None:
                await node.submit(1, KvRecord(KvOp.PUT, key, expected))
            racers = 32
            futures = []
            for n in range(racers):
                futures.append(node.submit(1, KvRecord(KvOp.CAS, key, b"racer-%02d" % n, expected)))
                if n % 3 == 0:
                    await asyncio.sleep(0)
            outcomes = []
            for future in futures:
                outcome = node.kv.dispatcher.take_outcome(await future)
                assert outcome is not None, "CAS applied without an outcome"
                outcomes.append(outcome)
            winners = [n for n, o in enumerate(outcomes) if o.applied]
            assert len(winners) == 1, f"{len(winners)} winners"
            winner_value = present(b"racer-%02d" % winners[0])
            assert all(o.current == winner_value for o in outcomes)
            assert node.state(1, key) == winner_value
            assert winner_value[0] == PRESENT_TAG
            assert node.commit.groups < racers
        finally:
            node.close()

    run(main)


def test_a_lone_writer_does_not_wait_for_the_linger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(kv_group_commit, "LINGER_S", 60.0)

    async def main() -> None:
        node = Node(tmp_path, FlushDiskType.ASYNC_FLUSH)
        try:
            for n in range(30):  # each write awaited before the next: never concurrent
                await asyncio.wait_for(node.submit(n % QUEUES, KvRecord(KvOp.PUT, b"solo", b"%d" % n)), 5)
            assert node.commit.groups == node.commit.records == 30
        finally:
            node.close()

    run(main)


def test_concurrent_writers_linger_until_the_last_group_is_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(kv_group_commit, "LINGER_S", 60.0)

    async def main() -> None:
        node = Node(tmp_path, FlushDiskType.ASYNC_FLUSH)
        try:
            first = [node.submit(0, KvRecord(KvOp.PUT, b"k%d" % n, b"1")) for n in range(4)]  # one loop turn
            await asyncio.gather(*first)
            assert node.commit.groups == 1
            second = []
            for n in range(3):  # the writers come back one loop turn apart: the group stays open
                second.append(node.submit(n % 2, KvRecord(KvOp.PUT, b"k%d" % n, b"2")))
                await asyncio.sleep(0.01)
            assert not any(f.done() for f in second) and node.commit.groups == 1
            second.append(node.submit(0, KvRecord(KvOp.PUT, b"k3", b"2")))  # the fourth closes it
            await asyncio.wait_for(asyncio.gather(*second), 5)
            assert node.commit.groups == 2 and node.appends[1:] == [(0, 3), (1, 1)]
        finally:
            node.close()

    run(main)


def test_a_refused_queue_fails_only_its_writers(tmp_path: Path):
    async def main() -> None:
        node = Node(tmp_path, FlushDiskType.ASYNC_FLUSH, refuse={2})
        try:
            ok = [node.submit(q, KvRecord(KvOp.PUT, b"k", b"%d" % q)) for q in (0, 1, 3)]
            refused = [node.submit(2, KvRecord(KvOp.PUT, b"k%d" % n, b"x")) for n in range(3)]
            await asyncio.gather(*ok)
            for future in refused:
                with pytest.raises(Refusal, match="queue 2 refused"):
                    await future
            assert node.state(2, b"k0") is None
            node.refuse.clear()  # the next group is not affected
            await node.submit(2, KvRecord(KvOp.PUT, b"k0", b"later"))
            assert node.state(2, b"k0") == present(b"later")
        finally:
            node.close()

    run(main)


def test_a_writer_cancelled_before_the_append_is_not_written(tmp_path: Path):
    async def main() -> None:
        node = Node(tmp_path, FlushDiskType.ASYNC_FLUSH)
        try:
            kept = node.submit(0, KvRecord(KvOp.PUT, b"kept", b"1"))
            gone = node.submit(0, KvRecord(KvOp.PUT, b"gone", b"1"))
            gone.cancel()  # before the loop turn ends: the group is still queued
            await kept
            assert node.state(0, b"kept") == present(b"1") and node.state(0, b"gone") is None
            assert node.appends == [(0, 1)]
        finally:
            node.close()

    run(main)


class FakeAppend:
    """Appends nothing: answers offsets far beyond anything a store applied."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, shard: int, queue_id: int, properties: list[bytes], bodies: list[bytes]) -> AppendResult:
        self.calls += 1
        base = 1 << 40
        return AppendResult([base + i for i in range(len(bodies))], 0, 0, base + len(bodies))


def test_a_group_not_applied_in_time_times_out_and_lets_the_next_one_go():
    async def main() -> None:
        append = FakeAppend()
        commit = KvGroupCommit(KvApplyWaiters(asyncio.get_running_loop()), append, apply_timeout_s=0.05)
        first = [commit.submit(0, 0, b"p", b"b") for _ in range(3)]
        await asyncio.sleep(0.01)
        queued = commit.submit(0, 0, b"p", b"b")  # waits for the group in flight
        for future in first:
            with pytest.raises(TimeoutError):
                await future
        with pytest.raises(TimeoutError):
            await queued
        assert append.calls == 2

    run(main)


def test_a_fail_stop_reaches_the_writers_in_flight_and_later_ones():
    async def main() -> None:
        waiters = KvApplyWaiters(asyncio.get_running_loop())
        commit = KvGroupCommit(waiters, FakeAppend(), apply_timeout_s=30)
        in_flight = [commit.submit(1, 1, b"p", b"b") for _ in range(2)]
        await asyncio.sleep(0.01)
        waiters.fail("the disk is gone")
        for future in in_flight:
            with pytest.raises(StoreFailStopped, match="the disk is gone"):
                await future
        with pytest.raises(StoreFailStopped):
            await commit.submit(1, 1, b"p", b"b")

    run(main)


def test_what_queues_behind_a_slow_apply_is_appended_in_bounded_groups(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """A group closed while another is in flight took everything queued meanwhile: behind a slow fsync or slave,
    one synchronous append of any size on the loop (5,000 records in one, measured before)."""
    monkeypatch.setattr(kv_group_commit, "MAX_GROUP_RECORDS", 64)

    async def main() -> None:
        node = Node(tmp_path, FlushDiskType.ASYNC_FLUSH)
        gate = asyncio.Event()
        dispatch = node.kv.dispatcher.dispatch
        loop = asyncio.get_running_loop()

        def held(requests, end):  # type: ignore[no-untyped-def]  # the reput thread waits for the gate
            asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(20)
            dispatch(requests, end)

        node.kv.dispatcher.dispatch = held  # type: ignore[method-assign]
        try:
            first = node.submit(0, KvRecord(KvOp.PUT, b"k0", b"v"))
            await asyncio.sleep(0.05)  # appended, its apply held
            queued = [node.submit(i % 2, KvRecord(KvOp.PUT, b"k%d" % i, b"v%d" % i)) for i in range(1, 301)]
            await asyncio.sleep(0.05)
            gate.set()
            await asyncio.gather(first, *queued)
            assert node.appends[0] == (0, 1)
            assert all(records <= 64 for _, records in node.appends), node.appends
            assert sum(records for _, records in node.appends) == 301
            assert [node.state(i % 2, b"k%d" % i) for i in range(1, 301)] == [present(b"v%d" % i)
                                                                             for i in range(1, 301)]
        finally:
            node.close()

    run(main)

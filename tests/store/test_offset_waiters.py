"""OffsetWaiters (``broker/offset_waiters.py``): the loop-side waits of SYNC_FLUSH and SYNC_MASTER answers."""

import asyncio

from broker.offset_waiters import SWEEP_S, OffsetWaiters


def test_a_settle_answers_exactly_the_waits_its_offset_covers():
    async def run() -> None:
        waiters: OffsetWaiters[str] = OffsetWaiters("timeout")
        futures = {offset: waiters.add(offset, 30) for offset in (300, 100, 200, 400)}
        waiters.settle(250, "ok")
        assert {o: f.done() for o, f in futures.items()} == {100: True, 200: True, 300: False, 400: False}
        waiters.settle(300, "ok")
        assert futures[300].result() == "ok" and not futures[400].done()
        waiters.settle_all("failed")
        assert futures[400].result() == "failed" and futures[100].result() == "ok"
        waiters.settle(10_000, "late")  # nothing is answered twice
        assert futures[400].result() == "failed"

    asyncio.run(run())


def test_each_wait_times_out_after_its_own_timeout_whatever_the_order_they_came_in():
    async def run() -> None:
        loop = asyncio.get_running_loop()
        waiters: OffsetWaiters[str] = OffsetWaiters("timeout")
        start = loop.time()
        long_wait = waiters.add(100, 30)
        short_wait = waiters.add(200, 0.2)  # later, but due first
        assert await short_wait == "timeout"
        assert 0.2 <= loop.time() - start < 10  # not held behind the 30 s wait that came first
        assert not long_wait.done()
        waiters.settle(100, "ok")
        assert long_wait.result() == "ok"
        await asyncio.sleep(SWEEP_S * 3)
        assert waiters._sweep is None  # nothing waits: the sweep timer stopped

    asyncio.run(run())

"""KvApplyWaiters on a real event loop, woken from another thread (the reput thread in the broker)."""

import asyncio
import threading
import time

import pytest

from broker.kv.kv_apply_waiters import KvApplyWaiters


def run(coro, timeout: float = 5.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def test_immediate_when_already_applied():
    async def main():
        waiters = KvApplyWaiters(asyncio.get_running_loop())
        assert waiters.wait(0).done()  # nothing to wait for at offset 0
        waiters.on_applied(100)
        for offset in (1, 99, 100):
            future = waiters.wait(offset)
            assert future.done()
            await future
        assert not waiters.wait(101).done()

    run(main())


def test_waits_resolve_from_another_thread_in_offset_order():
    async def main():
        loop = asyncio.get_running_loop()
        waiters = KvApplyWaiters(loop)
        futures = {offset: waiters.wait(offset) for offset in (50, 10, 30, 30, 70)}
        resolved: list[int] = []
        for offset, future in futures.items():
            future.add_done_callback(lambda _f, o=offset: resolved.append(o))

        def reput(offset: int) -> None:
            waiters.on_applied(offset)

        thread = threading.Thread(target=reput, args=(30,))
        thread.start()
        thread.join()
        await asyncio.wait_for(asyncio.gather(futures[10], futures[30]), 2)
        assert not futures[50].done() and not futures[70].done()

        thread = threading.Thread(target=reput, args=(60,))
        thread.start()
        thread.join()
        await asyncio.wait_for(futures[50], 2)
        await asyncio.sleep(0.05)
        assert not futures[70].done()
        assert sorted(resolved) == [10, 30, 50]

        thread = threading.Thread(target=reput, args=(70,))
        thread.start()
        thread.join()
        await asyncio.wait_for(futures[70], 2)

    run(main())


def test_many_waiters_and_a_concurrent_applier():
    async def main():
        loop = asyncio.get_running_loop()
        waiters = KvApplyWaiters(loop)
        stop = threading.Event()

        def reput() -> None:
            offset = 0
            while not stop.is_set() and offset < 5000:
                offset += 7
                waiters.on_applied(offset)
                if offset % 700 == 0:
                    time.sleep(0.001)

        thread = threading.Thread(target=reput)
        targets = list(range(1, 5000, 13))
        futures = [waiters.wait(t) for t in targets]
        thread.start()
        try:
            await asyncio.wait_for(asyncio.gather(*futures), 5)
            # waits placed while the applier runs resolve too, immediately or on a later apply
            late = [waiters.wait(t) for t in range(1, 4990, 97)]
            await asyncio.wait_for(asyncio.gather(*late), 5)
        finally:
            stop.set()
            thread.join()

    run(main())


def test_cancelled_waiter_does_not_break_the_others():
    async def main():
        waiters = KvApplyWaiters(asyncio.get_running_loop())
        cancelled, kept = waiters.wait(10), waiters.wait(10)
        cancelled.cancel()
        thread = threading.Thread(target=waiters.on_applied, args=(10,))
        thread.start()
        thread.join()
        await asyncio.wait_for(kept, 2)
        with pytest.raises(asyncio.CancelledError):
            await cancelled

    run(main())


def test_on_applied_without_waiters_does_not_touch_the_loop():
    loop = asyncio.new_event_loop()
    try:
        waiters = KvApplyWaiters(loop)
        waiters.on_applied(5)  # no waiters: nothing scheduled, fine even though the loop is not running
        assert loop.run_until_complete(_await_wait(waiters, 5)) is None
    finally:
        loop.close()


async def _await_wait(waiters: KvApplyWaiters, offset: int) -> None:
    return await waiters.wait(offset)


def test_when_applied_calls_back_on_the_loop_or_at_once():
    async def main():
        loop = asyncio.get_running_loop()
        waiters = KvApplyWaiters(loop)
        seen: list[tuple[str, str | None, bool]] = []

        def settle(name: str):
            return lambda reason: seen.append((name, reason, threading.current_thread() is threading.main_thread()))

        waiters.on_applied(10)
        waiters.when_applied(10, settle("at-once"))
        assert seen == [("at-once", None, True)]  # already applied: from the call itself
        waiters.when_applied(20, settle("later"))
        waiters.when_applied(30, settle("failed"))
        thread = threading.Thread(target=waiters.on_applied, args=(25,))
        thread.start()
        thread.join()
        await asyncio.sleep(0.05)
        assert seen[1:] == [("later", None, True)]  # on the loop's thread, not the applier's
        waiters.fail("disk gone")
        await asyncio.sleep(0.05)
        assert seen[2:] == [("failed", "disk gone", True)]
        waiters.when_applied(40, settle("after-fail"))
        assert seen[3:] == [("after-fail", "disk gone", True)]

    run(main())

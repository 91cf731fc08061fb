"""The threads the broker's calls that wait on other systems run on (broker/remote_waits.py): a call stuck there
holds up no other call, results and exceptions reach the caller, a caller that stopped waiting is harmless, and
a stuck thread does not keep the process from exiting (daemons)."""

import asyncio
import contextvars
import threading

import pytest

from broker.remote_waits import RemoteWaits


def test_a_stuck_call_holds_up_no_other_and_answers_reach_their_callers():
    waits = RemoteWaits("test-wait", max_threads=4)
    release = threading.Event()

    def stuck() -> str:
        release.wait(10)
        return "late"

    def fails() -> None:
        raise ValueError("the backend said no")

    async def scenario() -> None:
        first = asyncio.ensure_future(waits.run(stuck))
        await asyncio.sleep(0.05)
        assert await asyncio.wait_for(waits.run(lambda a, b: a + b, 2, 3), 2) == 5  # not behind the stuck one
        with pytest.raises(ValueError, match="the backend said no"):
            await asyncio.wait_for(waits.run(fails), 2)
        threads = [t for t in threading.enumerate() if t.name.startswith("test-wait")]
        assert 2 <= len(threads) <= 3 and all(t.daemon for t in threads)  # (a third if the second was not idle yet)
        release.set()
        assert await asyncio.wait_for(first, 2) == "late"

    asyncio.run(scenario())


def test_a_caller_that_stopped_waiting_is_harmless_and_the_threads_are_kept_within_their_bound():
    waits = RemoteWaits("bounded-wait", max_threads=2)
    release = threading.Event()
    ran: list[int] = []

    def job(i: int) -> int:
        release.wait(10)
        ran.append(i)
        return i

    async def scenario() -> None:
        calls = [asyncio.ensure_future(waits.run(job, i)) for i in range(5)]
        await asyncio.sleep(0.05)
        calls[0].cancel()  # its caller left; its answer comes all the same, and is dropped
        assert len([t for t in threading.enumerate() if t.name.startswith("bounded-wait")]) == 2
        release.set()
        assert await asyncio.gather(*calls[1:]) == [1, 2, 3, 4]
        for _ in range(100):  # the cancelled one still ran, on its thread
            if len(ran) == 5:
                break
            await asyncio.sleep(0.01)
        assert sorted(ran) == [0, 1, 2, 3, 4]

    asyncio.run(scenario())


def test_a_call_runs_in_its_caller_s_context():
    """As asyncio.to_thread: what a handler reads of its context on these threads (the ACL's caller, for a check
    made once the handler knows the resource) is the caller's, not missing, which would skip the check silently."""
    caller: contextvars.ContextVar[str | None] = contextvars.ContextVar("caller", default=None)

    async def main() -> str | None:
        caller.set("alice")
        return await RemoteWaits("context-test").run(caller.get)

    assert asyncio.run(main()) == "alice"

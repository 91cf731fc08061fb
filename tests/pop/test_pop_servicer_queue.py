"""POP calls that go to the worker thread count as queued until the worker is done with them, even when the
caller's wait is cancelled: an inline call never overtakes one the worker has not finished."""

import asyncio
import threading
from types import SimpleNamespace

from broker.pop.pop_service import PopService
from broker.pop.pop_state_store import PopStateStore
from broker.pop_servicer import PopServicer


def test_a_cancelled_wait_keeps_its_worker_call_counted_until_the_call_ends(tmp_path):
    service = PopService("b", PopStateStore(tmp_path / "pop", sync=False), lambda *a: None, lambda *a: None)
    processor = SimpleNamespace(service=service)
    servicer = PopServicer(processor, hold_service=None, max_suspend_ms=0)  # type: ignore[arg-type]
    release = threading.Event()
    ran: list[str] = []

    def slow(request: str) -> str:  # a worker call that holds POP's lock until released
        with service._lock:
            release.wait(10)
            ran.append(request)
        return request

    held = threading.Event()

    def hold_the_lock() -> None:  # another POP call holding the lock: the first call goes to the worker
        with service._lock:
            held.set()
            release.wait(10)

    def inline(request: str) -> str:
        ran.append(request)
        return request

    async def scenario() -> None:
        holder = threading.Thread(target=hold_the_lock)
        holder.start()
        assert held.wait(10)
        waiting = asyncio.ensure_future(servicer._run(slow, "worker-call", lambda: True))
        await asyncio.sleep(0.05)
        waiting.cancel()
        await asyncio.sleep(0.05)
        assert servicer._queued == 1  # its wait was cancelled, but the worker still has it
        release.set()
        holder.join(10)
        assert await servicer._run(inline, "next-call", lambda: True) == "next-call"
        assert ran == ["worker-call", "next-call"]
        for _ in range(100):
            if servicer._queued == 0:
                break
            await asyncio.sleep(0.01)
        assert servicer._queued == 0

    asyncio.run(scenario())
    service.close()

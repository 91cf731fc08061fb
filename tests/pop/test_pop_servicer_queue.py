"""POP calls that go to the worker thread count as queued until the worker is done with them, even when the
caller's wait is cancelled: an inline call never overtakes one the worker has not finished."""

import asyncio
import threading
from types import SimpleNamespace

from broker.pop.pop_service import PopService
from broker.pop.pop_state_store import PopStateStore
from broker.pop_servicer import PopServicer
from proto import pop_pb2


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


def test_only_an_ack_of_a_fifo_group_wakes_the_topics_parked_receives(tmp_path):
    """A wake runs every parked pull and pop of the topic again: at every ack of any group it took POP from 991 to
    67 acks/s with 50 idle push groups parked on the topic. Only an ack, change of invisible time or dead-lettering
    of a FIFO group may free a message a receive waits for."""
    service = PopService("b", PopStateStore(tmp_path / "pop", sync=False), lambda *a: None, lambda *a: None)
    woken: list[str] = []
    fifo = {"fifo-group"}
    processor = SimpleNamespace(
        service=service, runs_inline=lambda topic: True, holds_message_groups=lambda group: group in fifo,
        ack=lambda request: pop_pb2.AckMessageResponse(),
        change_invisible_time=lambda request: pop_pb2.ChangeInvisibleTimeResponse())
    servicer = PopServicer(processor, hold_service=SimpleNamespace(wake_topic=woken.append),  # type: ignore[arg-type]
                           max_suspend_ms=0)

    async def scenario() -> None:
        await servicer._ack(pop_pb2.AckMessageRequest(group="plain-group", topic="T"))
        await servicer.ChangeInvisibleTime(pop_pb2.ChangeInvisibleTimeRequest(group="plain-group", topic="T"), None)
        assert woken == []
        await servicer._ack(pop_pb2.AckMessageRequest(group="fifo-group", topic="T"))
        await servicer.ChangeInvisibleTime(pop_pb2.ChangeInvisibleTimeRequest(group="fifo-group", topic="T"), None)
        assert woken == ["T", "T"]

    asyncio.run(scenario())
    service.close()

"""Calls that wait on other systems (another broker, a tier's backend) run on these threads: off the event loop,
and apart from asyncio's default executor, which runs the waits on this machine (a SYNC_FLUSH send's fsync,
RocksDB). A peer or a backend that stalls then holds up only the calls that need it: with one shared pool, six
reads stuck on a stopped S3 server (the default pool's size on two cores) held up every SYNC_FLUSH send.

The threads are daemons, started as calls need them (up to ``max_threads``) and kept: a broker's stop does not
wait for a call stuck on a backend, whose answer nobody reads any more."""

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
MAX_THREADS = 32

Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class RemoteWaits:
    def __init__(self, name: str, max_threads: int = MAX_THREADS) -> None:
        self.name = name
        self.max_threads = max_threads
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for a job
        self._queued = 0  # jobs no thread took yet: a thread is started while they outnumber the idle ones

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on one of the threads; its result (or exception) once it returns."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queued += 1
            start = self._queued > self._idle and self._threads < self.max_threads
            if start:
                self._threads += 1
        # run in the caller's context, as asyncio.to_thread does: what the call reads of it (the ACL's caller, for a
        # check made once the handler knows the resource) must not silently be missing on these threads
        self._jobs.put((loop, future, contextvars.copy_context().run, (call, *args)))
        if start:
            threading.Thread(target=self._work, name=f"{self.name}-{self._threads}", daemon=True).start()
        return await future

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            loop, future, call, args = self._jobs.get()
            with self._lock:
                self._idle -= 1
                self._queued -= 1
            try:
                result = call(*args)
            except BaseException as exc:  # handed to the caller, as an executor does
                _settle(loop, future, exc, failed=True)
            else:
                _settle(loop, future, result, failed=False)


def _settle(loop: asyncio.AbstractEventLoop, future: "asyncio.Future[Any]", value: Any, failed: bool) -> None:
    def settle() -> None:
        if future.done():  # the caller stopped waiting (cancelled, or its stream ended)
            return
        if failed:
            future.set_exception(value)
        else:
            future.set_result(value)

    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the broker stopped)
        loop.call_soon_threadsafe(settle)


REMOTE_WAITS = RemoteWaits("remote-wait")  # the broker's (one process, one broker), as asyncio's default executor

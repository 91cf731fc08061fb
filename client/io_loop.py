"""The client's I/O thread: an asyncio event loop that every stream of a ``ClientInstance`` lives on.

A stream on the synchronous gRPC API takes four threads on each round (the caller, the thread that feeds it
requests, the channel's event thread, the thread reading answers), and each hands the GIL to the next; under
load each hand-off waits behind whichever thread holds the GIL. On ``grpc.aio`` a frame is written, and answers
are read and settled, in this one thread, so a round costs the caller one hand-off each way.

Callbacks on futures a stream settles run in this thread: they must not block on another stream's answer.
"""

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

STOP_TIMEOUT_S = 5.0


class IoLoop:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            left = asyncio.all_tasks(self.loop)  # a stream's reader and writer, cancelled by its close
            for task in left:
                task.cancel()
            if left:
                self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            self.loop.close()

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` in the loop (RuntimeError once it stopped)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def run(self, coro: Coroutine[Any, Any, T]) -> "Future[T]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, closing: Coroutine[Any, Any, None]) -> None:
        """Run ``closing`` (closing the channels), then stop the loop and wait for its thread."""
        if self.in_loop():  # a callback closing its own client: finish in the loop, do not wait for it
            task = self.loop.create_task(closing)
            task.add_done_callback(lambda _: self.loop.stop())
            return
        try:
            with contextlib.suppress(Exception):  # closing is best effort: the loop stops either way
                self.run(closing).result(STOP_TIMEOUT_S)
        finally:
            if not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(STOP_TIMEOUT_S)

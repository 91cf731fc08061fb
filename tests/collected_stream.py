"""A server stream read in the background: what it sends, into a queue the test takes from as it pleases."""

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc


@contextmanager
def collected(call: Any, stop: Callable[[], None], errors: bool = True) -> Iterator["queue.Queue[Any]"]:
    """``call``'s answers as they come (and its RpcError when it ends in one, with ``errors``); at the end,
    ``stop`` (what ends the requests the test sends) and the call is cancelled."""
    got: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        try:
            for answer in call:
                got.put(answer)
        except grpc.RpcError as exc:
            if errors:
                got.put(exc)

    threading.Thread(target=read, daemon=True).start()
    try:
        yield got
    finally:
        stop()
        call.cancel()

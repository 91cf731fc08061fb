"""What a child of ``os.fork()`` does with the SDK objects it inherited.

A fork copies the parent's memory but only the forking thread: the child's copy of a client has channels whose
gRPC threads, stream readers and retry threads do not exist there, and locks some other thread may have held. A
send on it waited for good (no reader to answer it, no reaper to time it out). Here every live client forgets its
channels and streams in the child and refuses calls at once, saying to make a new client after the fork; nothing of
the parent's is closed (the parent still uses it)."""

import os
import weakref
from typing import Protocol


class ForkAware(Protocol):
    def forget_after_fork(self) -> None: ...


_live: "weakref.WeakSet[ForkAware]" = weakref.WeakSet()

MADE_BEFORE_FORK = ("the client was made before os.fork(), in the parent process: make a new one in this process "
                    "(or make clients after forking)")


def track(client: ForkAware) -> None:
    _live.add(client)


def _after_fork_in_child() -> None:
    for client in list(_live):
        client.forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)

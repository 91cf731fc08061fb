"""Faults a test injects into a real broker process, named in the environment.

``PYROCKETMQ_FAULTS="fsync@3,dispatch@100"`` makes the commitlog flusher's 4th flush fail with EIO (as an
fsync would) and the 101st dispatched batch break a dispatcher invariant. Unset (always, in production) every
check is one dict lookup that finds nothing.
"""

import errno
import os

ENV = "PYROCKETMQ_FAULTS"


def _parse(spec: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, after = item.partition("@")
        points[name] = int(after or 0)
    return points


_remaining = _parse(os.environ.get(ENV, ""))


def arm(name: str, after: int = 0) -> None:
    """In-process tests: make the ``after``+1-th check of ``name`` fail."""
    _remaining[name] = after


def disarm() -> None:
    _remaining.clear()


def _fires(name: str) -> bool:
    left = _remaining.get(name)
    if left is None:
        return False
    if left > 0:
        _remaining[name] = left - 1
        return False
    del _remaining[name]  # fires once
    return True


def check_fsync(path: object) -> None:
    if _remaining and _fires("fsync"):
        raise OSError(errno.EIO, f"injected fsync failure ({ENV})", str(path))


def check_dispatch(offset: int) -> None:
    if _remaining and _fires("dispatch"):
        raise AssertionError(f"injected dispatcher invariant failure at commitlog offset {offset} ({ENV})")

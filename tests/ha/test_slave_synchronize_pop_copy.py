"""``SlaveSynchronize``'s POP copy step against answers as a master gives them: a copy is installed with its
version, an "unchanged" answer installs nothing, and a master of an older release (no versions) has an identical
copy installed once, not every time."""

from collections.abc import Callable

from broker.ha.slave_synchronize import SlaveSynchronize
from proto import pop_pb2


class Copies:
    def __init__(self) -> None:
        self.version = ""
        self.installed: list[tuple[bytes, str]] = []

    def copied_from(self) -> str:
        return self.version

    def install(self, snapshot: bytes, still_following: Callable[[], bool], version: str) -> bool:
        self.installed.append((snapshot, version))
        self.version = version
        return True


def slave(copies: Copies) -> SlaveSynchronize:
    return SlaveSynchronize(lambda: "", None, None, None, lambda: None, pop_state=copies)  # type: ignore[arg-type]


def test_versioned_copies_are_installed_once_per_version():
    copies = Copies()
    sync = slave(copies)
    sync._copy_pop_state("m", pop_pb2.PopStateSnapshot(records=b"a", version="v1"))
    sync._copy_pop_state("m", pop_pb2.PopStateSnapshot(version="v1", unchanged=True))
    sync._copy_pop_state("m", pop_pb2.PopStateSnapshot(records=b"b", version="v2"))
    assert copies.installed == [(b"a", "v1"), (b"b", "v2")]


def test_an_older_masters_identical_copy_is_installed_once():
    copies = Copies()
    sync = slave(copies)
    for records in (b"a", b"a", b"b", b"b"):
        sync._copy_pop_state("m", pop_pb2.PopStateSnapshot(records=records))
    assert copies.installed == [(b"a", ""), (b"b", "")]

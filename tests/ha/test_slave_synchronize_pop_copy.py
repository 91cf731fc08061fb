"""``SlaveSynchronize``'s POP copy step against answers as a master gives them: a copy is installed with its
version, an "unchanged" answer installs nothing, and a master of an older release (no versions) has an identical
copy installed once, not every time. And its thread's cadence: POP state asked for every second between the copies
of everything, a slow copy spaced out to keep its share of the time."""

import time
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


def run_for(sync: SlaveSynchronize, seconds: float, pop_copy_s: float = 0.0) -> list[str]:
    """The steps ``sync``'s thread takes in ``seconds``, each POP copy taking ``pop_copy_s``."""
    steps: list[str] = []

    def copy_pop_state(addr: str) -> None:
        steps.append("pop")
        time.sleep(pop_copy_s)

    sync.master_addr = lambda: "master:1"  # type: ignore[method-assign]
    sync.sync_all = lambda addr: steps.append("all")  # type: ignore[method-assign]
    sync.copy_pop_state = copy_pop_state  # type: ignore[method-assign]
    sync.start()
    time.sleep(seconds)
    sync.shutdown()
    sync.join(5)
    return steps


def test_pop_state_is_asked_for_every_second_between_the_copies_of_everything():
    steps = run_for(slave(Copies()), 3.6)
    assert steps[0] == "all" and steps.count("all") == 1  # everything every 5 s
    assert 2 <= steps.count("pop") <= 3


def test_a_slow_pop_copy_waits_long_enough_to_keep_its_share_of_the_time():
    steps = run_for(slave(Copies()), 3.6, pop_copy_s=0.2)  # 0.2 s: the next no sooner than 4 s later
    assert steps == ["all", "pop"]

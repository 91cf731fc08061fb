"""How a background service's failed pass is logged: the disk's refusal (the file system's, or RocksDB's I/O error
on it) on one line, a bug with its traceback; a failure that repeats is logged once, until a pass succeeds."""

import logging
import threading

import pytest

from broker.store.periodic_service import FailedPassLog, PeriodicService
from tests.cluster import wait_until
from tests.disk.rocksdb_refusal import rocksdb_disk_full

ROCKSDB_DISK_FULL = rocksdb_disk_full("/store/consumequeue_rocksdb/000008.sst")


class Failing(PeriodicService):
    def __init__(self, error: Exception, passes: int) -> None:
        super().__init__("failing-flush", 0.001)
        self.error, self.left = error, passes
        self.done = threading.Event()

    def run_once(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.done.set()
        raise type(self.error)(*self.error.args)  # a new one each pass, as a real failure is


@pytest.mark.parametrize("error, traceback", [
    (OSError(28, "No space left on device"), False),
    (ROCKSDB_DISK_FULL, False),
    (ValueError("a bug"), True),
])
def test_a_failed_pass_is_one_line_unless_it_is_a_bug(error: Exception, traceback: bool,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="broker.store.periodic_service")
    service = Failing(error, passes=5)
    service.start()
    try:
        wait_until(service.done.is_set, timeout=10, what="five failed passes")
    finally:
        service.shutdown()
    records = [r for r in caplog.records if "service_failed service=failing-flush" in r.getMessage()]
    assert len(records) == 1, [r.getMessage() for r in records]  # five passes failed alike: logged once
    assert (records[0].exc_info is not None) is traceback


def test_the_same_failure_after_a_good_pass_is_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    failures = FailedPassLog(logging.getLogger("test-loop"), "loop_failed loop=test")
    caplog.set_level(logging.ERROR, logger="test-loop")
    for _ in range(3):
        failures.failed(ROCKSDB_DISK_FULL)
    failures.succeeded()
    failures.failed(ROCKSDB_DISK_FULL)
    assert [r.getMessage() for r in caplog.records if r.name == "test-loop"] == \
        [f"loop_failed loop=test error={ROCKSDB_DISK_FULL!r}"] * 2

"""Stopping as a list of named steps, each run whatever became of the ones before.

A step that fails (a full disk refusing the last checkpoint, offsets write or RocksDB flush) is logged on one line
and the rest still run, so a stop flushes and closes what it can and the daemon exits 0. The caller learns which
steps failed: the message store then does not mark a clean shutdown, and its next start recovers as after a crash.
"""

import logging
from collections.abc import Callable, Iterable

from common.storage_refusal import is_storage_failure

ShutdownStep = tuple[str, Callable[[], object]]


def run_shutdown_steps(steps: Iterable[ShutdownStep], logger: logging.Logger) -> list[str]:
    """Run every step in order; returns the names of those that raised."""
    failed: list[str] = []
    for name, step in steps:
        try:
            step()
        except Exception as exc:
            failed.append(name)
            if is_storage_failure(exc):  # the disk said no: no traceback
                logger.error("shutdown_step_failed step=%s error=%r", name, exc)
            else:
                logger.exception("shutdown_step_failed step=%s", name)
    return failed

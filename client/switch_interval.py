"""The interpreter's GIL switch interval in a process that uses the SDK: 0.5 ms instead of Python's 5 ms.

The SDK's answers cross threads. A stream's reader thread settles the future a caller waits on, and a push
consumer's handlers run in a pool. A thread woken while another runs Python waits for the GIL until the runner
blocks or the switch interval forces it to let go: up to 5 ms by default, several round trips to a broker.
Measured on this project's machine kind (2 cores, 1 KiB messages, ``python -m bench --only cluster``, ten runs
beside ten at 5 ms, medians): pull consumption of batches of 64 went from 101k to 130k msgs/s and single async
sends from 2.2k to 2.8k a second. Batch produce fell from 43.6k to 40.1k (a probe of nine runs each saw 45.2k
against 45.0k; 0.2 ms cost it 10-15%) and send-to-receive p99 rose from 5.3 to 6.2 ms, both noisy.

The first client changes it once, and only when the process still has Python's default: an application that set
its own keeps it, and one that wants the default back sets it after creating its clients. A daemon that tunes
its own calls :func:`keep_switch_interval` first: the broker (no faster at 0.5 ms) and the proxy (whose sends
were 11-15% slower at 0.5 ms).
"""

import logging
import sys
import threading

log = logging.getLogger(__name__)

PYTHON_DEFAULT_S = 0.005
SDK_SWITCH_INTERVAL_S = 0.0005
_lock = threading.Lock()
_decided = False


def lower_switch_interval() -> None:
    """Called by every client as it is created; acts at most once per process."""
    global _decided
    with _lock:
        if _decided:
            return
        _decided = True
        if sys.getswitchinterval() == PYTHON_DEFAULT_S:
            sys.setswitchinterval(SDK_SWITCH_INTERVAL_S)
            log.info("switch_interval_lowered from_s=%s to_s=%s", PYTHON_DEFAULT_S, SDK_SWITCH_INTERVAL_S)


def keep_switch_interval() -> None:
    """The process keeps the switch interval it has: clients created later leave it alone."""
    global _decided
    with _lock:
        _decided = True

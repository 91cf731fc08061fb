"""Log lines for refused calls, at a bounded rate: anyone who can reach the proxy can send badly signed calls, and
one line each grew its log at their call rate (1.6 MB in 20 s from one client). The first ``per_window`` refusals
of a window are logged; the rest are counted, and the next line logged says how many were left out."""

import logging
import time
from collections.abc import Callable

WINDOW_S = 60.0
PER_WINDOW = 20


class RefusalLog:
    def __init__(self, logger: logging.Logger, per_window: int = PER_WINDOW, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._per_window = per_window
        self._window_s = window_s
        self._clock = clock
        self._window_start = -window_s
        self._logged = 0
        self._unlogged = 0  # refusals left out since the last line

    def refused(self, rpc: str, code: str, reason: str) -> bool:
        """Log one refusal unless this window's lines are spent; whether it was logged."""
        now = self._clock()
        if now - self._window_start >= self._window_s:
            self._window_start, self._logged = now, 0
        if self._logged >= self._per_window:
            self._unlogged += 1
            return False
        self._logged += 1
        unlogged, self._unlogged = self._unlogged, 0
        self._log.info("rpc_refused rpc=%s code=%s reason=%r unlogged_before=%d", rpc, code, reason, unlogged)
        return True

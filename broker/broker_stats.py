"""Message rates for runtime info: counters sampled into a short moving window."""

import threading
import time
from collections import deque


class BrokerStats:
    WINDOW_S = 10.0

    def __init__(self) -> None:
        self.put_count = 0
        self.get_count = 0
        self._samples: deque[tuple[float, int, int]] = deque()
        self._lock = threading.Lock()

    def _rate(self, index: int) -> float:
        now = time.monotonic()
        current = (now, self.put_count, self.get_count)
        with self._lock:
            self._samples.append(current)
            while self._samples and now - self._samples[0][0] > self.WINDOW_S:
                self._samples.popleft()
            first = self._samples[0]
        elapsed = now - first[0]
        return (current[index] - first[index]) / elapsed if elapsed > 0 else 0.0

    def put_tps(self) -> float:
        return self._rate(1)

    def get_tps(self) -> float:
        return self._rate(2)

"""Message rates for runtime info: counters sampled into a short moving window."""

import threading
import time
from collections import deque


class BrokerStats:
    WINDOW_S = 10.0
    KEY_WINDOW_S = 10

    def __init__(self) -> None:
        self.put_count = 0
        self.get_count = 0
        self._samples: deque[tuple[float, int, int]] = deque()
        self._lock = threading.Lock()
        self.totals: dict[tuple[str, str], int] = {}
        self._buckets: deque[tuple[int, dict[tuple[str, str], int]]] = deque()

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

    # -- per topic (sends) and per (topic, group) (pulled messages): totals and a per-second rate -------------
    def count(self, key: tuple[str, str], n: int) -> None:
        """``n`` messages for ``key``: (topic, "") a send, (topic, group) a pull."""
        if n <= 0:
            return
        second = int(time.monotonic())
        with self._lock:
            self.totals[key] = self.totals.get(key, 0) + n
            if not self._buckets or self._buckets[-1][0] != second:
                self._buckets.append((second, {}))
                while self._buckets and self._buckets[0][0] <= second - self.KEY_WINDOW_S - 1:
                    self._buckets.popleft()
            bucket = self._buckets[-1][1]
            bucket[key] = bucket.get(key, 0) + n

    def key_rates(self) -> dict[tuple[str, str], float]:
        """Messages a second per key over the last ``KEY_WINDOW_S`` seconds (the current one included)."""
        now = int(time.monotonic())
        out: dict[tuple[str, str], float] = {}
        with self._lock:
            for second, bucket in self._buckets:
                if now - self.KEY_WINDOW_S < second <= now:  # the current second counts as it goes
                    for key, n in bucket.items():
                        out[key] = out.get(key, 0.0) + n / self.KEY_WINDOW_S
        return out

    def put_tps(self) -> float:
        return self._rate(1)

    def get_tps(self) -> float:
        return self._rate(2)

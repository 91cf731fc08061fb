"""Message rates for runtime info and statsAll: per-second buckets of the messages each key moved.

Sends count per (topic, ""), pulls and POP deliveries per (topic, group). ``putTps`` and ``getTps`` are sums of
the same buckets (upstream's putTps and getTransferedTps: messages stored and messages handed out a second), so
they read right on a first query and after any silence (a rate sampled only when asked knew neither)."""

import threading
import time
from collections import deque

Key = tuple[str, str]  # (topic, "") for sends, (topic, group) for pulls and pops


class BrokerStats:
    KEY_WINDOW_S = 10

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.totals: dict[Key, int] = {}
        self._buckets: deque[tuple[int, dict[Key, int]]] = deque()

    # -- per topic (sends) and per (topic, group) (messages handed out): totals and a per-second rate --------
    def count(self, key: Key, n: int) -> None:
        """``n`` messages for ``key``: (topic, "") a send, (topic, group) a pull or a pop."""
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

    def totals_by_topic(self) -> dict[str, dict[str, int]]:
        """Messages since boot, per topic then group ("" for sends)."""
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            for (topic, group), n in self.totals.items():
                out.setdefault(topic, {})[group] = n
        return out

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's keys (the topic made again counts from 0, and deleted topics do not pile up)."""
        self._forget(0, topic)

    def forget_group(self, group: str) -> None:
        """A deleted group's keys, as a deleted topic's."""
        self._forget(1, group)

    def _forget(self, part: int, name: str) -> None:
        """The keys whose ``part`` (0: topic, 1: group) is ``name``."""
        with self._lock:
            for key in [k for k in self.totals if k[part] == name]:
                del self.totals[key]
            for _second, bucket in self._buckets:
                for key in [k for k in bucket if k[part] == name]:
                    del bucket[key]

    def key_rates(self) -> dict[Key, float]:
        """Messages a second per key over the last ``KEY_WINDOW_S`` seconds (the current one included)."""
        now = int(time.monotonic())
        out: dict[Key, float] = {}
        with self._lock:
            for second, bucket in self._buckets:
                if now - self.KEY_WINDOW_S < second <= now:  # the current second counts as it goes
                    for key, n in bucket.items():
                        out[key] = out.get(key, 0.0) + n / self.KEY_WINDOW_S
        return out

    def put_tps(self) -> float:
        """Messages stored by sends a second."""
        return sum(rate for (_topic, group), rate in self.key_rates().items() if not group)

    def get_tps(self) -> float:
        """Messages handed out to consumers (pulls and pops) a second; empty pulls move nothing."""
        return sum(rate for (_topic, group), rate in self.key_rates().items() if group)

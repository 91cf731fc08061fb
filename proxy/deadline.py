"""How long a v2 client still waits for its call (gRPC's ``time_remaining``): what the proxy may spend on the brokers
for it. A call to a broker that would outlast it is answered too late to matter, and holds what it holds meanwhile."""

import time
from dataclasses import dataclass

# A failure is answered this long before the client's deadline, so that the answer reaches it in time.
ANSWER_MARGIN_S = 0.25


@dataclass(frozen=True, slots=True)
class Deadline:
    at: float | None  # time.monotonic() by which the client gives up; None: it named no deadline

    @classmethod
    def after(cls, time_remaining_s: float | None) -> "Deadline":
        return cls(None if time_remaining_s is None else time.monotonic() + time_remaining_s)

    def left_s(self) -> float | None:
        """Seconds until the client gives up (negative once it has); None without a deadline."""
        return None if self.at is None else self.at - time.monotonic()

    def cap(self, timeout_s: float, margin_s: float = ANSWER_MARGIN_S) -> float:
        """``timeout_s``, cut to end ``margin_s`` before the client gives up (0 or less: no time for a call)."""
        left = self.left_s()
        return timeout_s if left is None else min(timeout_s, left - margin_s)

    def wait_s(self, margin_s: float = ANSWER_MARGIN_S) -> float | None:
        """How long a wait for the client may last: until ``margin_s`` before its deadline (None: no deadline)."""
        left = self.left_s()
        return None if left is None else max(0.0, left - margin_s)


NO_DEADLINE = Deadline(None)

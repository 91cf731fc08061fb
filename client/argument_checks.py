"""The SDK's checks of a caller's numbers, before anything is sent: a wrong one is an MQClientError naming the
argument, not a TypeError from deep in a call, a protobuf range error, or a deadline that never comes (NaN)."""

import math

from client.errors import MQClientError
from common.wait_limits import MAX_SUSPEND_MS

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def checked_int(name: str, value: object, low: int, high: int) -> int:
    """``value`` if it is an integer in ``low..high``; else MQClientError naming both."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise MQClientError(f"{name} must be an integer in {low}..{high}, not {value!r}")
    if not low <= value <= high:
        raise MQClientError(f"{name} {value} is outside {low}..{high}")
    return value


def held_s(wait_ms: int) -> float:
    """How long a broker may hold a long poll asked to wait ``wait_ms``, in seconds: what a call's deadline adds
    (a wait asked beyond the longest any broker holds gave a stopped broker's call an hour)."""
    return min(wait_ms, MAX_SUSPEND_MS) / 1000


def checked_timeout_ms(name: str, value: object, zero_allowed: bool = False) -> float:
    """A timeout given in milliseconds, in seconds: a finite number above 0 (or 0 too, when ``zero_allowed``). A
    client made with 0, a negative one, NaN or a string failed every call with DEADLINE_EXCEEDED naming none, or
    raised TypeError."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
            or (value == 0 and not zero_allowed)):
        raise MQClientError(f"{name} must be a number of milliseconds {'>= 0' if zero_allowed else 'above 0'}, "
                            f"not {value!r}")
    return value / 1000

"""``messageDelayLevel``: upstream's delay levels, e.g. ``"1s 5s 10s 30s 1m ... 2h"``, level N = the Nth entry."""

import re

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DEFAULT_TIMER_MAX_DELAY_SEC = 259_200  # timerMaxDelaySec: 3 days, as upstream
UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL = re.compile(r"([0-9]{1,9})([smhd])")


def parse_delay_levels(raw: str) -> tuple[int, ...]:
    """Milliseconds of each level (index 0 = level 1). Raises ValueError saying which entry is wrong (the
    broker.conf loader adds the key's name)."""
    entries = raw.split()
    if not entries:
        raise ValueError("no delay levels: expected e.g. '1s 5s 10s 30s 1m 2h'")
    levels = []
    for n, entry in enumerate(entries, 1):
        m = _LEVEL.fullmatch(entry)
        if m is None:
            raise ValueError(f"level {n} {entry!r} is not a count and a unit (s, m, h or d), e.g. 10s")
        levels.append(int(m.group(1)) * UNIT_MS[m.group(2)])
    return tuple(levels)

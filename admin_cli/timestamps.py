"""Points in time on the command line, as RocketMQ's mqadmin takes them (resetOffsetByTime -s): epoch
milliseconds, ``now``, or ``yyyy-MM-dd#HH:mm:ss:SSS`` in local time (upstream's UtilAll.YYYY_MM_DD_HH_MM_SS_SSS
pattern, which it parses in the JVM's time zone)."""

import re
import time
from collections.abc import Callable
from datetime import datetime

import click

UPSTREAM_PATTERN = "yyyy-MM-dd#HH:mm:ss:SSS"
_UPSTREAM = re.compile(r"(\d{4})-(\d{2})-(\d{2})#(\d{2}):(\d{2}):(\d{2}):(\d{3})")
MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: anything larger is a typo, not a time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_timestamp(raw: str, clock: Callable[[], int] = now_ms) -> int:
    """Epoch milliseconds of ``raw``; ValueError saying which forms are accepted."""
    text = raw.strip()
    if text.lower() == "now":
        return clock()
    if text.isascii() and text.isdigit():
        value = int(text)
        if value > MAX_EPOCH_MS:
            raise ValueError(f"{raw!r} is too large for epoch milliseconds")
        return value
    match = _UPSTREAM.fullmatch(text)
    if match is None:
        raise ValueError(f"{raw!r} is not epoch milliseconds, 'now' or {UPSTREAM_PATTERN}")
    year, month, day, hour, minute, second, millis = (int(g) for g in match.groups())
    try:
        local = datetime(year, month, day, hour, minute, second)  # naive: local time, as upstream
    except ValueError as exc:
        raise ValueError(f"{raw!r} is not a date: {exc}") from None
    try:
        seconds = int(local.timestamp())
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError(f"{raw!r} is out of range: {exc}") from None
    if seconds < 0:
        raise ValueError(f"{raw!r} is before 1970-01-01")
    return seconds * 1000 + millis


class TimestampParam(click.ParamType):
    """A click parameter of :func:`parse_timestamp`: a bad value is a usage error naming the flag."""

    name = "timestamp"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return parse_timestamp(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


TIMESTAMP = TimestampParam()

"""Which messages are delayed, until when, and the properties that route them through the timer topic.

One mechanism for both kinds: a delay level (``DELAY``) becomes the broker's wall clock at send plus the level's
delay, an absolute time (``TIMER_DELIVER_MS``) stays what it is, and either is stored in the timer topic with
``REAL_TOPIC``, ``REAL_QID`` and ``TIMER_OUT_MS`` (the due time) added, and for a static topic ``REAL_LOGIC_QID``
(its logic queue: the delivery finds the queue's leader by it, should the queue move while the message waits).
The send processor and the consumer groups' retry path (sendMessageBack) both route through here.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from common.message_properties import (
    DELAY_NEEDLE,
    PROPERTY_DELAY,
    PROPERTY_REAL_LOGIC_QID,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    REAL_LOGIC_QID_NEEDLE,
    REAL_QID_NEEDLE,
    REAL_TOPIC_NEEDLE,
    TIMER_DELIVER_MS_NEEDLE,
    TIMER_OUT_MS_NEEDLE,
    find_property,
    strip_properties,
)
from common.request_error import RequestError, require

_SEP = PROPERTY_SEPARATOR.encode()
_ROUTING = frozenset(p.encode() for p in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID, PROPERTY_REAL_LOGIC_QID,
                                           PROPERTY_TIMER_OUT_MS))
# What a delivered message no longer carries: it is an ordinary message of its topic again.
_TIMER_ONLY = _ROUTING | {PROPERTY_DELAY.encode(), PROPERTY_TIMER_DELIVER_MS.encode()}
# Timer keys pack the due time in 8 bytes whose first is zero (any time before the year 2 million): the timer
# store keeps its metadata under keys starting 0xff, after every timer.
MAX_DUE_MS = (1 << 56) - 1


def is_delayed_needle_in(raw: bytes) -> bool:
    """The cheap first test over a batch's property blocks joined: False means no message of it is delayed; True
    may be another property's name ending so (``XDELAY``), so each message is then checked with :meth:`due_ms`."""
    return DELAY_NEEDLE in raw or TIMER_DELIVER_MS_NEEDLE in raw


@dataclass(frozen=True, slots=True)
class TimerTarget:
    """Where and when a timer-topic record is delivered, read back from its properties."""

    topic: str
    queue_id: int  # the queue of this broker it was sent to
    due_ms: int
    logic_queue_id: int | None = None  # a static topic's: the logic queue


class DelayRouter:
    def __init__(self, level_delays_ms: Sequence[int], max_delay_ms: int) -> None:
        assert level_delays_ms, "at least one delay level"
        self.level_delays_ms = tuple(level_delays_ms)
        self.max_delay_ms = max_delay_ms

    @property
    def max_level(self) -> int:
        return len(self.level_delays_ms)

    def due_ms(self, raw_properties: bytes, now_ms: int) -> int | None:
        """When the message with these wire properties is due (epoch ms, never before ``now_ms``: a time in the
        past is due at once), or None when it is not delayed. Raises :class:`RequestError` saying what is wrong
        for a level out of range, a time too far ahead, both set, or a value that is not a number."""
        level_raw = find_property(raw_properties, DELAY_NEEDLE) if DELAY_NEEDLE in raw_properties else None
        at_raw = (find_property(raw_properties, TIMER_DELIVER_MS_NEEDLE)
                  if TIMER_DELIVER_MS_NEEDLE in raw_properties else None)
        level = _integer(PROPERTY_DELAY, level_raw) if level_raw is not None else 0
        if at_raw is not None:
            require(level == 0, f"a message has a delay level ({level}) or a delivery time, not both")
            at = _integer(PROPERTY_TIMER_DELIVER_MS, at_raw)
            ahead = at - now_ms
            require(ahead <= self.max_delay_ms,
                    f"delivery time {at} is {ahead / 1000:.0f} s ahead, beyond timerMaxDelaySec="
                    f"{self.max_delay_ms // 1000}: at most {self.max_delay_ms // 1000} s in the future")
            return max(at, now_ms)
        if level == 0:
            return None
        require(1 <= level <= self.max_level,
                f"delay level {level} is out of range: this broker has levels 1..{self.max_level} "
                f"(messageDelayLevel; 0 means not delayed)")
        return now_ms + self.level_delays_ms[level - 1]

    def level_delay(self, raw_properties: bytes) -> int | None:
        """The delay in ms of a timer-topic record delayed by a level (a delay level send, a consumer's retry);
        None for one delayed to a time, or whose level is not a number."""
        if DELAY_NEEDLE not in raw_properties or TIMER_DELIVER_MS_NEEDLE in raw_properties:
            return None
        level = find_property(raw_properties, DELAY_NEEDLE)
        return self.delay_of_level(int(level)) if level is not None and level.isdigit() else None

    def delay_of_level(self, level: int) -> int:
        """The delay of ``level`` in ms, the level clamped to 1..max_level (as upstream does for retries)."""
        return self.level_delays_ms[min(max(level, 1), self.max_level) - 1]

    def timer_properties(self, raw_properties: bytes, real_topic: str, real_queue_id: int, due_ms: int,
                         logic_queue_id: int | None = None) -> bytes:
        """The wire properties of the timer-topic record: the message's own (any routing properties it carried
        replaced) with where and when to deliver it."""
        assert 0 <= due_ms <= MAX_DUE_MS, f"due time {due_ms} out of range"
        if REAL_TOPIC_NEEDLE in raw_properties or REAL_QID_NEEDLE in raw_properties \
                or TIMER_OUT_MS_NEEDLE in raw_properties or REAL_LOGIC_QID_NEEDLE in raw_properties:
            raw_properties = strip_properties(raw_properties, _ROUTING)
        elif raw_properties and not raw_properties.endswith(_SEP):
            raw_properties += _SEP
        logic = f"{PROPERTY_REAL_LOGIC_QID}\x01{logic_queue_id}\x02" if logic_queue_id is not None else ""
        return raw_properties + (f"{PROPERTY_REAL_TOPIC}\x01{real_topic}\x02{PROPERTY_REAL_QID}\x01{real_queue_id}"
                                 f"\x02{logic}{PROPERTY_TIMER_OUT_MS}\x01{due_ms}\x02").encode()


def timer_target(raw_properties: bytes) -> TimerTarget | None:
    """Where and when a timer-topic record goes; None when its routing properties are missing or bad (only the
    broker writes the timer topic, so that is a record of another version or a bug: the caller logs it)."""
    topic = find_property(raw_properties, REAL_TOPIC_NEEDLE)
    qid = find_property(raw_properties, REAL_QID_NEEDLE)
    due = find_property(raw_properties, TIMER_OUT_MS_NEEDLE)
    if not topic or qid is None or due is None or not _digits(qid) or not _digits(due):
        return None
    logic = find_property(raw_properties, REAL_LOGIC_QID_NEEDLE)
    logic_queue_id = int(logic) if logic is not None and _digits(logic) else None
    return TimerTarget(topic.decode(errors="replace"), int(qid), int(due), logic_queue_id)


def delivered_properties(raw_properties: bytes) -> bytes:
    """The properties of the message delivered from a timer-topic record: without the delay and routing ones."""
    return strip_properties(raw_properties, _TIMER_ONLY)


def _digits(raw: bytes) -> bool:
    return raw.isdigit() and len(raw) <= 18  # bytes.isdigit is ASCII only


def _integer(name: str, raw: bytes) -> int:
    digits = raw.removeprefix(b"-")
    if digits.isdigit() and not _digits(digits):  # (a time in nanoseconds, where milliseconds were meant)
        raise RequestError(f"property {name} {raw[:40].decode(errors='replace')!r} is out of range: more than 18 "
                           "digits (times are epoch milliseconds)")
    if not _digits(digits):
        raise RequestError(f"property {name} {raw[:40].decode(errors='replace')!r} is not an integer")
    return int(raw)

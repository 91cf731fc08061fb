"""Level-delayed timers after the broker's wall clock stepped back (an NTP step, an operator fixing a fast clock).

A delay level is stored as a due time: the wall clock at the send plus the level's delay. After the clock stepped
back by an hour, every level timer stored before the step waited an hour more, while those sent after it went out
on time (order inverted too). As upstream's ``correctDeliverTimestamp`` does for its level queues, a level timer
due later than its level's delay from now is delivered now: the step is noticed by a delivery pass (the clock
below the highest it read), and the timers it affects (due up to that highest plus the longest level) are found
once. A consumer's retry is a level timer too (it carries its level). A time given by the producer
(``deliver_at_ms``) is not a delay: it stays due when it says. A step that happened while the broker was down is
not noticed."""

import logging
from collections import deque

from broker.timer.delay_router import DelayRouter
from broker.timer.timer_message_store import TimerMessageStore, due_of_key
from common.message_codec import decode_record

log = logging.getLogger(__name__)

STEP_TOLERANCE_MS = 1000  # a clock read this much below the highest: stepped back


class ClockStepWatch:
    def __init__(self, timers: TimerMessageStore, router: DelayRouter, now_ms: int) -> None:
        self.timers = timers
        self.router = router
        self._highest = now_ms
        self._early: deque[bytes] = deque()  # keys of level timers to deliver now, found at the last step

    def early(self, now_ms: int, limit: int) -> list[bytes]:
        """Up to ``limit`` keys of level timers that are not due and are to be delivered now."""
        if now_ms < self._highest - STEP_TOLERANCE_MS:
            self._find(now_ms)
        self._highest = max(self._highest, now_ms)
        return [self._early.popleft() for _ in range(min(limit, len(self._early)))]

    def give_back(self, keys: list[bytes]) -> None:
        """Keys :meth:`early` gave that could not be delivered: given again first."""
        self._early.extendleft(reversed(keys))

    def _find(self, now_ms: int) -> None:
        horizon = self._highest + max(self.router.level_delays_ms)
        found = 0
        for key, raw in self.timers.pending_between(now_ms + 1, horizon):
            delay = self.router.level_delay(decode_record(raw, verify_crc=False).raw_properties)
            if delay is not None and due_of_key(key) > now_ms + delay + STEP_TOLERANCE_MS:
                self._early.append(key)
                found += 1
        log.warning("timer_clock_stepped_back by_ms=%d level_timers_due_now=%d: delivered at once, as due within "
                    "their level's delay", self._highest - now_ms, found)
        self._highest = now_ms

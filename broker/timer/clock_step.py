"""Level-delayed timers after the broker's wall clock stepped back (an NTP step, an operator fixing a fast clock).

A delay level is stored as a due time: the wall clock at the send plus the level's delay. After the clock stepped
back by an hour, every level timer stored before the step waited an hour more, while those sent after it went out
on time (order inverted too). Upstream's ``correctDeliverTimestamp`` delivers a level message due later than its
level's delay from now at once, which is early by up to its whole delay; here such a timer is due its level's
delay from when the step was noticed instead: never early (it was sent before), and at most that much late. The
step is noticed by a delivery pass (the clock below the highest it read); the timers it affects (due up to that
highest plus the longest level) are found once, and their new due times are kept in memory: after a restart they
are due when stored again, as after a step while the broker was down. A consumer's retry is a level timer too
(it carries its level). A time given by the producer (``deliver_at_ms``) stays due when it says."""

import heapq
import logging

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
        self._due: dict[bytes, int] = {}  # key of a level timer a step left late -> when it is due now
        self._order: list[tuple[int, bytes]] = []  # (due, key), a heap; entries _due no longer holds are stale

    def due(self, now_ms: int) -> list[bytes]:
        """Keys of level timers due now by their corrected time (earliest first), not due by their stored one.
        Taken out of the watch: :meth:`give_back` those not delivered."""
        if now_ms < self._highest - STEP_TOLERANCE_MS:
            self._find(now_ms)
        self._highest = max(self._highest, now_ms)
        keys = []
        while self._order and self._order[0][0] <= now_ms:
            due, key = heapq.heappop(self._order)
            if self._due.get(key) == due:
                del self._due[key]
                keys.append(key)
        return keys

    def give_back(self, keys: list[bytes], now_ms: int) -> None:
        """Keys :meth:`due` gave that were not delivered: due again at once."""
        for key in keys:
            self._correct(key, now_ms)

    def _correct(self, key: bytes, due_ms: int) -> None:
        if due_ms < self._due.get(key, due_ms + 1):
            self._due[key] = due_ms
            heapq.heappush(self._order, (due_ms, key))

    def _find(self, now_ms: int) -> None:
        horizon = self._highest + max(self.router.level_delays_ms)
        found = 0
        for key, raw in self.timers.pending_between(now_ms + 1, horizon):
            delay = self.router.level_delay(decode_record(raw, verify_crc=False).raw_properties)
            if delay is not None and due_of_key(key) > now_ms + delay + STEP_TOLERANCE_MS:
                self._correct(key, now_ms + delay)
                found += 1
        log.warning("timer_clock_stepped_back by_ms=%d level_timers_corrected=%d: each due its level's delay from "
                    "now", self._highest - now_ms, found)
        self._highest = now_ms

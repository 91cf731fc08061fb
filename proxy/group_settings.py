"""A consumer group's settings as the brokers keep them (its subscription group config): whether it is FIFO
(``consumeMessageOrderly``) and how often a message is retried (``retryMaxTimes``). The settings reply tells v2
consumers both; read from the masters through the SDK's admin, in a worker thread, and cached for a while."""

import asyncio
import logging
import time
from dataclasses import dataclass

from client.admin import Admin
from client.errors import MQClientError

log = logging.getLogger(__name__)

DEFAULT_RETRY_MAX_TIMES = 16  # a group the brokers do not know yet: SubscriptionGroupConfig's default
SWEEP_AT = 1024


@dataclass(frozen=True, slots=True)
class GroupSettings:
    fifo: bool = False
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES


class GroupSettingsService:
    def __init__(self, admin: Admin, cache_s: float) -> None:
        self.admin = admin
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, GroupSettings]] = {}
        self._next_sweep = SWEEP_AT  # the cache's size at which expired entries are dropped next

    async def get(self, group: str) -> GroupSettings:
        cached = self._cache.get(group)
        if cached is not None and time.monotonic() - cached[0] < self.cache_s:
            return cached[1]
        try:
            configs = await asyncio.to_thread(self.admin.subscription_group, group)
        except MQClientError as exc:  # the defaults, not a failed handshake: consumption works without them
            log.warning("group_settings_unavailable group=%s reason=%r", group, str(exc))
            return cached[1] if cached is not None else GroupSettings()
        settings = GroupSettings()
        if configs:
            # The masters agree unless an update is half done; FIFO wins then (order kept is the safer side).
            settings = GroupSettings(any(c.consume_message_orderly for c in configs.values()),
                                     max(c.retry_max_times for c in configs.values()))
        now = time.monotonic()
        if len(self._cache) >= self._next_sweep:  # expired entries serve nobody: clients naming a new group each
            self._cache = {g: e for g, e in self._cache.items() if now - e[0] < self.cache_s}  # run grew it for good
            self._next_sweep = max(SWEEP_AT, 2 * len(self._cache))
        self._cache[group] = (now, settings)
        return settings

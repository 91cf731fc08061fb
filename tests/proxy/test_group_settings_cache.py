"""mqproxy's cache of consumer groups' settings forgets expired entries: it kept one for every group any client ever
named in its settings (about 300 bytes each, for good; a client naming a new group each run grew it without bound:
the leaks review). Live entries stay."""

import asyncio
from typing import cast

from client.admin import Admin
from proxy.group_settings import SWEEP_AT, GroupSettingsService


class Brokers:
    """No group is known to them: every group gets the defaults."""

    def subscription_group(self, group: str) -> dict:
        return {}


def _ask(service: GroupSettingsService, groups: int) -> None:
    async def ask() -> None:
        for i in range(groups):
            await service.get(f"group-{i}")

    asyncio.run(ask())


def test_expired_groups_are_forgotten() -> None:
    service = GroupSettingsService(cast(Admin, Brokers()), cache_s=0.0)
    _ask(service, 3 * SWEEP_AT)
    assert len(service._cache) <= SWEEP_AT


def test_live_groups_are_kept() -> None:
    service = GroupSettingsService(cast(Admin, Brokers()), cache_s=600.0)
    _ask(service, 3 * SWEEP_AT)
    assert len(service._cache) == 3 * SWEEP_AT

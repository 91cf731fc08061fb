"""``brokerRole``: a broker group's replicas in upstream's classic (static) mode."""

from enum import StrEnum


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"  # acknowledges sends once stored here; slaves follow behind
    SYNC_MASTER = "SYNC_MASTER"  # acknowledges sends once its slaves have them too
    SLAVE = "SLAVE"  # copies its master's commitlog; refuses writes

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE

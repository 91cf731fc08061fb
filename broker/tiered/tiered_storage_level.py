"""``tieredStorageLevel``: when reads are served from the second tier (RocketMQ's TieredStorageLevel)."""

from enum import StrEnum


class TieredStorageLevel(StrEnum):
    DISABLE = "DISABLE"  # never from the tier
    NOT_IN_DISK = "NOT_IN_DISK"  # when the local store no longer has the offset (its segments expired)
    NOT_IN_MEM = "NOT_IN_MEM"  # also when the message is in a local segment likely out of the page cache
    FORCE = "FORCE"  # whenever the tier has the offset

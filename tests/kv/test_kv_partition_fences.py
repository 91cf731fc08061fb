"""KvPartitionFences: a partition this broker no longer leads is read only once every write it took is applied (its
fence: the commitlog end when it was first seen unled); one it leads is never refused; a slave leads nothing."""

import pytest

from broker.kv.kv_partition_fences import KvPartitionFences
from common.refusal import Refusal
from common.response_code import ResponseCode


def test_an_unled_partition_waits_for_its_writes_and_a_led_one_never() -> None:
    end, applied = [100], [40]
    led: list[int] | None = [1]
    fences = KvPartitionFences("broker-a", lambda: led, lambda: end[0], lambda: applied[0])
    fences.check_applied(1)  # led: read at once
    with pytest.raises(Refusal) as refused:
        fences.check_applied(0)
    assert refused.value.code == ResponseCode.SYSTEM_BUSY and "applied 40 < 100" in refused.value.remark
    end[0] = 500  # later writes are other partitions': the fence stays where it was first seen
    applied[0] = 100
    fences.check_applied(0)
    led = None  # no mapping (yet): nothing to fence
    fences.check_applied(7)


def test_a_slave_leading_nothing_fences_every_partition_it_is_asked_for() -> None:
    """A slave answers an older item's read while its master is down; its copy of the mapping may still say it
    leads the partition (copied before the remap): it leads nothing, so the read waits for what it replicated."""
    fences = KvPartitionFences("broker-a", lambda: (), lambda: 300, lambda: 200)
    with pytest.raises(Refusal, match="applied 200 < 300"):
        fences.check_applied(2)

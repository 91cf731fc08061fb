"""The partitions of ``rmq_sys_KV`` this broker no longer leads (a remap moved their shard away), and where their
writes end in the commitlog: a partition is read as an older item of its shard's chain (by the new leader, which may
be this broker again after a move back) only once every write it took is applied. A write taken before the move
but applied after it (a slow flush or slave) was missed: two compare-and-sets "if absent" both succeeded, and the
later apply was hidden for good under the new leader's value.

The end is taken when the partition is first seen unled: it takes no write after the move, so every write it took
is below the commitlog's end then.
"""

from collections.abc import Callable, Collection

from common.kv_shard import KV_TOPIC
from common.refusal import Refusal
from common.response_code import ResponseCode


class KvPartitionFences:
    def __init__(self, broker_name: str, led_partitions: Callable[[], Collection[int] | None],
                 commit_log_end: Callable[[], int], applied_offset: Callable[[], int]) -> None:
        """``led_partitions``: the KV topic's physical queues this broker leads now (None: it holds no mapping)."""
        self.broker_name = broker_name
        self._led_partitions = led_partitions
        self._commit_log_end = commit_log_end
        self._applied_offset = applied_offset
        self._fences: dict[int, int] = {}

    def check_applied(self, partition: int) -> None:
        """Refusal (SYSTEM_BUSY: retried) while ``partition`` no longer led here has writes not yet applied."""
        fence = self._fence_of(partition)
        applied = self._applied_offset()
        if fence is not None and applied < fence:
            raise Refusal(ResponseCode.SYSTEM_BUSY, f"partition {partition} of {KV_TOPIC} on broker "
                          f"{self.broker_name} has writes taken before its shard moved that are not applied yet "
                          f"(applied {applied} < {fence}); retry")

    def _fence_of(self, partition: int) -> int | None:
        """Where ``partition``'s writes end in the commitlog, once this broker no longer leads it; None while it does
        (or holds no mapping)."""
        fence = self._fences.get(partition)
        if fence is None:
            led = self._led_partitions()
            if led is None or partition in led:
                return None
            fence = self._fences.setdefault(partition, self._commit_log_end())
        return fence

"""How a group's members split a topic's queues. Every member computes the same answer from the same sorted lists
(no coordination); a strategy is any function of this shape, so users can plug their own."""

from collections.abc import Callable, Sequence

from common.message_queue import MessageQueue

AllocateStrategy = Callable[[str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]


def allocate_averagely(client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]) -> list[MessageQueue]:
    """Upstream's AllocateMessageQueueAveragely: contiguous ranges of the sorted queues by the sorted client ids,
    the first ``len(queues) % len(client_ids)`` members one queue more; members beyond the queue count get none."""
    queues, client_ids = sorted(queues), sorted(client_ids)
    if client_id not in client_ids or not queues:
        return []
    index, n, members = client_ids.index(client_id), len(queues), len(client_ids)
    if n <= members:
        return [queues[index]] if index < n else []
    size, extra = divmod(n, members)
    start = index * size + min(index, extra)
    return queues[start:start + size + (1 if index < extra else 0)]

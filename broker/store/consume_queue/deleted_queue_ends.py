"""Where the queues of deleted topics ended, for the topic made again under the name.

A consumer may still hold an offset of the deleted topic's queue: a pull parked at the deletion, a push consumer's
position, a pull consumer's own bookkeeping. Its next pull asks for an offset past the new queue's end, which
moves a consumer to the end (a slave's or a new master's queue that lost its tail to a failover ends below what
its consumers saw: the end is right there). For a queue made again the end skips every message of it stored so
far: such an offset, one the deleted queue had reached, moves to the new queue's first message instead.

Kept in memory (the newest ``MAX_QUEUES`` queues deleted): after a restart a stale offset moves to the end again,
as before. Once the new queue passes the stale offset no store can tell it from the new queue's own.
"""

import threading
from collections import OrderedDict

MAX_QUEUES = 65_536


class DeletedQueueEnds:
    def __init__(self, max_queues: int = MAX_QUEUES) -> None:
        self._ends: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._max_queues = max_queues
        self._lock = threading.Lock()  # noted by dispatch, read by pulls

    def note(self, topic: str, ends: dict[int, int]) -> None:
        """``topic`` was deleted: its queues ended at ``ends`` (queue id -> max offset). An earlier deletion's
        higher end is kept (an offset of either life is stale)."""
        with self._lock:
            for queue_id, end in ends.items():
                key = (topic, queue_id)
                self._ends[key] = max(end, self._ends.pop(key, 0))
            while len(self._ends) > self._max_queues:
                self._ends.popitem(last=False)

    def reached(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether a deleted queue of this name reached ``offset`` (so an offset past the live queue's end may be
        one of the deleted queue's)."""
        return offset <= self._ends.get((topic, queue_id), -1)

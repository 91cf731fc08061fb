"""A store switched from ``storeType=default`` to ``defaultRocksDB``: the RocksDB consume queue starts empty and
is rebuilt by replaying the commitlog. A queue whose records all expired has nothing left to replay: it came back
at offset 0, its new messages took offsets its group had committed past (read by no one until they passed them),
and the group's pulls were refused as out of range. Such queues are carried over from the file consume queue as
bounds without units (``min = max``): their offsets go on where they were. Queues with records still in the
commitlog are rebuilt by the replay, from the file queue's first unit that is still readable."""

import logging
from pathlib import Path

from broker.store.consume_queue.file_consume_queue_store import FileConsumeQueueStore
from broker.store.consume_queue.rocksdb_consume_queue_store import QueueKey

log = logging.getLogger(__name__)


def expired_queue_ends(file_root: Path, file_size: int, commit_log_min: int) -> dict[QueueKey, int]:
    """The file consume queue's queues (under ``file_root``) whose last unit points below ``commit_log_min`` (or
    that hold none), with their max offsets."""
    if not file_root.is_dir():
        return {}
    files = FileConsumeQueueStore(file_root, file_size, lambda _offset: 0)
    files.load()
    try:
        ends = {}
        for (topic, queue_id), end in files.queue_max_offsets().items():
            last = files.read_units(topic, queue_id, end - 1, 1) if end > 0 else []
            if end > 0 and (not last or last[0][0] < commit_log_min):
                ends[(topic, queue_id)] = end
        return ends
    finally:
        files.shutdown()

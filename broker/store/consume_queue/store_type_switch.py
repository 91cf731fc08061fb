"""A store switched from ``storeType=default`` to ``defaultRocksDB``: the RocksDB consume queue starts empty and
is rebuilt by replaying the commitlog. A queue whose records all expired has nothing left to replay: it came back
at offset 0, its new messages took offsets its group had committed past (read by no one until they passed them),
and the group's pulls were refused as out of range. Such queues are carried over from the file consume queue as
bounds without units (``min = max``): their offsets go on where they were. Queues with records still in the
commitlog are rebuilt by the replay, from the file queue's first unit that is still readable.

Once, marked in the file queue's directory (``CARRIED_OVER``) when done: not again from files that went stale
since (a RocksDB consume queue removed later to be rebuilt would take their old ends over the records sent since),
and again at the next start when one stopped before it was done (the RocksDB directory exists by then)."""

import logging
from pathlib import Path

from broker.store.consume_queue.file_consume_queue_store import FileConsumeQueueStore
from broker.store.consume_queue.rocksdb_consume_queue_store import QueueKey
from common.atomic_file import write_file_atomically

log = logging.getLogger(__name__)

CARRIED_OVER = ".carried_over_to_rocksdb"


def needs_carry_over(file_root: Path) -> bool:
    return file_root.is_dir() and not (file_root / CARRIED_OVER).exists()


def mark_carried_over(file_root: Path) -> None:
    write_file_atomically(file_root / CARRIED_OVER, b"the queues whose records expired were carried over\n")


def expired_queue_ends(file_root: Path, file_size: int, commit_log_min: int) -> dict[QueueKey, int]:
    """The file consume queue's queues (under ``file_root``) whose last unit points below ``commit_log_min`` (or
    that hold none), with their max offsets."""
    files = FileConsumeQueueStore(file_root, file_size, lambda _offset: 0)
    files.load()
    try:
        ends = {}
        for (topic, queue_id), end in files.queue_max_offsets().items():
            if end <= 0:
                continue
            last = files.read_units(topic, queue_id, end - 1, 1)
            if not last or last[0][0] < commit_log_min:
                ends[(topic, queue_id)] = end
        return ends
    finally:
        files.shutdown()

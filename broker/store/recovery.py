"""Start-up recovery: find the commitlog's true end, cut what lies past it, re-dispatch the rest.

A clean-shutdown marker (the ``abort`` file exists while the store runs) tells a normal start from an
abnormal one. Normal: a structural scan of the last segment. Abnormal: every record from the start of the
segment holding the flushed checkpoint is checked for structure and CRC; the first bad one ends the log, and an
append a crash left part-written above the checkpoint is cut whole (``CommitLog.scan_valid_end``). An append larger
than a segment (only with segments below maxMessageSize) that began before the checkpoint's segment is not seen
whole: its first part stays.
"""

import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

ABORT_FILE = "abort"


def recover(store: "MessageStore") -> None:
    root = Path(store.config.store_path_root_dir)
    abort = root / ABORT_FILE
    abnormal = abort.exists()
    commit_log = store.commit_log
    commit_log.mapped_file_queue.load()
    for dispatcher in store.dispatchers:
        dispatcher.load()
    store.carry_over_file_queues()
    checkpoints = {d.name: d.checkpoint() for d in store.dispatchers}
    flushed = store.flushed_checkpoint.read() or 0
    lowest = min([flushed, *checkpoints.values()])
    if abnormal:
        # From the start of the segment holding the flushed checkpoint: bytes below it were fsynced before it
        # was written, so only what follows can be torn. (A dispatcher checkpoint says what was dispatched,
        # not that the bytes are intact: it does not bound the check; it only says where replay starts.)
        segment = commit_log.mapped_file_queue.find(flushed)
        end = commit_log.scan_valid_end(segment.file_from_offset if segment else flushed, verify_crc=True,
                                        written_whole_below=flushed)
    else:
        last = commit_log.mapped_file_queue.last()
        end = commit_log.scan_valid_end(last.file_from_offset if last else 0, verify_crc=False,
                                        written_whole_below=flushed)
    commit_log.recover_to(end)
    if store.keeps_confirm_checkpoint:
        commit_log.cap_recovered_confirm(store.confirm_checkpoint.read() or 0)
    commit_log.mapped_file_queue.flush()
    for dispatcher in store.dispatchers:
        dispatcher.truncate_dirty(end)
    reput_from = min(lowest, end)
    store.reput.start_from(reput_from)
    # All of it was on disk before this start (damaged_range.py); up to the confirm offset only, which a controller-
    # mode replica keeps and which may end inside a record: that one waits to be confirmed, it is no damage.
    if all(d.takes_holes for d in store.dispatchers):
        store.reput.damage_skipped_below = min(end, commit_log.confirm_offset)
        store.reput.recovered_end = end
    try:
        replayed = store.reput.do_reput()
    except Exception:  # e.g. a full disk: fail-stopped and logged; start anyway, serving what was dispatched
        replayed = -1
    finally:
        store.reput.damage_skipped_below = 0
    if commit_log.min_offset() > 0:  # a queue's min moved by expiry may not have been made durable before a crash
        store.correct_min_offsets(commit_log.min_offset())
    for name, checkpoint in checkpoints.items():
        if checkpoint < commit_log.min_offset() and name in {d.name for d in store.dispatchers if d.keeps_commit_log}:
            log.error("dispatcher_gap dispatcher=%s checkpoint=%d commitlog_min=%d: the records between were deleted "
                      "before it applied them (it was off, or its store was replaced); its state misses them", name,
                      checkpoint, commit_log.min_offset())
    commit_log.topic_queue_table = store.consume_queue_store.queue_max_offsets()
    log.info(
        "store_recovered mode=%s commitlog_min=%d commitlog_end=%d confirm=%d reput_from=%d replayed=%d "
        "checkpoints=%s damaged_skipped=%s", "abnormal" if abnormal else "normal", commit_log.min_offset(), end,
        commit_log.confirm_offset, reput_from, replayed, checkpoints, store.reput.skipped_damage or "none",
    )
    root.mkdir(parents=True, exist_ok=True)
    abort.touch()


def mark_clean_shutdown(root: Path) -> None:
    (root / ABORT_FILE).unlink(missing_ok=True)

"""The dispatch chain: order, confirm offset, checkpoints, re-dispatch after restart."""

from pathlib import Path

from broker.store.config import FlushDiskType
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.store.message_store import MessageStore
from tests.store.conftest import store_config


class RecordingDispatcher(CommitLogDispatcher):
    name = "recording"

    def __init__(self, checkpoint: int = 0) -> None:
        self.seen: list[tuple[str, int, int, int]] = []
        self.ends: list[int] = []
        self._checkpoint = checkpoint

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        self.seen.extend((r[0], r[1], r[2], r[3]) for r in requests)
        self.ends.append(end_offset)

    def checkpoint(self) -> int:
        return self._checkpoint


def _open(root: Path, dispatcher: CommitLogDispatcher, store_type: str, **overrides: object) -> MessageStore:
    store = MessageStore(store_config(root, store_type=store_type, **overrides))
    store.register_dispatcher(dispatcher)
    store.start()
    return store


def test_records_arrive_in_commitlog_order_never_past_confirm(tmp_path: Path, store_type: str):
    rec = RecordingDispatcher()
    store = _open(tmp_path, rec, store_type, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    results = [store.put_messages("ChainT", i % 3, [b"x" * 500] * 3, [b""] * 3) for i in range(100)]
    assert store.wait_dispatched(results[-1].append.end_offset)
    physical = [p for r in results for p in r.append.physical_offsets]
    assert [s[3] for s in rec.seen] == physical
    assert max(rec.ends) <= store.commit_log.confirm_offset <= store.commit_log.flushed_offset()
    assert rec.ends == sorted(rec.ends)
    store.shutdown()


def test_restart_redispatches_from_the_lowest_checkpoint(tmp_path: Path, store_type: str):
    rec = RecordingDispatcher()
    store = _open(tmp_path, rec, store_type)
    r = None
    for i in range(50):
        r = store.put_messages("ReT", 0, [f"{i}".encode()], [b""])
    store.wait_dispatched(r.append.end_offset)
    middle = store.put_messages("ReT", 0, [b"mid"], [b""]).physical_offset
    for i in range(50):
        r = store.put_messages("ReT", 0, [f"{i}".encode()], [b""])
    store.wait_dispatched(r.append.end_offset)
    store.shutdown()

    again = RecordingDispatcher(checkpoint=middle)  # durable only up to the middle
    store = _open(tmp_path, again, store_type)
    assert again.seen and again.seen[0][3] == middle
    assert [s[2] for s in again.seen] == list(range(50, 101))
    # the consume queue was not disturbed by the re-dispatch
    assert store.max_offset("ReT", 0) == 101
    assert store.put_messages("ReT", 0, [b"next"], [b""]).queue_offset == 101
    store.shutdown()

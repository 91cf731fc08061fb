"""Dispatch on the appending thread (``ReputMessageService.dispatch_on``): what the broker's event loop appends is
dispatched on that loop once the appending step is done; other threads' appends, and a large backlog, are still
the reput thread's."""

import asyncio
import threading
from pathlib import Path

import pytest

from broker.store.dispatch import reput_service
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.store.message_store import MessageStore
from tests.store.conftest import store_config


class ThreadRecordingDispatcher(CommitLogDispatcher):
    name = "thread-recording"

    def __init__(self, fail: bool = False) -> None:
        self.threads: list[int] = []  # the thread of each dispatch of records
        self.fail = fail

    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        if requests:
            self.threads.append(threading.get_ident())
            if self.fail:
                raise RuntimeError("dispatcher broke")

    def checkpoint(self) -> int:
        return 0


def _open(root: Path, dispatcher: CommitLogDispatcher, store_type: str) -> MessageStore:
    store = MessageStore(store_config(root, store_type=store_type))
    store.register_dispatcher(dispatcher)
    store.start()
    return store


def _on_loop(store: MessageStore, steps) -> None:
    async def main() -> None:
        store.reput.dispatch_on(threading.get_ident(), asyncio.get_running_loop().call_soon)
        await steps()

    try:
        asyncio.run(main())
    finally:
        store.shutdown()


def test_an_append_on_the_loop_is_dispatched_there_in_the_next_step(tmp_path: Path, store_type: str):
    rec = ThreadRecordingDispatcher()
    store = _open(tmp_path, rec, store_type)

    async def steps() -> None:
        for i in range(3):
            result = store.put_messages("LoopT", 0, [b"m%d" % i], [b""])
            assert result.ok
            await asyncio.sleep(0)  # the dispatch scheduled by the append runs
            assert store.max_offset("LoopT", 0) == i + 1
        assert rec.threads == [threading.get_ident()] * 3

    _on_loop(store, steps)


def test_appends_of_one_loop_step_are_dispatched_in_one_pass(tmp_path: Path, store_type: str):
    rec = ThreadRecordingDispatcher()
    store = _open(tmp_path, rec, store_type)

    async def steps() -> None:
        for i in range(5):
            store.put_messages("LoopT", i % 2, [b"m%d" % i], [b""])
        await asyncio.sleep(0)
        assert store.max_offset("LoopT", 0) + store.max_offset("LoopT", 1) == 5
        assert rec.threads == [threading.get_ident()]

    _on_loop(store, steps)


def test_appends_on_other_threads_are_dispatched_by_the_reput_thread(tmp_path: Path, store_type: str):
    rec = ThreadRecordingDispatcher()
    store = _open(tmp_path, rec, store_type)

    async def steps() -> None:
        result = await asyncio.to_thread(store.put_messages, "OtherT", 0, [b"m"], [b""])
        assert result.append is not None
        assert await asyncio.to_thread(store.wait_dispatched, result.append.end_offset)
        assert rec.threads == [store.reput.ident]

    _on_loop(store, steps)


def test_a_backlog_over_the_limit_is_left_to_the_reput_thread(tmp_path: Path, store_type: str,
                                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reput_service, "INLINE_MAX_BYTES", 512)
    rec = ThreadRecordingDispatcher()
    store = _open(tmp_path, rec, store_type)

    async def steps() -> None:
        result = store.put_messages("BigT", 0, [b"x" * 1024], [b""])
        assert result.append is not None
        assert await asyncio.to_thread(store.wait_dispatched, result.append.end_offset)
        assert rec.threads == [store.reput.ident]

    _on_loop(store, steps)


def test_a_dispatch_failing_on_the_loop_fail_stops_the_store_and_the_append_stands(tmp_path: Path,
                                                                                   store_type: str):
    rec = ThreadRecordingDispatcher(fail=True)
    store = _open(tmp_path, rec, store_type)

    async def steps() -> None:
        result = store.put_messages("FailT", 0, [b"m"], [b""])
        assert result.ok and result.append is not None  # stored: the failure comes after the append
        await asyncio.sleep(0)
        assert rec.threads == [threading.get_ident()]
        assert "dispatcher broke" in (store.running_flags.fail_stop_reason or "")
        assert store.reput.failed
        assert store.commit_log.max_offset() == result.append.end_offset

    _on_loop(store, steps)


class DeletionRecordingDispatcher(ThreadRecordingDispatcher):
    def __init__(self) -> None:
        super().__init__()
        self.deletions: list[tuple[str, int]] = []  # (topic, thread)

    def topic_deleted(self, topic: str, at_offset: int) -> None:
        self.deletions.append((topic, threading.get_ident()))


def test_a_topic_deletion_record_is_left_to_the_reput_thread(tmp_path: Path, store_type: str):
    """Dropping a topic's queues deletes its files (or key ranges), for as long as the topic is big: not on the
    loop. Its inline pass stops at the deletion record and wakes the reput thread, which dispatches it and what
    follows."""
    rec = DeletionRecordingDispatcher()
    store = _open(tmp_path, rec, store_type)
    try:
        old = store.put_messages("GoneT", 0, [b"old"], [b""])
        assert old.append is not None and store.wait_dispatched(old.append.end_offset)
        with store.reput._pass_lock:  # the reput thread's passes wait: the inline one below runs alone
            assert store.delete_topic("GoneT", timeout_s=0.05) is not None  # appended, not dispatched yet
            store.put_messages("GoneT", 0, [b"new"], [b""])
            store.reput._pass(inline=True)
            assert rec.deletions == []
            assert store.reput.reput_from_offset == old.append.end_offset  # stopped at the deletion record
        assert store.wait_dispatched(store.commit_log.max_offset())
        assert rec.deletions == [("GoneT", store.reput.ident)]
        assert store.max_offset("GoneT", 0) == 1  # the new message, from offset 0
    finally:
        store.shutdown()

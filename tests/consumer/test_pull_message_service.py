"""The push consumer's pull service, against a pull consumer whose answers the test gives: an answer is handled on
the thread that brings it, a failure while handling one does not leave its queue without a pull, a queue over its
cache limit waits, a failed pull is tried again, and a next pull that needs the name server is not sent from the
answer's thread."""

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, cast

import pytest

from client.client_instance import ClientInstance, RouteNotCached, _cache_only
from client.consumer import pull_message_service
from client.consumer.process_queue import ProcessQueue, Run
from client.consumer.pull_message_service import PullMessageService, PullSettings
from client.errors import MQClientError
from client.pull_consumer import PullConsumer
from client.results import PullResult, PullStatus
from common.message import MessageExt
from common.message_queue import MessageQueue

MQ = MessageQueue("PullServiceT", "broker-a", 0)


class CacheOnly:
    """The part of a client instance the service uses: ``cache_only()``."""

    cache_only = ClientInstance.cache_only


class WatchedFuture(Future):
    """Says when the service has taken its answer in hand (added its callback): settled before that, the answer is
    handled on the service's own thread instead of the one that brings it, which is not what a test then looks at."""

    def __init__(self, changed: threading.Condition) -> None:
        super().__init__()
        self.changed = changed
        self.watched = False

    def add_done_callback(self, fn: Callable[[Future], object]) -> None:
        super().add_done_callback(fn)
        with self.changed:
            self.watched = True
            self.changed.notify_all()


class AnsweredByTest:
    """``pull_async`` as a push consumer calls it; each pull's future waits in ``pulls`` for the test to settle."""

    def __init__(self) -> None:
        self.client = CacheOnly()
        self.pulls: list[tuple[int, Future]] = []
        self.threads: list[str] = []  # the thread each pull of ``pulls`` was sent from
        self.route_expired = False  # a pull within cache_only fails with RouteNotCached (nothing sent)
        self.misses: list[str] = []  # the threads of those
        self.changed = threading.Condition()

    def pull_async(self, mq: MessageQueue, offset: int, max_nums: int, sub_expression: str,
                   suspend_ms: int = 0) -> Future:
        future = WatchedFuture(self.changed)
        if self.route_expired and _cache_only.get():
            self.misses.append(threading.current_thread().name)
            future.set_exception(RouteNotCached(f"the route of {mq.topic} is not cached"))
            return future
        with self.changed:
            self.pulls.append((offset, future))
            self.threads.append(threading.current_thread().name)
            self.changed.notify_all()
        return future

    def wait_pulls(self, n: int, timeout_s: float = 5.0) -> list[tuple[int, Future]]:
        """The first ``n`` pulls, once each is sent and the service waits on its answer."""

        def sent_and_watched() -> bool:
            return len(self.pulls) >= n and all(cast(WatchedFuture, f).watched for _, f in self.pulls[:n])

        with self.changed:
            assert self.changed.wait_for(sent_and_watched, timeout_s), f"{len(self.pulls)} pulls, not {n}"
            return list(self.pulls)


def messages(first: int, n: int) -> list[MessageExt]:
    return [MessageExt(MQ.topic, b"m", MQ.queue_id, first + i, 0, 0, 0) for i in range(n)]


def found(first: int, n: int) -> PullResult:
    return PullResult(PullStatus.FOUND, messages(first, n), next_begin_offset=first + n)


def service(consumer: AnsweredByTest, on_messages: Callable[[ProcessQueue, Run], None],
            settings: PullSettings | None = None) -> PullMessageService:
    svc = PullMessageService(cast(PullConsumer, consumer), settings or PullSettings(), lambda _topic: "*", on_messages,
                             lambda pq, offset: pq.reset(offset), orderly=False)
    svc.start()
    return svc


def test_an_answer_is_handled_on_the_thread_that_brings_it_and_the_next_pull_goes_out():
    consumer = AnsweredByTest()
    handled: list[tuple[str, list[int]]] = []
    svc = service(consumer, lambda pq, run: handled.append(
        (threading.current_thread().name, [m.queue_offset for m in run.msgs])))
    try:
        pq = ProcessQueue(MQ, 0)
        svc.pull_now(pq)
        (offset, first), = consumer.wait_pulls(1)
        assert offset == 0
        answering = threading.Thread(target=first.set_result, args=(found(0, 3),), name="stream-reader")
        answering.start()
        answering.join()
        assert handled == [("stream-reader", [0, 1, 2])]  # handed over before the reader thread went on
        assert consumer.wait_pulls(2)[1][0] == 3  # and the next pull starts where the run ended
        assert pq.cached() == (3, 3)
    finally:
        svc.shutdown()


def test_a_failure_handing_over_a_run_is_logged_and_the_queue_keeps_pulling(caplog: pytest.LogCaptureFixture):
    consumer = AnsweredByTest()
    calls: list[int] = []

    def on_messages(_pq: ProcessQueue, run: Run) -> None:
        calls.append(len(run.msgs))
        if len(calls) == 1:
            raise RuntimeError("a bug in the consume service")

    svc = service(consumer, on_messages)
    try:
        pq = ProcessQueue(MQ, 0)
        svc.pull_now(pq)
        consumer.wait_pulls(1)[0][1].set_result(found(0, 2))
        assert "pull_answer_failed queue=" in caplog.text
        offset, second = consumer.wait_pulls(2)[1]  # went out before the hand-over failed
        assert offset == 2
        second.set_result(found(2, 1))
        assert consumer.wait_pulls(3)[2][0] == 3
        assert calls == [2, 1] and len(consumer.pulls) == 3  # one pull in flight, never two
    finally:
        svc.shutdown()


def test_a_queue_over_its_cache_limit_waits_until_its_messages_are_done(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(pull_message_service, "FLOW_CONTROL_PAUSE_S", 0.02)
    consumer = AnsweredByTest()
    runs: list[Run] = []
    svc = service(consumer, lambda pq, run: runs.append(run), PullSettings(cached_messages_limit=4))
    try:
        pq = ProcessQueue(MQ, 0)
        svc.pull_now(pq)
        consumer.wait_pulls(1)[0][1].set_result(found(0, 4))
        time.sleep(0.2)  # several flow-control pauses: none of them may pull
        assert len(consumer.pulls) == 1
        pq.finish(runs[0], 0, 4)
        assert consumer.wait_pulls(2)[1][0] == 4
    finally:
        svc.shutdown()


def test_a_failed_pull_is_tried_again_from_the_same_offset(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(pull_message_service, "PULL_FAILURE_PAUSE_S", 0.05)
    consumer = AnsweredByTest()
    svc = service(consumer, lambda pq, run: None)
    try:
        pq = ProcessQueue(MQ, 7)
        svc.pull_now(pq)
        consumer.wait_pulls(1)[0][1].set_exception(MQClientError("broker-a is unreachable"))
        assert consumer.wait_pulls(2)[1][0] == 7
    finally:
        svc.shutdown()


def test_answers_after_shutdown_are_dropped():
    consumer = AnsweredByTest()
    handled: list[Any] = []
    svc = service(consumer, lambda pq, run: handled.append(run))
    pq = ProcessQueue(MQ, 0)
    svc.pull_now(pq)
    (_, pending), = consumer.wait_pulls(1)
    svc.shutdown()
    pending.set_result(found(0, 1))
    assert handled == [] and len(consumer.pulls) == 1


def test_a_next_pull_that_needs_the_name_server_goes_out_from_the_service_s_thread():
    consumer = AnsweredByTest()
    handled: list[list[int]] = []
    svc = service(consumer, lambda pq, run: handled.append([m.queue_offset for m in run.msgs]))
    try:
        pq = ProcessQueue(MQ, 0)
        svc.pull_now(pq)
        (_, first), = consumer.wait_pulls(1)
        consumer.route_expired = True  # the route expired meanwhile: the next pull needs the name server
        answering = threading.Thread(target=first.set_result, args=(found(0, 3),), name="stream-reader")
        answering.start()
        answering.join()
        assert handled == [[0, 1, 2]]
        assert consumer.misses == ["stream-reader"]  # tried from the cache only, nothing sent
        assert consumer.wait_pulls(2)[1][0] == 3
        assert consumer.threads == ["push-pull", "push-pull"]
    finally:
        svc.shutdown()


def test_a_commit_offset_read_while_an_answer_is_cached_never_passes_its_messages(monkeypatch: pytest.MonkeyPatch):
    """The answer's next offset and its messages enter the process queue together: set apart, a task finishing the
    earlier run (or a rebalance dropping the queue) read the commit offset in between as the new next offset, past
    a run nobody had handled, which a drop then persisted and the next owner skipped."""
    in_window, go_on = threading.Event(), threading.Event()
    real_size = pull_message_service.records_size

    def paused_size(msgs: list[MessageExt]) -> int:  # runs while the answer is being cached
        in_window.set()
        assert go_on.wait(5)
        return real_size(msgs)

    monkeypatch.setattr(pull_message_service, "records_size", paused_size)
    consumer = AnsweredByTest()
    handled: list[list[int]] = []
    svc = service(consumer, lambda pq, run: handled.append([m.queue_offset for m in run.msgs]))
    try:
        pq = ProcessQueue(MQ, 4)
        earlier = pq.put(messages(0, 4), 4, 4)
        assert earlier is not None
        svc.pull_now(pq)
        (_, answer), = consumer.wait_pulls(1)
        answering = threading.Thread(target=answer.set_result, args=(found(4, 4),), name="stream-reader")
        answering.start()
        assert in_window.wait(5)
        assert pq.finish(earlier, 0, 4) == 4  # not 8: 4..7 are not handled
        pq.dropped = True  # a rebalance takes the queue away now
        assert pq.commit_offset() == 4  # what the drop persists: the next owner starts at 4
        go_on.set()
        answering.join(5)
        assert handled == []  # the dropped queue's run goes to nobody
    finally:
        go_on.set()
        svc.shutdown()


def test_the_span_counts_cached_messages_not_the_offsets_a_filter_skipped() -> None:
    """A sparse tag's one message in progress, 3,000 offsets before the next pull, held its queue at the span limit
    (its next messages waited for it: 20 handled in 10.5 s instead of 3.1 s in the diff review's run)."""
    pq = ProcessQueue(MQ, 0)
    run = pq.put(messages(0, 1), 1, 3000)  # one message; the pull skipped the 2,999 after it
    assert run is not None and pq.span() == 0
    assert pq.put(messages(2500, 2), 2, 5000) is not None and pq.span() == 2501  # oldest not done 0, newest 2501
    pq.finish(run, 0, 1)
    assert pq.span() == 1

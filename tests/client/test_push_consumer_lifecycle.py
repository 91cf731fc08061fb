"""A push consumer's life: its settings are checked before anything starts, a start happens once and a failed one
leaves nothing running, a close from its own handler completes, and an orderly queue dropped between failed tries
is not kept alive by them."""

import gc
import threading
import time
import weakref
from collections.abc import Iterator

import pytest

from client import Admin, ConsumeResult, Message, MQClientError, Producer, PushConsumer
from client import push_consumer as push_consumer_module
from client.consumer.consume_orderly_service import ConsumeOrderlyService
from client.consumer.consume_pool import ConsumePool
from client.consumer.offset_store import OffsetStore
from client.consumer.process_queue import ProcessQueue
from common.message import MessageExt
from common.message_queue import MessageQueue
from tests.cluster import Cluster, make_cluster, wait_until

NOWHERE = "127.0.0.1:1"  # a consumer's constructor calls nobody


def push_consumer(namesrv: str = NOWHERE, **settings: object) -> PushConsumer:
    kwargs: dict = {"group": "life", "topic": "T", "handler": print, **settings}
    return PushConsumer(namesrv, **kwargs)


def threads_of(group: str) -> list[str]:
    """The consumer's own threads (consume pool, watcher, pull, rebalance, commit, lease) by their names."""
    return [t.name for t in threading.enumerate() if group in t.name]


# -- settings ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("setting", "value", "said"), [
    ("pull_batch_size", 0, "pull_batch_size 0 is outside 1..1024"),
    ("pull_batch_size", 5000, "pull_batch_size 5000 is outside 1..1024"),
    ("pull_batch_size", "64", "pull_batch_size must be an integer in 1..1024, not '64'"),
    ("consume_threads", 0, "consume_threads 0 is outside 1..1000"),
    ("heartbeat_interval_ms", 0, "heartbeat_interval_ms 0 is outside 100..600000"),
    ("heartbeat_interval_ms", 10**15, "heartbeat_interval_ms 1000000000000000 is outside 100..600000"),
    ("long_poll_ms", -1, "long_poll_ms -1 is outside 0..600000"),
    ("long_poll_ms", True, "long_poll_ms must be an integer in 0..600000, not True"),
    ("max_reconsume_times", -1, "max_reconsume_times -1 is outside 0..2147483647"),
    ("max_reconsume_times", 2**31, "max_reconsume_times 2147483648 is outside 0..2147483647"),
    ("tags", "A ||", "tags: subscription expression 'A ||' has an empty tag"),
    ("tags", 5, "tags must be a subscription expression"),
    ("allocate", None, "handler and allocate must be callables"),
])
def test_a_setting_out_of_range_is_refused_before_anything_starts(setting: str, value: object, said: str):
    with pytest.raises(MQClientError) as refused:
        push_consumer(group="refused-setting", **{setting: value})
    assert said in str(refused.value)
    assert not threads_of("refused-setting")


def test_settings_at_their_bounds_are_taken():
    for settings in ({"pull_batch_size": 1, "consume_threads": 1, "heartbeat_interval_ms": 100, "long_poll_ms": 0,
                      "max_reconsume_times": 0},
                     {"pull_batch_size": 1024, "consume_threads": 1000, "heartbeat_interval_ms": 600_000,
                      "long_poll_ms": 600_000, "tags": "A || B"}):
        push_consumer(**settings).close()


# -- start and close, in-process -----------------------------------------------------------------------------------
def test_a_task_shuts_its_own_pool_down():
    pool = ConsumePool(2, "own-shutdown")
    outcome: list[object] = []
    done = threading.Event()

    def task() -> None:
        started = time.monotonic()
        try:
            pool.shutdown(wait=True, cancel_futures=True)
            outcome.append(time.monotonic() - started)
        except BaseException as exc:  # before: RuntimeError("cannot join current thread")
            outcome.append(exc)
        done.set()

    pool.submit(task)
    assert done.wait(10)
    assert isinstance(outcome[0], float) and outcome[0] < 5, outcome
    wait_until(lambda: not threads_of("own-shutdown"), timeout=10, what="the pool's threads to end")


def test_a_task_dropping_its_own_queue_waits_only_for_the_others():
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    other_running, release = threading.Event(), threading.Event()

    def other() -> None:  # another task of the queue, running
        assert pq.begin()
        other_running.set()
        release.wait(10)
        pq.end()

    t = threading.Thread(target=other)
    t.start()
    assert other_running.wait(10)
    result: list[tuple[bool, float, int]] = []

    def own() -> None:
        assert pq.begin()
        started = time.monotonic()
        dropped = pq.drop_and_wait(10)
        result.append((dropped, time.monotonic() - started, pq.in_flight))
        pq.end()

    dropper = threading.Thread(target=own)
    dropper.start()
    wait_until(lambda: pq.dropped, timeout=10, what="the drop to begin")
    release.set()  # the other task ends: only now may the drop return
    dropper.join(15)
    t.join(10)
    dropped, waited, in_flight = result[0]
    assert dropped and waited < 5  # before: False after the whole 10 s, waiting for itself
    assert in_flight == 1  # itself: it waited for the other
    assert pq.in_flight == 0 and not pq.begin()


def test_a_failed_start_leaves_nothing_running_and_a_consumer_starts_once():
    consumers = [push_consumer(group="failed-start") for _ in range(5)]
    for consumer in consumers:
        with pytest.raises(MQClientError, match="route of T failed"):
            consumer.start()
    wait_until(lambda: not threads_of("failed-start"), timeout=10, what="the failed consumers' threads to end")
    assert all(c.consumer.client._closed for c in consumers)  # each had a client of its own
    with pytest.raises(MQClientError, match="starts once"):  # a failed start is not tried again on the same one
        consumers[0].start()


# -- through real daemons ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("push-life"), broker_names=("broker-a",))
    yield c
    c.stop()


def members_of(cluster: Cluster, group: str) -> list[str]:
    with Admin(cluster.addr) as admin:
        return [m.client_id for m in admin.consumer_connection(group)]


def test_a_started_consumer_is_not_started_again(cluster: Cluster):
    topic = "LifeTwiceT"
    cluster.create_topic(topic, queues=2)
    consumer = PushConsumer(cluster.addr, group="life-twice", topic=topic, handler=print)
    consumer.start()
    try:
        with pytest.raises(MQClientError, match="was started already"):  # before: RuntimeError from a thread
            consumer.start()
    finally:
        consumer.close()
    with pytest.raises(MQClientError, match="was started already"):
        consumer.start()
    assert not threads_of("life-twice")


@pytest.mark.parametrize("orderly", [False, True])
def test_close_from_the_handler_closes_the_whole_consumer(cluster: Cluster, orderly: bool):
    topic, group = f"LifeCloseInHandler{int(orderly)}", f"life-close-{int(orderly)}"
    cluster.create_topic(topic, queues=2)
    bodies = {f"m{i}".encode() for i in range(10)}
    with Producer(cluster.addr) as producer:
        for body in sorted(bodies):
            producer.send(Message(topic, body))
    outcome: list[object] = []
    closed = threading.Event()
    first = threading.Lock()  # one handler closes: a second one's close() at once returns, the first is under way

    def handler(msg: MessageExt) -> None:
        if not first.acquire(blocking=False):
            return
        started = time.monotonic()
        try:
            consumer.close()
            outcome.append(time.monotonic() - started)
        except BaseException as exc:  # before: RuntimeError("cannot join current thread") after 10 s
            outcome.append(exc)
        closed.set()

    consumer = PushConsumer(cluster.addr, group=group, topic=topic, handler=handler, consume_from_first=True,
                            orderly=orderly)
    consumer.start()
    assert closed.wait(30)
    assert isinstance(outcome[0], float) and outcome[0] < 5, outcome
    assert consumer.consumer.client._closed  # returned with the consumer closed: client, sessions, threads
    wait_until(lambda: members_of(cluster, group) == [], timeout=10, what="the member to leave the group")
    wait_until(lambda: not threads_of(group), timeout=10, what="the consumer's threads to end")
    # The group goes on where it was: nothing lost (the message being handled at the close comes again).
    got: set[bytes] = set()
    lock = threading.Lock()

    def collect(msg: MessageExt) -> None:
        with lock:
            got.add(msg.body)

    with PushConsumer(cluster.addr, group=group, topic=topic, handler=collect, orderly=orderly):
        wait_until(lambda: got == bodies, timeout=30, what="the next member to consume every message")


def test_close_does_not_wait_for_good_for_a_handler_that_never_returns(cluster: Cluster, monkeypatch, caplog):
    topic, group = "LifeHangingHandler", "life-hanging"
    cluster.create_topic(topic, queues=1)
    with Producer(cluster.addr) as producer:
        producer.send(Message(topic, b"stuck"))
    monkeypatch.setattr(push_consumer_module, "HANDLER_WAIT_S", 1.0)
    entered, release = threading.Event(), threading.Event()

    def hang(msg: MessageExt) -> None:
        entered.set()
        release.wait()

    consumer = PushConsumer(cluster.addr, group=group, topic=topic, handler=hang, consume_from_first=True)
    consumer.start()
    try:
        assert entered.wait(30)
        closer = threading.Thread(target=consumer.close, daemon=True)
        closer.start()
        closer.join(20)
        assert not closer.is_alive(), "close() still waits for the handler"  # before: for good
        assert "push_consumer_handlers_still_running" in caplog.text
        got: list[bytes] = []
        with PushConsumer(cluster.addr, group=group, topic=topic, handler=lambda m: got.append(m.body)):
            wait_until(lambda: got == [b"stuck"], timeout=30, what="the next member to have the message again")
    finally:
        release.set()


# -- orderly tries --------------------------------------------------------------------------------------------------
class ThreadPerTask:
    """Runs each task on a thread of its own, which keeps no reference once the task ended (a pool thread keeps
    its last task's arguments until the next)."""

    def submit(self, fn, *args) -> None:
        threading.Thread(target=fn, args=args, daemon=True).start()


def test_an_orderly_queue_dropped_between_failed_tries_is_not_kept():
    tried = threading.Event()

    def failing(msg: MessageExt) -> ConsumeResult:
        tried.set()
        return ConsumeResult.LATER

    service = ConsumeOrderlyService(failing, ThreadPerTask(), OffsetStore(), lambda msg: None,  # type: ignore[arg-type]
                                    max_reconsume_times=16)
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    pq.locked, pq.last_lock_s = True, time.monotonic()
    run = pq.put([MessageExt("T", b"x" * 100_000, 0, 0, 0, 0, 0)], 100_000, 1)
    assert run is not None
    service.submit(pq, run)
    assert tried.wait(10)  # failed once: the queue waits out its pause before the next try
    pq.drop_and_wait(10)  # a rebalance takes the queue away meanwhile
    gone = weakref.ref(pq)
    del pq, run

    def released() -> bool:
        gc.collect()
        return gone() is None

    # before: the table of tries kept the queue (and its cached messages) for the life of the consumer
    wait_until(released, timeout=10, what="the dropped queue to be released")
    service.shutdown()

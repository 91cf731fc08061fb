"""The push consumer's consume pool: tasks that finish quickly run on one thread; tasks that wait make it let more
threads run, up to its maximum; it lets fewer run after its threads idle; shutdown drops or waits as asked."""

import threading
import time

import pytest

from client.consumer.consume_pool import ConsumePool
from cluster.daemon_process import wait_until


def test_tasks_that_keep_finishing_run_on_one_thread():
    pool = ConsumePool(8, "quick", grow_after_s=5)  # no pause of 5 s between two tasks, even on a busy machine
    threads: set[str] = set()
    done = threading.Event()
    n = 2000

    def task(i: int) -> None:
        threads.add(threading.current_thread().name)
        sum(range(200))  # computes for a while, as a handler that only counts would
        if i == n - 1:
            done.set()

    try:
        for i in range(n):
            pool.submit(task, i)
        assert done.wait(10)
        assert threads == {"quick_0"} and pool.allowed == 1
    finally:
        pool.shutdown()


def test_tasks_that_wait_let_more_threads_run_up_to_the_maximum():
    pool = ConsumePool(4, "waiting", grow_after_s=0.02)
    release = threading.Event()
    running = []
    lock = threading.Lock()

    def task() -> None:
        with lock:
            running.append(threading.current_thread().name)
        release.wait(10)

    try:
        for _ in range(6):
            pool.submit(task)
        wait_until(lambda: len(running) == 4, timeout=5, interval=0.005)
        time.sleep(0.1)  # several grow periods: never more than the maximum
        assert len(running) == 4 and len(set(running)) == 4 and pool.allowed == 4
        release.set()
        wait_until(lambda: len(running) == 6, timeout=5, interval=0.005)
    finally:
        release.set()
        pool.shutdown()


def test_a_pool_whose_threads_idle_lets_fewer_run():
    pool = ConsumePool(4, "shrinking", grow_after_s=0.02, shrink_after_s=0.05)
    release = threading.Event()
    try:
        for _ in range(4):
            pool.submit(release.wait, 10)
        wait_until(lambda: pool.allowed == 4, timeout=5, interval=0.005)
        release.set()
        wait_until(lambda: pool.allowed == 1, timeout=5, interval=0.005)
    finally:
        release.set()
        pool.shutdown()


def test_a_task_that_raises_is_logged_and_the_thread_goes_on(caplog: pytest.LogCaptureFixture):
    pool = ConsumePool(1, "raising")
    ran = threading.Event()

    def bad() -> None:
        raise ValueError("a handler's bug")

    try:
        pool.submit(bad)
        pool.submit(ran.set)
        assert ran.wait(5)
        assert "consume_task_failed pool=raising" in caplog.text
    finally:
        pool.shutdown()


def test_shutdown_waits_for_running_tasks_and_drops_waiting_ones_when_asked():
    pool = ConsumePool(1, "closing")
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def first() -> None:
        started.set()
        release.wait(5)
        ran.append("first")

    pool.submit(first)
    pool.submit(ran.append, "second")
    assert started.wait(5)
    closer = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
    closer.start()
    wait_until(lambda: pool._shutdown, timeout=5, interval=0.005)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(ran.append, "third")
    release.set()
    closer.join(5)
    assert not closer.is_alive() and ran == ["first"]


def test_shutdown_without_cancelling_runs_what_waits_and_every_thread_ends():
    pool = ConsumePool(3, "draining", grow_after_s=0.01, shrink_after_s=0.05)
    first, release = threading.Event(), threading.Event()
    for _ in range(3):
        pool.submit(first.wait, 5)
    wait_until(lambda: pool.allowed == 3, timeout=5, interval=0.005)
    first.set()
    # three threads, one of them allowed to run: two wait for a turn
    wait_until(lambda: pool.allowed == 1, timeout=5, interval=0.005)
    pool.grow_after_s = 60.0
    ran: list[int] = []
    pool.submit(release.wait, 5)
    for i in range(3):
        pool.submit(ran.append, i)
    closer = threading.Thread(target=pool.shutdown)
    closer.start()
    release.set()
    closer.join(5)
    assert not closer.is_alive() and ran == [0, 1, 2]

"""A daemon raises its soft open-files limit to the hard one: under the 1,024 a login shell or a systemd service
without LimitNOFILE gives, a file-store broker stopped taking writes after about 500 used queues (two descriptors a
consume-queue file), and its restart failed the same way."""

import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.store.running_flags import RunningFlags
from client import Admin, Message, MessageQueue, Producer
from common.storage_refusal import storage_hint
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until

LOW = 128


@contextmanager
def soft_open_files_limit(limit: int) -> Iterator[None]:
    """Processes started inside inherit ``limit`` as their soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def soft_limit_of(daemon: Daemon) -> int:
    line = next(line for line in Path(f"/proc/{daemon.proc.pid}/limits").read_text().splitlines()
                if line.startswith("Max open files"))
    return int(line.split()[3])


def test_a_broker_started_under_a_low_limit_raises_it_and_takes_writes_on_many_queues(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    ns = start_namesrv(tmp_path / "namesrv")
    with soft_open_files_limit(LOW):
        broker = start_broker(tmp_path, "broker-a", ns.addr, registerNameServerPeriod=1000)
    try:
        assert soft_limit_of(broker) == min(hard, 1 << 20) > LOW
        topics = [f"FdT{i}" for i in range(12)]
        with Admin(ns.addr) as admin:
            for topic in topics:
                admin.create_topic(topic, brokers=["broker-a"], read_queue_nums=8, write_queue_nums=8)
            wait_until(lambda: set(topics) <= set(admin.topic_list()), what="the topics' routes")
        with Producer(ns.addr, retry_times=0) as producer:  # 96 queues: 192 descriptors for their files alone
            for topic in topics:
                for queue_id in range(8):
                    producer.send(Message(topic, b"x"), queue=MessageQueue(topic, "broker-a", queue_id))
    finally:
        broker.stop()
        ns.stop()


def test_a_store_out_of_descriptors_says_what_to_raise() -> None:
    flags = RunningFlags()
    flags.fail_stop("dispatch failed at commitlog offset 67296: OSError(24, 'Too many open files')")
    refusal = flags.write_refusal()
    assert refusal is not None and "raise the broker's open-files limit (ulimit -n" in refusal
    assert "open-files limit" in storage_hint(OSError(24, "Too many open files"))
    assert "the disk is full" in storage_hint(OSError(28, "No space left on device"))

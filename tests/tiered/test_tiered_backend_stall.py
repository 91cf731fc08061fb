"""A tier backend that stalls stalls only the reads it serves: a pull and a POP receive of old messages (served by
the tier) wait for an S3 server that is stopped (SIGSTOP), and meanwhile producers send, a consumer pulls new
messages and the broker answers admin calls as usual. Once the server runs again the old messages come.
Real daemons and a real S3-protocol server process (moto's)."""

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from client import Admin, Message, Producer, PullConsumer, SimpleConsumer
from tests.cluster import wait_until
from tests.s3_server import S3Server
from tests.tiered.test_tiered_acceptance import tiered_cluster

QUEUES = 8


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_stopped_s3_server_holds_up_only_the_reads_it_serves(tmp_path: Path, s3_server: S3Server,
                                                               flush: str) -> None:
    """8 pulls (one per queue: more than asyncio's default pool has threads here, which a SYNC_FLUSH send waits
    on) and a POP receive of old messages wait on the stopped server; sends and new pulls do not."""
    cluster = tiered_cluster(tmp_path, tieredStorageLevel="FORCE", flushDiskType=flush,
                             **s3_server.broker_conf(f"stall-{flush.lower()}"))
    stopped = False
    try:
        cluster.create_topic("OldT", queues=QUEUES)
        cluster.create_topic("NewT", queues=1)
        with Producer(cluster.addr) as producer, Admin(cluster.addr) as admin:
            for _ in range(10):
                producer.send_batch([Message("OldT", b"old" * 300) for _ in range(100)])
            broker = cluster.brokers["broker-a"].addr
            wait_until(lambda: sum(q.tiered_max_offset for q in admin.tiered_status("OldT")[0].queues) == 1000,
                       timeout=30, what="OldT uploaded to the tier")
            os.kill(s3_server.process.pid, signal.SIGSTOP)
            stopped = True
            # The old reads' calls get 30 s, not the default 10: still waiting when the checks below end (<= 10.5 s).
            with PullConsumer(cluster.addr, group="old", rpc_timeout_ms=30_000) as puller, \
                    SimpleConsumer(cluster.addr, group="old-pop", topic="OldT", rpc_timeout_ms=30_000) as popper, \
                    PullConsumer(cluster.addr, group="new") as fresh, ThreadPoolExecutor(QUEUES + 1) as pool:
                old_pulls = [pool.submit(puller.pull, mq, 0, 8) for mq in puller.queues("OldT")]
                old_pop = pool.submit(popper.receive, 16, 60_000, 0)
                time.sleep(0.5)  # all are waiting on the stopped server now
                new_mq = fresh.queues("NewT")[0]
                started = time.monotonic()
                for i in range(20):
                    producer.send(Message("NewT", b"new-%d" % i))
                assert [m.body for m in fresh.pull(new_mq, 0, 32).messages] == [b"new-%d" % i for i in range(20)]
                assert admin.broker_runtime_info(broker)["brokerName"] == "broker-a"
                # Held up, it would wait as long as the server stays stopped (the S3 client's read timeout is 60 s).
                assert time.monotonic() - started < 10, "the broker was held up by the stopped S3 server"
                assert not any(f.done() for f in old_pulls) and not old_pop.done()
                os.kill(s3_server.process.pid, signal.SIGCONT)
                stopped = False
                assert [len(f.result(timeout=60).messages) for f in old_pulls] == [8] * QUEUES
                assert len(old_pop.result(timeout=60)) == 16
    finally:
        if stopped:
            os.kill(s3_server.process.pid, signal.SIGCONT)
        cluster.stop()


def test_a_stop_does_not_wait_for_a_stopped_s3_server_and_the_restart_uploads_the_rest(tmp_path: Path,
                                                                                         s3_server: S3Server) -> None:
    """Messages sent while the S3 server is stopped cannot be uploaded; the broker's stop waits about 10 s for the
    upload in progress, says what it skipped, and exits 0. Restarted once the server runs again, the broker
    uploads them from its checkpoint: the tier ends up with every message once, and consumers read them all."""
    cluster = tiered_cluster(tmp_path, tieredStorageLevel="FORCE", **s3_server.broker_conf("stall-stop"))
    stopped = False
    try:
        cluster.create_topic("StallT", queues=1)
        with Producer(cluster.addr) as producer:
            producer.send_batch([Message("StallT", b"before-%d" % i) for i in range(100)])
            with Admin(cluster.addr) as admin:
                wait_until(lambda: admin.tiered_status("StallT")[0].queues[0].tiered_max_offset == 100, timeout=30,
                           what="the first 100 uploaded")
            os.kill(s3_server.process.pid, signal.SIGSTOP)
            stopped = True
            producer.send_batch([Message("StallT", b"during-%d" % i) for i in range(100)])
        time.sleep(1)  # an upload of them is waiting on the stopped server
        broker = cluster.brokers["broker-a"]
        started = time.monotonic()
        assert broker.stop(timeout=30) == 0
        # The 10 s wait and the rest of a stop; waiting for the upload (60 s read timeout) or a second 10 s wait
        # (the upload and clean passes waited for one after the other) would take 20 s or more.
        assert time.monotonic() - started < 18
        log = broker.log()
        assert "tiered_final_upload_skipped" in log and "Traceback" not in log
        os.kill(s3_server.process.pid, signal.SIGCONT)
        stopped = False
        cluster.start_broker("broker-a")
        with Admin(cluster.addr) as admin:
            wait_until(lambda: admin.tiered_status("StallT")[0].queues[0].tiered_max_offset == 200, timeout=30,
                       what="the rest uploaded after the restart")
        with PullConsumer(cluster.addr, group="stall") as consumer:
            wait_until(lambda: consumer.queues("StallT"), what="route after the restart")
            mq = consumer.queues("StallT")[0]
            bodies = [m.body for m in consumer.pull(mq, 0, 256).messages]
        assert bodies == [b"before-%d" % i for i in range(100)] + [b"during-%d" % i for i in range(100)]
    finally:
        if stopped:
            os.kill(s3_server.process.pid, signal.SIGCONT)
        cluster.stop()

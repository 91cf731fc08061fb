"""Half messages and commitlog expiry, through real daemons (64 KiB segments that expire a second after they were
written, checked every 200 ms). A half message whose transaction is pending kept nothing from expiring: its segment
went, the producer's commit was refused ("no half message at commitlog offset ..."), the checker was never asked,
and the check service "discarded" it to TRANS_CHECK_MAX_TIME_TOPIC without a copy (or, expired before the service
read it, it vanished without a trace). Now the commitlog is held below the lowest half message not ended (and not
yet read), and only a disk past diskSpaceCleanForciblyRatio passes that hold: then the loss is said and counted."""

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Admin, Message, MessageExt, MQClientError, Producer, TransactionResolution
from common.transaction_id import TransactionId
from common.transaction_topic import TRANS_CHECK_MAX_TIME_TOPIC
from tests.cluster import Cluster, Daemon, make_cluster, wait_until
from tests.transaction.test_transactions import bodies

TOPIC, FILLER = "TxExpiry", "TxExpiryFiller"
SEGMENT = 64 * 1024
EXPIRING = {"registerNameServerPeriod": 1000, "mappedFileSizeCommitLog": SEGMENT, "deleteWhen": "*",
            "cleanResourceInterval": 200, "transactionTimeOut": 3000, "transactionCheckInterval": 1000,
            "transactionCheckMax": 10}
COMMIT, UNKNOWN = TransactionResolution.COMMIT, TransactionResolution.UNKNOWN


class Checker:
    def __init__(self, answers: dict[bytes, TransactionResolution]) -> None:
        self.answers = answers
        self.calls: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, msg: MessageExt) -> TransactionResolution:
        with self.lock:
            self.calls.append(msg.body)
            return self.answers.get(msg.body, UNKNOWN)

    def called(self) -> list[bytes]:
        with self.lock:
            return list(self.calls)


def runtime(cluster: Cluster, key: str) -> int:
    with Admin(cluster.addr) as admin:
        return int(admin.broker_runtime_info(cluster.brokers["broker-a"].addr)[key])


def fill(producer: Producer, segments: int) -> None:
    """About ``segments`` commitlog segments of other messages."""
    for _ in range(segments * SEGMENT // 8000 + 1):
        producer.send(Message(FILLER, b"f" * 8000))


def offsets_in_queue(tx_ids: list[str]) -> list[int]:
    return [TransactionId.decode(tx).queue_offset for tx in tx_ids]


def commit_log_offset(tx_ids: list[str]) -> int:
    return TransactionId.decode(tx_ids[0]).commit_log_offset


@contextlib.contextmanager
def cluster_of(workdir: Path, env: dict[str, str] | None = None, **settings: object) -> Iterator[Cluster]:
    class WithEnv(Cluster):
        def start_broker(self, name: str) -> Daemon:
            from tests.cluster import start_broker

            self.brokers[name] = start_broker(self.workdir, name, self.addr, env=env, **self.settings)
            return self.brokers[name]

    c = make_cluster(workdir, ("broker-a",), cls=WithEnv, **EXPIRING, **settings)
    try:
        c.create_topic(TOPIC, queues=2)
        c.create_topic(FILLER, queues=2)
        yield c
    finally:
        c.stop()


def test_a_pending_half_message_outlives_its_segment_and_commits(tmp_path: Path):
    with cluster_of(tmp_path, fileReservedTime="0.0003") as c:  # about a second
        checker = Checker({b"checked": COMMIT})
        with Producer(c.addr, group="tx-expiry", transaction_checker=checker) as producer:
            fill(producer, 2)
            late = producer.begin_transaction()
            late.send(Message(TOPIC, b"late-commit"))  # ended by its producer once its segment is old
            checked = producer.begin_transaction()
            checked.send(Message(TOPIC, b"checked"))  # left to the checker
            halves = [commit_log_offset(late.transaction_ids), commit_log_offset(checked.transaction_ids)]
            fill(producer, 3)  # at once: the segments may expire before the check service read the halves
            wait_until(lambda: runtime(c, "commitLogMinOffset") > 0, timeout=20, what="the first segment to expire")
            # A negative, watched for a few seconds: the segments around the halves are seconds old by then.
            with pytest.raises(TimeoutError):
                wait_until(lambda: runtime(c, "commitLogMinOffset") > min(halves), timeout=4)
            late.commit()
            wait_until(lambda: bodies(c.addr, TOPIC) == [b"checked", b"late-commit"], timeout=20,
                       what="both transactions committed")
            assert b"checked" in checker.called()  # (late-commit may have been asked about too: UNKNOWN)
            # Both ended: the hold goes, and their segments expire as any other.
            fill(producer, 2)
            wait_until(lambda: runtime(c, "commitLogMinOffset") > max(halves), timeout=20,
                       what="the halves' segments to expire once their transactions ended")
        assert bodies(c.addr, TOPIC) == [b"checked", b"late-commit"]  # delivered once each
        assert runtime(c, "transactionHalfPending") == 0
        assert runtime(c, "transactionDiscarded") == 0
        assert runtime(c, "transactionHalfLost") == 0
        assert "transaction_half_lost" not in c.brokers["broker-a"].log()


def test_forced_cleanup_passes_the_hold_and_the_loss_is_said(tmp_path: Path):
    usage = tmp_path / "disk-usage"
    usage.write_text("50")
    with cluster_of(tmp_path / "cluster", env={"PYROCKETMQ_DISK_USAGE_FILE": str(usage)},
                    fileReservedTime="48") as c:  # nothing expires by age here
        checker = Checker({b"checked": COMMIT})
        with Producer(c.addr, group="tx-expiry", transaction_checker=checker) as producer:
            fill(producer, 1)
            late = producer.begin_transaction()
            late.send(Message(TOPIC, b"late-commit"))
            checked = producer.begin_transaction()
            checked.send(Message(TOPIC, b"checked"))
            halves = [late.transaction_ids[0], checked.transaction_ids[0]]
            offsets = [TransactionId.decode(tx).commit_log_offset for tx in halves]
            fill(producer, 3)
            # Read by the check service (transactionHalfPending counts unread ones too: waiting on it, the forced
            # expiry could come first, and the halves were lost unread, said as a range without their ids)
            wait_until(lambda: runtime(c, "transactionHalfRead") == max(offsets_in_queue(halves)) + 1,
                       what="the halves read")
            usage.write_text("87")  # past diskSpaceCleanForciblyRatio=85, below diskSpaceWarningLevelRatio=90
            wait_until(lambda: runtime(c, "commitLogMinOffset") > max(offsets), timeout=20,
                       what="the forced expiry past the halves")
            usage.write_text("50")
            with pytest.raises(MQClientError, match="lost to commitlog expiry"):
                late.commit()
            wait_until(lambda: runtime(c, "transactionHalfLost") == 2, timeout=20, what="both halves counted as lost")
        assert runtime(c, "transactionHalfPending") == 0
        assert runtime(c, "transactionDiscarded") == 0
        assert checker.called() == []
        log = c.brokers["broker-a"].log()
        for tx in halves:
            [line] = [ln for ln in log.splitlines() if f"transaction_half_lost tx={tx} " in ln]
            assert "ERROR" in line and TRANS_CHECK_MAX_TIME_TOPIC not in line
        assert "transaction_discarded" not in log  # nothing claims a copy that was never made
        assert "commitlog_deleting_held" in log
        with pytest.raises(MQClientError):  # the discard topic was never even made
            bodies(c.addr, TRANS_CHECK_MAX_TIME_TOPIC)

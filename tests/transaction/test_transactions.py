"""Transactions through real daemons (a name server and two brokers on port 0, one SYNC_FLUSH and one ASYNC_FLUSH,
short check settings): commit delivered, rollback never, an unresolved transaction checked back and resolved by the
checker either way, checks exhausted into TRANS_CHECK_MAX_TIME_TOPIC, refused inputs, a commit called again after it
failed for one message (it retries that one), and a broker SIGKILL between half sends and their ends or checks (both
store types: consumer offsets in JSON files or in RocksDB)."""

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from client import Admin, Message, MessageExt, MQClientError, Producer, PullConsumer, TransactionResolution, transaction
from client import producer as producer_module
from client.client_instance import ClientInstance
from client.transaction import HalfMessage
from common.message_properties import HALF_MESSAGE_PROPERTIES
from common.transaction_id import TransactionId
from common.transaction_topic import HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from proto import transaction_pb2, transaction_pb2_grpc
from tests.cluster import Cluster, Daemon, make_cluster, start_broker, wait_until

TOPIC = "TxOrders"
CHECKS = {"transactionTimeOut": 1000, "transactionCheckInterval": 500}
COMMIT, ROLLBACK, UNKNOWN = TransactionResolution.COMMIT, TransactionResolution.ROLLBACK, TransactionResolution.UNKNOWN


@dataclass
class Checker:
    """A producer's transaction_checker: answers by body (UNKNOWN for any other) and notes every check."""

    answers: dict[bytes, TransactionResolution] = field(default_factory=dict)
    calls: list[tuple[bytes, int]] = field(default_factory=list)  # (body, TRANSACTION_CHECK_TIMES)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, msg: MessageExt) -> TransactionResolution:
        assert msg.topic == TOPIC and msg.properties["TRAN_MSG"] == "true"
        TransactionId.decode(msg.properties["__transactionId__"])
        with self.lock:
            self.calls.append((msg.body, int(msg.properties["TRANSACTION_CHECK_TIMES"])))
            return self.answers.get(msg.body, UNKNOWN)

    def checks_of(self, body: bytes) -> list[int]:
        with self.lock:
            return [n for b, n in self.calls if b == body]

    def checked(self) -> set[bytes]:
        with self.lock:
            return {b for b, _ in self.calls}


def read_all(addr: str, topic: str) -> list[MessageExt]:
    """Every message of the topic on every broker, from offset 0."""
    out: list[MessageExt] = []
    with PullConsumer(addr, group="tx-reader") as consumer:
        for mq in consumer.queues(topic):
            offset = 0
            while (result := consumer.pull(mq, offset=offset, max_nums=256)).messages:
                out.extend(result.messages)
                offset = result.next_begin_offset
    return out


def bodies(addr: str, topic: str = TOPIC) -> list[bytes]:
    return sorted(m.body for m in read_all(addr, topic))


def pending(cluster: Cluster) -> int:
    """Half messages nobody ended yet, on every broker (``GetBrokerRuntimeInfo``)."""
    with Admin(cluster.addr) as admin:
        return sum(int(admin.broker_runtime_info(d.addr)["transactionHalfPending"]) for d in cluster.brokers.values())


def routed(addr: str, topic: str) -> bool:
    try:
        read_all(addr, topic)
    except MQClientError:
        return False
    return True


class MixedCluster(Cluster):
    """broker-a SYNC_FLUSH (an end answers once its op message is on disk), broker-b ASYNC_FLUSH."""

    def start_broker(self, name: str) -> Daemon:
        flush = "SYNC_FLUSH" if name == "broker-a" else "ASYNC_FLUSH"
        self.brokers[name] = start_broker(self.workdir, name, self.addr, **self.settings, flushDiskType=flush)
        return self.brokers[name]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("transactions"), ("broker-a", "broker-b"), cls=MixedCluster,
                     registerNameServerPeriod=1000, transactionCheckMax=3, **CHECKS)
    try:  # a setup that fails part-way must not leave the daemons running
        c.create_topic(TOPIC, queues=4)
        yield c
    finally:
        c.stop()


def test_commit_delivered_rollback_never_and_checks_resolve_either_way(cluster: Cluster):
    checker = Checker({b"checked-commit": COMMIT, b"checked-rollback": ROLLBACK})
    with Producer(cluster.addr, group="tx-resolve", transaction_checker=checker) as producer:
        committed = producer.begin_transaction()
        sent = committed.send(Message(TOPIC, b"committed", keys=["k-committed"]))
        assert sent.queue_offset == -1 and committed.transaction_ids[0].startswith(f"tx1|{sent.queue.broker_name}|")
        committed.commit()
        rolled = producer.begin_transaction()
        rolled.send(Message(TOPIC, b"rolled-back"))
        rolled.rollback()
        for body in (b"checked-commit", b"checked-rollback"):
            producer.begin_transaction().send(Message(TOPIC, body))  # left open: the broker asks
        wait_until(lambda: b"checked-commit" in bodies(cluster.addr) and checker.checks_of(b"checked-rollback")
                   and pending(cluster) == 0, timeout=15, what="both open transactions checked and resolved")
        resolved_after = list(checker.calls)
        time.sleep(4 * CHECKS["transactionCheckInterval"] / 1000)  # more checks would come by now
        assert checker.calls == resolved_after  # resolved: never checked again
    delivered = read_all(cluster.addr, TOPIC)
    assert sorted(m.body for m in delivered) == [b"checked-commit", b"committed"]
    by_body = {m.body: m for m in delivered}
    assert by_body[b"committed"].msg_id == sent.msg_id and by_body[b"committed"].keys == ["k-committed"]
    assert all("TRAN_MSG" not in m.properties and "REAL_TOPIC" not in m.properties for m in delivered)
    assert checker.checked() == {b"checked-commit", b"checked-rollback"}  # ended ones never checked


def test_unanswered_checks_end_in_trans_check_max_time_topic(cluster: Cluster):
    checker = Checker()
    with Producer(cluster.addr, group="tx-unanswered", transaction_checker=checker) as producer:
        tx = producer.begin_transaction()
        tx.send(Message(TOPIC, b"never-answered"))
        wait_until(lambda: routed(cluster.addr, TRANS_CHECK_MAX_TIME_TOPIC) and any(
            m.body == b"never-answered" for m in read_all(cluster.addr, TRANS_CHECK_MAX_TIME_TOPIC)),
                   timeout=20, what="the half message moved to " + TRANS_CHECK_MAX_TIME_TOPIC)
        with pytest.raises(MQClientError, match="ended earlier with DISCARD"):
            tx.commit()
    assert checker.checks_of(b"never-answered") == [1, 2, 3]  # transactionCheckMax=3
    [moved] = [m for m in read_all(cluster.addr, TRANS_CHECK_MAX_TIME_TOPIC) if m.body == b"never-answered"]
    assert (moved.properties["TRANSACTION_CHECK_TIMES"], moved.properties["REAL_TOPIC"]) == ("3", TOPIC)
    assert b"never-answered" not in bodies(cluster.addr)


def test_another_producer_of_the_group_answers_for_one_that_left(cluster: Cluster):
    with Producer(cluster.addr, group="tx-handover", transaction_checker=Checker()) as first:
        first.begin_transaction().send(Message(TOPIC, b"handed-over"))
    # the first producer is gone; a new one of the group, which sent nothing yet, names the topic to be asked about
    checker = Checker({b"handed-over": COMMIT})
    with Producer(cluster.addr, group="tx-handover", transaction_checker=checker, topics=[TOPIC]):
        wait_until(lambda: b"handed-over" in bodies(cluster.addr), timeout=15, what="the new producer's commit")
    assert checker.checked() == {b"handed-over"}


def test_a_transaction_of_several_messages_and_the_with_block(cluster: Cluster):
    checker = Checker()
    with Producer(cluster.addr, group="tx-block", transaction_checker=checker) as producer:
        with producer.begin_transaction() as tx:
            for i in range(3):
                tx.send(Message(TOPIC, b"block-%d" % i))
        with pytest.raises(RuntimeError, match="local transaction failed"), producer.begin_transaction() as failed:
            failed.send(Message(TOPIC, b"block-failed"))
            raise RuntimeError("local transaction failed")
        with pytest.raises(MQClientError, match="already ended"):
            tx.send(Message(TOPIC, b"too-late"))
    wait_until(lambda: {b"block-0", b"block-1", b"block-2"} <= set(bodies(cluster.addr)), what="the block's commit")
    assert b"block-failed" not in bodies(cluster.addr) and not checker.calls


def test_a_commit_that_failed_for_a_message_commits_it_when_called_again(cluster: Cluster,
                                                                        monkeypatch: pytest.MonkeyPatch):
    ends: list[tuple[str, bool]] = []  # (tx id, succeeded)
    real_end = transaction.end_transaction

    def end_failing_once(client: ClientInstance, group: str, half: HalfMessage, resolution: TransactionResolution,
                         **kw: Any) -> None:
        if half.transaction_id.encode() == first and not ends:  # as if its broker could not be reached
            ends.append((first, False))
            raise MQClientError(f"commit of transaction {first} failed: UNAVAILABLE")
        real_end(client, group, half, resolution, **kw)
        ends.append((half.transaction_id.encode(), True))

    monkeypatch.setattr(transaction, "end_transaction", end_failing_once)
    with Producer(cluster.addr, group="tx-retry-end", transaction_checker=Checker()) as producer:
        tx = producer.begin_transaction()
        tx.send(Message(TOPIC, b"retried-0"))
        tx.send(Message(TOPIC, b"retried-1"))
        first, second = tx.transaction_ids
        with pytest.raises(MQClientError, match="commit failed for 1 of 2 messages"):
            tx.commit()
        tx.commit()  # retries only the one that failed
        with pytest.raises(MQClientError, match="already ended"):
            tx.rollback()
    assert ends == [(first, False), (second, True), (first, True)]
    wait_until(lambda: {b"retried-0", b"retried-1"} <= set(bodies(cluster.addr)), timeout=5, what="both committed")


def test_refused_inputs(cluster: Cluster, monkeypatch: pytest.MonkeyPatch):
    with Producer(cluster.addr, group="tx-refused") as plain:
        with pytest.raises(MQClientError, match="transaction_checker"):
            plain.begin_transaction()
        with pytest.raises(MQClientError, match="belongs to the broker"):
            plain.send(Message(HALF_TOPIC, b"x"))
        half = {"TRAN_MSG": "true", "PGROUP": "tx-refused"}  # a raw half message, as another client may send it
        with pytest.raises(MQClientError, match="property 'PGROUP' is reserved"):
            plain.send(Message(TOPIC, b"1", properties=half))  # the SDK sends halves through transactions only
        monkeypatch.setattr(producer_module, "USER_SET_PROPERTIES", HALF_MESSAGE_PROPERTIES)  # another client
        with pytest.raises(MQClientError, match="sent alone"):
            plain.send_batch([Message(TOPIC, b"1", properties=half), Message(TOPIC, b"2", properties=half)])
        with pytest.raises(MQClientError, match="PGROUP"):
            plain.send(Message(TOPIC, b"1", properties={"TRAN_MSG": "true"}))
    with Producer(cluster.addr, group="tx-refused", transaction_checker=Checker()) as producer:
        tx = producer.begin_transaction()
        with pytest.raises(MQClientError, match="cannot be delayed"):
            tx.send(Message(TOPIC, b"x", delay_level=2))
        tx.send(Message(TOPIC, b"refused-ends"))
        [tx_id] = tx.transaction_ids
        owner = TransactionId.decode(tx_id).broker_name
        other = next(name for name in cluster.brokers if name != owner)
        with pytest.raises(MQClientError, match=f"is broker {owner}'s"):
            end_at(cluster, other, "tx-refused", tx_id, transaction_pb2.TRANSACTION_COMMIT)
        with pytest.raises(MQClientError, match="producer group tx-refused's, not someone-else's"):
            end_at(cluster, owner, "someone-else", tx_id, transaction_pb2.TRANSACTION_COMMIT)
        tx.rollback()
        with pytest.raises(MQClientError, match="ended earlier with ROLLBACK"):
            end_at(cluster, owner, "tx-refused", tx_id, transaction_pb2.TRANSACTION_COMMIT)
        end_at(cluster, owner, "tx-refused", tx_id, transaction_pb2.TRANSACTION_ROLLBACK)  # a repeat: fine


def test_a_half_message_of_a_deleted_topic_is_never_committed_into_the_topic_made_again(cluster: Cluster):
    """Half messages sent before deleteTopic were committed, by the producer or after a check, into a topic made again
    under the name (which started with the deleted topic's messages). Such a commit now ends the transaction as a
    rollback and says why; the open one is resolved the same way, so nobody checks it again."""
    topic = "TxDeletedT"
    cluster.create_topic(topic, queues=2)
    checks: list[bytes] = []

    def checker(msg: MessageExt) -> TransactionResolution:
        checks.append(msg.body)
        return COMMIT

    with Producer(cluster.addr, group="tx-deleted", transaction_checker=checker) as producer:
        late = producer.begin_transaction()
        late.send(Message(topic, b"old-late"))
        producer.begin_transaction().send(Message(topic, b"old-open"))  # left open: the broker checks it
        with Admin(cluster.addr) as admin:
            admin.delete_topic(topic, "DefaultCluster")
            wait_until(lambda: topic not in admin.topic_list(), what=f"{topic} deleted")
        cluster.create_topic(topic, queues=2)
        producer.send(Message(topic, b"new-plain"))
        with pytest.raises(MQClientError, match="was deleted after its half message was stored"):
            late.commit()
        wait_until(lambda: b"old-open" in checks and pending(cluster) == 0, timeout=20,
                   what="the open transaction checked and ended")
    assert bodies(cluster.addr, topic) == [b"new-plain"]  # was old-late, old-open and new-plain


def end_at(cluster: Cluster, broker: str, group: str, tx_id: str, resolution: int) -> None:
    """EndTransaction straight to one broker, as a proxy would call it; raises MQClientError on a refusal."""
    import grpc

    with grpc.insecure_channel(cluster.brokers[broker].addr) as channel:
        response = transaction_pb2_grpc.TransactionServiceStub(channel).EndTransaction(
            transaction_pb2.EndTransactionRequest(producer_group=group, transaction_id=tx_id, resolution=resolution,
                                                  client_id="proxy-client"), timeout=5)
    if response.code != 0:
        raise MQClientError(response.remark, response.code)


@pytest.mark.parametrize("store_type", ["default", "defaultRocksDB"])
def test_broker_sigkill_between_half_sends_and_their_ends(tmp_path_factory: pytest.TempPathFactory,
                                                         store_type: str):
    """Ten commits and ten rollbacks acknowledged, two transactions left to the checker, two ended by the producer
    only after the restart, one checked twice already: the broker is SIGKILLed, restarted on its store, and then
    nothing committed is missing or doubled, nothing rolled back shows, the open ones are checked (their check count
    going on from where it was) and resolved."""
    c = make_cluster(tmp_path_factory.mktemp(f"tx-kill-{store_type}"), ("broker-a",), registerNameServerPeriod=1000,
                     storeType=store_type, transactionCheckMax=40, **CHECKS)
    try:
        c.create_topic(TOPIC, queues=4)
        checker = Checker()  # UNKNOWN to everything until the broker was killed and restarted
        with Producer(c.addr, group="tx-kill", transaction_checker=checker) as producer:
            producer.begin_transaction().send(Message(TOPIC, b"counted"))
            wait_until(lambda: len(checker.checks_of(b"counted")) >= 2, timeout=15, what="two checks before the kill")
            for i in range(10):
                tx = producer.begin_transaction()
                tx.send(Message(TOPIC, b"committed-%d" % i))
                tx.commit()
                tx = producer.begin_transaction()
                tx.send(Message(TOPIC, b"rolled-back-%d" % i))
                tx.rollback()
            for body in (b"check-commit", b"check-rollback"):
                producer.begin_transaction().send(Message(TOPIC, body))
            commit_later = producer.begin_transaction()
            commit_later.send(Message(TOPIC, b"commit-after-restart"))
            rollback_later = producer.begin_transaction()
            rollback_later.send(Message(TOPIC, b"rollback-after-restart"))
            before_kill = max(checker.checks_of(b"counted"))

            c.brokers["broker-a"].kill()
            with checker.lock:
                checker.answers.update({b"check-commit": COMMIT, b"check-rollback": ROLLBACK})
                checker.calls.clear()
            c.start_broker("broker-a")
            commit_later.commit()  # ends of half messages sent before the kill
            rollback_later.rollback()

            expected = sorted([b"committed-%d" % i for i in range(10)] + [b"check-commit", b"commit-after-restart"])
            wait_until(lambda: bodies(c.addr) == expected and checker.checks_of(b"check-rollback")
                       and checker.checks_of(b"counted"), timeout=20, what="the open transactions checked")
            time.sleep(4 * CHECKS["transactionCheckInterval"] / 1000)  # a stray commit or a second copy shows by now
        assert bodies(c.addr) == expected  # none lost, none twice, no rollback visible
        # answered once each (a check may have come before the producer's session was back: counted, not delivered)
        assert len(checker.checks_of(b"check-commit")) == len(checker.checks_of(b"check-rollback")) == 1
        assert min(checker.checks_of(b"counted")) > before_kill  # the count went on from the op queue
        ended = {b"committed-%d" % i for i in range(10)} | {b"rolled-back-%d" % i for i in range(10)}
        assert not ended & checker.checked()  # ended before the kill: never checked after it
        log = c.brokers["broker-a"].log()
        assert "transaction_loaded" in log
    finally:
        c.stop()


def test_a_graceful_stop_sends_no_check_its_producers_cannot_answer(tmp_path_factory: pytest.TempPathFactory):
    """On SIGTERM the broker stopped taking calls but kept checking for the server's 5 s grace: each check was
    counted, and the producers' answers were refused, so a planned restart used up checks and discarded the
    transactions on their last one (the timers review: 0 of 200 committed)."""
    c = make_cluster(tmp_path_factory.mktemp("tx-stop"), ("broker-a",), registerNameServerPeriod=1000,
                     transactionCheckMax=40, **CHECKS)
    try:
        c.create_topic(TOPIC, queues=1)
        checker = Checker()  # UNKNOWN: checked again every interval
        with Producer(c.addr, group="tx-stop", transaction_checker=checker) as producer:
            producer.begin_transaction().send(Message(TOPIC, b"open"))
            wait_until(lambda: checker.checks_of(b"open"), timeout=15, what="a first check")
            assert c.brokers["broker-a"].stop() == 0  # the producer's session stays open: the server's grace
        log = c.brokers["broker-a"].log()
        stopping = log.index("broker_stopping")
        assert "transaction_check_sent" not in log[stopping:], log[stopping:]
    finally:
        c.stop()


def test_half_pending_counts_a_half_message_before_the_check_service_reads_it(tmp_path_factory):
    """transactionHalfPending counted only what the check service's last pass read: with the default timing an
    open half message showed up to 6 s late (60 s here: transactionTimeOut and the check interval are 60 s)."""
    c = make_cluster(tmp_path_factory.mktemp("tx-pending"), ("broker-a",), registerNameServerPeriod=1000,
                     transactionTimeOut=60_000, transactionCheckInterval=60_000)
    try:
        c.create_topic(TOPIC, queues=1)
        with Producer(c.addr, group="tx-pending", transaction_checker=Checker()) as producer:
            open_tx = producer.begin_transaction()
            open_tx.send(Message(TOPIC, b"open"))
            wait_until(lambda: pending(c) == 1, timeout=10, what="the open half message counted")  # was 0
            open_tx.rollback()
            wait_until(lambda: pending(c) == 0, timeout=10, what="the ended one no longer counted")
    finally:
        c.stop()

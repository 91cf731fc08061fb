"""Replication in a broker group (issue 16, first part): a master and a slave of one brokerName as real processes.
SYNC_MASTER: an acknowledged message is in the slave's commitlog at the same offset, byte for byte."""

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, Message, MessageQueue, MQClientError, Producer, PullConsumer, PullStatus
from client.pulled_messages import PulledMessages
from client.results import SendStatus
from common.response_code import ResponseCode
from proto import broker_pb2, broker_pb2_grpc, ha_pb2, ha_pb2_grpc, transaction_pb2, transaction_pb2_grpc
from tests.admin_cli.helpers import free_port, ok_json
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until

SEGMENT = 1024 * 1024  # small segments: replication crosses several
TOPIC = "HaT"


def runtime(ns: str, broker: Daemon) -> dict[str, str]:
    with Admin(ns) as admin:
        return admin.broker_runtime_info(broker.addr)


def commit_log_bytes(store: Path, end: int) -> bytes:
    files = sorted((store / "commitlog").iterdir())
    return b"".join(f.read_bytes() for f in files)[:end]


class Group:
    def __init__(self, workdir: Path, role: str, with_slave: bool = True, **settings: str) -> None:
        self.workdir = workdir
        self.ns = start_namesrv(workdir / "namesrv")
        self.settings = {"mappedFileSizeCommitLog": SEGMENT, "registerNameServerPeriod": 1000,
                         "brokerNotActiveTimeoutMillis": 3000, "slaveReadEnable": "true", **settings}
        self.master = start_broker(workdir / "master", "broker-a", self.ns.addr, brokerRole=role, **self.settings)
        self.ha_addr = runtime(self.ns.addr, self.master)["haServerAddr"]
        if with_slave:
            self.slave = self.start_slave()

    def create_topic(self, queues: int) -> None:
        with Admin(self.ns.addr) as admin:
            admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=queues, write_queue_nums=queues)
            wait_until(lambda: TOPIC in admin.topic_list(), what="the topic's route")

    def wait_slaves(self, n: int) -> None:
        wait_until(lambda: runtime(self.ns.addr, self.master)["haSlaves"] == str(n), what=f"{n} slave(s) to connect")

    def start_slave(self) -> Daemon:
        return start_broker(self.workdir / "slave", "broker-a", self.ns.addr, brokerId=1, brokerRole="SLAVE",
                            haMasterAddress=self.ha_addr, **self.settings)

    def ends(self) -> tuple[int, int]:
        m, s = runtime(self.ns.addr, self.master), runtime(self.ns.addr, self.slave)
        return int(m["commitLogMaxOffset"]), int(s["commitLogMaxOffset"])

    def wait_slave_shows_everything(self) -> int:
        """Until the slave shows (its confirm offset) everything the master holds; returns the master's end. A slave
        shows only what its master told it was confirmed: a test that kills the master and reads the slave waits
        for this first, or the tail stays hidden when the master died before telling it (FLUSH_SLAVE_TIMEOUT sends
        on a busy machine are copied later, too)."""
        end = self.ends()[0]
        wait_until(lambda: int(runtime(self.ns.addr, self.slave)["commitLogConfirmOffset"]) >= end,
                   what=f"the slave to show everything up to the master's end {end}")
        return end

    def slave_pull(self, queue_id: int = 0) -> tuple[int, list[bytes]]:
        """The slave's answer to a pull of ``queue_id`` from offset 0: its code and the bodies it carries."""
        slave = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(self.slave.addr))
        answer = slave.PullMessage(broker_pb2.PullMessageRequest(
            consumer_group="slave-reader", topic=TOPIC, queue_id=queue_id, queue_offset=0, max_msg_nums=64), timeout=5)
        return answer.code, [m.body for m in PulledMessages(answer.records)]

    def stop(self) -> None:
        for d in (getattr(self, "slave", None), self.master, self.ns):
            if d is not None and d.alive:
                d.stop(strict=False)


# Both flush modes (a SYNC_FLUSH stream answers sends out of order: each must still wait for the slave) and both
# store types.
@pytest.fixture(params=[("ASYNC_FLUSH", "default"), ("SYNC_FLUSH", "defaultRocksDB")], ids=lambda p: "-".join(p))
def sync_group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Group]:
    flush, store_type = request.param
    g = Group(tmp_path, "SYNC_MASTER", flushDiskType=flush, storeType=store_type)
    try:
        g.create_topic(4)
        g.wait_slaves(1)
        yield g
    finally:
        g.stop()


def test_sync_master_acknowledges_what_the_slave_has_byte_for_byte(sync_group: Group):
    g = sync_group
    with Producer(g.ns.addr) as producer:
        for i in range(0, 5000, 50):  # ~5 MB: several segments
            result = producer.send_batch([Message(TOPIC, f"m{j}".encode() * 100) for j in range(i, i + 50)])
            assert result.status is SendStatus.SEND_OK
    master_end = int(runtime(g.ns.addr, g.master)["commitLogMaxOffset"])
    wait_until(lambda: g.ends()[1] >= master_end, what="the slave to hold everything acknowledged")
    assert master_end > 2 * SEGMENT
    master_bytes = commit_log_bytes(g.workdir / "master" / "broker-a" / "store", master_end)
    slave_bytes = commit_log_bytes(g.workdir / "slave" / "broker-a" / "store", master_end)
    assert slave_bytes == master_bytes
    info = runtime(g.ns.addr, g.master)
    assert int(info["commitLogConfirmOffset"]) == master_end  # confirmed = replicated
    with PullConsumer(g.ns.addr, group="ha-reader") as consumer:
        total = sum(consumer.max_offset(mq) for mq in consumer.queues(TOPIC))
    assert total == 5000


def test_a_slave_refuses_sends_and_a_stranger_is_refused(sync_group: Group):
    g = sync_group
    stub = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(g.slave.addr))
    answer = stub.SendMessage(broker_pb2.SendMessageRequest(topic=TOPIC, queue_id=0, bodies=[b"x"]), timeout=5)
    assert answer.code == ResponseCode.NO_PERMISSION and "slave" in answer.remark
    from proto import consumer_pb2, consumer_pb2_grpc  # any other write is refused by the slave's store itself
    back = consumer_pb2_grpc.ConsumerServiceStub(grpc.insecure_channel(g.slave.addr)).ConsumerSendMsgBack(
        consumer_pb2.SendMsgBackRequest(group="g", topic=TOPIC, body=b"x", max_reconsume_times=-1), timeout=5)
    assert back.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in back.remark
    assert runtime(g.ns.addr, g.slave)["storeWriteable"] == "false"
    # An end of a transaction is refused at once, saying where to go (it waited 5 s, then said busy)
    started = time.monotonic()
    end = transaction_pb2_grpc.TransactionServiceStub(grpc.insecure_channel(g.slave.addr)).EndTransaction(
        transaction_pb2.EndTransactionRequest(producer_group="pg", transaction_id="tx1|broker-a|0|0",
                                              resolution=transaction_pb2.TRANSACTION_COMMIT), timeout=10)
    assert end.code == ResponseCode.NO_PERMISSION and "is not its group's master" in end.remark, end
    assert time.monotonic() - started < 2
    ha = ha_pb2_grpc.HaServiceStub(grpc.insecure_channel(g.ha_addr))
    hello = ha_pb2.ReplicaHandshake(cluster_name="DefaultCluster", broker_name="broker-z", broker_id=1,
                                    commit_log_end=0, mapped_file_size=SEGMENT)
    with pytest.raises(grpc.RpcError) as err:
        list(ha.Replicate(iter([ha_pb2.ReplicaFrame(handshake=hello)]), timeout=5))
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION and "broker-z" in err.value.details()


def test_without_its_slave_a_sync_master_fails_sends_fast_and_confirms_nothing_more(sync_group: Group):
    g = sync_group
    with Producer(g.ns.addr, retry_times=0) as producer:
        producer.send(Message(TOPIC, b"before"))
        confirmed = int(runtime(g.ns.addr, g.master)["commitLogConfirmOffset"])
        g.slave.stop(signal.SIGKILL)
        wait_until(lambda: runtime(g.ns.addr, g.master)["haSlaves"] == "0", what="the master to see the slave go")
        with pytest.raises(MQClientError) as err:
            producer.send(Message(TOPIC, b"while the slave is down"))
        assert "SLAVE_NOT_AVAILABLE" in str(err.value)
        assert int(runtime(g.ns.addr, g.master)["commitLogConfirmOffset"]) == confirmed
        g.slave = g.start_slave()  # it catches up, and what waited becomes visible
        wait_until(lambda: int(runtime(g.ns.addr, g.master)["commitLogConfirmOffset"]) > confirmed,
                   what="the returning slave to confirm the stored message")
        assert producer.send(Message(TOPIC, b"after")).status is SendStatus.SEND_OK


def test_a_commit_a_sync_master_stored_without_its_slave_is_not_reported_failed(sync_group: Group):
    """Ended on the master, its slave gone: the commit raised "commit failed ... the broker will check them, or call
    commit again", while no check would come and the message is delivered (the transactions review): an application
    that undid the order on that error was wrong. It returns, and the message is delivered."""
    g = sync_group
    checked: list[bytes] = []
    with Producer(g.ns.addr, group="sync-tx", transaction_checker=lambda msg: checked.append(msg.body)) as producer:
        tx = producer.begin_transaction()
        tx.send(Message(TOPIC, b"order-1"))
        g.slave.stop(signal.SIGKILL)
        wait_until(lambda: runtime(g.ns.addr, g.master)["haSlaves"] == "0", what="the master to see the slave go")
        tx.commit()
        assert runtime(g.ns.addr, g.master)["transactionHalfPending"] == "0"
        g.slave = g.start_slave()
        with PullConsumer(g.ns.addr, group="sync-tx-reader") as consumer:
            def delivered() -> list[bytes]:
                return [m.body for mq in consumer.queues(TOPIC) for m in consumer.pull(mq, offset=0).messages]
            wait_until(lambda: delivered() == [b"order-1"], what="the committed message, once the slave has it")
    assert checked == []


def test_cluster_list_shows_the_group_with_roles(sync_group: Group):
    g = sync_group
    with Admin(g.ns.addr) as admin:
        wait_until(lambda: len(admin.all_brokers()) == 2, what="both replicas registered")
    rows = ok_json(g.ns.addr, "clusterList")
    assert [(r["broker_name"], r["broker_id"], r["addr"], r["role"]) for r in rows] == [
        ("broker-a", 0, g.master.addr, "SYNC_MASTER"), ("broker-a", 1, g.slave.addr, "SLAVE")]


def test_an_async_master_acknowledges_at_once_and_its_slave_follows(tmp_path: Path):
    g = Group(tmp_path, "ASYNC_MASTER")
    try:
        g.create_topic(2)
        g.slave.stop(signal.SIGKILL)
        with Producer(g.ns.addr) as producer:
            for i in range(200):
                assert producer.send(Message(TOPIC, f"a{i}".encode())).status is SendStatus.SEND_OK
        g.slave = g.start_slave()
        master_end = g.ends()[0]
        wait_until(lambda: g.ends()[1] == master_end, what="the slave to catch up")
        store = g.workdir / "{}" / "broker-a" / "store"
        assert commit_log_bytes(Path(str(store).format("slave")), master_end) == \
            commit_log_bytes(Path(str(store).format("master")), master_end)
    finally:
        g.stop()



def test_a_slave_holds_its_masters_topics_and_serves_pulls_of_replicated_messages(sync_group: Group):
    g = sync_group
    from proto import common_pb2
    with Producer(g.ns.addr) as producer:
        for i in range(20):
            producer.send(Message(TOPIC, f"s{i}".encode()), queue=MessageQueue(TOPIC, "broker-a", 0))
    slave = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(g.slave.addr))
    wait_until(lambda: TOPIC in {c.topic_name for c in slave.GetAllTopicConfig(common_pb2.Empty(), timeout=5).configs},
               what="the slave to copy the master's topics")

    def pulled() -> list[bytes]:
        code, bodies = g.slave_pull()
        assert code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), code
        return bodies

    # every acknowledged message within moments: the master tells the slave its new confirm offset as it moves,
    # and the slave dispatches up to it (a moment after, as any broker does after an acknowledgement)
    expected = [f"s{i}".encode() for i in range(20)]
    wait_until(lambda: pulled() == expected, timeout=5, what="the slave to serve every acknowledged message")


def test_with_its_master_gone_a_group_is_read_from_its_slave(sync_group: Group):
    g = sync_group
    with Producer(g.ns.addr) as producer:
        sent = [f"f{i}".encode() for i in range(100)]
        for body in sent:
            producer.send(Message(TOPIC, body))
    wait_until(lambda: int(runtime(g.ns.addr, g.slave)["topicCount"]) > 0, what="the slave to copy the topics")
    g.wait_slave_shows_everything()
    g.master.stop(signal.SIGKILL)
    with PullConsumer(g.ns.addr, group="failover-reader") as consumer:
        def read_all() -> list[bytes]:
            got: list[bytes] = []
            try:
                for mq in consumer.queues(TOPIC):
                    got += [m.body for m in consumer.pull(mq, 0, 64).messages]
            except MQClientError:
                return []  # the master still in the route: refused or unreachable until the name server drops it
            return got

        got = wait_until(read_all, timeout=20, what="the slave to serve the group's queues")
    assert sorted(got) == sorted(sent)



def test_a_topic_deleted_and_made_again_on_the_master_is_served_so_by_its_slave(sync_group: Group):
    """The deletion travels in the replicated log: the slave's queue of the deleted topic kept the old messages,
    and the topic made again (offsets 0..) was taken for messages it already held."""
    g = sync_group
    queue = MessageQueue(TOPIC, "broker-a", 0)
    with Producer(g.ns.addr) as producer:
        for body in (b"old-0", b"old-1", b"old-2"):
            producer.send(Message(TOPIC, body), queue=queue)
    with Admin(g.ns.addr) as admin:
        admin.delete_topic(TOPIC, "DefaultCluster")
        admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=4, write_queue_nums=4)
        wait_until(lambda: TOPIC in admin.topic_list(), what="the topic's route again")
    with Producer(g.ns.addr) as producer:
        assert producer.send(Message(TOPIC, b"new-0"), queue=queue).queue_offset == 0
    g.wait_slave_shows_everything()
    wait_until(lambda: g.slave_pull() == (ResponseCode.SUCCESS, [b"new-0"]), timeout=10,
               what="the slave to serve the topic made again")


def test_a_slave_copies_its_masters_consumer_offsets(sync_group: Group):
    g = sync_group
    with PullConsumer(g.ns.addr, group="offsets-group") as consumer:
        consumer.commit(MessageQueue(TOPIC, "broker-a", 2), 7)
    slave = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(g.slave.addr))

    def slave_offset() -> int:
        return slave.QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
            consumer_group="offsets-group", topic=TOPIC, queue_id=2), timeout=5).offset

    wait_until(lambda: slave_offset() == 7, timeout=25, what="the slave to copy the committed offset (every 10 s)")


def test_a_group_deleted_on_the_master_is_deleted_on_its_slave(tmp_path: Path):
    """The slave's copy only added and updated groups: one deleted on the master stayed on its slave, and was
    served again after a failover."""
    g = Group(tmp_path, "ASYNC_MASTER")
    from proto import common_pb2
    slave = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(g.slave.addr))

    def slave_groups() -> set[str]:
        return {c.group_name for c in slave.GetAllSubscriptionGroup(common_pb2.Empty(), timeout=5).groups}

    try:
        with Admin(g.ns.addr) as admin:
            admin.update_subscription_group("doomed", brokers=["broker-a"])
            admin.update_subscription_group("kept", brokers=["broker-a"])
            wait_until(lambda: {"doomed", "kept"} <= slave_groups(), timeout=15, what="the slave to copy the groups")
            admin.delete_subscription_group("doomed", brokers=["broker-a"])
        wait_until(lambda: "doomed" not in slave_groups(), timeout=15, what="the slave to delete the group")
        assert "kept" in slave_groups()
    finally:
        g.stop()


def test_in_sync_replicas_lets_a_send_complete_with_any_n_minus_one_slaves(tmp_path: Path):
    g = Group(tmp_path, "SYNC_MASTER", inSyncReplicas=2)  # the master and one slave, whichever is ahead
    second = start_broker(tmp_path / "slave2", "broker-a", g.ns.addr, brokerId=2, brokerRole="SLAVE",
                          haMasterAddress=g.ha_addr, **g.settings)
    try:
        g.create_topic(4)
        g.wait_slaves(2)
        with Producer(g.ns.addr, retry_times=0) as producer:
            g.slave.stop(signal.SIGKILL)
            assert producer.send(Message(TOPIC, b"one slave is enough")).status is SendStatus.SEND_OK
            second.stop(signal.SIGKILL)
            wait_until(lambda: runtime(g.ns.addr, g.master)["haSlaves"] == "0", what="the master to see both go")
            with pytest.raises(MQClientError, match="SLAVE_NOT_AVAILABLE"):
                producer.send(Message(TOPIC, b"none is not"))
    finally:
        if second.alive:
            second.stop(strict=False)
        g.stop()


def test_a_slave_with_tiered_storage_configured_expires_its_commitlog_as_its_master_does(tmp_path: Path):
    """Master and slave of one broker.conf, tiered storage on: only the master uploads. The slave's uploader, never
    started, held its commitlog's expiry at its checkpoint 0, so a slave kept every segment until its disk filled."""
    g = Group(tmp_path, "ASYNC_MASTER", tieredStoreEnable="true", tieredBackendServiceProvider="posix",
              fileReservedTime="0.0003", deleteWhen="*", cleanResourceInterval="200", tieredStoreGroupCommitAge="100")
    try:
        g.create_topic(2)
        with Producer(g.ns.addr) as producer:
            for i in range(0, 4000, 50):  # ~4 MB: four 1 MiB segments
                producer.send_batch([Message(TOPIC, f"t{j}".encode() * 100) for j in range(i, i + 50)])
        wait_until(lambda: g.ends()[1] >= g.ends()[0], what="the slave to catch up")

        def segments(who: str) -> int:
            return len(list((g.workdir / who / "broker-a" / "store" / "commitlog").iterdir()))

        wait_until(lambda: segments("master") == 1, timeout=20, what="the master to expire what its tier holds")
        wait_until(lambda: segments("slave") == 1, timeout=20, what="the slave to expire its copy as well")
    finally:
        g.stop()


def test_a_slave_copies_topics_static_topic_mappings_and_groups_as_soon_as_they_change(tmp_path: Path):
    """A slave watches its master's topic, mapping and group versions (WaitMetadataChange) and copies them when they
    move, not at its next periodic copy (up to 5 s later: a master dying then lost a topic made in it, with the
    delayed messages and KV shards that needed it, on the slave that took over, and a FIFO group's order)."""
    from proto import common_pb2

    g = Group(tmp_path, "ASYNC_MASTER")
    try:
        slave = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(g.slave.addr))

        def slave_has(topic: str) -> bool:
            return topic in {c.topic_name for c in slave.GetAllTopicConfig(common_pb2.Empty(), timeout=5).configs}

        def slave_orderly(group: str) -> bool:
            groups = slave.GetAllSubscriptionGroup(common_pb2.Empty(), timeout=5).groups
            return any(g.group_name == group and g.consume_message_orderly for g in groups)

        def slave_maps(topic: str) -> bool:
            return slave.GetTopicQueueMapping(broker_pb2.TopicRequest(topic=topic), timeout=5).HasField("detail")

        with Admin(g.ns.addr) as admin:
            admin.create_topic("WatchFirstT", brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
            wait_until(lambda: slave_has("WatchFirstT"), timeout=15, what="a first copy")  # (a periodic one, before)
            admin.create_topic("WatchedT", brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
            wait_until(lambda: slave_has("WatchedT"), timeout=2.5, interval=0.02,
                       what="the new topic on the slave well before the next periodic copy")
            admin.update_static_topic("WatchedStaticT", 2, brokers=["broker-a"])
            wait_until(lambda: slave_maps("WatchedStaticT") and slave_has("WatchedStaticT"), timeout=2.5,
                       interval=0.02, what="the new static topic's mapping on the slave")
            # A FIFO group's order: a promoted slave without it handed a message group to every consumer at once.
            admin.update_subscription_group("WatchedFifoG", brokers=["broker-a"], consume_message_orderly=True)
            wait_until(lambda: slave_orderly("WatchedFifoG"), timeout=2.5, interval=0.02,
                       what="the new FIFO group on the slave")
    finally:
        g.stop()


SHORT_RETENTION = {"fileReservedTime": "0.0003", "deleteWhen": "*", "cleanResourceInterval": "200"}


def _master_without_its_first_segments(tmp_path: Path, before_filling: Callable[[Producer], None] = lambda _p: None,
                                       **settings: str) -> Group:
    """A master alone, with ~2.4 MB sent in 1 MiB segments and all but the segment being written expired."""
    g = Group(tmp_path, "ASYNC_MASTER", with_slave=False, **SHORT_RETENTION, **settings)
    try:
        g.create_topic(2)
        with Producer(g.ns.addr) as producer:
            before_filling(producer)
            for i in range(0, 4000, 50):
                producer.send_batch([Message(TOPIC, f"t{j}".encode() * 100) for j in range(i, i + 50)])
        wait_until(lambda: int(runtime(g.ns.addr, g.master)["commitLogMinOffset"]) >= 2 * SEGMENT, timeout=20,
                   what="the master to expire its first segments")
    except BaseException:
        g.stop()
        raise
    return g


def _queue_bodies(addr: str, queue_id: int) -> tuple[int, list[bytes]]:
    """A broker's min offset of ``TOPIC``'s queue and the bodies from there to its end."""
    stub = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(addr))
    offset = low = stub.GetMinOffset(broker_pb2.QueueRequest(topic=TOPIC, queue_id=queue_id), timeout=5).offset
    bodies: list[bytes] = []
    while True:
        answer = stub.PullMessage(broker_pb2.PullMessageRequest(
            consumer_group="copy-reader", topic=TOPIC, queue_id=queue_id, queue_offset=offset, max_msg_nums=64),
            timeout=5)
        got = [m.body for m in PulledMessages(answer.records)]
        if answer.code != ResponseCode.SUCCESS or not got:
            return low, bodies
        bodies += got
        offset = answer.next_begin_offset


@pytest.mark.parametrize(("flush", "store_type"), [("ASYNC_FLUSH", "default"), ("SYNC_FLUSH", "defaultRocksDB")])
def test_an_empty_slave_copies_the_log_of_a_master_whose_first_segments_expired(tmp_path: Path, flush: str,
                                                                                store_type: str):
    """A new slave of a master whose oldest segments expired was refused for good ("replica commitlog ends at 0,
    outside the master's ..."): no replica could ever be added once a master ran past its retention. It starts
    its log at the master's oldest segment now, its queues where the master's begin, and goes on after a kill."""
    g = _master_without_its_first_segments(tmp_path, flushDiskType=flush, storeType=store_type)
    try:
        g.slave = g.start_slave()
        with Producer(g.ns.addr) as producer:
            producer.send_batch([Message(TOPIC, f"after{j}".encode()) for j in range(50)])
        g.wait_slave_shows_everything()
        low = int(runtime(g.ns.addr, g.master)["commitLogMinOffset"])
        assert int(runtime(g.ns.addr, g.slave)["commitLogMinOffset"]) == low
        for queue_id in (0, 1):
            master_low, master_bodies = _queue_bodies(g.master.addr, queue_id)
            assert master_low > 0 and master_bodies
            wait_until(lambda q=queue_id, want=(master_low, master_bodies): _queue_bodies(g.slave.addr, q) == want,
                       what=f"queue {queue_id} on the slave as on the master")  # (dispatched a moment later)
        g.slave.stop(signal.SIGKILL)
        g.slave = g.start_slave()
        with Producer(g.ns.addr) as producer:
            producer.send_batch([Message(TOPIC, f"later{j}".encode()) for j in range(50)])
        end = g.wait_slave_shows_everything()
        assert g.ends() == (end, end)
        wait_until(lambda: _queue_bodies(g.slave.addr, 0) == _queue_bodies(g.master.addr, 0),
                   what="queue 0 on the restarted slave as on the master")
    finally:
        g.stop()


def test_an_empty_replica_of_an_older_release_is_refused_saying_so(tmp_path: Path):
    """A replica that cannot begin its log where the master's does (an older release: no starts_anywhere) would
    be sent bytes at an offset it cannot place, and stop on an assertion: it is refused, saying why."""
    g = _master_without_its_first_segments(tmp_path)
    try:
        hello = ha_pb2.ReplicaHandshake(cluster_name="DefaultCluster", broker_name="broker-a", broker_id=1,
                                        commit_log_end=0, mapped_file_size=SEGMENT)
        with grpc.insecure_channel(g.ha_addr) as channel, pytest.raises(grpc.RpcError) as refused:
            next(iter(ha_pb2_grpc.HaServiceStub(channel).Replicate(
                iter([ha_pb2.ReplicaFrame(handshake=hello)]), timeout=10)))
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "older release" in (refused.value.details() or "")
    finally:
        g.stop()


def test_an_empty_slave_copies_the_timers_only_the_expired_segments_held(tmp_path: Path):
    """A pending timer recorded in an expired segment is in the master's timer store only: a slave copying the log
    from the oldest segment left would lack it, and so would a master it became. It copies the store first."""
    due = int(time.time() * 1000) + 3_600_000
    g = _master_without_its_first_segments(
        tmp_path, lambda producer: producer.send(Message(TOPIC, b"in an hour", deliver_at_ms=due)))
    try:
        assert runtime(g.ns.addr, g.master)["timerPending"] == "1"
        g.slave = g.start_slave()
        g.wait_slave_shows_everything()
        assert runtime(g.ns.addr, g.slave)["timerPending"] == "1"
    finally:
        g.stop()


def test_a_record_larger_than_64_mib_replicates(tmp_path: Path):
    """Frames are cut at 1 MiB whatever the records: with frames of whole appends (tried this session), one record
    over the replica's 64 MiB channel limit stopped replication for good and a SYNC_MASTER failed every later send
    (the failover review)."""
    g = Group(tmp_path, "SYNC_MASTER", mappedFileSizeCommitLog=str(128 << 20), maxMessageSize=str(80 << 20))
    try:
        g.create_topic(1)
        g.wait_slaves(1)
        with Producer(g.ns.addr, send_timeout_ms=20_000) as producer:
            assert producer.send(Message(TOPIC, b"L" * (65 << 20))).status is SendStatus.SEND_OK
            assert producer.send(Message(TOPIC, b"after")).status is SendStatus.SEND_OK
        end = g.wait_slave_shows_everything()
        assert g.ends() == (end, end)
    finally:
        g.stop()


def test_a_slave_leaves_offsets_it_does_not_hold_to_its_master(tmp_path: Path) -> None:
    """A lagging group read from the slave while its tiered master was down: the slave (no tier of its own) answered
    its offset as moved to the slave's local min, and the consumer skipped, for good, what the master's tier still
    held. A replica never moves an offset now (upstream's offsetCheckInSlave=false): the consumer waits for the
    master, which serves the offset from its tier."""
    g = Group(tmp_path, "ASYNC_MASTER", tieredStoreEnable="true", tieredBackendServiceProvider="posix",
              fileReservedTime="0.0003", deleteWhen="*", cleanResourceInterval="200", tieredStoreGroupCommitAge="100")
    try:
        g.create_topic(1)
        with Producer(g.ns.addr) as producer:
            for i in range(0, 3000, 50):
                producer.send_batch([Message(TOPIC, b"%d-" % j + b"y" * 1000) for j in range(i, i + 50)])
        g.wait_slave_shows_everything()
        segments = lambda who: len(list((tmp_path / who / "broker-a" / "store" / "commitlog").iterdir()))  # noqa: E731
        wait_until(lambda: segments("master") == 1 and segments("slave") == 1, timeout=60,
                   what="the local commitlogs to expire on both replicas")
        g.master.stop()
        with PullConsumer(g.ns.addr, group="lagging") as consumer:
            (mq,) = consumer.queues(TOPIC)
            answer = consumer.pull(mq, 0, 8)  # the master is unreachable: the slave answers
            assert answer.status is PullStatus.NO_NEW_MSG and answer.next_begin_offset == 0, answer
            g.master = start_broker(tmp_path / "master", "broker-a", g.ns.addr, brokerRole="ASYNC_MASTER",
                                    **g.settings)
            wait_until(lambda: consumer.pull(mq, 0, 8).messages, timeout=30, what="the master to serve offset 0")
            assert consumer.pull(mq, 0, 8).messages[0].body.startswith(b"0-")
    finally:
        g.stop()


def test_a_sync_master_restarted_with_timers_due_is_ready_at_once(tmp_path: Path) -> None:
    """Timers due while a SYNC_MASTER was down are appended as it starts, and it waited for them to be dispatched,
    which needs its slave's copy, and the slave can connect only once the start is done: every such start took 30 s
    with nothing served. Ready at once now, and every delayed message is delivered once."""
    ns = start_namesrv(tmp_path / "namesrv")
    ha_port = free_port()
    settings = {"registerNameServerPeriod": 1000, "brokerNotActiveTimeoutMillis": 3000}
    master = start_broker(tmp_path / "master", "broker-a", ns.addr, brokerRole="SYNC_MASTER", haListenPort=ha_port,
                          **settings)
    slave = start_broker(tmp_path / "slave", "broker-a", ns.addr, brokerId=1, brokerRole="SLAVE",
                         haMasterAddress=f"127.0.0.1:{ha_port}", **settings)
    try:
        wait_until(lambda: runtime(ns.addr, master)["haSlaves"] == "1", what="the slave to connect")
        with Admin(ns.addr) as admin:
            admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=2, write_queue_nums=2)
            wait_until(lambda: TOPIC in admin.topic_list(), what="the topic's route")
        due = int(time.time() * 1000) + 1500
        with Producer(ns.addr) as producer:
            sent = {producer.send(Message(TOPIC, b"d%02d" % i, deliver_at_ms=due)).msg_id for i in range(20)}
        master.stop(signal.SIGKILL)
        time.sleep(max(0.0, due / 1000 + 0.5 - time.time()))  # due while it is down: delivered as it starts
        started = time.monotonic()
        master = start_broker(tmp_path / "master", "broker-a", ns.addr, brokerRole="SYNC_MASTER",
                              haListenPort=ha_port, **settings)
        assert time.monotonic() - started < 15, "the master's start waited for dispatch its slave had to confirm"
        bodies: list[bytes] = []
        with PullConsumer(ns.addr, group="timer-reader") as consumer:
            def read_all() -> bool:
                bodies.clear()
                for mq in consumer.queues(TOPIC):
                    result = consumer.pull(mq, 0, 64)
                    bodies.extend(m.body for m in result.messages)
                return len(bodies) >= len(sent)
            wait_until(read_all, timeout=20, what="every delayed message delivered")
        assert sorted(bodies) == [b"d%02d" % i for i in range(20)]
    finally:
        for daemon in (slave, master, ns):
            if daemon.alive:
                daemon.stop(strict=False)


def test_a_replica_of_a_master_whose_segment_size_changed_holds_its_segments_as_they_are(tmp_path):
    """mappedFileSizeCommitLog changed on a master with data (its old segments keep their size): an empty replica
    with the new size rolled at its own size, so its segments ended elsewhere than the master's. At a larger size it
    skipped records at the first old segment's end (acknowledged messages missing on it), at a smaller one it
    stopped with an assertion. It makes each segment the size of the master's now."""
    g = Group(tmp_path, "ASYNC_MASTER", with_slave=False)
    try:
        g.create_topic(1)
        for i in range(24):  # 768 KiB of the first 1 MiB segment
            assert _send_one(g.master.addr, b"%03d" % i * 10_000) == ResponseCode.SUCCESS
        g.master.stop()
        g.settings["mappedFileSizeCommitLog"] = 2 * SEGMENT
        g.master = start_broker(tmp_path / "master", "broker-a", g.ns.addr, brokerRole="ASYNC_MASTER", **g.settings)
        g.ha_addr = runtime(g.ns.addr, g.master)["haServerAddr"]
        for i in range(24, 48):  # fills the old segment, rolls to a new one of 2 MiB
            assert _send_one(g.master.addr, b"%03d" % i * 10_000) == ResponseCode.SUCCESS
        g.slave = g.start_slave()
        end = g.wait_slave_shows_everything()
        master_store, slave_store = (tmp_path / name / "broker-a" / "store" for name in ("master", "slave"))
        sizes = [(p.name, p.stat().st_size) for p in sorted((master_store / "commitlog").iterdir())]
        assert sizes == [(p.name, p.stat().st_size) for p in sorted((slave_store / "commitlog").iterdir())]
        assert len({size for _, size in sizes}) == 2
        assert commit_log_bytes(slave_store, end) == commit_log_bytes(master_store, end)
        wait_until(lambda: g.slave_pull()[0] == ResponseCode.SUCCESS, what="the slave's copy of the topic")
        assert g.slave_pull()[1] == [b"%03d" % i * 10_000 for i in range(48)]
    finally:
        g.stop()


@pytest.mark.parametrize(("flush", "store_type"), [("ASYNC_FLUSH", "default"), ("SYNC_FLUSH", "defaultRocksDB")])
def test_an_empty_replica_starts_at_the_oldest_segment_of_a_master_whose_segment_size_changed(
        tmp_path: Path, flush: str, store_type: str):
    """A master whose mappedFileSizeCommitLog changed, its older segments expired: the oldest left starts at an
    offset that is no multiple of the new size. An empty replica (of the new size) stopped on an assertion ("not a
    segment's start") and never copied anything. It starts its first segment where and as large as the master's,
    and recovers from it after a kill."""
    g = Group(tmp_path, "ASYNC_MASTER", with_slave=False, flushDiskType=flush, storeType=store_type,
              **SHORT_RETENTION)
    try:
        g.create_topic(2)

        def fill(first: int, count: int) -> None:
            with Producer(g.ns.addr) as producer:
                for i in range(first, first + count, 50):
                    producer.send_batch([Message(TOPIC, f"t{j}".encode() * 100) for j in range(i, i + 50)])

        fill(0, 2500)  # 1 MiB segments: the second one written
        g.master.stop()
        g.settings["mappedFileSizeCommitLog"] = str(3 * SEGMENT // 2)
        g.master = start_broker(tmp_path / "master", "broker-a", g.ns.addr, brokerRole="ASYNC_MASTER", **g.settings)
        g.ha_addr = runtime(g.ns.addr, g.master)["haServerAddr"]
        fill(2500, 6000)  # the old segment filled, then segments of 1.5 MiB from 2 MiB on
        low = wait_until(lambda: (m := int(runtime(g.ns.addr, g.master)["commitLogMinOffset"])) >= 7 * SEGMENT // 2
                         and m, timeout=20, what="the master to expire its segments below 3.5 MiB")
        assert low % (3 * SEGMENT // 2) != 0
        g.slave = g.start_slave()
        with Producer(g.ns.addr) as producer:
            producer.send_batch([Message(TOPIC, f"after{j}".encode()) for j in range(50)])
        g.wait_slave_shows_everything()
        assert int(runtime(g.ns.addr, g.slave)["commitLogMinOffset"]) == int(runtime(g.ns.addr, g.master)[
            "commitLogMinOffset"])
        g.slave.stop(signal.SIGKILL)
        g.slave = g.start_slave()
        with Producer(g.ns.addr) as producer:
            producer.send_batch([Message(TOPIC, f"later{j}".encode()) for j in range(50)])
        g.wait_slave_shows_everything()
        for queue_id in (0, 1):
            wait_until(lambda q=queue_id: _queue_bodies(g.slave.addr, q) == _queue_bodies(g.master.addr, q),
                       what=f"queue {queue_id} on the slave as on the master")
    finally:
        g.stop()


def _send_one(addr: str, body: bytes) -> int:
    stub = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(addr))
    return stub.SendMessage(broker_pb2.SendMessageRequest(topic=TOPIC, queue_id=0, bodies=[body]), timeout=10).code

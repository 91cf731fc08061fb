"""Controller mode (issue 16): a name server with --enable-controller elects the master of a broker group; a master
that dies or is cut off is replaced by an in-sync replica, nothing acknowledged is lost, and the old master rejoins
as a replica, cutting the tail the new master never had, until both commitlogs are byte-identical."""

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from client import (
    Admin,
    Message,
    MessageQueue,
    MQClientError,
    Producer,
    PullConsumer,
    SimpleConsumer,
    TransactionResolution,
)
from client.results import PullStatus
from common.message_properties import encode_properties
from common.receipt_handle import ReceiptHandle
from common.response_code import ResponseCode
from proto import broker_pb2, broker_pb2_grpc, common_pb2, pop_pb2, pop_pb2_grpc
from proto.v2 import definition_pb2 as v2d
from proto.v2 import service_pb2 as v2
from proto.v2 import service_pb2_grpc as sg
from tests.admin_cli.helpers import fails, ok, ok_json
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until
from tests.ha.test_replication import commit_log_bytes, runtime
from tests.proxy.conftest import start_proxy
from tests.transaction.test_transactions import CHECKS, COMMIT, ROLLBACK, Checker, bodies
from tests.transaction.test_transactions import TOPIC as TX_TOPIC

SEGMENT = 256 * 1024  # small segments: the copies and the cut cross several
TOPIC = "FailoverT"
QUEUES = 2


def runtime_or_none(ns: str, broker: Daemon) -> dict[str, str] | None:
    try:
        return runtime(ns, broker)
    except Exception:  # a restarting replica: not answering for a moment
        return None


def send(addr: str, queue_id: int, bodies: list[bytes], timeout: float = 10.0, topic: str = TOPIC,
         addressing: int = broker_pb2.ADDRESSING_UNSPECIFIED) -> broker_pb2.SendMessageResponse:
    stub = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(addr))
    return stub.SendMessage(broker_pb2.SendMessageRequest(topic=topic, queue_id=queue_id, bodies=bodies,
                                                          addressing=addressing), timeout=timeout)


class ReplicaGroup:
    """broker-a: two replicas under a controller; broker-b: a plain broker beside them."""

    def __init__(self, workdir: Path, **settings: object) -> None:
        self.workdir = workdir
        self.ns = start_namesrv(workdir / "namesrv", "--enable-controller", "--controller-store-path",
                                str(workdir / "controller"))
        self.settings = {"mappedFileSizeCommitLog": SEGMENT, "registerNameServerPeriod": 1000,
                         "brokerNotActiveTimeoutMillis": 3000, "slaveReadEnable": "true",
                         "enableControllerMode": "true", "controllerAddr": self.ns.addr,
                         "controllerHeartBeatTimeoutMills": 3000, "haMaxTimeSlaveNotCatchup": 15000,
                         "syncFlushTimeout": 1000, **settings}
        self.replicas: dict[int, Daemon] = {}
        try:
            self.start(1)
            wait_until(lambda: self.role(1) == "MASTER", timeout=15, what="replica 1 to be elected master")
            self.start(2)
            self.plain = start_broker(workdir / "plain", "broker-b", self.ns.addr, registerNameServerPeriod=1000)
        except BaseException:  # nobody else stops what was started: a failed set-up left a name server running
            for daemon in [*self.replicas.values(), self.ns]:
                daemon.stop(strict=False)
            raise

    def start(self, broker_id: int) -> Daemon:
        self.replicas[broker_id] = start_broker(self.workdir / f"r{broker_id}", "broker-a", self.ns.addr,
                                                brokerId=broker_id, **self.settings)
        return self.replicas[broker_id]

    def info(self, broker_id: int) -> dict[str, str] | None:
        return runtime_or_none(self.ns.addr, self.replicas[broker_id])

    def role(self, broker_id: int) -> str:
        info = self.info(broker_id)
        return info.get("replicaRole", "") if info else ""

    def end(self, broker_id: int) -> int:
        info = self.info(broker_id)
        return int(info["commitLogMaxOffset"]) if info else -1

    def store(self, broker_id: int) -> Path:
        return self.workdir / f"r{broker_id}" / "broker-a" / "store"

    def in_sync(self, master: int, members: str) -> bool:
        info = self.info(master)
        return bool(info) and info.get("replicaRole") == "MASTER" and info.get("syncStateSet") == members

    def wait_replicas_reach_end_of(self, master: int) -> None:
        """Until every other live replica's commitlog reaches ``master``'s end as of now."""
        end = self.end(master)
        others = [b for b, d in self.replicas.items() if b != master and d.alive]
        wait_until(lambda: all(self.end(b) >= end for b in others), timeout=15,
                   what=f"replicas {others} to reach the end {end} of replica {master}")

    def byte_identical(self, a: int, b: int) -> bool:
        end_a, end_b = self.end(a), self.end(b)
        return end_a == end_b > 0 and commit_log_bytes(self.store(a), end_a) == commit_log_bytes(self.store(b), end_b)

    def stop(self) -> None:
        for d in [*self.replicas.values(), self.plain, self.ns]:
            if d.alive:
                os.kill(d.proc.pid, signal.SIGCONT)
                d.stop(strict=False)


def started_group(tmp_path: Path, **settings: object) -> Iterator[ReplicaGroup]:
    g = ReplicaGroup(tmp_path, **settings)
    try:
        wait_until(lambda: g.in_sync(1, "1,2"), timeout=20, what="replica 2 to join the in-sync set")
        with Admin(g.ns.addr) as admin:
            admin.create_topic(TOPIC, brokers=["broker-a", "broker-b"], read_queue_nums=QUEUES,
                               write_queue_nums=QUEUES)
        # The slave copies topics every few seconds: a promoted slave serves the topics it copied.
        wait_until(lambda: _has_topic(g.replicas[2].addr), timeout=20, what="the slave to copy the topic")
        yield g
    finally:
        g.stop()


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ReplicaGroup]:
    yield from started_group(tmp_path)


# Failover under both flush modes (SYNC_FLUSH: a replica acknowledges what it fsynced, the master confirms what it
# flushed), both store types (the RocksDB consume queue is rebuilt on promotion the same way), and with the KV store
# and tiered storage on (a promoted replica starts uploading; reads go through the tiered facade).
@pytest.fixture(params=[("ASYNC_FLUSH", "default", False), ("SYNC_FLUSH", "defaultRocksDB", False),
                        ("ASYNC_FLUSH", "default", True)],
                ids=["ASYNC_FLUSH-default", "SYNC_FLUSH-defaultRocksDB", "kv-tiered"])
def any_group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ReplicaGroup]:
    flush, store_type, features = request.param
    extra = {"kvEnable": "true", "tieredStoreEnable": "true", "tieredBackendServiceProvider": "posix"} if features \
        else {}
    yield from started_group(tmp_path, flushDiskType=flush, storeType=store_type, **extra)


def _has_topic(addr: str, topic: str = TOPIC) -> bool:
    stub = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(addr))
    return any(c.topic_name == topic for c in stub.GetAllTopicConfig(common_pb2.Empty(), timeout=5).configs)


def consumed_bodies(ns: str) -> list[bytes]:
    bodies: list[bytes] = []
    with PullConsumer(ns, group="failover-reader") as consumer:
        for queue_id in range(QUEUES):
            mq, offset = MessageQueue(TOPIC, "broker-a", queue_id), 0
            while True:
                result = consumer.pull(mq, offset, 64)
                if result.status is not PullStatus.FOUND:
                    break
                bodies += [m.body for m in result.messages]
                offset = result.next_begin_offset
    return bodies


def all_acknowledged_consumable(ns: str, acked: list[bytes], what: str) -> None:
    """Every acknowledged message is consumable exactly once; on timeout, say which are missing or extra."""
    seen: list[bytes] = []

    def check() -> bool:
        seen[:] = consumed_bodies(ns)
        return sorted(seen) == sorted(acked)

    try:
        wait_until(check, timeout=15, what=what)
    except TimeoutError:
        missing, extra = set(acked) - set(seen), set(seen) - set(acked)
        raise AssertionError(f"{what}: consumed {len(seen)} of {len(acked)}; missing {len(missing)} "
                             f"{sorted(missing)[:3]}, extra {len(extra)} {sorted(extra)[:3]}") from None


def send_acknowledged(g: ReplicaGroup, master: int, prefix: str, n: int) -> list[bytes]:
    """``n`` messages the master stored and its live replicas have. A send answered FLUSH_SLAVE_TIMEOUT (stored on
    the master, the slave's confirmation later than syncFlushTimeout: 1 s here, to keep the sends to a paused slave
    short, which a busy machine can miss) counts once every live replica's commitlog reached the master's end."""
    acked = []
    for i in range(0, n, 10):
        bodies = [f"{prefix}-{j}".encode() * 20 for j in range(i, i + 10)]
        answer = send(g.replicas[master].addr, i % QUEUES, bodies)
        if answer.code == ResponseCode.FLUSH_SLAVE_TIMEOUT:
            g.wait_replicas_reach_end_of(master)
        else:
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        acked += bodies
    return acked


def first_acknowledged_send(addr: str, deadline_s: float) -> float:
    """Seconds until a send to ``addr`` is acknowledged."""
    started = time.monotonic()

    def attempt() -> bool:
        try:
            return send(addr, 0, [b"probe"], timeout=2).code == ResponseCode.SUCCESS
        except grpc.RpcError:
            return False

    wait_until(attempt, timeout=deadline_s, interval=0.1, what=f"a send acknowledged by {addr}")
    return time.monotonic() - started


def send_unacknowledged(g: ReplicaGroup, master: int, batches: int) -> list[bytes]:
    """Sends the master stores and cannot get acknowledged (its slave is paused): more bytes than the replication
    stream holds in flight, so the master's log gets a tail the slave never received."""
    def one(i: int) -> list[bytes]:
        bodies = [b"unacked-%d-%d-" % (i, j) + b"x" * 10_000 for j in range(10)]
        answer = send(g.replicas[master].addr, i % QUEUES, bodies)
        assert answer.code != ResponseCode.SUCCESS, "acknowledged without its in-sync slave"
        return bodies

    with ThreadPoolExecutor(16) as pool:
        return [body for bodies in pool.map(one, range(batches)) for body in bodies]


def test_master_killed_an_in_sync_replica_takes_over_and_the_old_master_cuts_its_tail(any_group: ReplicaGroup):
    g = any_group
    acked = send_acknowledged(g, 1, "before", 300)
    os.kill(g.replicas[2].proc.pid, signal.SIGSTOP)
    unacked = send_unacknowledged(g, 1, 120)
    diverged_end = g.end(1)
    g.replicas[1].kill()
    os.kill(g.replicas[2].proc.pid, signal.SIGCONT)

    took = first_acknowledged_send(g.replicas[2].addr, deadline_s=10)
    assert g.role(2) == "MASTER" and took < 10
    assert g.end(2) < diverged_end - 1_000_000  # the old master's tail was never replicated
    acked += [b"probe"]
    acked += send_acknowledged(g, 2, "after", 100)
    # Every acknowledged message, once; of the unacknowledged, those that reached the slave before it paused.
    seen: list[bytes] = []

    def every_acknowledged_seen() -> bool:  # the last ones are dispatched a moment after their acknowledgement
        seen[:] = consumed_bodies(g.ns.addr)
        return set(acked) <= set(seen)

    wait_until(every_acknowledged_seen, timeout=15, what="every acknowledged message consumable")
    assert len(seen) == len(set(seen)) and set(seen) <= set(acked) | set(unacked)
    acked = seen

    g.start(1)  # the old master rejoins: a replica now, cutting what replica 2 never had
    wait_until(lambda: g.role(1) == "SLAVE", timeout=15, what="the old master to rejoin as a slave")
    wait_until(lambda: g.byte_identical(1, 2), timeout=15, what="the two commitlogs to be byte-identical")
    assert "commitlog_truncated" in g.replicas[1].log()

    # And once more: the new master dies too, the rejoined replica (in sync again) takes over; nothing is lost.
    wait_until(lambda: g.in_sync(2, "1,2"), timeout=20, what="replica 1 to rejoin the in-sync set")
    acked += send_acknowledged(g, 2, "third", 50)
    g.replicas[2].kill()
    first_acknowledged_send(g.replicas[1].addr, deadline_s=10)
    acked += [b"probe"]
    all_acknowledged_consumable(g.ns.addr, acked, "every acknowledged message after the second failover")


def test_a_master_paused_past_its_lease_acknowledges_nothing_and_steps_down(group: ReplicaGroup):
    g = group
    acked = send_acknowledged(g, 1, "before", 50)
    os.kill(g.replicas[1].proc.pid, signal.SIGSTOP)
    first_acknowledged_send(g.replicas[2].addr, deadline_s=15)
    acked += [b"probe"]

    answers: list[object] = []

    def late_send() -> None:  # queued in the paused master's socket: it runs when the master resumes
        try:
            answers.append(send(g.replicas[1].addr, 1, [b"sent-to-the-deposed-master"], timeout=20).code)
        except grpc.RpcError as exc:
            answers.append(exc.code())

    sender = threading.Thread(target=late_send)
    sender.start()
    time.sleep(0.3)  # let the request reach the paused process's socket before it resumes
    os.kill(g.replicas[1].proc.pid, signal.SIGCONT)
    sender.join(30)
    assert answers and answers[0] != ResponseCode.SUCCESS, answers
    wait_until(lambda: g.role(1) == "SLAVE", timeout=20, what="the deposed master to step down and follow")
    wait_until(lambda: g.byte_identical(1, 2), timeout=15, what="the two commitlogs to be byte-identical")
    assert b"sent-to-the-deposed-master" not in consumed_bodies(g.ns.addr)
    assert sorted(consumed_bodies(g.ns.addr)) == sorted(acked)


def test_an_operator_moves_the_master_with_electMaster(group: ReplicaGroup):
    g = group
    acked = send_acknowledged(g, 1, "before", 100)
    data = ok_json(g.ns.addr, "getSyncStateSet", "-b", "broker-a")
    assert data["master_id"] == 1 and data["sync_state_set"] == [1, 2]
    assert [r["broker_id"] for r in data["replicas"] if r["alive"] and r["in_sync_state_set"]] == [1, 2]
    ok(g.ns.addr, "electMaster", "-b", "broker-a", "-i", "2")
    first_acknowledged_send(g.replicas[2].addr, deadline_s=10)
    acked += [b"probe"]
    try:
        wait_until(lambda: g.role(1) == "SLAVE", timeout=20, what="the old master to follow the new one")
    except TimeoutError as exc:  # (timed out once in a loaded full run: its log says where the demotion stood)
        raise TimeoutError(f"{exc}; the old master's log ends:\n{g.replicas[1].log()[-4000:]}") from None
    wait_until(lambda: g.byte_identical(1, 2), timeout=15, what="the two commitlogs to be byte-identical")
    all_acknowledged_consumable(g.ns.addr, acked, "every acknowledged message after the switch")

    def roles() -> list[tuple[int, str, str]]:
        rows = ok_json(g.ns.addr, "clusterList")
        return sorted((r["broker_id"], r["addr"], r["role"]) for r in rows if r["broker_name"] == "broker-a")

    wait_until(lambda: roles() == [(0, g.replicas[2].addr, "MASTER"), (1, g.replicas[1].addr, "SLAVE")],
               timeout=10, what="clusterList to show the new master as id 0 and the old one as replica 1")
    assert "7" in fails(g.ns.addr, "electMaster", "-b", "broker-a", "-i", "7")  # no such replica: one line


def test_clients_busy_through_an_electMaster_hear_no_refusal(group: ReplicaGroup):
    """The deposed master restarts as a replica: through its server's 5 s grace its open streams went on answering
    every receive NO_PERMISSION "not its group's master" and sends and KV writes "another replica is master now",
    all raised to users (the failover review: 48 receive errors, 41 KV writes). Its calls are cut at once now (the
    SDK takes that as a failover), a receive refused so skips the broker and looks up the route again, and a send to
    a queue of broker-a waits for the new master (it failed at once: every FIFO send through mqproxy failed so)."""
    g = group
    errors: list[str] = []
    rounds = [0]
    stop = threading.Event()

    def busy() -> None:
        with Producer(g.ns.addr, send_timeout_ms=10_000) as producer, \
                SimpleConsumer(g.ns.addr, "ElectBusyG", TOPIC) as consumer:
            while not stop.is_set():
                try:
                    producer.send(Message(TOPIC, b"busy"))
                    # a queue of its own (a FIFO message group's, a keyed send's) waits for the group's new master
                    producer.send(Message(TOPIC, b"busy-on-a"), queue=MessageQueue(TOPIC, "broker-a", 0))
                    received = consumer.receive(16, invisible_ms=60_000, wait_ms=100)
                except MQClientError as exc:
                    errors.append(str(exc))
                    continue
                # An ack may fail across the switch (its message comes again after its invisible time: at least
                # once): the old master refuses it in the moment before it cuts its calls, or the new one's copy
                # of the POP state predates the handle.
                with contextlib.suppress(MQClientError):
                    if received:
                        consumer.ack(received)
                rounds[0] += 1

    worker = threading.Thread(target=busy)
    worker.start()
    try:
        wait_until(lambda: rounds[0] >= 20, timeout=20, what="the clients to be busy")
        ok(g.ns.addr, "electMaster", "-b", "broker-a", "-i", "2")
        wait_until(lambda: g.role(1) == "SLAVE", timeout=30, what="the old master to follow the new one")
        after = rounds[0]
        wait_until(lambda: rounds[0] >= after + 20, timeout=30, what="the clients to go on with the new master")
    finally:
        stop.set()
        worker.join(30)
    assert not errors, errors[:5]


def test_a_killed_slave_leaves_the_in_sync_set_and_rejoins_once_caught_up(group: ReplicaGroup):
    g = group
    send_acknowledged(g, 1, "before", 50)
    confirmed = int(g.info(1)["commitLogConfirmOffset"])
    g.replicas[2].kill()
    # Until the set shrinks a send waits for the dead member and times out: never acknowledged, never visible.
    answer = send(g.replicas[1].addr, 0, [b"while-the-slave-is-in-the-set"])
    if answer.code != ResponseCode.SUCCESS:
        assert answer.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, answer.remark
        assert int(g.info(1)["commitLogConfirmOffset"]) in (confirmed, g.end(1))
    wait_until(lambda: g.in_sync(1, "1"), timeout=10, what="the master to drop the dead slave from the set")
    send_acknowledged(g, 1, "alone", 50)  # a set of the master alone commits at once
    g.start(2)
    wait_until(lambda: g.in_sync(1, "1,2"), timeout=20, what="the slave to rejoin the set once caught up")
    wait_until(lambda: g.byte_identical(1, 2), timeout=15, what="the two commitlogs to be byte-identical")


def test_a_group_lost_whole_waits_for_its_last_master_and_loses_nothing(group: ReplicaGroup):
    """Both replicas die (a power loss): the master first, so the controller elects the slave, which dies before
    it took a write. The old master, back first, holds everything acknowledged but may not be elected (the last
    master could have acknowledged more): it stays fenced and says why, until the last master is back."""
    g = group
    acked = send_acknowledged(g, 1, "before", 100)
    g.replicas[1].kill()
    wait_until(lambda: g.role(2) == "MASTER", timeout=15, what="replica 2 to be elected")
    g.replicas[2].kill()
    earlier = len(g.replicas[1].log())  # the restart appends to the same log
    g.start(1)
    wait_until(lambda: "group_has_no_master" in g.replicas[1].log()[earlier:], timeout=10,
               what="the restarted replica 1 to say it has no master")
    line = next(x for x in g.replicas[1].log()[earlier:].splitlines() if "group_has_no_master" in x)
    assert "sync_state_set=[2] in_set=False" in line, line
    assert "controller_replica_not_electable broker=broker-a id=1" in g.ns.log()
    assert g.role(1) != "MASTER"
    g.start(2)
    wait_until(lambda: g.role(2) == "MASTER", timeout=20, what="the last master to be elected again")
    acked += send_acknowledged(g, 2, "after", 20)
    all_acknowledged_consumable(g.ns.addr, acked, "everything acknowledged before and after the loss")
    wait_until(lambda: g.in_sync(2, "1,2"), timeout=20, what="replica 1 to rejoin the set")
    wait_until(lambda: g.byte_identical(1, 2), timeout=15, what="the two commitlogs to be byte-identical")


def send_delayed(addr: str, bodies: list[bytes], due_ms: int) -> broker_pb2.SendMessageResponse:
    props = encode_properties({"TIMER_DELIVER_MS": str(due_ms)})
    stub = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(addr))
    return stub.SendMessage(broker_pb2.SendMessageRequest(topic=TOPIC, queue_id=0, bodies=bodies,
                                                          properties=[props] * len(bodies)), timeout=10)


def test_a_promoted_replica_delivers_only_the_delayed_messages_its_master_had_not(any_group: ReplicaGroup):
    """A slave's timer store holds every timer its master stored; the master's markers take out the ones it
    delivered, so the new master delivers each delayed message once: the rest, and none again."""
    g = any_group
    now_ms = int(time.time() * 1000)
    delivered = [b"delivered-%d" % i for i in range(20)]
    later = [b"later-%d" % i for i in range(5)]
    assert send_delayed(g.replicas[1].addr, delivered, now_ms + 500).code == ResponseCode.SUCCESS
    assert send_delayed(g.replicas[1].addr, later, now_ms + 60_000).code == ResponseCode.SUCCESS
    wait_until(lambda: sorted(consumed_bodies(g.ns.addr)) == sorted(delivered), timeout=10,
               what="the master to deliver the first 20")
    # deleted (so their marker is in the master's commitlog), and the slave has it all
    wait_until(lambda: int((g.info(1) or {}).get("timerPending", -1)) == len(later), timeout=10,
               what="the master to delete the delivered timers")
    wait_until(lambda: g.end(2) == g.end(1), timeout=10, what="the slave to copy the master's markers")
    g.replicas[1].kill()
    first_acknowledged_send(g.replicas[2].addr, deadline_s=10)  # promoted
    # A probe due at once: timers deliver in due order, so the 20 would come before it if they were pending.
    assert send_delayed(g.replicas[2].addr, [b"probe-delayed"], int(time.time() * 1000)).code == ResponseCode.SUCCESS
    wait_until(lambda: b"probe-delayed" in consumed_bodies(g.ns.addr), timeout=10, what="the probe's delivery")
    seen = consumed_bodies(g.ns.addr)
    assert sorted(seen) == sorted([*delivered, b"probe", b"probe-delayed"]), "delivered again after the failover"
    wait_until(lambda: int((g.info(2) or {}).get("timerPending", -1)) == len(later), timeout=10,
               what="the new master to hold only the later timers")


def pop(addr: str, group: str, invisible_ms: int, topic: str = TOPIC,
        addressing: int = broker_pb2.ADDRESSING_UNSPECIFIED) -> list[ReceiptHandle]:
    """What one pop of queue 0 hands out (nothing while the broker refuses, as a replica does)."""
    stub = pop_pb2_grpc.PopServiceStub(grpc.insecure_channel(addr))
    answer = stub.PopMessage(pop_pb2.PopMessageRequest(group=group, topic=topic, queue_id=0, max_msg_nums=32,
                                                       invisible_time_ms=invisible_ms, addressing=addressing),
                             timeout=10)
    return [ReceiptHandle.decode(p.receipt_handle) for p in answer.popped]


def ack(addr: str, group: str, handles: list[ReceiptHandle], topic: str = TOPIC) -> pop_pb2.AckMessageResponse:
    stub = pop_pb2_grpc.PopServiceStub(grpc.insecure_channel(addr))
    return stub.AckMessage(pop_pb2.AckMessageRequest(group=group, topic=topic,
                                                     receipt_handles=[h.encode() for h in handles]), timeout=10)


def pop_state(addr: str) -> bytes:
    stub = pop_pb2_grpc.PopServiceStub(grpc.insecure_channel(addr))
    return stub.GetPopState(pop_pb2.PopStateRequest(), timeout=10).records


INVISIBLE_MS = 25_000  # outlasts the slave's copy (up to 5 s) and the failover on a loaded machine


def test_a_promoted_replica_hands_out_only_what_its_master_had_not_popped(group: ReplicaGroup):
    """The slave copies its master's POP state: promoted, it hands out neither what the master acked nor what it
    had in flight (until that message's invisible time passes), and takes the master's receipt handles."""
    g, name = group, "pop-failover"
    with Admin(g.ns.addr) as admin:
        admin.update_subscription_group(name, brokers=["broker-a"])
    assert send(g.replicas[1].addr, 0, [b"m-%d" % i for i in range(20)]).code == ResponseCode.SUCCESS
    handed = wait_until(lambda: pop(g.replicas[1].addr, name, invisible_ms=INVISIBLE_MS), timeout=10,
                        what="the master to hand out the 20")
    assert [h.queue_offset for h in handed] == list(range(20))
    assert ack(g.replicas[1].addr, name, handed[:5]).code == ResponseCode.SUCCESS  # 0..4 done, 5..19 in flight
    master_state = pop_state(g.replicas[1].addr)
    wait_until(lambda: pop_state(g.replicas[2].addr) == master_state, timeout=15, interval=0.2,
               what="the slave to copy the master's POP state")
    g.replicas[1].kill()
    first_acknowledged_send(g.replicas[2].addr, deadline_s=15)  # promoted; the probe lands at offset 20

    fresh = wait_until(lambda: pop(g.replicas[2].addr, name, invisible_ms=60_000), timeout=10, interval=0.2,
                       what="the new master to hand out the probe")
    assert [h.queue_offset for h in fresh] == [20], "handed out again what the old master had popped"
    assert ack(g.replicas[2].addr, name, handed[5:6] + handed[10:]).code == ResponseCode.SUCCESS  # old handles
    # 6..9 were never acked: handed out again once their invisible time passes, as their second delivery
    again = wait_until(lambda: pop(g.replicas[2].addr, name, invisible_ms=60_000), timeout=INVISIBLE_MS / 1000 + 10,
                       interval=0.2,
                       what="the messages in flight at the failover to come due")
    assert [(h.queue_offset, h.reconsume_times) for h in again] == [(6, 1), (7, 1), (8, 1), (9, 1)]


def elect_replica_2_holding_the_pop_state(g: ReplicaGroup) -> None:
    """electMaster to replica 2 once it copied the master's POP state; returns when the name server routes broker-a
    to it (a client's cached route still names the old master)."""
    master_state = pop_state(g.replicas[1].addr)
    wait_until(lambda: pop_state(g.replicas[2].addr) == master_state, timeout=15, interval=0.2,
               what="the slave to copy the master's POP state")
    ok(g.ns.addr, "electMaster", "-b", "broker-a", "-i", "2")
    wait_until(lambda: g.role(1) == "SLAVE" and g.role(2) == "MASTER", timeout=20, what="the switch")
    with Admin(g.ns.addr) as admin:
        wait_until(lambda: any(b.broker_name == "broker-a" and b.broker_addrs.get(0) == g.replicas[2].addr
                               for b in admin.topic_route(TOPIC).broker_datas), timeout=15,
                   what="the name server to route broker-a to its new master")


def test_an_ack_through_mqproxy_after_an_electMaster_goes_to_the_new_master(group: ReplicaGroup):
    """mqproxy's cached route named the old master for up to 30 s: an ack made after the switch was refused there
    (NO_PERMISSION: not its group's master) and its message handed out again, and receives failed alike. The proxy
    asks the group's new master once the old one says it is not."""
    g, name = group, "proxy-failover"
    with Admin(g.ns.addr) as admin:
        admin.update_subscription_group(name, brokers=["broker-a"])
    assert send(g.replicas[1].addr, 0, [b"held"]).code == ResponseCode.SUCCESS
    proxy = start_proxy(g.workdir / "mqproxy", g.ns.addr)
    try:
        with grpc.insecure_channel(proxy.addr) as channel:
            stub = sg.MessagingServiceStub(channel)
            request = v2.ReceiveMessageRequest(
                group=v2d.Resource(name=name), message_queue=v2d.MessageQueue(topic=v2d.Resource(name=TOPIC), id=-1),
                filter_expression=v2d.FilterExpression(type=v2d.TAG, expression="*"), batch_size=8,
                invisible_duration=Duration(seconds=60))

            def received() -> list[v2d.Message]:
                return [a.message for a in stub.ReceiveMessage(request, timeout=10) if a.HasField("message")]

            (message,) = wait_until(received, timeout=15, what="the message through the proxy")
            elect_replica_2_holding_the_pop_state(g)
            answer = stub.AckMessage(v2.AckMessageRequest(
                group=v2d.Resource(name=name), topic=v2d.Resource(name=TOPIC), entries=[v2.AckMessageEntry(
                    message_id=message.system_properties.message_id,
                    receipt_handle=message.system_properties.receipt_handle)]), timeout=15)
            assert answer.status.code == v2d.Code.OK, answer
    finally:
        proxy.stop()


def test_sdk_acks_and_recalls_after_an_electMaster_go_to_the_new_master(group: ReplicaGroup):
    """The SDK's cached route named the old master for up to 30 s: acks, changes of invisible time and recalls made
    after the switch were refused there (NO_PERMISSION: not its group's master) until the route expired, and the
    messages came again (or, recalled, were delivered all the same). They are asked at the new master."""
    g, name = group, "sdk-failover"
    with Admin(g.ns.addr) as admin:
        admin.update_subscription_group(name, brokers=["broker-a"])
    with Producer(g.ns.addr) as producer, SimpleConsumer(g.ns.addr, name, TOPIC) as consumer:
        for i in range(3):
            producer.send(Message(TOPIC, b"held%d" % i), queue=MessageQueue(TOPIC, "broker-a", 0))
        delayed = producer.send(Message(TOPIC, b"recalled", deliver_at_ms=int(time.time() * 1000) + 120_000),
                                queue=MessageQueue(TOPIC, "broker-a", 0))
        got: list = []
        wait_until(lambda: got.extend(consumer.receive(8, invisible_ms=60_000)) or len(got) == 3, timeout=15,
                   what="the three messages")
        g.wait_replicas_reach_end_of(1)  # (the delayed message too)
        elect_replica_2_holding_the_pop_state(g)
        consumer.ack(got[0])
        consumer.change_invisible(got[1], 60_000)
        consumer.ack_async([got[1], got[2]]).result(15)
        assert producer.recall(TOPIC, delayed.recall_handle)


def test_a_promoted_replica_keeps_what_its_master_popped_of_a_static_topic(group: ReplicaGroup):
    """As above for a logic queue the group leads: the copied POP state is in physical terms and fitted at
    promotion through the logic queue's item on this broker, so the new master hands out only what came after."""
    g, name, topic = group, "pop-failover-static", "FailoverStaticT"
    logic = {"topic": topic, "addressing": broker_pb2.LOGIC}
    with Admin(g.ns.addr) as admin:
        admin.update_static_topic(topic, 1, brokers=["broker-a"])
        admin.update_subscription_group(name, brokers=["broker-a"])
    wait_until(lambda: send(g.replicas[1].addr, 0, [b"m-%d" % i for i in range(20)], **logic).code
               == ResponseCode.SUCCESS, timeout=10, what="the master to take sends to the logic queue")
    handed = wait_until(lambda: pop(g.replicas[1].addr, name, INVISIBLE_MS, **logic), timeout=10,
                        what="the master to hand out the 20")
    assert len(handed) == 20
    assert ack(g.replicas[1].addr, name, handed[:5], topic).code == ResponseCode.SUCCESS
    master_state = pop_state(g.replicas[1].addr)
    wait_until(lambda: pop_state(g.replicas[2].addr) == master_state and _has_topic(g.replicas[2].addr, topic),
               timeout=15, interval=0.2, what="the slave to copy the master's POP state and the static topic")
    g.replicas[1].kill()
    first_acknowledged_send(g.replicas[2].addr, deadline_s=15)  # promoted

    assert send(g.replicas[2].addr, 0, [b"probe-static"], **logic).code == ResponseCode.SUCCESS
    fresh = wait_until(lambda: pop(g.replicas[2].addr, name, 60_000, **logic), timeout=10, interval=0.2,
                       what="the new master to hand out the probe")
    assert [h.queue_offset for h in fresh] == [handed[-1].queue_offset + 1], "handed out again what was popped"
    assert ack(g.replicas[2].addr, name, handed[5:], topic).code == ResponseCode.SUCCESS  # the master's handles


@pytest.fixture
def tx_group(tmp_path: Path) -> Iterator[ReplicaGroup]:
    # No slave is paused here, and a half send must be on the replica before the kill: a busy machine's slave gets
    # the time it needs instead of the group's 1 s (a FLUSH_SLAVE_TIMEOUT fails the transaction's send).
    yield from started_group(tmp_path, **CHECKS, syncFlushTimeout=10_000)


def test_a_promoted_replica_checks_back_the_transactions_its_master_left_open(tx_group: ReplicaGroup):
    """Half messages and their ends are commitlog records, so the replica has them: once promoted it asks the
    producer about the open ones and delivers each committed message once, the rolled back one never."""
    g, topic = tx_group, TX_TOPIC  # the Checker expects it
    with Admin(g.ns.addr) as admin:
        admin.create_topic(topic, brokers=["broker-a"], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        wait_until(lambda: topic in admin.topic_list(), what=f"route of {topic}")
    wait_until(lambda: _has_topic(g.replicas[2].addr, topic), timeout=20, what="the slave to copy the topic")
    checker = Checker({b"open-commit": COMMIT, b"open-rollback": ROLLBACK})
    with Producer(g.ns.addr, transaction_checker=checker) as producer:
        committed = producer.begin_transaction()
        committed.send(Message(topic, b"committed"))
        committed.commit()
        for body in (b"open-commit", b"open-rollback"):
            producer.begin_transaction().send(Message(topic, body))  # left open: checked after transactionTimeOut
        g.replicas[1].kill()  # before the first check could come
        wait_until(lambda: g.role(2) == "MASTER", timeout=15, what="replica 2 to be elected")
        wait_until(lambda: b"open-commit" in bodies(g.ns.addr, topic) and checker.checks_of(b"open-rollback")
                   and g.info(2)["transactionHalfPending"] == "0", timeout=20,
                   what="the new master to check back both open transactions")
        g.start(1)
        wait_until(lambda: g.in_sync(2, "1,2"), timeout=20, what="the old master to rejoin the set")
        checks = list(checker.calls)
        time.sleep(4 * CHECKS["transactionCheckInterval"] / 1000)  # more checks would come by now
        assert checker.calls == checks
        assert checker.checked() == {b"open-commit", b"open-rollback"}  # the committed one is never asked about
    assert bodies(g.ns.addr, topic) == [b"committed", b"open-commit"]


def test_a_delayed_message_to_a_topic_the_replica_had_not_copied_is_delivered_after_failover(group: ReplicaGroup):
    """Topic configs reach a replica by its periodic copy; the timer records with the commitlog. A delayed message
    sent to a topic made in the master's last seconds was dropped by the promoted replica when due ("the topic no
    longer exists"), though acknowledged. It is delivered, and readable once the topic is made again."""
    g = group
    topic = "BornLateT"
    with Admin(g.ns.addr) as admin:
        admin.create_topic(topic, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
    stub = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(g.replicas[1].addr))
    props = encode_properties({"TIMER_DELIVER_MS": str(int(time.time() * 1000) + 2000)})
    sent = stub.SendMessage(broker_pb2.SendMessageRequest(topic=topic, queue_id=0, bodies=[b"delayed"],
                                                          properties=[props]), timeout=10)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    wait_until(lambda: g.end(2) == g.end(1), timeout=10, what="the replica to have the timer record")
    copied = _has_topic(g.replicas[2].addr, topic)
    g.replicas[1].kill()
    wait_until(lambda: g.role(2) == "MASTER", timeout=20, what="replica 2 to be promoted")
    wait_until(lambda: (g.info(2) or {}).get("timerDelivered") == "1", timeout=15, what="the delayed delivery")
    assert (g.info(2) or {}).get("timerDropped") == "0"
    if not copied:  # (the copy may have come first on a slow machine: then nothing was at stake)
        with Admin(g.ns.addr) as admin:
            admin.create_topic(topic, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
    with PullConsumer(g.ns.addr, group="born-late") as consumer:
        found = wait_until(lambda: consumer.pull(MessageQueue(topic, "broker-a", 0), 0, 8).messages, timeout=10,
                           what="the delayed message on the new master")
    assert [m.body for m in found] == [b"delayed"]


@pytest.fixture
def kv_group(tmp_path: Path) -> Iterator[ReplicaGroup]:
    yield from started_group(tmp_path, kvEnable="true")


def test_kv_values_put_just_after_the_store_provisioned_itself_survive_a_failover(kv_group: ReplicaGroup):
    """The KV store's first use makes its shards (a static topic mapping) on the master; a replica copies mappings
    as soon as they change (WaitMetadataChange). At its periodic copy (5 s) a master dying first took the mapping
    with it: the promoted replica held every acknowledged value but no shard had a leader, for good."""
    from client import KVClient

    g = kv_group
    keys = [b"key-%d" % i for i in range(10)]
    with KVClient(g.ns.addr) as kv:
        for key in keys:
            kv.put(key, b"v-" + key)
    wait_until(lambda: g.end(2) == g.end(1), timeout=10, what="the replica to have the puts")
    g.replicas[1].kill()
    wait_until(lambda: g.role(2) == "MASTER", timeout=20, what="replica 2 to be promoted")
    with KVClient(g.ns.addr, rpc_timeout_ms=3000) as kv:
        got = wait_until(lambda: _kv_values(kv, keys), timeout=20, what="the values on the new master")
    assert got == [b"v-" + key for key in keys]


def _kv_values(kv, keys: list[bytes]) -> list[bytes] | None:  # type: ignore[no-untyped-def]
    try:
        return kv.get_batch(keys)
    except Exception:  # no leader for a shard yet (the route moves to the new master)
        return None


def queue_contents(ns: str) -> dict[int, tuple[int, list[bytes]]] | None:
    """Each queue's min offset and its messages from there, as a new consumer reads them; None while unreadable."""
    contents: dict[int, tuple[int, list[bytes]]] = {}
    try:
        with PullConsumer(ns, group="failover-reader") as consumer:
            for queue_id in range(QUEUES):
                mq = MessageQueue(TOPIC, "broker-a", queue_id)
                offset = low = consumer.min_offset(mq)
                bodies: list[bytes] = []
                while (result := consumer.pull(mq, offset, 64)).status is PullStatus.FOUND:
                    bodies += [m.body for m in result.messages]
                    offset = result.next_begin_offset
                contents[queue_id] = (low, bodies)
    except Exception:  # a route still naming the dead master
        return None
    return contents


@pytest.mark.parametrize(("kv_store_type", "tiered"), [("rocksdb", False), ("memory", False), ("rocksdb", True)],
                         ids=["rocksdb", "memory", "tiered"])
def test_a_new_replica_of_a_master_whose_first_segments_expired_joins_and_can_take_over(tmp_path: Path,
                                                                                        kv_store_type: str,
                                                                                        tiered: bool):
    """A replica lost whole (a new machine takes its place, its store empty) while its master ran past its
    retention: the empty replica copies the master's KV values and pending timers (the expired records made them),
    then the log from the oldest segment left (it was refused for good), joins the in-sync set, and once elected
    serves every queue from where the old master's began, every KV value, and the delayed message when due."""
    from client import KVClient

    extra = {"tieredStoreEnable": "true", "tieredBackendServiceProvider": "posix", "tieredStoreGroupCommitAge": 100,
             "tieredStoreFilePath": str(tmp_path / "tier")} if tiered else {}  # (one tier, shared by the replicas)
    groups = started_group(tmp_path, kvEnable="true", kvStoreType=kv_store_type, fileReservedTime="0.0003",
                           deleteWhen="*", cleanResourceInterval="200", **extra)
    g = next(groups)
    try:
        keys = [b"key-%d" % i for i in range(20)]
        with KVClient(g.ns.addr) as kv:
            for key in keys:
                kv.put(key, b"v-" + key)
        due_ms = int(time.time() * 1000) + 25_000
        assert send_delayed(g.replicas[1].addr, [b"delayed"], due_ms).code == ResponseCode.SUCCESS
        g.replicas[2].kill()
        wait_until(lambda: g.in_sync(1, "1"), timeout=10, what="the master to drop the lost replica")
        shutil.rmtree(tmp_path / "r2")
        for i in range(120):  # ~1.2 MB in 256 KiB segments
            answer = send(g.replicas[1].addr, i % QUEUES, [b"filler-%d-%d-" % (i, j) + b"x" * 1000 for j in range(10)])
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        wait_until(lambda: int(g.info(1)["commitLogMinOffset"]) >= 2 * SEGMENT, timeout=20,
                   what="the master to expire its first segments")
        g.start(2)
        wait_until(lambda: g.in_sync(1, "1,2"), timeout=20, what="the new replica to join the in-sync set")
        assert (g.info(2) or {}).get("timerPending") == "1"
        acked = send_acknowledged(g, 1, "joined", 50)
        before = queue_contents(g.ns.addr)
        # (with a tier the queues still begin at 0: the tier holds what the local segments lost)
        assert before is not None and all((low == 0) is tiered for low, _ in before.values())
        assert set(acked) <= {body for _, bodies in before.values() for body in bodies}
        g.replicas[1].kill()
        wait_until(lambda: g.role(2) == "MASTER", timeout=20, what="the new replica to be elected")
        with KVClient(g.ns.addr, rpc_timeout_ms=3000) as kv:
            got = wait_until(lambda: _kv_values(kv, keys), timeout=20, what="the values on the new master")
        assert got == [b"v-" + key for key in keys]
        wait_until(lambda: queue_contents(g.ns.addr) == before, timeout=20,
                   what="every queue on the new master as it was on the old one")
        wait_until(lambda: b"delayed" in consumed_bodies_from_min(g.ns.addr), timeout=40,
                   what="the delayed message, due after the failover, delivered by the new master")
        assert time.time() * 1000 >= due_ms
    finally:
        groups.close()


def consumed_bodies_from_min(ns: str) -> list[bytes]:
    contents = queue_contents(ns)
    return [body for _, bodies in contents.values() for body in bodies] if contents else []


def test_sends_reach_the_new_master_soon_after_a_hung_master_is_replaced(group: ReplicaGroup):
    """A send whose try took its whole deadline on a hung (SIGSTOPped) master left the route as it was: every send
    went to that master until the route expired (30 s), 20 s after the controller had elected the other replica."""
    g, topic = group, "HungMasterT"
    with Admin(g.ns.addr) as admin:
        admin.create_topic(topic, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
    wait_until(lambda: _has_topic(g.replicas[2].addr, topic), timeout=20, what="the slave to copy the topic")
    with Producer(g.ns.addr, send_timeout_ms=1500) as producer:
        producer.send(Message(topic, b"warm"))
        os.kill(g.replicas[1].proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        while True:
            try:
                sent = producer.send(Message(topic, b"after"))
                break
            except MQClientError:
                assert time.monotonic() - stopped < 25, "no send acknowledged within 25 s of the master's hang"
        took = time.monotonic() - stopped
    assert sent.queue.broker_name == "broker-a"
    assert took < 15, f"the first send after the hang was acknowledged after {took:.1f} s (the route's 30 s)"


@pytest.fixture
def last_check_group(tmp_path: Path) -> Iterator[ReplicaGroup]:
    """Checks every 8 s, one only: the first check's answer decides."""
    yield from started_group(tmp_path, transactionTimeOut=1000, transactionCheckInterval=8000, transactionCheckMax=1,
                             syncFlushTimeout=10_000)


def test_a_check_answered_across_an_electMaster_reaches_the_new_master(last_check_group: ReplicaGroup):
    """A check's answer went to the broker that asked, every try: after an electMaster the old master (restarting as
    a replica) held each try 5 s then said busy, and the new master discarded, on its last check, a transaction the
    producer's checker answered COMMIT (the transactions review). The old master refuses at once now, and the answer
    goes on to the group's master the route names."""
    g, topic = last_check_group, "TxAcrossElectT"
    with Admin(g.ns.addr) as admin:
        admin.create_topic(topic, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: topic in admin.topic_list(), what=f"route of {topic}")
    wait_until(lambda: _has_topic(g.replicas[2].addr, topic), timeout=20, what="the slave to copy the topic")
    asked, release = threading.Event(), threading.Event()

    def checker(msg) -> TransactionResolution:
        asked.set()
        release.wait(30)  # the producer looks its transaction up while the master moves
        return COMMIT

    with Producer(g.ns.addr, transaction_checker=checker) as producer:
        producer.begin_transaction().send(Message(topic, b"order-42"))
        assert asked.wait(30), "the master never checked the open transaction"
        ok(g.ns.addr, "electMaster", "-b", "broker-a", "-i", "2")
        wait_until(lambda: g.role(2) == "MASTER", timeout=30, what="replica 2 to be elected")
        release.set()
        wait_until(lambda: bodies(g.ns.addr, topic) == [b"order-42"], timeout=30,
                   what="the transaction committed at the new master")
    info = g.info(2)
    assert info is not None and info["transactionDiscarded"] == "0"

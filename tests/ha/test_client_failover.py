"""The SDK fails over by itself when a broker group's master is down.

Unit tests first (``client/replica_health.py`` with an injected clock; the SDK against fake brokers), then real
daemons: a group (SYNC_MASTER + SLAVE with slaveReadEnable) whose master is SIGKILLed while the name server still
routes to it (brokerNotActiveTimeoutMillis is long here: the SDK must notice by itself, not wait for the route).
"""

import logging
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from client import Admin, KVClient, Message, MessageQueue, MQClientError, Producer, PullConsumer, PushConsumer
from client.consumer.pull_message_service import PullSettings
from client.replica_health import DownAddresses, channel_connected, live_master, read_replica, unreachable
from client.results import PullStatus, SendStatus
from common.response_code import ResponseCode
from proto import broker_pb2, common_pb2, kv_pb2, kv_pb2_grpc
from tests.client.fakes import FakeCluster, addr_of, broker_data, mapping_info, normal_route
from tests.cluster import Daemon, start_broker, wait_until
from tests.ha.test_replication import Group, runtime

ROUTED = "60000"  # brokerNotActiveTimeoutMillis: the dead master stays in the route for the whole test
TOPIC = "FailoverT"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- ReplicaHealth ---------------------------------------------------------------------------------
def test_a_down_mark_holds_for_its_time_and_an_answer_clears_it():
    clock = Clock()
    down = DownAddresses(hold_s=3.0, clock=clock)
    down.mark("a:1")
    assert down.is_down("a:1") and not down.is_down("b:1")
    clock.now += 2.9
    assert down.is_down("a:1")
    clock.now += 0.2
    assert not down.is_down("a:1")  # expired: the next call finds out whether it is back
    down.mark("a:1")
    down.clear("a:1")
    assert not down.is_down("a:1")


def test_reads_go_to_the_master_else_the_lowest_live_slave():
    group = {0: "m", 1: "s1", 2: "s2"}
    assert read_replica(group, lambda a: False) == "m"
    assert read_replica(group, lambda a: a == "m") == "s1"
    assert read_replica(group, lambda a: a in ("m", "s1")) == "s2"
    assert read_replica(group, lambda a: True) == "m"  # all marked: a mark is a guess, try the master
    assert read_replica({2: "s2", 1: "s1"}, lambda a: False) == "s1"  # no master in the route
    assert read_replica({}, lambda a: False) is None
    assert live_master(group, lambda a: a == "m") is None
    assert live_master({1: "s1"}, lambda a: False) is None
    assert live_master(group, lambda a: False) == "m"


def test_only_a_dead_broker_counts_as_unreachable():
    assert unreachable(grpc.StatusCode.UNAVAILABLE, lambda: True)
    assert unreachable(grpc.StatusCode.DEADLINE_EXCEEDED, lambda: False)  # never connected: a dead host
    assert not unreachable(grpc.StatusCode.DEADLINE_EXCEEDED, lambda: True)  # connected: a slow broker
    assert not unreachable(grpc.StatusCode.INTERNAL, lambda: False)
    assert not unreachable(grpc.StatusCode.CANCELLED, lambda: False)


def test_a_channel_counts_as_connected_only_while_ready():
    server = grpc.server(ThreadPoolExecutor(1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as live, grpc.insecure_channel("127.0.0.1:1") as dead:
            assert not channel_connected(live)  # never used: idle, not connected
            grpc.channel_ready_future(live).result(timeout=5)
            assert channel_connected(live)
            with pytest.raises(grpc.FutureTimeoutError):
                grpc.channel_ready_future(dead).result(timeout=0.5)
            assert not channel_connected(dead)
    finally:
        server.stop(None)


# -- the SDK against fake brokers ------------------------------------------------------------------
def group_route(topic: str, queues: int, groups: dict[str, dict[int, str]]) -> common_pb2.TopicRouteData:
    """A normal topic on ``groups``: broker name -> {broker id: fake broker name}."""
    route = normal_route(topic, dict.fromkeys(groups, queues))
    del route.broker_datas[:]
    for name, replicas in groups.items():
        route.broker_datas.append(common_pb2.BrokerData(cluster="DefaultCluster", broker_name=name, broker_addrs={
            i: addr_of(b) for i, b in replicas.items()}))
    return route


def stored(queue_id: int = 0) -> broker_pb2.SendMessageResponse:
    return broker_pb2.SendMessageResponse(code=ResponseCode.SUCCESS, queue_id=queue_id, queue_offset=7)


def test_a_send_skips_a_group_whose_master_failed_until_its_mark_expires():
    fake = FakeCluster("broker-a", "broker-b")
    fake.routes["N"] = group_route("N", 1, {"broker-a": {0: "broker-a"}, "broker-b": {0: "broker-b"}})
    fake.brokers["broker-a"].down = True
    fake.brokers["broker-b"].handlers["SendMessage"] = lambda req: stored()
    clock = Clock()
    with Producer("fake-namesrv:9876", use_streams=False) as producer:
        fake.install(producer.client)
        producer.client.down = DownAddresses(hold_s=3.0, clock=clock)
        for _ in range(6):
            assert producer.send(Message("N", b"m")).queue.broker_name == "broker-b"
        assert len(fake.brokers["broker-a"].requests("SendMessage")) == 1  # one failure, then skipped
        clock.now += 3.1
        fake.brokers["broker-a"].down = False
        fake.brokers["broker-a"].handlers["SendMessage"] = lambda req: stored()
        names = {producer.send(Message("N", b"m")).queue.broker_name for _ in range(4)}
    assert names == {"broker-a", "broker-b"}  # back to the master once its mark expired


def test_a_send_the_slave_stored_nothing_for_is_never_a_success():
    """SLAVE_NOT_AVAILABLE: stored on the master only. Another group is tried; with none, the caller sees it."""
    fake = FakeCluster("broker-a")
    fake.routes["N"] = group_route("N", 1, {"broker-a": {0: "broker-a"}})
    fake.brokers["broker-a"].handlers["SendMessage"] = lambda req: broker_pb2.SendMessageResponse(
        code=ResponseCode.SLAVE_NOT_AVAILABLE, remark="no slave is connected: stored on the master only")
    with Producer("fake-namesrv:9876", use_streams=False) as producer:
        fake.install(producer.client)
        with pytest.raises(MQClientError, match="SLAVE_NOT_AVAILABLE"):
            producer.send(Message("N", b"m"))
    assert len(fake.brokers["broker-a"].requests("SendMessage")) == 1  # no second copy on the same group


def static_failover_route(with_master: bool) -> common_pb2.TopicRouteData:
    """Static topic S with one logic queue led by broker-a, whose master is there or not (only its slave)."""
    route = common_pb2.TopicRouteData()
    route.queue_datas.append(common_pb2.QueueData(broker_name="broker-a", read_queue_nums=1, write_queue_nums=1,
                                                  perm=6))
    route.broker_datas.append(broker_data("broker-a", with_master))
    route.topic_queue_mapping_by_broker["broker-a"].CopyFrom(mapping_info("S", "broker-a", 1, 1, {0: 0}))
    return route


def test_a_static_send_waits_for_its_leader_group_to_have_a_master_again():
    fake = FakeCluster("broker-a")
    fake.routes["S"] = static_failover_route(with_master=False)
    fake.brokers["broker-a"].handlers["SendMessage"] = lambda req: stored()
    promote = threading.Timer(0.6, lambda: fake.routes.__setitem__("S", static_failover_route(with_master=True)))
    with Producer("fake-namesrv:9876", send_timeout_ms=3000, use_streams=False) as producer:
        fake.install(producer.client)
        start = time.monotonic()
        promote.start()
        result = producer.send(Message("S", b"m"), sharding_key="k")
        took = time.monotonic() - start
    assert result.status is SendStatus.SEND_OK and result.queue_offset == 7
    assert 0.5 < took < 2.8  # soon after the master is back, well before the 3 s timeout (room for a slow machine)
    assert len(fake.brokers["broker-a"].requests("SendMessage")) == 1
    assert fake.fetches.count("S") >= 3  # the route was looked at while waiting


def test_a_static_send_without_a_master_fails_at_its_timeout():
    fake = FakeCluster("broker-a")
    fake.routes["S"] = static_failover_route(with_master=False)
    with Producer("fake-namesrv:9876", send_timeout_ms=1000, use_streams=False) as producer:
        fake.install(producer.client)
        start = time.monotonic()
        with pytest.raises(MQClientError, match="no live master"):
            producer.send(Message("S", b"m"), sharding_key="k")
        took = time.monotonic() - start
    assert 0.7 < took < 2.5  # its own 1 s timeout, not the default 3 s (room for a slow machine)
    assert 2 <= fake.fetches.count("S") <= 20  # polled about every 200 ms, not in a busy loop


def test_a_static_send_refused_by_a_slave_is_retried_at_the_new_master():
    fake = FakeCluster("broker-a", "broker-a-new")
    route = static_failover_route(with_master=True)
    fake.routes["S"] = route
    fake.brokers["broker-a"].handlers["SendMessage"] = lambda req: broker_pb2.SendMessageResponse(
        code=ResponseCode.NO_PERMISSION, remark="broker 127.0.0.1:1 is a slave (brokerRole=SLAVE)")
    fake.brokers["broker-a-new"].handlers["SendMessage"] = lambda req: stored()
    with Producer("fake-namesrv:9876", use_streams=False) as producer:
        fake.install(producer.client)
        producer.client.route("S")
        promoted = common_pb2.TopicRouteData()
        promoted.CopyFrom(route)
        promoted.broker_datas[0].broker_addrs[0] = addr_of("broker-a-new")  # the name server's new id 0
        fake.routes["S"] = promoted
        assert producer.send(Message("S", b"m"), sharding_key="k").status is SendStatus.SEND_OK
    assert [b for b, _ in fake.all_calls("SendMessage")] == ["broker-a", "broker-a-new"]


def test_pulls_and_offset_queries_go_to_the_slave_while_the_master_is_down_and_commits_do_not():
    fake = FakeCluster("broker-a", "broker-a-slave")
    fake.routes["N"] = group_route("N", 1, {"broker-a": {0: "broker-a", 1: "broker-a-slave"}})

    def caught_up(req: broker_pb2.PullMessageRequest) -> broker_pb2.PullMessageResponse:
        return broker_pb2.PullMessageResponse(code=ResponseCode.PULL_NOT_FOUND, next_begin_offset=req.queue_offset)

    for name in fake.brokers:
        fake.brokers[name].handlers["PullMessage"] = caught_up  # type: ignore[assignment]
        fake.brokers[name].handlers["QueryConsumerOffset"] = lambda req: broker_pb2.OffsetResponse(
            code=ResponseCode.SUCCESS, offset=5)
        fake.brokers[name].handlers["UpdateConsumerOffset"] = lambda req: common_pb2.CommandResponse(
            code=ResponseCode.SUCCESS)
    fake.brokers["broker-a"].down = True
    mq = MessageQueue("N", "broker-a", 0)
    clock = Clock()
    with PullConsumer("fake-namesrv:9876", group="g", use_streams=False) as consumer:
        fake.install(consumer.client)
        consumer.client.down = DownAddresses(hold_s=3.0, clock=clock)
        assert consumer.pull(mq, 3).status is PullStatus.NO_NEW_MSG  # failed over within the call
        assert consumer.committed(mq) == 5
        with pytest.raises(MQClientError, match="UNAVAILABLE"):
            consumer.commit(mq, 9)  # a write: the master or nobody
        assert fake.brokers["broker-a-slave"].requests("UpdateConsumerOffset") == []
        assert len(fake.brokers["broker-a-slave"].requests("PullMessage")) == 1
        fake.brokers["broker-a"].down = False
        clock.now += 3.1
        consumer.pull(mq, 3)
        consumer.commit(mq, 9)
    assert len(fake.brokers["broker-a"].requests("PullMessage")) == 2  # the failed one, then back at the master
    assert len(fake.brokers["broker-a"].requests("UpdateConsumerOffset")) == 2


# -- real daemons ----------------------------------------------------------------------------------
def create_topic(ns: str, topic: str, brokers: list[str], queues: int) -> None:
    with Admin(ns) as admin:
        admin.create_topic(topic, brokers=brokers, read_queue_nums=queues, write_queue_nums=queues)
        wait_until(lambda: {q.broker_name for q in admin.topic_route(topic).queue_datas} >= set(brokers)
                   if topic in admin.topic_list() else False, what=f"route of {topic}")


def slave_knows(g: Group, topic: str) -> bool:
    from proto import broker_pb2_grpc
    with grpc.insecure_channel(g.slave.addr) as channel:
        configs = broker_pb2_grpc.BrokerServiceStub(channel).GetAllTopicConfig(common_pb2.Empty(), timeout=5).configs
    return topic in {c.topic_name for c in configs}


def kill_master(g: Group) -> str:
    """SIGKILL the group's master; the name server still routes to it (checked). Returns its address."""
    dead = g.master.addr
    g.master.stop(signal.SIGKILL)
    with Admin(g.ns.addr) as admin:
        groups = {b.broker_name: dict(b.broker_addrs) for b in admin.topic_route(TOPIC).broker_datas}
    assert groups["broker-a"].get(0) == dead, "the test wants the dead master still routed"
    return dead


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    g = Group(tmp_path, "SYNC_MASTER", brokerNotActiveTimeoutMillis=ROUTED)
    try:
        create_topic(g.ns.addr, TOPIC, ["broker-a"], 4)
        wait_until(lambda: runtime(g.ns.addr, g.master)["haSlaves"] == "1", what="the slave to connect")
        yield g
    finally:
        g.stop()


def test_a_pull_consumer_reads_what_the_master_confirmed_from_the_slave(group: Group):
    g = group
    with Producer(g.ns.addr) as producer:
        sent = [f"p{i}".encode() for i in range(200)]
        for body in sent:  # SYNC_MASTER: acknowledged once the slave has it
            producer.send(Message(TOPIC, body))
    wait_until(lambda: slave_knows(g, TOPIC), what="the slave to copy the topic")
    got: list[bytes] = []
    with PullConsumer(g.ns.addr, group="failover-pull") as consumer:
        queues = consumer.queues(TOPIC)
        offsets = {}
        for mq in queues:  # some from the master
            result = consumer.pull(mq, 0, 10)
            got += [m.body for m in result.messages]
            offsets[mq] = result.next_begin_offset
        committed = offsets[queues[0]]
        consumer.commit(queues[0], committed)
        wait_until(lambda: slave_committed(g, queues[0]) == committed, timeout=25,
                   what="the slave to copy the committed offset (every 10 s)")
        g.wait_slave_shows_everything()
        kill_master(g)
        start = time.monotonic()
        for mq in queues:  # the rest from the slave: no call fails, none waits for the route
            while (result := consumer.pull(mq, offsets[mq], 32)).status is PullStatus.FOUND:
                got += [m.body for m in result.messages]
                offsets[mq] = result.next_begin_offset
        assert consumer.committed(queues[0]) == committed > 0  # an offset query, answered by the slave
        took = time.monotonic() - start
        with pytest.raises(MQClientError):
            consumer.commit(queues[0], offsets[queues[0]])  # a write: never to the slave
    assert sorted(got) == sorted(sent)
    assert took < 5.0


def slave_committed(g: Group, mq: MessageQueue) -> int:
    from proto import broker_pb2_grpc
    with grpc.insecure_channel(g.slave.addr) as channel:
        return broker_pb2_grpc.BrokerServiceStub(channel).QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
            consumer_group="failover-pull", topic=mq.topic, queue_id=mq.queue_id), timeout=5).offset


def test_a_push_consumer_keeps_consuming_from_the_slave_and_commits_once_a_master_is_back(group: Group):
    """The consumer has cached as much as flow control lets it (the handler is held) when the master dies: the
    rest comes from the slave. Its commits fail during the outage and land once a master is back."""
    g = group
    topic = "FailoverPush"
    create_topic(g.ns.addr, topic, ["broker-a"], 1)
    total = PullSettings().cached_messages_limit + 300
    sent = {f"q{i}".encode() for i in range(total)}
    with Producer(g.ns.addr) as producer:
        bodies = sorted(sent)
        for i in range(0, total, 100):
            producer.send_batch([Message(topic, b) for b in bodies[i:i + 100]])
    wait_until(lambda: slave_knows(g, topic), what="the slave to copy the topic")
    received: set[bytes] = set()
    lock, gate = threading.Lock(), threading.Event()

    def handler(msg) -> None:
        gate.wait()
        with lock:
            received.add(msg.body)

    with PushConsumer(g.ns.addr, group="failover-push", topic=topic, handler=handler, consume_from_first=True,
                      pull_batch_size=32, long_poll_ms=1000) as consumer:
        pq = wait_until(lambda: next(iter(consumer.rebalance_impl.process_queues.values()), None),
                        what="the queue to be assigned")
        assert pq is not None
        wait_until(lambda: pq.cached()[0] >= PullSettings().cached_messages_limit, what="flow control")
        g.wait_slave_shows_everything()
        dead = kill_master(g)
        gate.set()
        wait_until(lambda: len(received) == total, timeout=20, what="every message, the last ones from the slave")
        assert received == sent
        g.master = start_broker(g.workdir / "master", "broker-a", g.ns.addr, brokerRole="SYNC_MASTER",
                                **g.settings)  # the same store, a new address
        assert g.master.addr != dead
        with PullConsumer(g.ns.addr, group="failover-push") as reader:
            mq = MessageQueue(topic, "broker-a", 0)
            wait_until(lambda: reader.committed(mq) == total, timeout=20,
                       what="the offset kept through the outage committed at the new master")


def test_a_push_consumer_started_after_the_name_server_dropped_the_master_consumes_from_the_slave(tmp_path: Path):
    """No master in the route at all: the member list comes from the slave, which the consumer heartbeats to."""
    g = Group(tmp_path, "SYNC_MASTER")  # brokerNotActiveTimeoutMillis=3000: the dead master leaves the route
    try:
        create_topic(g.ns.addr, TOPIC, ["broker-a"], 4)
        wait_until(lambda: runtime(g.ns.addr, g.master)["haSlaves"] == "1", what="the slave to connect")
        sent = {f"late{i}".encode() for i in range(100)}
        with Producer(g.ns.addr) as producer:
            for body in sent:
                producer.send(Message(TOPIC, body))
        wait_until(lambda: slave_knows(g, TOPIC), what="the slave to copy the topic")
        master_end = g.wait_slave_shows_everything()
        g.master.stop(signal.SIGKILL)
        with Admin(g.ns.addr) as admin:
            wait_until(lambda: 0 not in admin.topic_route(TOPIC).broker_datas[0].broker_addrs, timeout=20,
                       what="the name server to drop the dead master")
        received: set[bytes] = set()
        with PushConsumer(g.ns.addr, group="late-push", topic=TOPIC, handler=lambda m: received.add(m.body),
                          consume_from_first=True, long_poll_ms=1000) as consumer:
            try:
                wait_until(lambda: received >= sent, timeout=20, what="every message, from the slave")
            except TimeoutError as exc:  # where each queue stood: assigned or not, and how far its pulls got
                queues = {str(mq): pq.next_offset for mq, pq in consumer.rebalance_impl.process_queues.items()}
                shown = runtime(g.ns.addr, g.slave)["commitLogConfirmOffset"]
                raise TimeoutError(f"{exc}: {len(sent - received)} of {len(sent)} missing; next pull offsets "
                                   f"{queues}; the slave shows up to {shown} (the master's end {master_end})") from exc
            # assigned_queues shows the last finished pass; the pass that took the queues may still be on the
            # retry topic when the last message arrives
            wait_until(lambda: len([mq for mq in consumer.assigned_queues() if mq.topic == TOPIC]) == 4, timeout=10,
                       what="the pass that took all 4 queues to finish")
    finally:
        g.stop()


def test_a_send_goes_to_the_live_group_at_once(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """Each producer pays for the dead master once (a failed try, then another group), not once per send."""
    caplog.set_level(logging.INFO, logger="client.producer")
    g = Group(tmp_path, "SYNC_MASTER", brokerNotActiveTimeoutMillis=ROUTED)
    b: Daemon | None = None
    try:
        b = start_broker(tmp_path / "b", "broker-b", g.ns.addr, brokerRole="ASYNC_MASTER", **g.settings)
        create_topic(g.ns.addr, TOPIC, ["broker-a", "broker-b"], 4)
        wait_until(lambda: runtime(g.ns.addr, g.master)["haSlaves"] == "1", what="the slave to connect")
        producers = [Producer(g.ns.addr, use_streams=streams) for streams in (True, False)]
        for producer in producers:  # routes cached, streams open: the dead master is still their choice
            assert producer.send(Message(TOPIC, b"warm-up")).status is SendStatus.SEND_OK
        kill_master(g)
        caplog.clear()
        results = {}
        for n, producer in enumerate(producers):
            for i in range(20):
                body = f"s{n}-{i}".encode()
                start = time.monotonic()
                results[body] = producer.send(Message(TOPIC, body))
                assert time.monotonic() - start < 2.5  # not held for the dead master's 3 s send timeout
            producer.close()
        assert {r.queue.broker_name for r in results.values()} == {"broker-b"}
        retries = [r for r in caplog.records if r.getMessage().startswith("send_retry")]
        assert len(retries) <= 2 * len(producers)  # the dead group is skipped while its master is marked down
        with PullConsumer(g.ns.addr, group="check") as consumer:  # each success is stored where it says
            for body, r in results.items():
                pulled = consumer.pull(r.queue, r.queue_offset, 1).messages
                assert [m.body for m in pulled] == [body]
    finally:
        if b is not None and b.alive:
            b.stop(strict=False)
        g.stop()


@pytest.fixture
def kv_group(tmp_path: Path) -> Iterator[tuple[Group, dict[bytes, bytes]]]:
    """A KV-enabled group with keys put, then its master killed (still routed)."""
    g = Group(tmp_path, "SYNC_MASTER", brokerNotActiveTimeoutMillis=ROUTED, kvEnable="true")
    try:
        wait_until(lambda: runtime(g.ns.addr, g.master)["haSlaves"] == "1", what="the slave to connect")
        values = {f"key-{i}".encode(): f"value-{i}".encode() for i in range(40)}
        with KVClient(g.ns.addr) as kv:  # the first use provisions the shards on broker-a
            for k, v in values.items():
                kv.put(k, v)
        g.wait_slave_shows_everything()
        key = next(iter(values))
        wait_until(lambda: slave_kv_get(g, key) == b"\x01" + values[key], timeout=15,
                   what="the slave to copy the KV shards' mappings (SlaveSynchronize) and serve a get")
        g.master.stop(signal.SIGKILL)
        yield g, values
    finally:
        g.stop()


def test_a_kv_put_while_the_group_has_no_master_fails_within_its_retry_timeout(kv_group):
    g, _ = kv_group
    with KVClient(g.ns.addr, retry_timeout_ms=1500) as kv:
        start = time.monotonic()
        with pytest.raises(MQClientError, match="UNAVAILABLE"):
            kv.put(b"during", b"outage")
        assert 1.2 < time.monotonic() - start < 4.0


def slave_kv_get(g: Group, key: bytes) -> bytes | None:
    """The slave's raw state of ``key`` (0x01 + value when present), asked directly; None while it refuses."""
    with grpc.insecure_channel(g.slave.addr) as channel:
        answer = kv_pb2_grpc.KvServiceStub(channel).Get(kv_pb2.KvGetRequest(keys=[key], addressing=broker_pb2.LOGIC),
                                                        timeout=5)
    return answer.states[0] if answer.code == ResponseCode.SUCCESS else None


def test_kv_gets_of_keys_put_before_the_kill_are_served_by_the_slave(kv_group):
    g, values = kv_group
    with KVClient(g.ns.addr, retry_timeout_ms=5000) as kv:
        keys = sorted(values)
        assert kv.get_batch(keys) == [values[k] for k in keys]
        assert kv.get(keys[0]) == values[keys[0]]

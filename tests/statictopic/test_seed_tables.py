"""Seed 004's tables replayed on real daemons: each step's ``topicStatus --json`` shows the seed's broker / physical
queue / logic queue / logic range / status, and every message produced along the way is consumed once, in order
per logic queue.

The seed writes ranges like ``0(0-100)``; ours are the same with the block jump of a move (the first logic offset
of a new item is rounded up to 10,000s: "offsets may be scaled"). Brokers are named as in the seed. Data expires
when a broker's commitlog rolls (``fileReservedTime=0``): filler on a normal topic of that broker rolls it.
"""

from pathlib import Path

import grpc
import pytest

from client import Admin, Message, Producer, PullConsumer
from common.message_queue import MessageQueue
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME, LogicQueueMappingItem
from common.statictopic.mapping_codec import detail_from_proto, detail_to_proto
from proto import broker_pb2
from tests.admin_cli.helpers import ok, ok_json
from tests.cluster import make_cluster, wait_dispatched, wait_until
from tests.statictopic.cluster_fixture import StaticCluster
from tests.statictopic.test_static_topic_cluster import drain, epoch_of

SEGMENT = 512 * 1024  # holds everything the replay writes to one broker between two expiries
SHORT_RETENTION = {"mappedFileSizeCommitLog": SEGMENT, "fileReservedTime": 0, "deleteWhen": "*",
                   "cleanResourceInterval": 200, "staticTopicCleanInterval": 200, "registerNameServerPeriod": 1000}
N, R, E = "Normal", "ReadOnly", "Expired"
Row = tuple[str, int, int, int | None, int | None, str]  # broker, physical queue, logic queue, first, last, status


class SeedReplay:
    """A cluster, a producer and a consumer group; what was produced and consumed per (topic, logic queue)."""

    def __init__(self, cluster: StaticCluster) -> None:
        self.cluster = cluster
        self.producer = Producer(cluster.addr)
        self.consumer = PullConsumer(cluster.addr, group="seed-replay")
        self.produced: dict[tuple[str, int], list[bytes]] = {}
        self.consumed: dict[tuple[str, int], list[bytes]] = {}
        self.offsets: dict[tuple[str, int], int] = {}
        self.ends: dict[tuple[str, int], int] = {}  # one past the last acknowledged logic offset

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()

    def create(self, topic: str) -> None:
        """Table 1: broker1 leads logic queues 0 and 1 (physical 0, 1), broker2 leads 2 and 3 (physical 0, 1)."""
        with Admin(self.cluster.addr) as admin:
            admin.update_static_topic(topic, 2, brokers=["broker1"])
            admin.update_static_topic(topic, 4, brokers=["broker2"])  # broker1 joins: holders do
        self.settle(topic)

    def settle(self, topic: str) -> None:
        self.cluster.wait_route_epoch(topic, epoch_of(self.cluster, topic))

    def produce(self, topic: str, logic_id: int, n: int) -> None:
        mq = MessageQueue(topic, LOGICAL_QUEUE_MOCK_BROKER_NAME, logic_id)
        bodies = self.produced.setdefault((topic, logic_id), [])
        for _ in range(n):
            body = f"{topic}-{logic_id}-{len(bodies)}".encode()
            sent = self.producer.send(Message(topic, body), queue=mq)
            self.ends[(topic, logic_id)] = sent.queue_offset + 1
            bodies.append(body)

    def consume(self, topic: str) -> None:
        """Every logic queue of ``topic`` to its end, committing as it goes."""
        wait_dispatched(self.consumer, {mq: self.ends[(topic, mq.queue_id)] for mq in self.consumer.queues(topic)
                                        if (topic, mq.queue_id) in self.ends})
        for mq in self.consumer.queues(topic):
            key = (topic, mq.queue_id)
            start = self.offsets.get(key, 0)
            got, end = drain(self.consumer, mq, start)
            offsets = [o for o, _ in got]
            assert offsets == sorted(set(offsets)), f"{key}: logic offsets increase"
            self.consumed.setdefault(key, []).extend(b for _, b in got)
            self.offsets[key] = end
            self.consumer.commit(mq, end)
            assert self.consumer.committed(mq) == end, f"{key}: the commit reads back (reused queues too)"

    def assert_all_consumed_once(self) -> None:
        for key, bodies in self.produced.items():
            assert self.consumed.get(key, []) == bodies, f"{key}: consumed once, in order"

    def table(self, topic: str) -> list[Row]:
        doc = ok_json(self.cluster.addr, "topicStatus", "-t", topic)
        return sorted((i["broker_name"], i["queue_id"], q["logic_id"], i["logic_first"], i["logic_last"], i["status"])
                      for q in doc["logic_queues"] for i in q["items"])

    def wait_table(self, topic: str, expected: list[Row], what: str) -> None:
        expected = sorted(expected)
        last: list[list[Row]] = [[]]

        def matches() -> bool:
            last[0] = self.table(topic)
            return last[0] == expected
        try:
            wait_until(matches, timeout=30, what=what)
        except TimeoutError as exc:
            raise AssertionError(f"{what}: topicStatus shows {last[0]}, the seed says {expected}") from exc

    def migrate(self, topic: str, logic_id: int, broker: str) -> dict:
        moved = ok_json(self.cluster.addr, "migrateLogicalQueue", "-t", topic, "-q", str(logic_id), "-b", broker)
        self.settle(topic)
        return moved

    def expire(self, broker: str) -> None:
        """Roll ``broker``'s commitlog so everything written so far is deleted."""
        filler = f"Filler{broker}"
        with Admin(self.cluster.addr) as admin:
            if filler not in admin.topic_list():
                admin.create_topic(filler, brokers=[broker], read_queue_nums=1, write_queue_nums=1)
                wait_until(lambda: filler in admin.topic_list(), what=f"{filler} routed")
        for _ in range(3 * SEGMENT // (64 * 4000) + 1):  # past two segment rolls
            self.producer.send_batch([Message(filler, b"f" * 4000) for _ in range(64)])


# both flush modes and both store types (metadata, consume queue and offsets in RocksDB on the second)
@pytest.fixture(params=[("ASYNC_FLUSH", "default"), ("SYNC_FLUSH", "defaultRocksDB")], ids=lambda p: "-".join(p))
def replay(request: pytest.FixtureRequest, tmp_path: Path):
    flush, store_type = request.param
    cluster = make_cluster(tmp_path, ("broker1", "broker2"), cls=StaticCluster, flushDiskType=flush,
                           storeType=store_type, **SHORT_RETENTION)
    assert isinstance(cluster, StaticCluster)
    r = SeedReplay(cluster)
    try:
        yield r
    finally:
        r.close()
        cluster.stop()


def test_a_reused_queue_must_start_at_its_max_offset(replay: SeedReplay):
    """The broker refuses a leader link that would reuse one of its physical queues anywhere but at its max."""
    replay.create("SeedStartT")
    replay.produce("SeedStartT", 0, 3)
    stub = replay.cluster.stub("broker1")
    detail = detail_from_proto(replay.cluster.mapping("broker1", "SeedStartT").detail)
    detail.epoch += 1
    held = detail.hosted_queues[1][-1]  # kept, closed: a newer detail never drops the link this broker leads
    held.end_offset = held.start_offset
    detail.hosted_queues[1].append(LogicQueueMappingItem(gen=held.gen + 1, queue_id=9, bname="broker1",
                                                         logic_offset=10_000, start_offset=7))
    with pytest.raises(grpc.RpcError) as err:
        stub.UpdateTopicQueueMapping(broker_pb2.UpdateTopicQueueMappingRequest(detail=detail_to_proto(detail)),
                                     timeout=5)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "reuses physical queue 9 from offset 7, but that queue's max offset here is 0" in err.value.details()


def table1(topic_rows: list[Row] | None = None) -> list[Row]:
    return [("broker1", 0, 0, 0, None, N), ("broker1", 1, 1, 0, None, N), ("broker2", 0, 2, 0, None, N),
            ("broker2", 1, 3, 0, None, N), *(topic_rows or [])]


def test_the_seeds_tables_in_order(replay: SeedReplay):
    a, b, c = "SeedReuseT", "SeedNewQueueT", "SeedOfflineT"
    for topic in (a, b, c):
        replay.create(topic)
        replay.wait_table(topic, table1(), f"{topic}: table 1")
        for q in range(4):
            replay.produce(topic, q, 101)  # logic offsets 0..100, as the seed's 0(0-100)
        replay.consume(topic)

    # a group that consumed logic queue 0 of `a` to 101 and then stopped: its offset sits on broker1's queue 0
    laggard = PullConsumer(replay.cluster.addr, group="seed-laggard")
    lq0 = MessageQueue(a, LOGICAL_QUEUE_MOCK_BROKER_NAME, 0)
    laggard.commit(lq0, 101)

    # table 2: logic queue 0 moves from broker1 to broker2; broker1's queue 0 serves its old data, read-only
    for topic in (a, b):
        replay.migrate(topic, 0, "broker2")
        replay.wait_table(topic, [("broker1", 0, 0, 0, 100, R), ("broker1", 1, 1, 0, None, N),
                                  ("broker2", 0, 2, 0, None, N), ("broker2", 1, 3, 0, None, N),
                                  ("broker2", 2, 0, 10_000, None, N)], f"{topic}: table 2")
        replay.produce(topic, 0, 100)  # 0(101-200) in the seed: 10000..10099 here
        replay.consume(topic)

    # table 5 (the seed's fourth): back to broker1 while its queue 0 still holds data: a new physical queue
    moved = replay.migrate(b, 0, "broker1")
    assert [(m["queue_id"], m["reused"]) for m in moved["moved"]] == [(2, False)]
    replay.wait_table(b, [("broker1", 0, 0, 0, 100, R), ("broker1", 1, 1, 0, None, N),
                          ("broker1", 2, 0, 20_000, None, N),
                          ("broker2", 0, 2, 0, None, N), ("broker2", 1, 3, 0, None, N),
                          ("broker2", 2, 0, 10_000, 10_099, R)], f"{b}: table 5")
    replay.produce(b, 0, 50)
    replay.consume(b)

    # table 3: broker1's data is cleaned; its queue 0 of logic queue 0 is Expired and stays named (broker1 still
    # leads logic queue 1 of the topic), so a move back can reuse it
    replay.expire("broker1")
    replay.wait_table(a, [("broker1", 0, 0, None, None, E), ("broker1", 1, 1, 0, None, N),
                          ("broker2", 0, 2, 0, None, N), ("broker2", 1, 3, 0, None, N),
                          ("broker2", 2, 0, 10_000, None, N)], f"{a}: table 3")

    # table 4 (the seed's third): back to broker1: its expired queue 0 is reused, broker2's queue 2 is read-only
    moved = replay.migrate(a, 0, "broker1")
    assert [(m["queue_id"], m["reused"]) for m in moved["moved"]] == [(0, True)]
    replay.wait_table(a, [("broker1", 0, 0, 20_000, None, N), ("broker1", 1, 1, 0, None, N),
                          ("broker2", 0, 2, 0, None, N), ("broker2", 1, 3, 0, None, N),
                          ("broker2", 2, 0, 10_000, 10_099, R)], f"{a}: table 4")
    replay.consume(a)  # commits 20000: the reused queue's start
    # the laggard's offset on the expired link moved to the next link's start: it reads broker2's queue 2 next
    # (not "never committed", and not the reused queue's start, which would skip 10000..10099)
    assert laggard.committed(lq0) == 10_000
    got, _end = drain(laggard, lq0, laggard.committed(lq0))
    assert [body for _, body in got] == replay.produced[(a, 0)][101:]
    laggard.close()
    replay.produce(a, 0, 100)
    for topic in (a, b, c):
        replay.produce(topic, 1, 10)
        replay.consume(topic)

    # table 6: broker2 goes offline: every logic queue it leads (of every static topic) moves to broker1
    drained = ok_json(replay.cluster.addr, "drainBroker", "-b", "broker2")
    assert {(m["topic"], m["logic_id"]) for m in drained["moved"]} == {(t, q) for t in (a, b, c) for q in (2, 3)}
    for topic in (a, b, c):
        replay.settle(topic)
    replay.wait_table(c, [("broker1", 0, 0, 0, None, N), ("broker1", 1, 1, 0, None, N),
                          ("broker1", 2, 2, 10_000, None, N), ("broker1", 3, 3, 10_000, None, N),
                          ("broker2", 0, 2, 0, 100, R), ("broker2", 1, 3, 0, 100, R)], f"{c}: table 6")
    status = ok_json(replay.cluster.addr, "drainStatus", "-b", "broker2")
    assert not status["removable"] and not status["leads"] and status["held"], status
    for topic in (a, b, c):
        for q in range(4):
            replay.produce(topic, q, 20)
        replay.consume(topic)

    # table 7: broker2's data is cleaned: the chains forget it and it can be removed
    replay.expire("broker2")
    replay.wait_table(c, [("broker1", 0, 0, 0, None, N), ("broker1", 1, 1, 0, None, N),
                          ("broker1", 2, 2, 10_000, None, N), ("broker1", 3, 3, 10_000, None, N)], f"{c}: table 7")
    wait_until(lambda: ok_json(replay.cluster.addr, "drainStatus", "-b", "broker2")["removable"], timeout=30,
               what="broker2 removable")
    assert "can be removed" in ok(replay.cluster.addr, "drainStatus", "-b", "broker2")
    replay.cluster.brokers.pop("broker2").stop()

    # table 8: a new broker takes logic queues from broker1 (the newest ones: 2 and 3)
    replay.cluster.start_broker("broker3")
    with Admin(replay.cluster.addr) as admin:
        wait_until(lambda: any(b.broker_name == "broker3" for b in admin.all_brokers()), what="broker3 registered")
    rebalanced = ok_json(replay.cluster.addr, "rebalanceLogicalQueues", "-c", "DefaultCluster")
    assert sorted((m["logic_id"], m["to_broker"]) for m in rebalanced["moved"] if m["topic"] == c) == [
        (2, "broker3"), (3, "broker3")]
    for topic in (a, b, c):
        replay.settle(topic)
    replay.wait_table(c, [("broker1", 0, 0, 0, None, N), ("broker1", 1, 1, 0, None, N),
                          ("broker1", 2, 2, 10_000, 10_019, R), ("broker1", 3, 3, 10_000, 10_019, R),
                          ("broker3", 0, 2, 20_000, None, N), ("broker3", 1, 3, 20_000, None, N)], f"{c}: table 8")
    for topic in (a, b, c):
        for q in range(4):
            replay.produce(topic, q, 5)
        replay.consume(topic)
    replay.assert_all_consumed_once()

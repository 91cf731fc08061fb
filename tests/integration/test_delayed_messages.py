"""Delayed and timed messages through real daemons: a name server, broker-a (SYNC_FLUSH, file consume queue) and
broker-b (ASYNC_FLUSH, storeType=defaultRocksDB). Never early, p99 lateness printed; a SIGKILL with ~10,000
timers pending loses none; out-of-range delays refused by the SDK and the broker; a static topic; recalls (both
brokers, a SIGKILL, a static topic)."""

import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field

import grpc
import pytest

from bench.harness import percentile
from client import Admin, Message, MQClientError, Producer, PullConsumer, PullResult
from client.message_encoding import batch_wire_properties
from common.message import MessageExt
from common.message_id import encode_host
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from common.wire_batch import encode_wire_batch
from proto import broker_pb2
from tests.cluster import start_broker, wait_until
from tests.statictopic.cluster_fixture import StaticCluster

BROKERS = ("broker-a", "broker-b")
PER_BROKER = {"broker-a": {"flushDiskType": "SYNC_FLUSH"}, "broker-b": {"storeType": "defaultRocksDB"}}
LEVEL_MS = {1: 1000, 2: 5000, 3: 10_000}  # the first three of the default messageDelayLevel


class DelayCluster(StaticCluster):
    def start_broker(self, name: str):
        self.brokers[name] = start_broker(self.workdir, name, self.addr, **self.settings, **PER_BROKER[name])
        return self.brokers[name]

    def runtime(self, name: str) -> dict[str, str]:
        with Admin(self.addr) as admin:
            return admin.broker_runtime_info(self.brokers[name].addr)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DelayCluster]:
    from tests.cluster import make_cluster

    c = make_cluster(tmp_path_factory.mktemp("delayed"), BROKERS, cls=DelayCluster, registerNameServerPeriod=1000)
    assert isinstance(c, DelayCluster)
    yield c
    c.stop()


def now_ms() -> int:
    return int(time.time() * 1000)


class WallClockSteps:
    """How far the wall clock was stepped back while a test ran (the offset of time.time() to time.monotonic()
    falling): a broker and a consumer reading that clock on either side of a step disagree by it, which is not a
    message delivered early. NTP slewing moves both clocks alike and is not counted. Each reading brackets the
    wall clock between two monotonic ones, so a thread paused meanwhile can only hide a step, never make one up;
    a reading that took over a millisecond is dropped."""

    def __init__(self) -> None:
        self.first = self.least = self._offsets()[1]

    @staticmethod
    def _offsets() -> tuple[float, float]:
        """(offset at most, offset at least), or the first at +inf when the reading took too long."""
        before = time.monotonic()
        wall = time.time()
        after = time.monotonic()
        return (wall - before if after - before < 0.001 else float("inf")), wall - after

    def sample(self) -> None:
        self.least = min(self.least, self._offsets()[0])

    @property
    def back_ms(self) -> float:
        return max(0.0, self.first - self.least) * 1000


@dataclass
class Receiver:
    """Long-polls every queue of a topic at once and notes when each message came in: the time its pull's answer
    was settled, taken in the future's callback. A time taken once after `wait` returns would be too early for a
    pull that settles while the loop reads the others, and a message would look delivered before it was stored."""

    consumer: PullConsumer
    queues: list[MessageQueue]
    got: dict[bytes, list[tuple[float, MessageExt]]] = field(default_factory=dict)
    clock: WallClockSteps = field(default_factory=WallClockSteps)

    def until(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        offsets = {mq: 0 for mq in self.queues}
        pulls: dict[MessageQueue, Future[PullResult]] = {}
        settled_ms: dict[int, float] = {}  # id of a pull's future -> wall clock when its answer was settled
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}: {len(self.got)} received")
            for mq in self.queues:
                if mq not in pulls:
                    pulls[mq] = self.consumer.pull_async(mq, offsets[mq], 256, suspend_ms=300)
                    pulls[mq].add_done_callback(lambda f: settled_ms.setdefault(id(f), time.time() * 1000))
            wait(list(pulls.values()), timeout=1, return_when=FIRST_COMPLETED)
            self.clock.sample()
            for mq, pull in list(pulls.items()):
                if id(pull) in settled_ms:  # not done(): a future is done a moment before its callbacks run
                    del pulls[mq]
                    arrived = settled_ms.pop(id(pull))
                    result = pull.result()
                    for m in result.messages:
                        self.got.setdefault(m.body, []).append((arrived, m))
                    offsets[mq] = result.next_begin_offset
        for pull in pulls.values():
            pull.result()


def test_ten_thousand_delayed_messages_arrive_never_early(cluster: DelayCluster):
    topic = "DelayMixT"
    cluster.create_topic(topic, queues=4)
    rng = random.Random(15)
    due: dict[bytes, tuple[str, int]] = {}  # body -> (kind, earliest time it may arrive)
    clock = WallClockSteps()
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="delay-mix") as consumer:
        sends = []
        for b in range(100):  # 100 batches of 100: half by level, half by time (batches are all delayed anyway)
            sent_at = now_ms()
            msgs = []
            for j in range(100):
                body = b"%d" % (b * 100 + j)
                if (b + j) % 2:
                    level = rng.randint(1, 3)
                    msgs.append(Message(topic, body, keys=[body.decode()], delay_level=level))
                    due[body] = ("level", sent_at + LEVEL_MS[level])  # the broker's clock at send is later
                else:
                    at = sent_at + rng.randint(1000, 8000)
                    msgs.append(Message(topic, body, deliver_at_ms=at))
                    due[body] = ("time", at)
            sends.append(producer.send_batch_async(msgs))
        results = [s.result(timeout=30) for s in sends]
        assert {r.queue.broker_name for r in results} == set(BROKERS)  # SYNC_FLUSH and RocksDB brokers both
        assert all(r.queue_offset == -1 for r in results)  # no offset in the real queue until delivered
        receiver = Receiver(consumer, consumer.queues(topic), clock=clock)
        receiver.until(lambda: len(receiver.got) >= len(due), timeout_s=30, what="10,000 delayed messages")

    assert set(receiver.got) == set(due)
    slack = clock.back_ms
    early = [(body, kind, f"arrived {arrived - at:+.1f} ms", f"stored {m.store_timestamp - at:+d} ms")
             for body, arrivals in receiver.got.items() for arrived, m in arrivals for kind, at in [due[body]]
             if arrived + slack < at or m.store_timestamp + slack < at]
    assert not early, f"{len(early)} delivered early (wall clock stepped back {slack:.1f} ms), e.g. {early[:5]}"
    lateness = [arrived - due[body][1] for body, arrivals in receiver.got.items() for arrived, _ in arrivals[:1]]
    stored_late = [m.store_timestamp - due[body][1] for body, arrivals in receiver.got.items()
                   for _, m in arrivals[:1]]
    duplicates = sum(len(a) - 1 for a in receiver.got.values())
    print(f"\ndelayed 10,000: lateness at the consumer p50={percentile(lateness, 50):.0f} ms "
          f"p99={percentile(lateness, 99):.0f} ms max={max(lateness):.0f} ms; store time past due "
          f"p99={percentile(stored_late, 99):.0f} ms; duplicates={duplicates}")
    assert duplicates == 0
    assert percentile(lateness, 99) < 3000  # generous: two cores shared with other work; the bench measures it
    sample = receiver.got[b"1"][0][1]  # a level message: its keys and unique key came along
    assert sample.keys == ["1"] and sample.unique_key and "DELAY" not in sample.properties
    assert "REAL_TOPIC" not in sample.properties and "TIMER_OUT_MS" not in sample.properties


def test_refused_delays(cluster: DelayCluster):
    topic = "DelayBadT"
    cluster.create_topic(topic, queues=2)
    far = now_ms() + 4 * 86_400_000
    with Producer(cluster.addr, use_streams=False) as unary, Producer(cluster.addr) as streams:
        with pytest.raises(MQClientError, match="invalid argument: delay level 19 is out of range: this broker "
                           r"has levels 1\.\.18"):
            unary.send(Message(topic, b"x", delay_level=19))
        with pytest.raises(MQClientError, match=r"invalid argument: .* beyond timerMaxDelaySec=259200") as refused:
            unary.send(Message(topic, b"x", deliver_at_ms=far))
        assert refused.value.code is None  # gRPC INVALID_ARGUMENT, not a response code
        with pytest.raises(MQClientError, match="INVALID_PARAMETER: delay level 19 is out of range") as refused:
            streams.send(Message(topic, b"x", delay_level=19))  # on a stream, the request's own answer
        assert refused.value.code == ResponseCode.INVALID_PARAMETER
        # what the SDK can tell: refused before anything is sent
        for msg in (Message(topic, b"x", delay_level=1, deliver_at_ms=far), Message(topic, b"x", delay_level=-1)):
            with pytest.raises(MQClientError, match=r"not both|negative"):
                streams.send(msg)
        with pytest.raises(MQClientError, match="all delayed or all immediate"):
            streams.send_batch([Message(topic, b"a"), Message(topic, b"b", delay_level=1)])

    # a client that does not check: the broker refuses a mixed batch (INVALID_ARGUMENT), and stores nothing of it
    with Admin(cluster.addr) as admin:
        addr = admin.topic_route(topic).broker_datas[0].broker_addrs[0]
    properties = batch_wire_properties([Message(topic, b"a")]) + batch_wire_properties(
        [Message(topic, b"b", delay_level=1)])
    records = encode_wire_batch(topic.encode(), [b"a", b"b"], properties, born_timestamp=now_ms(),
                                born_host=encode_host("127.0.0.1:1"))
    stub = cluster.stub(next(n for n, d in cluster.brokers.items() if d.addr == addr))
    for request in (broker_pb2.SendMessageRequest(topic=topic, queue_id=0, records=records),
                    broker_pb2.SendMessageRequest(topic=topic, queue_id=0, bodies=[b"a", b"b"],
                                                  properties=properties)):
        with pytest.raises(grpc.RpcError) as error:
            stub.SendMessage(request, timeout=5)
        assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "all delayed or all immediate: 1 of 2 messages are delayed" in error.value.details()


@pytest.mark.parametrize("broker", BROKERS)
def test_round_trip_in_each_flush_mode_and_store_type(cluster: DelayCluster, broker: str):
    """broker-a: SYNC_FLUSH (the send's ack waits for its fsync as a normal send's does); broker-b: RocksDB."""
    topic = f"DelayRoundT-{broker}"
    with Admin(cluster.addr) as admin:
        admin.create_topic(topic, brokers=[broker], read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: topic in admin.topic_list(), what=f"route of {topic}")
    with Producer(cluster.addr) as producer, Producer(cluster.addr, use_streams=False) as unary, \
            PullConsumer(cluster.addr, group="delay-round") as consumer, Admin(cluster.addr) as admin:
        queue = MessageQueue(topic, broker, 1)
        sent_at = now_ms()
        level = producer.send(Message(topic, b"level", keys=["k-level"], delay_level=1), queue=queue)
        timed = unary.send(Message(topic, b"timed", keys=["k-timed"], deliver_at_ms=sent_at + 1500), queue=queue)
        past = producer.send(Message(topic, b"past", deliver_at_ms=sent_at - 60_000), queue=queue)
        for result in (level, timed, past):
            assert result.status.name == "SEND_OK" and result.queue == queue and result.queue_offset == -1
        receiver = Receiver(consumer, [queue])
        receiver.until(lambda: len(receiver.got) == 3, timeout_s=10, what="3 delayed messages")
        arrived = {body: a[0][0] for body, a in receiver.got.items()}
        assert arrived[b"past"] - sent_at < 1000  # a time in the past: at once
        assert arrived[b"level"] >= sent_at + 1000 and arrived[b"timed"] >= sent_at + 1500
        # the delivered message is found by its key and its id (the unique key) in its real topic
        assert [m.body for m in admin.query_msg_by_key(topic, "k-timed")] == [b"timed"]
        found = admin.query_msg_by_id(level.msg_id, topic)
        assert (found.topic, found.body, found.queue_id) == (topic, b"level", 1)
    info = cluster.runtime(broker)
    assert int(info["timerDelivered"]) >= 3 and info["timerMaxDelaySec"] == "259200"


def test_static_topic(cluster: DelayCluster):
    topic = "DelayStaticT"
    with Admin(cluster.addr) as admin:
        admin.update_static_topic(topic, 2, brokers=["broker-a"])
    cluster.wait_route_epoch(topic, 1)
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="delay-static") as consumer:
        sent_at = now_ms()
        result = producer.send(Message(topic, b"static", delay_level=1), sharding_key="user-1")
        assert result.queue.broker_name != "broker-a" and result.queue_offset == -1  # a logic queue
        receiver = Receiver(consumer, [result.queue])
        receiver.until(lambda: b"static" in receiver.got, timeout_s=10, what="the static topic's message")
        arrived, msg = receiver.got[b"static"][0]
        assert arrived >= sent_at + 1000 and msg.queue_offset == 0  # its logic offset


def test_a_delayed_message_follows_its_logic_queue_when_the_queue_moves_before_it_is_due(cluster: DelayCluster):
    """It waits in broker-a's timer, which led the logic queue when it was sent; the queue moves to broker-b and
    the consumer hops there: put into broker-a's old queue, nobody would read it. It is sent to broker-b."""
    topic = "DelayMovesT"
    with Admin(cluster.addr) as admin:
        admin.update_static_topic(topic, 1, brokers=["broker-a"])
    cluster.wait_route_epoch(topic, 1)
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="delay-moves") as consumer:
        producer.send(Message(topic, b"before"))
        due = now_ms() + 10_000  # room for the remap on a loaded machine (it takes ~0.2 s on an idle one)
        producer.send(Message(topic, b"moved", deliver_at_ms=due))
        with Admin(cluster.addr) as admin:
            epoch = admin.remap_static_topic(topic, brokers=["broker-b"]).epoch
        cluster.wait_route_epoch(topic, epoch)
        assert now_ms() < due, "the remap took longer than the delay: the message came due before the move"
        producer.send(Message(topic, b"after"))
        receiver = Receiver(consumer, consumer.queues(topic))
        receiver.until(lambda: b"moved" in receiver.got and now_ms() > due + 2000,
                       timeout_s=(due - now_ms()) / 1000 + 20,
                       what="the delayed message after the move (and then nothing more)")
    assert {body: len(arrivals) for body, arrivals in receiver.got.items()} == {b"before": 1, b"moved": 1, b"after": 1}
    arrived, msg = receiver.got[b"moved"][0]
    assert arrived >= due and msg.queue_offset >= 10_000  # in broker-b's link of the chain
    forwarded = "timer_forwarded topic=DelayMovesT logic_queue=0 leader=broker-b count=1"
    assert forwarded in cluster.brokers["broker-a"].log()


def test_a_moved_queue_s_delayed_message_survives_both_brokers_killed_around_its_due_time(cluster: DelayCluster):
    """As above, but broker-a (the timer) is SIGKILLed and restarted before the message is due, and broker-b (the
    new leader) is down when it comes due: broker-a keeps it pending, and forwards it once broker-b is back."""
    topic = "DelayMovesKillT"
    with Admin(cluster.addr) as admin:
        admin.update_static_topic(topic, 1, brokers=["broker-a"])
    cluster.wait_route_epoch(topic, 1)
    with Producer(cluster.addr) as producer:
        producer.send(Message(topic, b"before"))
        # Room for the remap, broker-a's restart and broker-b's kill before it is due: ~1 s on an idle machine,
        # 16 s with the two cores busy thrice over (the restart dominates).
        due = now_ms() + 20_000
        producer.send(Message(topic, b"moved", deliver_at_ms=due))
    with Admin(cluster.addr) as admin:
        epoch = admin.remap_static_topic(topic, brokers=["broker-b"]).epoch
    cluster.wait_route_epoch(topic, epoch)
    cluster.brokers["broker-a"].kill()
    cluster.start_broker("broker-a")
    cluster.brokers["broker-b"].kill()
    assert now_ms() < due, "the remap and the restarts took longer than the delay: it came due before they were done"
    refused = f"timer_forward_refused topic={topic} logic_queue=0 leader=broker-b"
    wait_until(lambda: refused in cluster.brokers["broker-a"].log(), timeout=(due - now_ms()) / 1000 + 15,
               what="a refused forward")
    assert now_ms() >= due
    cluster.start_broker("broker-b")
    cluster.wait_route_epoch(topic, epoch)
    with PullConsumer(cluster.addr, group="delay-moves-kill") as consumer:
        receiver = Receiver(consumer, consumer.queues(topic))
        receiver.until(lambda: b"moved" in receiver.got and now_ms() > due + 3000, timeout_s=20,
                       what="the delayed message after the restarts (and then nothing more)")
    assert {body: len(arrivals) for body, arrivals in receiver.got.items()} == {b"before": 1, b"moved": 1}
    assert receiver.got[b"moved"][0][1].queue_offset >= 10_000  # in broker-b's link of the chain
    assert f"timer_forwarded topic={topic} logic_queue=0 leader=broker-b count=1" in cluster.brokers["broker-a"].log()


def test_sigkill_with_ten_thousand_pending_timers_loses_none(cluster: DelayCluster):
    broker = "broker-b"
    topic = "DelayKillT"
    with Admin(cluster.addr) as admin:
        admin.create_topic(topic, brokers=[broker], read_queue_nums=4, write_queue_nums=4)
        wait_until(lambda: topic in admin.topic_list(), what=f"route of {topic}")
    info = cluster.runtime(broker)
    pending_before, delivered_before = int(info["timerPending"]), int(info["timerDelivered"])
    bodies = {b"kill-%d" % i for i in range(10_000)}
    with Producer(cluster.addr) as producer:
        start = now_ms() + 2500  # every timer pending once all are sent; then due over the next 3 s
        sends = [producer.send_batch_async([Message(topic, b"kill-%d" % (b * 100 + j),
                                                    deliver_at_ms=start + (b * 100 + j) * 3000 // 10_000)
                                            for j in range(100)]) for b in range(100)]
        for s in sends:
            s.result(timeout=30)
    def all_scheduled() -> bool:
        """Each timer pending, or delivered already (sends that took over 2.5 s on a busy machine); a delivered
        timer is counted before it leaves the pending ones, so the sum never falls short of what was sent."""
        info = cluster.runtime(broker)
        return int(info["timerPending"]) - pending_before + int(info["timerDelivered"]) - delivered_before >= 10_000

    wait_until(all_scheduled, timeout=10, what="10,000 timers scheduled")
    # killed while it delivers: some are out, the rest pending (at-least-once for those between put and delete)
    wait_until(lambda: int(cluster.runtime(broker)["timerDelivered"]) > delivered_before, timeout=10, interval=0.005,
               what="deliveries started")
    cluster.brokers[broker].kill()
    cluster.start_broker(broker)
    log = cluster.brokers[broker].log()
    loaded = [line for line in log.splitlines() if "timer_loaded pending=" in line][-1]
    print(f"\nrestart after SIGKILL: {loaded.split(' ', 4)[-1]}")
    with PullConsumer(cluster.addr, group="delay-kill") as consumer:
        wait_until(lambda: len(consumer.queues(topic)) == 4, what="route after restart")
        receiver = Receiver(consumer, consumer.queues(topic))
        receiver.until(lambda: bodies <= set(receiver.got), timeout_s=30, what="every message after the restart")
    assert set(receiver.got) == bodies
    duplicates = sum(len(a) - 1 for a in receiver.got.values())
    print(f"delivered after SIGKILL: {len(receiver.got)} of 10,000, duplicates (at-least-once) {duplicates}")
    assert duplicates <= 1024  # at most the batch in flight between put and delete


# -- recall ------------------------------------------------------------------------------------------------------
def _one_queue_topic(cluster: DelayCluster, topic: str, broker: str) -> MessageQueue:
    with Admin(cluster.addr) as admin:
        admin.create_topic(topic, brokers=[broker], read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: topic in admin.topic_list(), what=f"route of {topic}")
    return MessageQueue(topic, broker, 0)


def _refused_recall(producer: Producer, topic: str, handle: str) -> MQClientError:
    with pytest.raises(MQClientError) as refused:
        producer.recall(topic, handle)
    return refused.value


@pytest.mark.parametrize("broker", BROKERS)
def test_a_recalled_message_is_never_delivered_in_each_flush_mode_and_store_type(cluster: DelayCluster, broker: str):
    """The recalled message and the kept one are due at the same time, the recalled one first in the commitlog: the
    timer delivers in that order, so once the kept one arrived the recalled one would have. One send on the SDK's
    stream (records), the other unary (bodies): both paths answer recall handles."""
    topic = f"DelayRecallT-{broker}"
    queue = _one_queue_topic(cluster, topic, broker)
    with Producer(cluster.addr) as producer, Producer(cluster.addr, use_streams=False) as unary, \
            PullConsumer(cluster.addr, group="delay-recall") as consumer:
        at = now_ms() + 3000
        recalled = producer.send(Message(topic, b"recalled", deliver_at_ms=at), queue=queue)
        kept = unary.send(Message(topic, b"kept", deliver_at_ms=at), queue=queue)
        assert recalled.recall_handle.startswith(f"r1|{broker}|{at}|") and kept.recall_handle
        assert producer.send(Message(topic, b"now"), queue=queue).recall_handle == ""  # not delayed: none
        assert unary.recall(topic, recalled.recall_handle) == recalled.msg_id
        again = _refused_recall(producer, topic, recalled.recall_handle)
        assert again.code == ResponseCode.QUERY_NOT_FOUND and "not pending" in str(again)
        with pytest.raises(MQClientError, match="not one this cluster issued"):
            producer.recall(topic, "r1|" + broker)
        receiver = Receiver(consumer, [queue])
        receiver.until(lambda: b"kept" in receiver.got, timeout_s=10, what="the message not recalled")
        assert set(receiver.got) == {b"now", b"kept"}
        assert _refused_recall(producer, topic, kept.recall_handle).code == ResponseCode.QUERY_NOT_FOUND  # delivered


def test_a_recall_survives_a_sigkill(cluster: DelayCluster):
    broker = "broker-b"  # RocksDB consume queue, ASYNC_FLUSH: the marker is in the page cache, not yet on disk
    topic = "DelayRecallKillT"
    queue = _one_queue_topic(cluster, topic, broker)
    with Producer(cluster.addr) as producer:
        # Sent, recalled and killed while still pending: ~0.2 s on an idle machine, 0.5 s with the two cores busy
        # thrice over.
        at = now_ms() + 10_000
        sent = producer.send_batch([Message(topic, b"recalled-%d" % i, deliver_at_ms=at) for i in range(50)]
                                   + [Message(topic, b"kept", deliver_at_ms=at)], queue=queue)
        for handle in sent.recall_handles[:50]:
            producer.recall(topic, handle)
    cluster.brokers[broker].kill()
    assert now_ms() < at, "the sends and recalls took longer than the delay: killed after they came due"
    cluster.start_broker(broker)
    with PullConsumer(cluster.addr, group="delay-recall-kill") as consumer:
        wait_until(lambda: consumer.queues(topic) == [queue], what="route after restart")
        receiver = Receiver(consumer, [queue])
        receiver.until(lambda: b"kept" in receiver.got, timeout_s=(at - now_ms()) / 1000 + 15,
                       what="the message not recalled")
    assert set(receiver.got) == {b"kept"}


def test_a_static_topic_message_is_recalled_on_the_broker_that_holds_it(cluster: DelayCluster):
    topic = "DelayRecallStaticT"
    with Admin(cluster.addr) as admin:
        admin.update_static_topic(topic, 1, brokers=["broker-b"])
    cluster.wait_route_epoch(topic, 1)
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="delay-recall-static") as consumer:
        at = now_ms() + 3000
        recalled = producer.send(Message(topic, b"recalled", deliver_at_ms=at), sharding_key="k")
        kept = producer.send(Message(topic, b"kept", deliver_at_ms=at), sharding_key="k")
        assert recalled.queue == kept.queue and recalled.recall_handle.startswith("r1|broker-b|")
        assert producer.recall(topic, recalled.recall_handle) == recalled.msg_id
        receiver = Receiver(consumer, [kept.queue])
        receiver.until(lambda: b"kept" in receiver.got, timeout_s=10, what="the static topic's kept message")
    assert set(receiver.got) == {b"kept"}

"""Static topics through real daemons: fixed logic queues while brokers come and go (STATIC_TOPIC.md)."""

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, Message, MQClientError, Producer, PullConsumer, PullStatus
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME, block_round_up
from common.statictopic.mapping_codec import detail_from_proto, detail_to_proto
from proto import broker_pb2, broker_pb2_grpc, consumer_pb2, consumer_pb2_grpc
from tests.cluster import DaemonStartError, acked_ends, start_daemon, wait_dispatched, wait_until
from tests.statictopic.cluster_fixture import StaticCluster, make_static_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticCluster]:
    c = make_static_cluster(tmp_path_factory.mktemp("static"), staticTopicCleanInterval=300)
    yield c
    c.stop()


def epoch_of(cluster: StaticCluster, topic: str) -> int:
    return max(detail_from_proto(cluster.mapping(b, topic).detail).epoch for b in cluster.brokers
               if cluster.mapping(b, topic).HasField("detail"))


def create(cluster: StaticCluster, topic: str, queues: int, brokers: list[str]) -> None:
    with Admin(cluster.addr) as admin:
        admin.update_static_topic(topic, queues, brokers=brokers)
    cluster.wait_route_epoch(topic, epoch_of(cluster, topic))


def remap(cluster: StaticCluster, topic: str, brokers: list[str]) -> None:
    with Admin(cluster.addr) as admin:
        admin.remap_static_topic(topic, brokers=brokers)
    cluster.wait_route_epoch(topic, epoch_of(cluster, topic))


def drain(consumer: PullConsumer, mq: MessageQueue, start: int) -> tuple[list[tuple[int, bytes]], int]:
    out, offset = [], start
    while True:
        result = consumer.pull(mq, offset, 64)
        if result.status is not PullStatus.FOUND:
            return out, result.next_begin_offset
        out += [(m.queue_offset, m.body) for m in result.messages]
        offset = result.next_begin_offset


def test_logic_queues_are_fixed_and_carry_logic_offsets(cluster: StaticCluster):
    topic = "StaticBasicT"
    create(cluster, topic, 6, ["broker-a", "broker-b"])
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="basic") as consumer:
        queues = consumer.queues(topic)
        assert queues == [MessageQueue(topic, LOGICAL_QUEUE_MOCK_BROKER_NAME, i) for i in range(6)]
        sent = [producer.send(Message(topic, f"m{i}".encode())) for i in range(60)]
        assert {r.queue.broker_name for r in sent} == {LOGICAL_QUEUE_MOCK_BROKER_NAME}
        assert {r.queue.queue_id for r in sent} == set(range(6))
        wait_dispatched(consumer, acked_ends(sent))
        for mq in queues:
            got, end = drain(consumer, mq, 0)
            assert [o for o, _ in got] == list(range(len(got)))
            assert sorted(b for _, b in got) == sorted(f"m{i}".encode() for i, r in enumerate(sent)
                                                       if r.queue.queue_id == mq.queue_id)
            assert consumer.max_offset(mq) == end and consumer.min_offset(mq) == 0


def test_extend_only_grows(cluster: StaticCluster):
    topic = "StaticGrowT"
    create(cluster, topic, 3, ["broker-a"])
    with Admin(cluster.addr) as admin:
        admin.update_static_topic(topic, 5, brokers=["broker-b", "broker-c"])
        for bad in (5, 2):
            with pytest.raises(MQClientError):
                admin.update_static_topic(topic, bad, brokers=["broker-b"])
    details = {b: detail_from_proto(cluster.mapping(b, topic).detail) for b in cluster.brokers}
    assert {d.total_queues for d in details.values()} == {5} and len({d.epoch for d in details.values()}) == 1
    leaders = {gid: b for b, d in details.items() for gid in d.led_queues()}
    assert sorted(leaders) == list(range(5))
    assert [leaders[g] for g in range(3)] == ["broker-a"] * 3  # existing queues stay where they were


def test_remap_with_traffic_and_a_group_resuming_across_remaps(cluster: StaticCluster):
    topic = "StaticRemapT"
    create(cluster, topic, 4, ["broker-a"])
    bodies: dict[int, list[bytes]] = {q: [] for q in range(4)}
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="resume") as consumer:
        def produce(tag: str, n: int) -> None:
            sent = []
            for i in range(n):
                r = producer.send(Message(topic, f"{tag}-{i}".encode()), sharding_key=f"key-{i % 4}")
                bodies[r.queue.queue_id].append(f"{tag}-{i}".encode())
                sent.append(r)
            wait_dispatched(consumer, acked_ends(sent))

        produce("before", 40)
        committed = {}
        for mq in consumer.queues(topic):  # consume and commit everything so far
            got, end = drain(consumer, mq, 0)
            assert [b for _, b in got] == bodies[mq.queue_id]
            consumer.commit(mq, end)
            committed[mq] = end
        seen = {q: list(v) for q, v in bodies.items()}
        for step, targets in enumerate((["broker-b", "broker-c"], ["broker-c"], ["broker-a", "broker-b"])):
            remap(cluster, topic, targets)
            produce(f"after{step}", 40)
        for mq in consumer.queues(topic):
            start = consumer.committed(mq)
            # the committed offset survives remaps; when the link it sat on held no data and was trimmed (its broker
            # led nothing of the topic for a moment), it was carried to the next link's start: the same position
            assert start >= committed[mq], "the committed offset survives remaps"
            got, end = drain(consumer, mq, start)
            offsets = [o for o, _ in got]
            assert offsets == sorted(set(offsets)), "logic offsets strictly increase"
            assert [b for _, b in got] == bodies[mq.queue_id][len(seen[mq.queue_id]):], "no re-reading, no loss"
            assert end == consumer.max_offset(mq)
            everything, _ = drain(consumer, mq, 0)
            assert [b for _, b in everything] == bodies[mq.queue_id]


def test_new_leader_answers_minus_one_until_its_offset_is_decided(cluster: StaticCluster):
    """The window between remap steps 1 and 4, driven step by step through the planner."""
    from client.static_topic_admin import StaticTopicAdmin  # the admin's planner and writer

    topic = "StaticWindowT"
    create(cluster, topic, 1, ["broker-a"])
    with Producer(cluster.addr) as producer:
        for i in range(7):
            producer.send(Message(topic, f"w{i}".encode()))
    with Admin(cluster.addr) as admin:
        tool = StaticTopicAdmin(admin)
        states = tool.read_states(topic, list(cluster.brokers))
        plan = tool.plan_remap(topic, states, ["broker-b"])
        tool.write_updates(plan.gained)  # step 1 only: broker-b leads, logic offset undecided
    b = cluster.stub("broker-b")
    r = b.SendMessage(broker_pb2.SendMessageRequest(topic=topic, queue_id=0, bodies=[b"in-window"],
                                                    addressing=broker_pb2.LOGIC), timeout=5)
    assert r.code == ResponseCode.SUCCESS and r.queue_offset == -1
    with Admin(cluster.addr) as admin:  # re-running the command completes the interrupted remap
        admin.remap_static_topic(topic, brokers=["broker-b"])
    d = detail_from_proto(cluster.mapping("broker-b", topic).detail)
    chain = d.hosted_queues[0]
    assert chain[-1].bname == "broker-b" and chain[-1].logic_offset == block_round_up(7)
    cluster.wait_route_epoch(topic, d.epoch)
    with PullConsumer(cluster.addr, group="window") as consumer:
        got, _ = drain(consumer, consumer.queues(topic)[0], 0)
    assert [b for _, b in got] == [f"w{i}".encode() for i in range(7)] + [b"in-window"]
    assert got[-1][0] == block_round_up(7)


def test_refusals_are_worded(cluster: StaticCluster):
    topic = "StaticRulesT"
    create(cluster, topic, 2, ["broker-a"])
    a = cluster.stub("broker-a")
    current = detail_from_proto(cluster.mapping("broker-a", topic).detail)

    def offer(mutate) -> str:
        d = current.copy()
        mutate(d)
        with pytest.raises(grpc.RpcError) as err:
            a.UpdateTopicQueueMapping(broker_pb2.UpdateTopicQueueMappingRequest(detail=detail_to_proto(d)), timeout=5)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        return err.value.details()

    def lower_epoch(d): d.epoch -= 1
    def scope(d): d.scope = "other"
    def leader_changed(d): d.hosted_queues[0][-1].bname = "broker-b"
    def gen(d): d.hosted_queues[0].append(type(d.hosted_queues[0][0])(gen=0, queue_id=9, bname="broker-a"))
    def negative(d): d.hosted_queues[1][0].queue_id = -3
    def foreign(d): d.bname = "broker-z"

    assert "smaller epoch" in offer(lower_epoch)
    assert "scope mismatch" in offer(scope)
    assert "leader changed at equal epoch" in offer(leader_changed)
    assert "gen not increasing" in offer(gen)
    assert "negative field" in offer(negative)
    assert "broker-z" in offer(foreign)
    d = current.copy()
    d.epoch += 1
    d.hosted_queues[0] = [*d.hosted_queues[0], type(d.hosted_queues[0][0])(gen=1, queue_id=5, bname="broker-a",
                                                                         logic_offset=0)]
    with pytest.raises(grpc.RpcError) as err:
        a.UpdateTopicQueueMapping(broker_pb2.UpdateTopicQueueMappingRequest(detail=detail_to_proto(d)), timeout=5)
    assert "logic offsets not increasing" in err.value.details()
    assert detail_from_proto(cluster.mapping("broker-a", topic).detail) == current  # nothing changed
    with pytest.raises(grpc.RpcError) as err:  # an old-style request on a static topic
        a.SendMessage(broker_pb2.SendMessageRequest(topic=topic, queue_id=0, bodies=[b"x"]), timeout=5)
    assert "static topic" in err.value.details()
    with Admin(cluster.addr) as admin, pytest.raises(MQClientError, match="static"):
        admin.create_topic(topic, brokers=["broker-a"])


def test_clean_service_drops_expired_items_and_lost_chains(tmp_path: Path):
    cluster = make_static_cluster(tmp_path, staticTopicCleanInterval=200, mappedFileSizeCommitLog=65536,
                                  fileReservedTime=0, deleteWhen="*", cleanResourceInterval=200)
    try:
        topic = "StaticCleanT"
        create(cluster, topic, 1, ["broker-a"])
        with Producer(cluster.addr) as producer:
            for _ in range(40):
                producer.send(Message(topic, b"x" * 1000))
        remap(cluster, topic, ["broker-b"])
        with Admin(cluster.addr) as admin:  # more traffic on broker-a rolls its commitlog: the old item expires
            admin.create_topic("FillerT", brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
        wait_until(lambda: "FillerT" in _topics(cluster), what="filler topic routed")
        with Producer(cluster.addr) as producer:
            for _ in range(150):
                producer.send(Message("FillerT", b"f" * 1000))

        def chains() -> tuple[list[tuple[str, int]], bool]:
            b = detail_from_proto(cluster.mapping("broker-b", topic).detail)
            a = detail_from_proto(cluster.mapping("broker-a", topic).detail)
            return [(i.bname, i.gen) for i in b.hosted_queues[0]], 0 in a.hosted_queues

        wait_until(lambda: chains() == ([("broker-b", 1)], False), timeout=20, what="chains trimmed")
        with PullConsumer(cluster.addr, group="after-clean") as consumer:
            mq = consumer.queues(topic)[0]
            assert consumer.min_offset(mq) == consumer.max_offset(mq) == block_round_up(40)
    finally:
        cluster.stop()


def _topics(cluster: StaticCluster) -> list[str]:
    with Admin(cluster.addr) as admin:
        return admin.topic_list()


def test_copied_mapping_file_is_refused(cluster: StaticCluster, tmp_path: Path):
    create(cluster, "StaticCopyT", 1, ["broker-a"])
    source = cluster.workdir / "broker-a" / "store" / "config" / "topicQueueMapping.json"
    wait_until(source.exists, what="mapping file")
    store = tmp_path / "store"
    (store / "config").mkdir(parents=True)
    shutil.copy(source, store / "config" / "topicQueueMapping.json")
    assert json.loads(source.read_text())["details"]
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=broker-x\nlistenPort=0\nstorePathRootDir={store}\n")
    with pytest.raises(DaemonStartError, match="exited"):
        start_daemon("broker-x", "broker.main", ["-c", str(conf)], tmp_path, ready_timeout=20)
    lines = [x for x in (tmp_path / "broker-x.log").read_text().splitlines() if x.strip()]
    assert len(lines) == 1 and "broker-a" in lines[0] and "broker-x" in lines[0], lines


def test_delete_removes_mapping_everywhere(cluster: StaticCluster):
    topic = "StaticDeleteT"
    create(cluster, topic, 2, ["broker-a", "broker-b"])
    with Admin(cluster.addr) as admin:
        admin.delete_topic(topic, "DefaultCluster")
        wait_until(lambda: topic not in admin.topic_list(), what="topic gone from the name server")
    for b in cluster.brokers:
        assert not cluster.mapping(b, topic).HasField("detail")
        assert not cluster.mapping(b, topic).HasField("config")


def test_a_static_topic_deleted_and_made_again_holds_only_its_new_messages(cluster: StaticCluster):
    """Deleted after a remap (its physical queues on both brokers, each deleting by a record in its own log) and made
    again under the name: the logic queues start at 0 with the new messages alone."""
    topic = "StaticAgainT"
    create(cluster, topic, 2, ["broker-a"])
    with Producer(cluster.addr) as producer:
        for i in range(6):
            producer.send(Message(topic, b"old-a-%d" % i))
        remap(cluster, topic, ["broker-b"])
        for i in range(6):
            producer.send(Message(topic, b"old-b-%d" % i))
    with Admin(cluster.addr) as admin:
        admin.delete_topic(topic, "DefaultCluster")
        wait_until(lambda: topic not in admin.topic_list(), what="topic gone from the name server")
    create(cluster, topic, 2, ["broker-a", "broker-b"])
    with Producer(cluster.addr) as producer:
        sent = [producer.send(Message(topic, b"new-%d" % i)) for i in range(4)]
    with PullConsumer(cluster.addr, group="static-again") as consumer:
        got = {(mq.queue_id, offset, body) for mq in consumer.queues(topic)
               for offset, body in drain(consumer, mq, 0)[0]}
    assert sorted(body for _, _, body in got) == [b"new-%d" % i for i in range(4)]
    assert {(r.queue.queue_id, r.queue_offset) for r in sent} == {(q, o) for q, o, _ in got}
    assert min(o for _, o, _ in got) == 0


def test_a_commit_back_to_an_older_link_and_a_reset_by_time_take_effect(cluster: StaticCluster):
    """Reads take the newest link's offset, so a commit that moves a group back to an older link forgets the newer
    ones' first (here and on their brokers): a rewind, and a reset by time to before a remap, were answered with the
    newer offset and ignored."""
    topic = "StaticRewindT"
    create(cluster, topic, 1, ["broker-a"])
    mq = MessageQueue(topic, LOGICAL_QUEUE_MOCK_BROKER_NAME, 0)
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="rewind") as consumer:
        sent = {"a": [producer.send(Message(topic, b"a%d" % i)) for i in range(5)]}
        for broker in ("b", "c"):  # links on a, b, c: c leads, b's is held by neither end
            remap(cluster, topic, [f"broker-{broker}"])
            sent[broker] = [producer.send(Message(topic, f"{broker}{i}".encode())) for i in range(5)]
        wait_dispatched(consumer, acked_ends([r for rs in sent.values() for r in rs]))
        consumer.commit(mq, sent["b"][2].queue_offset)  # on b's link
        consumer.commit(mq, sent["c"][4].queue_offset + 1)  # on c's, the leader's: b's stays
        assert consumer.committed(mq) == sent["c"][4].queue_offset + 1
        consumer.commit(mq, 3)  # back to a's link: c's and b's offsets are forgotten
        assert consumer.committed(mq) == 3
        consumer.commit(mq, sent["b"][1].queue_offset)
        assert consumer.committed(mq) == sent["b"][1].queue_offset
        with Admin(cluster.addr) as admin:
            assert admin.reset_offset_by_time("rewind", topic, 0) == {mq: 0}
        assert consumer.committed(mq) == 0
        got, _ = drain(consumer, mq, consumer.committed(mq))
        assert [b for _, b in got] == [f"{k}{i}".encode() for k in "abc" for i in range(5)]


def test_search_by_time_upper_answers_the_last_message_at_or_before_the_time_across_links(cluster: StaticCluster):
    """UPPER took the newest link's answer, which its store gives as the link's first message when all of them are
    later than the time: the next link's start, not the older link's last message at or before it."""
    topic = "StaticUpperT"
    create(cluster, topic, 1, ["broker-a"])
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="upper") as consumer:
        before = [producer.send(Message(topic, b"a%d" % i)) for i in range(5)]
        wait_dispatched(consumer, acked_ends(before))
        mq = MessageQueue(topic, LOGICAL_QUEUE_MOCK_BROKER_NAME, 0)
        between = consumer.pull(mq, 4, 1).messages[0].store_timestamp + 1  # a4's store time, by a's clock
        before_all = between - 10_000_000
        wait_until(lambda: time.time() * 1000 > between + 5, 5)  # b0 is stored after the time
        remap(cluster, topic, ["broker-b"])
        after = [producer.send(Message(topic, b"b%d" % i)) for i in range(5)]
        wait_dispatched(consumer, acked_ends(after))
        leader = cluster.brokers["broker-b"].addr
        with grpc.insecure_channel(leader) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)

            def search(timestamp: int, upper: bool) -> int:
                r = stub.SearchOffset(broker_pb2.SearchOffsetRequest(topic=topic, queue_id=0, timestamp=timestamp,
                                                                     upper=upper, addressing=broker_pb2.LOGIC),
                                      timeout=10)
                assert r.code == ResponseCode.SUCCESS, r.remark
                return r.offset

            assert search(between, upper=True) == 4  # a4, the last at or before the time
            assert search(between, upper=False) == after[0].queue_offset  # b0, the first at or after it
            assert search(before_all, upper=True) == 0  # none that old: the queue's min, as a store answers
            assert search(int(time.time() * 1000) + 60_000, upper=True) == after[-1].queue_offset


def test_an_orderly_lease_on_a_logic_queue_is_granted_by_its_leader_only(cluster: StaticCluster):
    """A client renewing at the old leader after a remap (a stale route) held the lease there while another took
    it at the new leader: two members consuming one orderly queue."""
    topic = "StaticLeaseT"
    create(cluster, topic, 1, ["broker-a"])
    remap(cluster, topic, ["broker-b"])
    queue = consumer_pb2.QueueRef(topic=topic, broker_name=LOGICAL_QUEUE_MOCK_BROKER_NAME, queue_id=0)
    locked = {}
    for broker in ("broker-a", "broker-b"):
        with grpc.insecure_channel(cluster.brokers[broker].addr) as channel:
            response = consumer_pb2_grpc.ConsumerServiceStub(channel).LockBatchMQ(consumer_pb2.LockBatchRequest(
                group="lease", client_id=f"client-at-{broker}", queues=[queue]), timeout=10)
            locked[broker] = list(response.locked)
    assert locked == {"broker-a": [], "broker-b": [queue]}

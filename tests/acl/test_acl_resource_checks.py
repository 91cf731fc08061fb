"""ACL on calls whose resources are not plain request fields, with real daemons (a name server and one broker,
authentication and authorization on): a message read by its commitlog offset, transactions (their checks and
ends), consumer sessions and queue locks, and metadata reads. mallory may Pub and Sub only on Mine / mine-cg; carol
on Secret / secret-cg; the victim's data is on Secret."""

import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from client import Admin, ConsumeResult, Message, Producer, PullConsumer, PushConsumer, TransactionResolution
from client.acl_admin import AclAdmin
from client.errors import MQClientError
from common.acl import sign
from common.message_codec import decode_record
from common.response_code import ResponseCode
from common.timer_topic import TIMER_TOPIC
from common.transaction_id import TransactionId
from common.transaction_topic import HALF_TOPIC
from proto import (
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    consumer_pb2,
    consumer_pb2_grpc,
    tiered_pb2,
    tiered_pb2_grpc,
    transaction_pb2,
    transaction_pb2_grpc,
)
from tests.acl.test_acl_cluster import NAMESRV_ARGS, ROOT, SETTINGS, grant_users
from tests.admin_cli.helpers import fails, ok
from tests.cluster import Cluster, make_cluster, wait_until
from tests.collected_stream import collected

MALLORY = ("mallory", "mallory-secret")
CAROL = ("carol", "carol-secret")
SECRET, MINE = "Secret", "Mine"
TX_SETTINGS = {"transactionTimeOut": 1000, "transactionCheckInterval": 1000, "transactionCheckMax": 1000,
               "messageDelayLevel": "1s 1s 1s"}  # a retry comes back within a second


def _env(user: tuple[str, str]) -> dict[str, str]:
    return {"ROCKETMQ_ACCESS_KEY": user[0], "ROCKETMQ_SECRET_KEY": user[1]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("acl-resources"), broker_names=("broker-a",), namesrv_args=NAMESRV_ARGS,
                     **SETTINGS, **TX_SETTINGS)
    try:
        with Admin(c.addr, credentials=ROOT) as admin:
            wait_until(lambda: len(admin.all_masters()) == 1, what="the broker registered (signed)")
            grant_users(admin, (SECRET, MINE), {
                MALLORY: [f"Topic:{MINE}", "Group:mine-cg"],
                CAROL: [f"Topic:{SECRET}", "Group:secret-cg"]})  # the README's grant: no Topic:%RETRY%...
        yield c
    finally:
        c.stop()


def _addr(cluster: Cluster) -> str:
    return cluster.brokers["broker-a"].addr


def _denied(call: object, request: object, user: tuple[str, str]) -> str:
    """The details of a PERMISSION_DENIED answer to a unary ``call`` made as ``user``."""
    with pytest.raises(grpc.RpcError) as info:
        call(request, metadata=sign(*user), timeout=5)  # type: ignore[operator]
    assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED, info.value.details()
    return info.value.details() or ""


# -- a message by its commitlog offset ---------------------------------------------------------------------------
def test_view_message_by_id_needs_sub_on_the_records_topic(cluster: Cluster) -> None:
    with Producer(cluster.addr, credentials=ROOT) as producer:
        sent = producer.send(Message(SECRET, b"top-secret-payload"))
    offset = sent.physical_offsets[0]
    with grpc.insecure_channel(_addr(cluster)) as channel:
        view = broker_pb2_grpc.BrokerServiceStub(channel).ViewMessageById
        request = broker_pb2.ViewMessageRequest(commit_log_offset=offset)
        details = _denied(view, request, MALLORY)
        assert f"user 'mallory' has no Sub permission on Topic:{SECRET} (ViewMessageById)" in details
        answer = view(request, metadata=sign(*CAROL), timeout=5)  # Sub on the record's topic: served
        assert decode_record(answer.records).body == b"top-secret-payload"
    with Admin(cluster.addr, credentials=CAROL) as carol:  # mqadmin queryMsgById's path
        assert carol.query_msg_by_id(sent.offset_msg_id).body == b"top-secret-payload"
    assert f"no Sub permission on Topic:{SECRET}" in fails(cluster.addr, "queryMsgById", "-i", sent.offset_msg_id,
                                                           env=_env(MALLORY))


# -- transactions ------------------------------------------------------------------------------------------------
@contextmanager
def _producer_session(addr: str, user: tuple[str, str], group: str, client_id: str
                      ) -> Iterator["queue.Queue[object]"]:
    """A ProducerSession as ``user`` heartbeating ``group`` every second; the checks it gets (or its error)."""
    stop = threading.Event()

    def beats() -> Iterator[transaction_pb2.ProducerHeartbeat]:
        while not stop.is_set():
            yield transaction_pb2.ProducerHeartbeat(client_id=client_id, producer_groups=[group])
            stop.wait(1)

    with grpc.insecure_channel(addr) as channel, collected(transaction_pb2_grpc.TransactionServiceStub(
            channel).ProducerSession(beats(), metadata=sign(*user)), stop.set) as got:
        yield got


def test_transaction_checks_and_ends_need_pub_on_the_messages_topic(cluster: Cluster) -> None:
    with Producer(cluster.addr, group="tx-pg", credentials=ROOT,
                  transaction_checker=lambda m: TransactionResolution.UNKNOWN) as victim:
        tx = victim.begin_transaction()
        tx.send(Message(SECRET, b"secret-tx-payload"))
    # The victim's producer is gone: its half message waits for a producer of tx-pg to be asked.
    half = TransactionId.decode(tx.transaction_ids[0])
    end = transaction_pb2.EndTransactionRequest(producer_group="tx-pg", transaction_id=tx.transaction_ids[0],
                                                resolution=transaction_pb2.TRANSACTION_COMMIT)
    with grpc.insecure_channel(_addr(cluster)) as channel:
        stub = transaction_pb2_grpc.TransactionServiceStub(channel)
        details = _denied(stub.EndTransaction, end, MALLORY)
        assert f"user 'mallory' has no Pub permission on Topic:{SECRET} (EndTransaction)" in details
        # the half message itself is in a system topic: even a user with Sub on its real topic may not view it
        details = _denied(broker_pb2_grpc.BrokerServiceStub(channel).ViewMessageById,
                          broker_pb2.ViewMessageRequest(commit_log_offset=half.commit_log_offset), CAROL)
        assert "Topic:RMQ_SYS_TRANS_HALF_TOPIC (ViewMessageById): a system topic, for Super users only" in details
    with _producer_session(_addr(cluster), MALLORY, "tx-pg", "mallory-1") as checks:
        time.sleep(5)  # checks come every second: none is hers (no Pub on Secret)
        assert checks.empty(), f"mallory's session got {checks.get()}"
    with _producer_session(_addr(cluster), CAROL, "tx-pg", "carol-1") as checks:
        got = checks.get(timeout=20)
        assert isinstance(got, transaction_pb2.TransactionCheckRequest), got
        assert decode_record(got.record).topic == SECRET
    with grpc.insecure_channel(_addr(cluster)) as channel:  # Pub on the real topic: the end goes through
        answer = transaction_pb2_grpc.TransactionServiceStub(channel).EndTransaction(end, metadata=sign(*CAROL),
                                                                                     timeout=5)
        assert answer.code == 0, answer.remark


# -- consumer sessions and locks ---------------------------------------------------------------------------------
def _frame(client_id: str, group: str, topic: str, held: str = "") -> consumer_pb2.HeartbeatFrame:
    queues = [consumer_pb2.QueueRef(topic=held, broker_name="broker-a", queue_id=0)] if held else []
    return consumer_pb2.HeartbeatFrame(client_id=client_id, consumers=[consumer_pb2.ConsumerData(
        group=group, subscriptions=[consumer_pb2.Subscription(topic=topic, expression="*")], queues=queues)])


def _root_reads(stub: broker_pb2_grpc.BrokerServiceStub) -> tuple[set[str], set[str]]:
    groups = stub.GetAllSubscriptionGroup(common_pb2.Empty(), metadata=sign(*ROOT), timeout=5).groups
    topics = stub.GetAllTopicConfig(common_pb2.Empty(), metadata=sign(*ROOT), timeout=5).configs
    return {g.group_name for g in groups}, {t.topic_name for t in topics}


@pytest.mark.parametrize(("frame", "resource"), [
    (_frame("mallory-1", "secret-cg", MINE), "Group:secret-cg"),  # joining another's group
    (_frame("mallory-2", "mallory-made", MINE), "Group:mallory-made"),  # making a group
    (_frame("mallory-3", "mine-cg", SECRET), f"Topic:{SECRET}"),  # subscribing another's topic
    (_frame("mallory-4", "mine-cg", "%RETRY%secret-cg"), "Group:secret-cg"),  # another group's retries
    (_frame("mallory-5", "mine-cg", MINE, held=SECRET), f"Topic:{SECRET}"),  # claiming another's queue
], ids=["group", "new-group", "topic", "retry-topic", "held-queue"])
def test_a_consumer_session_needs_sub_on_its_groups_topics_and_queues(
        cluster: Cluster, frame: consumer_pb2.HeartbeatFrame, resource: str) -> None:
    with grpc.insecure_channel(_addr(cluster)) as channel:
        consumers = consumer_pb2_grpc.ConsumerServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            list(consumers.ConsumerSession(iter([frame]), metadata=sign(*MALLORY), timeout=5))
        assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED, info.value.details()
        assert f"user 'mallory' has no Sub permission on {resource} (ConsumerSession)" in (info.value.details() or "")
        group = frame.consumers[0].group
        members = consumers.GetConsumerList(consumer_pb2.ConsumerListRequest(group=group), metadata=sign(*ROOT),
                                            timeout=5).client_ids
        assert frame.client_id not in members
        groups, topics = _root_reads(broker_pb2_grpc.BrokerServiceStub(channel))
        assert "mallory-made" not in groups and "%RETRY%mallory-made" not in topics


def test_a_queue_lock_needs_sub_on_the_queues_topic(cluster: Cluster) -> None:
    with grpc.insecure_channel(_addr(cluster)) as channel:
        consumers = consumer_pb2_grpc.ConsumerServiceStub(channel)
        for call in (consumers.LockBatchMQ, consumers.UnlockBatchMQ):
            request = consumer_pb2.LockBatchRequest(group="mine-cg", client_id="mallory-1", queues=[
                consumer_pb2.QueueRef(topic=SECRET, broker_name="broker-a", queue_id=0)])
            assert f"user 'mallory' has no Sub permission on Topic:{SECRET}" in _denied(call, request, MALLORY)
        request = consumer_pb2.LockBatchRequest(group="mine-cg", client_id="mallory-1", queues=[
            consumer_pb2.QueueRef(topic=MINE, broker_name="broker-a", queue_id=0)])
        assert len(consumers.LockBatchMQ(request, metadata=sign(*MALLORY), timeout=5).locked) == 1


def test_a_user_with_sub_on_topic_and_group_consumes_with_a_push_consumer_and_gets_its_retries(
        cluster: Cluster) -> None:
    """Sub on the topic and the group is all a push consumer needs: its group's retry topic is the group's (it
    pulled and asked offsets of %RETRY%secret-cg as a topic of its own, refused: a retried message never came back)."""
    received: queue.Queue[bytes] = queue.Queue()
    tries: list[int] = []

    def handler(msg: object) -> ConsumeResult:
        received.put(msg.body)  # type: ignore[attr-defined]
        if msg.body == b"retry-me":  # type: ignore[attr-defined]
            tries.append(msg.reconsume_times)  # type: ignore[attr-defined]
            return ConsumeResult.SUCCESS if len(tries) > 1 else ConsumeResult.LATER
        return ConsumeResult.SUCCESS

    with PushConsumer(cluster.addr, group="secret-cg", topic=SECRET, handler=handler, consume_from_first=True,
                      heartbeat_interval_ms=1000, credentials=CAROL) as consumer:
        with Producer(cluster.addr, credentials=CAROL) as producer:
            producer.send(Message(SECRET, b"for-carol"))
        wait_until(lambda: not received.empty() and received.get() == b"for-carol", timeout=30,
                   what="carol's push consumer to get the message")
        with Admin(cluster.addr, credentials=CAROL) as admin:  # its session made it a member
            assert consumer.client_id in {m.client_id for m in admin.consumer_connection("secret-cg")}
        with Producer(cluster.addr, credentials=CAROL) as producer:
            producer.send(Message(SECRET, b"retry-me"))
        wait_until(lambda: len(tries) >= 2, timeout=30, what="the message carol's handler put off to come back")
        assert tries[:2] == [0, 1]


# -- metadata ----------------------------------------------------------------------------------------------------
def _metadata_calls(channel: grpc.Channel) -> list[tuple[str, object, object, str]]:
    """(name, call, request, what it needs)."""
    b, c = broker_pb2_grpc.BrokerServiceStub(channel), consumer_pb2_grpc.ConsumerServiceStub(channel)
    t = tiered_pb2_grpc.TieredServiceStub(channel)
    queue_request = broker_pb2.QueueRequest(topic=SECRET, queue_id=0)
    topic_request = broker_pb2.TopicRequest(topic=SECRET)
    group_request = consumer_pb2.ConsumerListRequest(group="secret-cg")
    topic, group, admin = f"Sub permission on Topic:{SECRET}", "Sub permission on Group:secret-cg", "admin permission"
    return [
        ("GetMinOffset", b.GetMinOffset, queue_request, topic),
        ("GetMaxOffset", b.GetMaxOffset, queue_request, topic),
        ("SearchOffset", b.SearchOffset, broker_pb2.SearchOffsetRequest(topic=SECRET, queue_id=0,
                                                                        timestamp=int(time.time() * 1000)), topic),
        ("GetTopicStatsInfo", b.GetTopicStatsInfo, topic_request, topic),
        ("GetTopicQueueMapping", b.GetTopicQueueMapping, topic_request, topic),
        ("GetTieredStatus", t.GetTieredStatus, tiered_pb2.TieredStatusRequest(topic=SECRET), topic),
        ("GetConsumeStats", b.GetConsumeStats, broker_pb2.ConsumeStatsRequest(consumer_group="secret-cg"), group),
        ("GetConsumerList", c.GetConsumerList, group_request, group),
        ("GetConsumerConnection", c.GetConsumerConnection, group_request, group),
        ("GetAllTopicConfig", b.GetAllTopicConfig, common_pb2.Empty(), admin),
        ("GetTopicConfigChanges", b.GetTopicConfigChanges, broker_pb2.TopicConfigChangesRequest(), admin),
        ("GetAllSubscriptionGroup", b.GetAllSubscriptionGroup, common_pb2.Empty(), admin),
        ("GetAllTopicQueueMapping", b.GetAllTopicQueueMapping, common_pb2.Empty(), admin),
        ("WaitMetadataChange", b.WaitMetadataChange, broker_pb2.MetadataChangeRequest(), admin),
        ("GetTieredMetadata", t.GetTieredMetadata, tiered_pb2.TieredMetadataRequest(), admin),
        ("GetBrokerStats", b.GetBrokerStats, common_pb2.Empty(), admin),
        ("GetProducerConnectionList", b.GetProducerConnectionList, broker_pb2.GroupRequest(group_name="tx-pg"),
         admin),
    ]


def test_metadata_reads_need_sub_on_their_topic_or_group_or_admin(cluster: Cluster) -> None:
    with grpc.insecure_channel(_addr(cluster)) as channel:
        for name, call, request, needed in _metadata_calls(channel):
            details = _denied(call, request, MALLORY)
            assert needed in details and name in details, details
            if needed != "admin permission":  # the topic's or group's user reads it
                call(request, metadata=sign(*CAROL), timeout=5)  # type: ignore[operator]
            else:
                assert needed in _denied(call, request, CAROL)


def test_sdk_and_mqadmin_reads_work_for_a_user_with_the_rights(cluster: Cluster) -> None:
    with Producer(cluster.addr, credentials=CAROL) as producer:
        producer.send(Message(SECRET, b"counted"))
    with PullConsumer(cluster.addr, group="secret-cg", credentials=CAROL) as consumer:
        mq = consumer.queues(SECRET)[0]
        assert consumer.min_offset(mq) == 0 and consumer.max_offset(mq) >= 1
        assert consumer.search_offset(mq, int(time.time() * 1000)) >= 0
        consumer.commit(mq, 1)
    carol = _env(CAROL)
    assert "broker-a" in ok(cluster.addr, "topicStatus", "-t", SECRET, env=carol)
    assert SECRET in ok(cluster.addr, "consumerProgress", "-g", "secret-cg", env=carol)
    for command in (["topicStatus", "-t", SECRET], ["consumerProgress", "-g", "secret-cg"],
                    ["consumerConnection", "-g", "secret-cg"]):
        assert "no Sub permission" in fails(cluster.addr, *command, env=_env(MALLORY))
    for command in (["statsAll"], ["producerConnection", "-g", "tx-pg"]):  # whole tables: Super users only
        assert "admin permission" in fails(cluster.addr, *command, env=carol)
    assert SECRET in ok(cluster.addr, "statsAll", env=_env(ROOT))


def test_a_message_read_as_the_right_user_through_pull_still_works(cluster: Cluster) -> None:
    with PullConsumer(cluster.addr, group="secret-cg", credentials=CAROL) as consumer:
        mq = consumer.queues(SECRET)[0]
        assert consumer.pull(mq, 0, 32).messages
    with PullConsumer(cluster.addr, group="mine-cg", credentials=MALLORY) as consumer, \
            pytest.raises(MQClientError, match=f"no Sub permission on Topic:{SECRET}"):
        consumer.min_offset(consumer.queues(SECRET)[0])


def test_a_grant_on_every_topic_opens_none_of_the_brokers_own(cluster: Cluster) -> None:
    """The broker's topics hold other topics' messages (half messages of pending transactions, delayed messages):
    a user granted "*" read them by pulling the half topic, whatever it was denied on the real topic."""
    everything = ("dave", "dave-secret")
    with Admin(cluster.addr, credentials=ROOT) as admin:
        acl = AclAdmin(admin)
        acl.create_user(*everything, cluster="DefaultCluster")
        acl.create_acl(f"User:{everything[0]}", ["Topic:*", "Group:*"], ["Pub", "Sub"], "Allow",
                       cluster="DefaultCluster")
    with grpc.insecure_channel(_addr(cluster)) as channel:
        pull = broker_pb2_grpc.BrokerServiceStub(channel).PullMessage
        for topic in (HALF_TOPIC, TIMER_TOPIC):
            request = broker_pb2.PullMessageRequest(consumer_group="dave-cg", topic=topic, queue_id=0,
                                                    queue_offset=0, max_msg_nums=8)
            assert f"Topic:{topic}" in _denied(pull, request, everything)
            assert "system topic" in _denied(pull, request, everything)
        mine = pull(broker_pb2.PullMessageRequest(consumer_group="dave-cg", topic=MINE, queue_id=0, queue_offset=0,
                                                  max_msg_nums=8), metadata=sign(*everything), timeout=5)
        assert mine.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND)  # the grant holds elsewhere

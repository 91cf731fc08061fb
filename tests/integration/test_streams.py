"""Sends and pulls over the broker's bidirectional streams, through real daemons: what goes in comes out, a bad
request fails alone, a bad frame ends only its stream, old unary clients still interoperate, long polling holds up
nothing else on the stream, SYNC_FLUSH, and a broker killed under a producer."""

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
import pytest

from client import Message, MessageQueue, MQClientError, Producer, PullConsumer, PullStatus, SendResult, SendStatus
from client.replica_health import channel_connected
from common.message_id import encode_host
from common.response_code import ResponseCode
from common.wire_batch import encode_wire_batch
from proto import broker_pb2, broker_pb2_grpc
from tests.cluster import acked_ends, wait_dispatched, wait_until
from tests.integration.conftest import Cluster, make_cluster

SEND_STREAM = "/rmq.BrokerService/SendMessageStream"
PULL_STREAM = "/rmq.BrokerService/PullMessageStream"


# -- helpers --------------------------------------------------------------------------------------------------


def queue_of(consumer: PullConsumer, topic: str, broker: str, queue_id: int = 0) -> MessageQueue:
    return next(q for q in consumer.queues(topic) if q.broker_name == broker and q.queue_id == queue_id)


def pull_all(consumer: PullConsumer, mq: MessageQueue, offset: int = 0) -> list[Any]:
    """Every message of ``mq`` from ``offset`` (queue offsets checked contiguous)."""
    out: list[Any] = []
    while True:
        result = consumer.pull(mq, offset, 64)
        if result.status is not PullStatus.FOUND:
            assert result.status is PullStatus.NO_NEW_MSG, result.status
            return out
        assert [m.queue_offset for m in result.messages] == list(range(offset, offset + len(result.messages)))
        out += list(result.messages)
        offset = result.next_begin_offset


def records(topic: str, *bodies: bytes) -> bytes:
    return records_with(topic, list(bodies), [b""] * len(bodies))


def records_with(topic: str, bodies: list[bytes], properties: list[bytes]) -> bytes:
    return encode_wire_batch(topic.encode(), bodies, properties, born_timestamp=int(time.time() * 1000),
                             born_host=encode_host("127.0.0.1:1"))


def send_frames(channel: grpc.Channel, *frames: broker_pb2.SendStreamFrame,
                ) -> dict[int, broker_pb2.SendMessageResponse]:
    """Sends ``frames`` on a new stream, half-closes, and returns every answer by request id."""
    stub = broker_pb2_grpc.BrokerServiceStub(channel)
    answers: dict[int, broker_pb2.SendMessageResponse] = {}
    for frame in stub.SendMessageStream(iter(frames), timeout=10):
        for response in frame.responses:
            assert response.request_id not in answers, f"request {response.request_id} answered twice"
            answers[response.request_id] = response
    return answers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def broker_a(cluster: Cluster) -> Iterator[grpc.Channel]:
    channel = grpc.insecure_channel(cluster.brokers["broker-a"].addr)
    yield channel
    channel.close()


# -- what goes in comes out -------------------------------------------------------------------------------------


def test_stream_producer_and_stream_consumer_see_the_same_messages_in_order(cluster: Cluster):
    topic = "StreamRoundT"
    cluster.create_topic(topic, queues=2)
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="stream-round") as consumer:
        assert producer.use_streams and consumer.use_streams
        mq = queue_of(consumer, topic, "broker-b", 1)
        sent = [Message(topic, f"body-{i}".encode() * (1 + i % 7), tags=f"tag{i % 3}", keys=[f"k{i}", f"kk{i}"],
                        properties={"n": str(i), "note": "x y"}) for i in range(120)]
        batch_result = producer.send_batch(sent[:20], queue=mq)
        singles: list[Future[SendResult]] = [producer.send_async(m, queue=mq) for m in sent[20:]]
        results = [batch_result, *(f.result(timeout=10) for f in singles)]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        # One stream, one ASYNC_FLUSH broker: sends are appended in the order they were made.
        assert [r.queue_offset for r in results] == [0, *range(20, 120)]
        assert set(producer.client._streams) == {(cluster.brokers["broker-b"].addr, "SendMessageStream")}

        got = pull_all(consumer, mq)
        assert set(consumer.client._streams) == {(cluster.brokers["broker-b"].addr, "PullMessageStream")}
    assert [m.body for m in got] == [m.body for m in sent]
    assert [m.tags for m in got] == [m.tags for m in sent]
    assert [m.keys for m in got] == [m.key_list() for m in sent]
    assert [{k: m.properties[k] for k in ("n", "note")} for m in got] == [m.properties for m in sent]
    assert [m.msg_id for m in got] == [*batch_result.msg_ids, *(r.msg_id for r in results[1:])]
    assert {(m.topic, m.queue_id, m.store_host) for m in got} == {(topic, 1, cluster.brokers["broker-b"].addr)}


def test_a_timeout_on_a_stream_to_a_live_broker_does_not_mark_it_down(cluster: Cluster):
    """A stream request that timed out asks whether the broker is alive (the channel the stream went on is
    connected): a slow but live broker is not marked down, so sends do not leave it."""
    topic = "StreamAliveT"
    cluster.create_topic(topic, queues=1)
    with Producer(cluster.addr) as producer:
        result = producer.send(Message(topic, b"hello"))
        addr = cluster.brokers[result.queue.broker_name].addr
        assert channel_connected(producer.client.channel(addr))
        assert not producer.client.report_failure(addr, grpc.StatusCode.DEADLINE_EXCEEDED)
        assert not producer.client.down.is_down(addr)


def test_threads_sending_at_once_share_the_producers_stream_per_broker(cluster: Cluster):
    topic = "StreamThreadsT"
    cluster.create_topic(topic, queues=4)
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="stream-threads") as consumer:
        errors: list[BaseException] = []

        def send(thread: int) -> None:
            try:
                futures = [producer.send_async(Message(topic, f"{thread}-{i}".encode())) for i in range(150)]
                for f in futures:
                    f.result(timeout=15)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=send, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors and not any(t.is_alive() for t in threads), errors
        assert {method for _, method in producer.client._streams} == {"SendMessageStream"}
        assert len(producer.client._streams) == 2
        got = [m.body for mq in consumer.queues(topic) for m in pull_all(consumer, mq)]
    assert sorted(got) == sorted(f"{t}-{i}".encode() for t in range(4) for i in range(150))


# -- a bad request fails alone; a bad frame ends its stream ------------------------------------------------------


def test_bad_requests_in_a_frame_get_their_own_answers_and_the_others_are_stored(cluster: Cluster, broker_a):
    topic = "StreamBadReqT"
    cluster.create_topic(topic, queues=1)
    broken_crc = bytearray(records(topic, b"tampered"))
    broken_crc[-1] ^= 0x20

    def req(rid: int, recs: bytes, **fields: Any) -> broker_pb2.SendMessageRequest:
        return broker_pb2.SendMessageRequest(request_id=rid, topic=fields.pop("topic", topic), records=recs, **fields)

    frame = broker_pb2.SendStreamFrame(requests=[
        req(1, records(topic, b"good-1")),
        req(2, records("StreamOtherT", b"foreign")),
        req(3, records(topic, b"good-2", b"good-3")),
        req(4, bytes(broken_crc)),
        req(5, records(topic, b"good-4")[:-1]),
        req(6, records(topic, b"x"), queue_id=9),
        req(7, records(topic, b"x"), bodies=[b"x"]),
        req(8, records(topic, b"good-5")),
        req(9, records(topic, *[b"x"] * 4097)),
        req(10, records(topic, b"y" * (2200 * 1024), b"z" * (2200 * 1024))),
        req(11, records_with(topic, [b"latin-1"], [b"note\x01caf\xe9\x02"])),
        req(12, records_with(topic, [b"k" * (2 << 20)] * 2, [b"p\x01" + b"v" * 30_000 + b"\x02"] * 2)),
    ])
    answers = send_frames(broker_a, frame)
    assert sorted(answers) == list(range(1, 13))
    expected_failures = {2: "is not of topic StreamBadReqT", 4: "fails its CRC", 5: "has size",
                         6: "queue id 9 does not exist", 7: "records or bodies, not both",
                         9: "more than 4096 records", 10: "exceeds maxMessageSize",
                         11: "properties are not UTF-8 text", 12: "properties of 60006 bytes exceed maxMessageSize"}
    for rid, says in expected_failures.items():
        assert answers[rid].code == ResponseCode.INVALID_PARAMETER, (rid, answers[rid])
        assert says in answers[rid].remark, (rid, answers[rid].remark)
    assert [(answers[r].code, answers[r].queue_offset) for r in (1, 3, 8)] == [(0, 0), (0, 1), (0, 3)]

    # The broker kept serving: the stream clients see exactly the good records.
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="stream-bad") as consumer:
        mq = queue_of(consumer, topic, "broker-a")
        assert producer.send(Message(topic, b"after"), queue=mq).queue_offset == 4
        assert [m.body for m in pull_all(consumer, mq)] == [b"good-1", b"good-2", b"good-3", b"good-5", b"after"]


def test_a_refused_request_in_a_frame_carries_its_code(cluster: Cluster, broker_a):
    topic = "StreamRefusedT"
    cluster.create_topic(topic, queues=1)
    frame = broker_pb2.SendStreamFrame(requests=[
        broker_pb2.SendMessageRequest(request_id=10, topic="StreamNoSuchT", records=records("StreamNoSuchT", b"x")),
        broker_pb2.SendMessageRequest(request_id=11, topic=topic, records=records(topic, b"ok")),
    ])
    answers = send_frames(broker_a, frame)
    assert answers[10].code == ResponseCode.TOPIC_NOT_EXIST and "StreamNoSuchT" in answers[10].remark
    assert answers[11].code == ResponseCode.SUCCESS


def test_bad_pull_requests_in_a_frame_get_their_own_answers(cluster: Cluster, broker_a):
    topic = "StreamBadPullT"
    cluster.create_topic(topic, queues=1)
    send_frames(broker_a, broker_pb2.SendStreamFrame(requests=[
        broker_pb2.SendMessageRequest(request_id=1, topic=topic, records=records(topic, b"p1", b"p2"))]))

    def pull(rid: int, **fields: Any) -> broker_pb2.PullMessageRequest:
        base: dict[str, Any] = dict(consumer_group="g", topic=topic, queue_id=0, queue_offset=0, max_msg_nums=8)
        return broker_pb2.PullMessageRequest(request_id=rid, **{**base, **fields})

    frame = broker_pb2.PullStreamFrame(requests=[pull(1, queue_offset=-1), pull(2), pull(3, max_msg_nums=0),
                                                 pull(4, queue_offset=1)])
    stub = broker_pb2_grpc.BrokerServiceStub(broker_a)
    answers = {r.request_id: r for f in stub.PullMessageStream(iter([frame]), timeout=10) for r in f.responses}
    assert answers[1].code == ResponseCode.INVALID_PARAMETER and "negative" in answers[1].remark
    assert answers[3].code == ResponseCode.INVALID_PARAMETER and "outside 1..1024" in answers[3].remark
    assert (answers[2].code, answers[2].next_begin_offset) == (ResponseCode.SUCCESS, 2)
    assert (answers[4].code, answers[4].next_begin_offset) == (ResponseCode.SUCCESS, 2)


@pytest.mark.parametrize("method", [SEND_STREAM, PULL_STREAM])
def test_an_undecodable_frame_ends_the_stream_with_invalid_argument(cluster: Cluster, broker_a, method: str):
    raw = broker_a.stream_stream(method, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as err:
        list(raw(iter([b"\xff\xff\xff\xff"]), timeout=10))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "does not parse" in (err.value.details() or "")
    # The broker keeps serving, streams included.
    topic = "StreamAfterGarbageT"
    cluster.create_topic(topic, queues=1)
    answers = send_frames(broker_a, broker_pb2.SendStreamFrame(requests=[
        broker_pb2.SendMessageRequest(request_id=1, topic=topic, records=records(topic, b"fine"))]))
    assert answers[1].code == ResponseCode.SUCCESS


def test_requests_answered_before_an_undecodable_frame_stand(cluster: Cluster, broker_a):
    topic = "StreamGarbageLaterT"
    cluster.create_topic(topic, queues=1)
    answered = threading.Event()
    good = broker_pb2.SendStreamFrame(requests=[
        broker_pb2.SendMessageRequest(request_id=1, topic=topic, records=records(topic, b"kept"))]).SerializeToString()

    def frames() -> Iterator[bytes]:
        yield good
        answered.wait(10)
        yield b"\x0a\x05garbage-that-is-cut"

    raw = broker_a.stream_stream(SEND_STREAM, request_serializer=None,
                                 response_deserializer=broker_pb2.SendStreamAnswers.FromString)
    got: list[broker_pb2.SendMessageResponse] = []
    with pytest.raises(grpc.RpcError) as err:
        for frame in raw(frames(), timeout=10):
            got += frame.responses
            answered.set()
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert [(r.request_id, r.code, r.queue_offset) for r in got] == [(1, ResponseCode.SUCCESS, 0)]
    with PullConsumer(cluster.addr, group="garbage-later") as consumer:
        assert [m.body for m in pull_all(consumer, queue_of(consumer, topic, "broker-a"))] == [b"kept"]


# -- old unary clients ------------------------------------------------------------------------------------------


def test_old_unary_clients_and_stream_clients_interoperate(cluster: Cluster, broker_a):
    topic = "StreamUnaryMixT"
    cluster.create_topic(topic, queues=1)
    old = broker_pb2_grpc.BrokerServiceStub(broker_a).SendMessage(broker_pb2.SendMessageRequest(
        topic=topic, queue_id=0, bodies=[b"old-1", b"old-2"], properties=[b"TAGS\x01A\x02", b""],
        born_host="10.9.8.7:6543", born_timestamp=1_700_000_000_000), timeout=10)
    assert (old.code, old.queue_offset) == (ResponseCode.SUCCESS, 0)
    with Producer(cluster.addr, use_streams=False) as unary_producer, Producer(cluster.addr) as stream_producer, \
            PullConsumer(cluster.addr, group="mix-unary", use_streams=False) as unary_consumer, \
            PullConsumer(cluster.addr, group="mix-stream") as stream_consumer:
        mq = queue_of(stream_consumer, topic, "broker-a")
        r1 = unary_producer.send_batch([Message(topic, b"unary-1", tags="B"), Message(topic, b"unary-2")], queue=mq)
        r2 = stream_producer.send(Message(topic, b"stream-1", keys="K1"), queue=mq)
        r3 = unary_producer.send(Message(topic, b"unary-3"), queue=mq)
        assert [r1.queue_offset, r2.queue_offset, r3.queue_offset] == [2, 4, 5]
        assert not unary_producer.client._streams and not unary_consumer.client._streams

        by_unary, by_stream = pull_all(unary_consumer, mq), pull_all(stream_consumer, mq)
        assert not unary_consumer.client._streams
    expected = [b"old-1", b"old-2", b"unary-1", b"unary-2", b"stream-1", b"unary-3"]
    assert [m.body for m in by_unary] == [m.body for m in by_stream] == expected
    for a, b in zip(by_unary, by_stream, strict=True):
        assert (a.properties, a.queue_offset, a.physical_offset, a.born_host, a.born_timestamp) == (
            b.properties, b.queue_offset, b.physical_offset, b.born_host, b.born_timestamp)
    assert [m.tags for m in by_stream] == ["A", None, "B", None, None, None]
    assert by_stream[4].keys == ["K1"]
    assert (by_stream[0].born_host, by_stream[0].born_timestamp) == ("10.9.8.7:6543", 1_700_000_000_000)


def test_a_unary_send_may_carry_records(cluster: Cluster, broker_a):
    topic = "StreamUnaryRecordsT"
    cluster.create_topic(topic, queues=1)
    stub = broker_pb2_grpc.BrokerServiceStub(broker_a)
    ok = stub.SendMessage(broker_pb2.SendMessageRequest(topic=topic, records=records(topic, b"r1", b"r2")), timeout=10)
    assert (ok.code, ok.queue_offset, len(ok.physical_offsets)) == (ResponseCode.SUCCESS, 0, 2)
    with pytest.raises(grpc.RpcError) as err:  # unary: a malformed request is still INVALID_ARGUMENT
        stub.SendMessage(broker_pb2.SendMessageRequest(topic=topic, records=records("OtherT", b"x")), timeout=10)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "is not of topic" in (err.value.details() or "")


# -- long polling on a stream -----------------------------------------------------------------------------------


def test_a_parked_pull_wakes_on_arrival_while_other_pulls_on_the_stream_are_answered(cluster: Cluster):
    topic = "StreamLongPollT"
    cluster.create_topic(topic, queues=2)
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="stream-lp", rpc_timeout_ms=4000) \
            as consumer:
        idle, busy = queue_of(consumer, topic, "broker-a", 0), queue_of(consumer, topic, "broker-a", 1)
        for i in range(3):
            producer.send(Message(topic, f"busy-{i}".encode()), queue=busy)
        parked = consumer.pull_async(idle, 0, 32, suspend_ms=15_000)
        for i in range(3):  # each answered while the parked pull waits (one after it would wait 15 s)
            result = consumer.pull(busy, i, 1)
            assert [m.body for m in result.messages] == [f"busy-{i}".encode()]
        assert not parked.done(), "the parked pull answered with nothing to say"
        assert len(consumer.client._streams) == 1  # both went on the one pull stream to broker-a

        sent_at = time.monotonic()
        producer.send(Message(topic, b"wake-up"), queue=idle)
        woke = parked.result(timeout=5)
        assert time.monotonic() - sent_at < 3
    assert woke.status is PullStatus.FOUND and [m.body for m in woke.messages] == [b"wake-up"]


def test_parked_pulls_time_out_with_not_found_on_a_stream(cluster: Cluster):
    topic = "StreamLongPollIdleT"
    cluster.create_topic(topic, queues=2)
    with PullConsumer(cluster.addr, group="stream-lp-idle") as consumer:
        mqs = [queue_of(consumer, topic, "broker-b", q) for q in (0, 1)]
        start = time.monotonic()
        parked = [consumer.pull_async(mq, 0, 8, suspend_ms=3000) for mq in mqs]
        results = [f.result(timeout=15) for f in parked]
        waited = time.monotonic() - start
    assert [r.status for r in results] == [PullStatus.NO_NEW_MSG] * 2
    assert 2.9 <= waited < 5.0, waited  # together, not one after the other (6 s)


@pytest.mark.parametrize("use_streams", [False, True], ids=["unary", "streams"])
def test_more_parked_pulls_than_the_window_all_answer_and_wake_on_arrival(cluster: Cluster, use_streams: bool):
    """A push consumer long-polls every queue: with more queues on a broker than the stream's window, every pull
    must still park at once, wake on arrival, and time out as NO_NEW_MSG."""
    topic = "StreamManyQueuesT"
    cluster.create_topic(topic, queues=70)
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group=f"many-{use_streams}",
                                                          rpc_timeout_ms=1000, use_streams=use_streams) as consumer:
        mqs = sorted((q for q in consumer.queues(topic) if q.broker_name == "broker-a"), key=lambda q: q.queue_id)
        offsets = [consumer.max_offset(mq) for mq in mqs]
        parked = [consumer.pull_async(mq, offset, 8, suspend_ms=3000) for mq, offset in zip(mqs, offsets, strict=True)]
        sent_at = time.monotonic()
        producer.send(Message(topic, b"to-the-last"), queue=mqs[-1])
        woke: list[float] = []
        parked[-1].add_done_callback(lambda _: woke.append(time.monotonic() - sent_at))
        outcomes = [f.exception(timeout=15) or f.result().status for f in parked]
    assert len(mqs) == 70 and woke and woke[0] < 1.0, f"the last queue's pull answered {woke} s after the send"
    assert outcomes == [PullStatus.NO_NEW_MSG] * 69 + [PullStatus.FOUND], outcomes


# -- SYNC_FLUSH -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sync_cluster(tmp_path_factory: pytest.TempPathFactory, store_type: str) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("sync"), broker_names=("broker-s",), flushDiskType="SYNC_FLUSH",
                     registerNameServerPeriod=1000, storeType=store_type)
    yield c
    c.stop()


def test_sync_flush_stream_sends_are_all_stored_once(sync_cluster: Cluster):
    topic = "StreamSyncT"
    sync_cluster.create_topic(topic, queues=2)
    with Producer(sync_cluster.addr) as producer, PullConsumer(sync_cluster.addr, group="stream-sync") as consumer:
        mq = queue_of(consumer, topic, "broker-s", 0)
        batches = [[Message(topic, f"b{b}-m{m}".encode()) for m in range(4)] for b in range(150)]
        futures = [producer.send_batch_async(batch, queue=mq) for batch in batches]
        results = [f.result(timeout=30) for f in futures]
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        # Batches in flight together may be appended in any order, each one whole.
        assert sorted(r.queue_offset for r in results) == list(range(0, 600, 4))
        wait_dispatched(consumer, acked_ends(results))
        got = pull_all(consumer, mq)
    by_offset = {m.queue_offset: m.body for m in got}
    assert len(got) == 600
    for batch, result in zip(batches, results, strict=True):
        assert [by_offset[result.queue_offset + i] for i in range(4)] == [m.body for m in batch]


def test_sync_flush_stream_frame_with_a_bad_request(sync_cluster: Cluster):
    topic = "StreamSyncBadT"
    sync_cluster.create_topic(topic, queues=1)
    channel = grpc.insecure_channel(sync_cluster.brokers["broker-s"].addr)
    try:
        frame = broker_pb2.SendStreamFrame(requests=[
            broker_pb2.SendMessageRequest(request_id=rid, topic=topic,
                                          records=records(topic if rid != 3 else "ElsewhereT", f"s{rid}".encode()))
            for rid in range(1, 7)])
        answers = send_frames(channel, frame)
    finally:
        channel.close()
    assert answers[3].code == ResponseCode.INVALID_PARAMETER and "is not of topic" in answers[3].remark
    assert sorted(answers[r].queue_offset for r in (1, 2, 4, 5, 6)) == [0, 1, 2, 3, 4]
    assert {answers[r].code for r in (1, 2, 4, 5, 6)} == {ResponseCode.SUCCESS}


# -- a broker killed under a producer ---------------------------------------------------------------------------


@pytest.fixture
def fixed_port_cluster(tmp_path: Path, store_type: str) -> Iterator[Cluster]:
    """One broker on a fixed port, so that a restarted broker is where the clients' streams pointed."""
    c = make_cluster(tmp_path, broker_names=("broker-k",), registerNameServerPeriod=500, listenPort=free_port(),
                     storeType=store_type)
    yield c
    c.stop()


def send_once_reachable(producer: Producer, msg: Message, mq: MessageQueue) -> SendResult:
    """Sends ``msg`` once the producer reaches the restarted broker: its channel, refused while the broker was
    down, reconnects within its capped backoff (1 s); a refused connection stores nothing, so trying again is safe."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            return producer.send(msg, queue=mq)
        except MQClientError as exc:
            if "failed to connect" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def restart(cluster: Cluster, name: str) -> None:
    addr = cluster.brokers[name].addr
    cluster.brokers[name].kill()
    assert cluster.start_broker(name).addr == addr


def test_after_a_broker_is_killed_and_restarted_the_next_sends_reopen_the_streams(fixed_port_cluster: Cluster):
    cluster = fixed_port_cluster
    topic = "StreamKillIdleT"
    cluster.create_topic(topic, queues=1)
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="kill-idle") as consumer:
        mq = queue_of(consumer, topic, "broker-k")
        futures = [producer.send_async(Message(topic, f"before-{i}".encode()), queue=mq) for i in range(200)]
        acked = [f.result(timeout=10) for f in futures]
        assert len(pull_all(consumer, mq)) == 200

        restart(cluster, "broker-k")
        after = [producer.send(Message(topic, f"after-{i}".encode()), queue=mq) for i in range(20)]
        assert [r.queue_offset for r in after] == list(range(200, 220))
        got = pull_all(consumer, mq)
    assert [m.body for m in got] == [f"before-{i}".encode() for i in range(200)] + [
        f"after-{i}".encode() for i in range(20)]
    assert [m.msg_id for m in got[:200]] == [r.msg_id for r in acked]


def test_every_acknowledged_send_survives_a_kill_in_mid_stream(fixed_port_cluster: Cluster):
    cluster = fixed_port_cluster
    topic = "StreamKillBusyT"
    cluster.create_topic(topic, queues=1)
    acked: list[bytes] = []
    failed: list[BaseException] = []
    stop = threading.Event()
    with Producer(cluster.addr, send_timeout_ms=2000) as producer, \
            PullConsumer(cluster.addr, group="kill-busy") as consumer:
        mq = queue_of(consumer, topic, "broker-k")

        def send_until_it_fails() -> None:
            """Sends with up to 32 in flight until a send fails; then waits for the rest to settle."""
            in_flight: list[tuple[bytes, Future[SendResult]]] = []
            i = 0
            while not stop.is_set() and not failed:
                body = f"m-{i:06d}".encode()
                in_flight.append((body, producer.send_async(Message(topic, body), queue=mq)))
                i += 1
                while len(in_flight) >= 32 or (in_flight and (failed or stop.is_set())):
                    body, future = in_flight.pop(0)
                    try:
                        future.result(timeout=10)
                        acked.append(body)
                    except (MQClientError, TimeoutError) as exc:
                        failed.append(exc)

        sender = threading.Thread(target=send_until_it_fails)
        sender.start()
        try:
            wait_until(lambda: len(acked) >= 500, timeout=30, what="500 acknowledged sends")
            cluster.brokers["broker-k"].kill()
            wait_until(lambda: not sender.is_alive() or None, timeout=30, what="the sender to see the failure")
        finally:
            stop.set()
            sender.join(30)
        assert failed, "no send failed although the broker was killed"
        cluster.start_broker("broker-k")

        after = send_once_reachable(producer, Message(topic, b"after-restart"), mq)  # on a stream opened anew
        assert after.status is SendStatus.SEND_OK
        stored = [m.body for m in pull_all(consumer, mq)]
    assert len(stored) == len(set(stored)), "a message was stored twice"
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    assert stored[-1] == b"after-restart"

"""Bad KV requests, once per backend: raw gRPC calls get INVALID_ARGUMENT naming the problem and the broker keeps
serving; the SDK refuses the same inputs itself; the KV topic refuses plain sends; a broker with the KV store off,
or a store not initialised yet, answers with a business code and a remark."""

import asyncio
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from broker.processor import kv_processor
from client import Admin, KVClient, Message, MQClientError, Producer
from client.client_instance import CHANNEL_OPTIONS
from client.kv_client import response_states
from common.kv_shard import KV_TOPIC, MAX_GET_KEYS, MAX_KEY_BYTES, MAX_SCAN_LIMIT, MAX_VALUE_BYTES
from common.request_error import RequestError
from common.response_code import ResponseCode
from proto import broker_pb2, broker_pb2_grpc, kv_pb2, kv_pb2_grpc
from tests.cluster import Cluster, make_cluster, start_broker, wait_until

KV_TYPES = ("rocksdb", "memory")
SHARDS = 4
BASELINE = {b"base-%02d" % i: b"value-%02d" % i for i in range(24)}
TOO_BIG = b"x" * (MAX_VALUE_BYTES + 1)
LONG_KEY = b"k" * (MAX_KEY_BYTES + 1)
LOGIC = broker_pb2.LOGIC


def kv_conf(kv_type: str) -> dict[str, object]:
    return {"kvEnable": "true", "kvStoreType": kv_type, "kvSnapshotInterval": 500, "registerNameServerPeriod": 1000}


@pytest.fixture(scope="module", params=KV_TYPES)
def kv_type(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, kv_type: str) -> Iterator[Cluster]:
    """broker-a holds the KV store (every shard); broker-off runs with kvEnable=false."""
    workdir = tmp_path_factory.mktemp(f"kv-bad-{kv_type}")
    c = make_cluster(workdir, ("broker-a",), **kv_conf(kv_type))
    try:
        c.brokers["broker-off"] = start_broker(workdir, "broker-off", c.addr, kvEnable="false",
                                               registerNameServerPeriod=1000)
        with Admin(c.addr) as admin:
            admin.kv_init(SHARDS, brokers=["broker-a"])
        with KVClient(c.addr) as kv:
            for k, v in BASELINE.items():
                kv.put(k, v)
        yield c
    finally:
        c.stop()


@contextmanager
def kv_stub(addr: str) -> Iterator[kv_pb2_grpc.KvServiceStub]:
    with grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) as channel:
        yield kv_pb2_grpc.KvServiceStub(channel)


@pytest.fixture(scope="module")
def stub(cluster: Cluster) -> Iterator[kv_pb2_grpc.KvServiceStub]:
    with kv_stub(cluster.brokers["broker-a"].addr) as s:
        yield s


@pytest.fixture(scope="module")
def off_stub(cluster: Cluster) -> Iterator[kv_pb2_grpc.KvServiceStub]:
    with kv_stub(cluster.brokers["broker-off"].addr) as s:
        yield s


def assert_still_serving(cluster: Cluster, stub: kv_pb2_grpc.KvServiceStub, tag: str) -> None:
    """The broker is alive, earlier data is intact, and a new put reads back (raw and through the SDK)."""
    assert cluster.brokers["broker-a"].alive
    keys = list(BASELINE)
    got = stub.Get(kv_pb2.KvGetRequest(keys=keys, addressing=LOGIC), timeout=10)
    assert got.code == ResponseCode.SUCCESS, got.remark
    assert list(got.states) == [b"\x01" + v for v in BASELINE.values()]
    key = f"after-{tag}".encode()
    put = stub.Write(kv_pb2.KvWriteRequest(op=kv_pb2.KV_PUT, key=key, value=b"ok"), timeout=10)
    assert put.code == ResponseCode.SUCCESS, put.remark
    with KVClient(cluster.addr) as kv:
        assert kv.get(key) == b"ok"
        assert kv.get_batch(keys) == list(BASELINE.values())


def write(**fields: object) -> Callable[[kv_pb2_grpc.KvServiceStub], object]:
    fields.setdefault("op", kv_pb2.KV_PUT)
    return lambda s: s.Write(kv_pb2.KvWriteRequest(**fields), timeout=30)


def get(keys: list[bytes]) -> Callable[[kv_pb2_grpc.KvServiceStub], object]:
    return lambda s: s.Get(kv_pb2.KvGetRequest(keys=keys, addressing=LOGIC), timeout=10)


def scan(**fields: object) -> Callable[[kv_pb2_grpc.KvServiceStub], object]:
    fields = {"shard": 0, "limit": 10, "addressing": LOGIC, **fields}
    return lambda s: s.Scan(kv_pb2.KvScanRequest(**fields), timeout=10)


def header(shard: int, total: int) -> kv_pb2.KvSnapshotChunk:
    return kv_pb2.KvSnapshotChunk(header=kv_pb2.KvSnapshotHeader(shard=shard, total_shards=total))


BAD_REQUESTS = [
    pytest.param(write(key=b"", value=b"v"), "key is empty", id="put-empty-key"),
    pytest.param(write(key=LONG_KEY, value=b"v"), "key is 1025 bytes, longer than 1024", id="put-1025-byte-key"),
    pytest.param(write(key=b"k", value=TOO_BIG), "value is 4194305 bytes, larger than 4194304", id="put-4MiB+1-value"),
    pytest.param(write(op=kv_pb2.KV_DELETE, key=b""), "key is empty", id="delete-empty-key"),
    pytest.param(write(op=kv_pb2.KV_DELETE, key=LONG_KEY), "key is 1025 bytes", id="delete-1025-byte-key"),
    pytest.param(write(op=kv_pb2.KV_CAS, key=b"", value=b"v", expect_absent=True), "key is empty",
                 id="cas-empty-key"),
    pytest.param(write(op=kv_pb2.KV_CAS, key=b"base-00", expected=TOO_BIG, value=b"v"),
                 "expected value is 4194305 bytes, larger than 4194304", id="cas-4MiB+1-expected"),
    pytest.param(write(op=kv_pb2.KV_CAS, key=b"base-00", expected=b"value-00", value=TOO_BIG),
                 "value is 4194305 bytes", id="cas-4MiB+1-value"),
    pytest.param(write(op=kv_pb2.KV_OP_UNSPECIFIED, key=b"base-00", value=b"v"), "KV op 0 is not PUT, DELETE or CAS",
                 id="op-unspecified"),
    pytest.param(write(op=42, key=b"base-00", value=b"v"), "KV op 42 is not PUT, DELETE or CAS", id="op-unknown"),
    pytest.param(get([]), "0 keys: a get takes 1..4096", id="get-zero-keys"),
    pytest.param(get([b"k%d" % i for i in range(MAX_GET_KEYS + 1)]), "4097 keys", id="get-too-many-keys"),
    pytest.param(get([b"base-00", b""]), "key is empty", id="get-empty-key"),
    pytest.param(get([LONG_KEY]), "key is 1025 bytes", id="get-1025-byte-key"),
    pytest.param(scan(limit=0), "scan limit 0 is outside 1..10000", id="scan-limit-0"),
    pytest.param(scan(limit=MAX_SCAN_LIMIT + 1), "scan limit 10001 is outside 1..10000", id="scan-limit-10001"),
    pytest.param(scan(limit=-5), "scan limit -5 is outside", id="scan-limit-negative"),
    pytest.param(scan(prefix=LONG_KEY), "prefix is longer than 1024", id="scan-long-prefix"),
    pytest.param(scan(shard=SHARDS), "shard 4 does not exist", id="scan-shard-out-of-range"),
    pytest.param(scan(shard=-1), "shard -1 does not exist", id="scan-negative-shard"),
    pytest.param(lambda s: list(s.ExportSnapshot(kv_pb2.KvSnapshotRequest(shard=9), timeout=10)),
                 "shard 9 does not exist", id="export-shard-out-of-range"),
    pytest.param(lambda s: s.ImportSnapshot(iter([]), timeout=10), "starts with a header chunk", id="import-empty"),
    pytest.param(lambda s: s.ImportSnapshot(iter([kv_pb2.KvSnapshotChunk(entries=[kv_pb2.KvEntry(key=b"a")])]),
                                            timeout=10),
                 "starts with a header chunk", id="import-no-header"),
    pytest.param(lambda s: s.ImportSnapshot(iter([header(0, SHARDS * 2)]), timeout=10),
                 "with 8 shards; this one has 4", id="import-other-shard-count"),
    pytest.param(lambda s: s.ImportSnapshot(iter([header(0, SHARDS), header(1, SHARDS)]), timeout=10),
                 "one header, in its first chunk: chunk 1 (counting from 0) carries another",
                 id="import-second-header"),
]


def test_bad_writes_on_the_write_stream_are_answered_each_and_the_stream_goes_on(cluster: Cluster, stub):
    """KVClient's writes travel on WriteStream: a bad one is answered with its own id and what was wrong; the
    others of its frame, and later frames, are written."""
    frames = [kv_pb2.KvWriteFrame(requests=[
        kv_pb2.KvWriteRequest(request_id=1, op=kv_pb2.KV_PUT, key=b"", value=b"v"),
        kv_pb2.KvWriteRequest(request_id=2, op=kv_pb2.KV_PUT, key=b"stream-good", value=b"one"),
        kv_pb2.KvWriteRequest(request_id=3, op=42, key=b"stream-good", value=b"v")])]
    answers = {r.request_id: r for frame in stub.WriteStream(iter(frames), timeout=30) for r in frame.responses}
    assert sorted(answers) == [1, 2, 3]
    assert (answers[1].code, answers[1].remark) == (ResponseCode.INVALID_PARAMETER, "key is empty")
    assert answers[2].code == ResponseCode.SUCCESS, answers[2].remark
    assert answers[3].code == ResponseCode.INVALID_PARAMETER and "KV op 42" in answers[3].remark
    with KVClient(cluster.addr) as kv:
        assert kv.get(b"stream-good") == b"one"
    assert_still_serving(cluster, stub, "stream-bad-writes")


def test_bad_gets_on_the_get_stream_are_answered_each_and_the_stream_goes_on(cluster: Cluster, stub):
    """KVClient's gets travel on GetStream: a bad one is answered with its own id and what was wrong; the others
    of its frame, and later frames, are answered."""
    def get(request_id: int, keys: list[bytes]) -> kv_pb2.KvGetRequest:
        return kv_pb2.KvGetRequest(request_id=request_id, keys=keys, addressing=LOGIC, pack_states=True)

    frames = [kv_pb2.KvGetFrame(requests=[get(1, [b"base-00", b""]), get(2, [b"base-01", b"absent"])]),
              kv_pb2.KvGetFrame(requests=[get(3, [b"k%d" % i for i in range(MAX_GET_KEYS + 1)]),
                                          get(4, [b"base-02"])])]
    answers = {r.request_id: r for frame in stub.GetStream(iter(frames), timeout=30) for r in frame.responses}
    assert sorted(answers) == [1, 2, 3, 4]
    assert (answers[1].code, answers[1].remark) == (ResponseCode.INVALID_PARAMETER, "key is empty")
    assert (answers[3].code, answers[3].remark) == (ResponseCode.INVALID_PARAMETER, "4097 keys: a get takes 1..4096")
    assert response_states(answers[2]) == [b"\x01value-01", b""]
    assert response_states(answers[4]) == [b"\x01value-02"]
    assert_still_serving(cluster, stub, "stream-bad-gets")


def test_a_write_stream_frame_that_does_not_parse_ends_the_stream_with_invalid_argument(cluster: Cluster, stub):
    with grpc.insecure_channel(cluster.brokers["broker-a"].addr) as channel:
        call = channel.stream_stream("/rmq.KvService/WriteStream", request_serializer=None,
                                     response_deserializer=kv_pb2.KvWriteAnswers.FromString)
        with pytest.raises(grpc.RpcError) as err:
            list(call(iter([b"\xff\xff\xff"]), timeout=10))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, (err.value.code(), err.value.details())
    assert "does not parse" in err.value.details()
    assert_still_serving(cluster, stub, "stream-garbage")


@pytest.mark.parametrize(("call", "says"), BAD_REQUESTS)
def test_bad_raw_request_is_invalid_argument(cluster: Cluster, stub, call, says, request: pytest.FixtureRequest):
    with pytest.raises(grpc.RpcError) as err:
        call(stub)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, (err.value.code(), err.value.details())
    assert says in err.value.details(), err.value.details()
    assert_still_serving(cluster, stub, request.node.callspec.id)


def test_limits_themselves_are_accepted(cluster: Cluster, stub):
    """The largest key, value, expected value and scan limit are fine."""
    key, value = b"m" * MAX_KEY_BYTES, b"v" * MAX_VALUE_BYTES
    with KVClient(cluster.addr) as kv:
        kv.put(key, value)
        assert kv.get(key) == value
        swapped = kv.cas(key, value, b"w" * MAX_VALUE_BYTES)
        assert swapped.applied and swapped.current == b"w" * MAX_VALUE_BYTES
        assert kv.compare_and_set(key, b"w" * MAX_VALUE_BYTES, b"small")
        assert kv.scan(b"base-", limit=MAX_SCAN_LIMIT) == sorted(BASELINE.items())
        kv.delete(key)
        assert kv.get(key) is None
        # More keys than one get takes, all on this broker: KVClient splits them over several requests.
        many = [b"k%d" % i for i in range(2 * MAX_GET_KEYS)] + list(BASELINE)
        assert kv.get_batch(many) == [None] * 2 * MAX_GET_KEYS + list(BASELINE.values())
    response = stub.Get(kv_pb2.KvGetRequest(keys=[b"k%d" % i for i in range(MAX_GET_KEYS)], addressing=LOGIC),
                        timeout=10)
    assert response.code == ResponseCode.SUCCESS and len(response.states) == MAX_GET_KEYS
    assert_still_serving(cluster, stub, "limits")


SDK_BAD_CALLS = [
    pytest.param(lambda kv: kv.put(b"", b"v"), "key is empty", id="put-empty-key"),
    pytest.param(lambda kv: kv.put("", "v"), "key is empty", id="put-empty-str-key"),
    pytest.param(lambda kv: kv.put(LONG_KEY, b"v"), "key is 1025 bytes, longer than 1024", id="put-1025-byte-key"),
    pytest.param(lambda kv: kv.put(b"k", TOO_BIG), "value is 4194305 bytes, larger than 4194304",
                 id="put-4MiB+1-value"),
    pytest.param(lambda kv: kv.put(123, b"v"), "key must be bytes or str", id="put-int-key"),
    pytest.param(lambda kv: kv.put(b"k", None), "value must be bytes or str", id="put-none-value"),
    pytest.param(lambda kv: kv.delete(b""), "key is empty", id="delete-empty-key"),
    pytest.param(lambda kv: kv.delete(LONG_KEY), "key is 1025 bytes", id="delete-1025-byte-key"),
    pytest.param(lambda kv: kv.cas(b"", None, b"v"), "key is empty", id="cas-empty-key"),
    pytest.param(lambda kv: kv.cas(b"k", TOO_BIG, b"v"), "expected value is 4194305 bytes, larger than 4194304",
                 id="cas-4MiB+1-expected"),
    pytest.param(lambda kv: kv.cas(b"k", b"old", TOO_BIG), "value is 4194305 bytes", id="cas-4MiB+1-value"),
    pytest.param(lambda kv: kv.compare_and_set(b"k", TOO_BIG, b"v"), "expected value is 4194305 bytes",
                 id="compare-and-set-4MiB+1-expected"),
    pytest.param(lambda kv: kv.get(b""), "key is empty", id="get-empty-key"),
    pytest.param(lambda kv: kv.get_batch([b"ok", LONG_KEY]), "key is 1025 bytes", id="get-batch-1025-byte-key"),
    pytest.param(lambda kv: kv.scan(b"", limit=0), "scan limit 0 is outside 1..10000", id="scan-limit-0"),
    pytest.param(lambda kv: kv.scan(b"", limit=MAX_SCAN_LIMIT + 1), "scan limit 10001 is outside 1..10000",
                 id="scan-limit-10001"),
    pytest.param(lambda kv: kv.import_snapshot([]), "starts with a header chunk", id="import-empty"),
    pytest.param(lambda kv: kv.import_snapshot([kv_pb2.KvSnapshotChunk(entries=[kv_pb2.KvEntry(key=b"a")])]),
                 "starts with a header chunk", id="import-no-header"),
]


@pytest.fixture
def offline_kv(cluster: Cluster) -> Iterator[tuple[KVClient, list[str]]]:
    """A KVClient whose calls to brokers are recorded and refused: what it raises it decided by itself."""
    calls: list[str] = []

    def no_broker(*args: object, **kwargs: object):
        calls.append(repr(args)[:200])
        raise AssertionError("the SDK called a broker")

    with KVClient(cluster.addr) as kv:
        kv._on_shard = no_broker  # type: ignore[method-assign]
        kv._stub = no_broker  # type: ignore[method-assign]
        yield kv, calls


@pytest.mark.parametrize(("call", "says"), SDK_BAD_CALLS)
def test_sdk_refuses_bad_input_without_calling_the_broker(offline_kv, call, says):
    kv, calls = offline_kv
    with pytest.raises(MQClientError, match=re.escape(says)):
        call(kv)
    assert calls == []


def test_sdk_get_of_no_keys_is_empty_without_calling_the_broker(offline_kv):
    kv, calls = offline_kv
    assert kv.get_batch([]) == []
    assert calls == []


def test_plain_send_to_the_kv_topic_is_refused(cluster: Cluster, stub):
    with grpc.insecure_channel(cluster.brokers["broker-a"].addr) as channel:
        broker = broker_pb2_grpc.BrokerServiceStub(channel)
        for request in (broker_pb2.SendMessageRequest(topic=KV_TOPIC, queue_id=0, bodies=[b"x"]),
                        broker_pb2.SendMessageRequest(topic=KV_TOPIC, queue_id=0, bodies=[b"x"], addressing=LOGIC)):
            with pytest.raises(grpc.RpcError) as err:
                broker.SendMessage(request, timeout=10)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value.code()
            assert KV_TOPIC in err.value.details() and "KV client" in err.value.details(), err.value.details()
    with Producer(cluster.addr) as producer, pytest.raises(MQClientError, match=KV_TOPIC):
        producer.send(Message(KV_TOPIC, b"not a KV op"))
    assert_still_serving(cluster, stub, "plain-send")


def test_kv_disabled_broker_answers_service_not_available(off_stub):
    answers = {
        "write": write(key=b"k", value=b"v")(off_stub),
        "cas": write(op=kv_pb2.KV_CAS, key=b"k", value=b"v", expect_absent=True)(off_stub),
        "get": get([b"k"])(off_stub),
        "scan": scan()(off_stub),
    }
    for what, response in answers.items():
        assert response.code == ResponseCode.SERVICE_NOT_AVAILABLE, (what, response)
        assert "kvEnable=false" in response.remark and "broker-off" in response.remark, (what, response.remark)


def test_kv_disabled_broker_refuses_snapshot_export(off_stub):
    with pytest.raises(grpc.RpcError) as err:  # a stream has no response code: the refusal is a gRPC status
        list(off_stub.ExportSnapshot(kv_pb2.KvSnapshotRequest(shard=0), timeout=10))
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION and "kvEnable=false" in err.value.details()


def test_kv_disabled_broker_answers_import_with_service_not_available(cluster: Cluster, off_stub):
    response = off_stub.ImportSnapshot(iter([header(0, SHARDS)]), timeout=10)
    assert response.code == ResponseCode.SERVICE_NOT_AVAILABLE and "kvEnable=false" in response.remark
    assert cluster.brokers["broker-off"].alive


def test_kv_call_before_kv_init_answers_topic_not_exist(tmp_path: Path, kv_type: str):
    cluster = make_cluster(tmp_path, ("broker-a",), **kv_conf(kv_type))
    try:
        with kv_stub(cluster.brokers["broker-a"].addr) as stub:
            answers = {
                "write": write(key=b"k", value=b"v")(stub),
                "get": get([b"k"])(stub),
                "scan": scan()(stub),
                "import": stub.ImportSnapshot(iter([header(0, SHARDS)]), timeout=10),
            }
            for what, response in answers.items():
                assert response.code == ResponseCode.TOPIC_NOT_EXIST, (what, response)
                assert "not initialised" in response.remark and "kvInit" in response.remark, (what, response.remark)
            # (A KVClient would now create the store on first use: tests/kv/test_kv_provision.py.)
            with Admin(cluster.addr) as admin:
                admin.kv_init(SHARDS, cluster="DefaultCluster")
            assert write(key=b"k", value=b"v")(stub).code == ResponseCode.SUCCESS
            with KVClient(cluster.addr) as kv:  # the name servers learn the new route with the next registration
                wait_until(lambda: _routed(kv), timeout=10, what="the KV route at the name server")
                assert kv.get(b"k") == b"v"
    finally:
        cluster.stop()


def _routed(kv: KVClient) -> bool:
    try:
        return kv.shards(refresh=True) == SHARDS
    except MQClientError:
        return False


def test_a_snapshot_import_past_its_bound_is_refused_before_it_is_all_held(monkeypatch: pytest.MonkeyPatch):
    """The broker holds a snapshot while it checks it: a client streaming without end grew it without end (400 MiB
    streamed at a broker whose KV store was off, before it said so)."""
    monkeypatch.setattr(kv_processor, "MAX_IMPORT_BYTES", 4096)
    taken: list[int] = []

    async def chunks():
        for i in range(100):
            taken.append(i)
            yield kv_pb2.KvSnapshotChunk(entries=[kv_pb2.KvEntry(key=b"k%d" % i, value=bytes(1000))])

    with pytest.raises(RequestError, match="at most"):
        asyncio.run(kv_processor._received(chunks()))
    assert len(taken) < 10

"""Bad requests get INVALID_ARGUMENT (or the right business code) with a message; the daemon keeps serving."""

import contextlib
import socket

import grpc
import pytest

from broker.broker_config import ConfigError, load_broker_config
from broker.kv.kv_state_store import KvStoreType
from broker.store.config import FlushDiskType, StoreType
from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider
from broker.tiered.tiered_storage_level import TieredStorageLevel
from client import Message, MQClientError, Producer
from common.response_code import ResponseCode
from proto import broker_pb2, broker_pb2_grpc
from tests.cluster import DaemonStartError, start_daemon, write_broker_conf
from tests.integration.conftest import Cluster


@pytest.fixture(scope="module")
def broker_stub(cluster: Cluster):
    cluster.create_topic("BadInputT", queues=2)
    channel = grpc.insecure_channel(cluster.brokers["broker-a"].addr)
    yield broker_pb2_grpc.BrokerServiceStub(channel)
    channel.close()


def pull(**overrides) -> broker_pb2.PullMessageRequest:
    fields = dict(consumer_group="g", topic="BadInputT", queue_id=0, queue_offset=0, max_msg_nums=8)
    fields.update(overrides)
    return broker_pb2.PullMessageRequest(**fields)


@pytest.mark.parametrize(("request_", "says"), [
    (pull(queue_offset=-1), "negative"),
    (pull(queue_id=7), "queue id 7 does not exist"),
    (pull(max_msg_nums=0), "outside 1..1024"),
    (pull(max_msg_nums=1025), "outside 1..1024"),
    (pull(consumer_group=""), "group is empty"),
    (pull(topic="bad topic"), "characters outside"),
    (pull(sub_expression="A ||"), "empty tag"),
])
def test_bad_pull(broker_stub, request_, says):
    with pytest.raises(grpc.RpcError) as err:
        broker_stub.PullMessage(request_, timeout=5)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and says in err.value.details()


@pytest.mark.parametrize(("request_", "says"), [
    (broker_pb2.SendMessageRequest(topic="BadInputT", queue_id=0), "batch is empty"),
    (broker_pb2.SendMessageRequest(topic="BadInputT", queue_id=0, bodies=[b"x" * (3 * 1024 * 1024)] * 2),
     "batch of 2 messages with bodies of 6291456 bytes exceeds maxMessageSize"),
    (broker_pb2.SendMessageRequest(topic="BadInputT", queue_id=0, bodies=[b"x" * (5 * 1024 * 1024)]),
     "message body of 5242880 bytes exceeds maxMessageSize"),  # one message is not "a batch"
    (broker_pb2.SendMessageRequest(topic="BadInputT", queue_id=9, bodies=[b"x"]), "queue id 9 does not exist"),
    (broker_pb2.SendMessageRequest(topic="BadInputT", queue_id=0, bodies=[b""]), "body is empty"),
    (broker_pb2.SendMessageRequest(topic="", queue_id=0, bodies=[b"x"]), "topic is empty"),
    (broker_pb2.SendMessageRequest(topic="BadInputT", queue_id=0, bodies=[b"x", b"y"], properties=[b""]),
     "2 bodies but 1 property"),
    # stored, they failed every reader of the message: a consumer's queue stuck, v2 receives, key queries
    (broker_pb2.SendMessageRequest(topic="BadInputT", queue_id=0, bodies=[b"x"], properties=[b"note\x01caf\xe9\x02"]),
     "properties are not UTF-8 text"),
    # a batch's properties counted too (2,048 messages of 31 KB of keys each were one 62 MiB batch): its bodies
    # and properties are at most maxMessageSize and one message's largest properties
    (broker_pb2.SendMessageRequest(topic="BadInputT", queue_id=0, bodies=[b"x" * (2 << 20)] * 2,
                                   properties=[b"p\x01" + b"v" * 30_000 + b"\x02"] * 2),
     "properties of 60006 bytes exceed maxMessageSize"),
])
def test_bad_send(broker_stub, request_, says):
    with pytest.raises(grpc.RpcError) as err:
        broker_stub.SendMessage(request_, timeout=5)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and says in err.value.details()


@pytest.mark.parametrize("topic", ["TBW102", "%RETRY%g1", "%DLQ%g1", "rmq_sys_TRACE"])
def test_system_topics_refuse_ordinary_sends(cluster: Cluster, broker_stub, topic: str):
    with pytest.raises(grpc.RpcError) as err:
        broker_stub.SendMessage(broker_pb2.SendMessageRequest(topic=topic, queue_id=0, bodies=[b"x"]), timeout=5)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert f"topic {topic} belongs to the broker" in err.value.details(), err.value.details()
    with Producer(cluster.addr) as producer, pytest.raises(MQClientError, match="belongs to the broker"):
        producer.send(Message(topic, b"x"))


def test_business_codes(broker_stub):
    missing = broker_stub.SendMessage(broker_pb2.SendMessageRequest(topic="NoSuchT", bodies=[b"x"]), timeout=5)
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchT" in missing.remark
    offset = broker_stub.QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
        consumer_group="never", topic="BadInputT", queue_id=0), timeout=5)
    assert offset.code == ResponseCode.QUERY_NOT_FOUND and offset.offset == -1
    with pytest.raises(grpc.RpcError) as err:
        broker_stub.UpdateConsumerOffset(broker_pb2.UpdateConsumerOffsetRequest(
            consumer_group="g", topic="BadInputT", queue_id=0, commit_offset=-5), timeout=5)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_a_pull_asking_for_more_bytes_than_the_broker_sends_gets_the_broker_s_most(broker_stub):
    """max_bytes is the client's wish, capped by the broker (4 MiB): a pull asking for 2 GiB made a 300 MB answer,
    which ended its stream with RESOURCE_EXHAUSTED (failing every other request on it) and held 600 MB meanwhile."""
    for _ in range(3):  # 6 MiB in queue 1, 1 MiB a message (maxMessageSize is 4 MiB)
        sent = broker_stub.SendMessage(broker_pb2.SendMessageRequest(
            topic="BadInputT", queue_id=1, bodies=[bytes(1 << 20)] * 2), timeout=10)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    answer = broker_stub.PullMessage(pull(queue_id=1, max_msg_nums=1024, max_bytes=2**31 - 1), timeout=10)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert 1 << 20 < len(answer.records) <= 5 << 20, len(answer.records)


def test_garbage_on_the_port_does_not_hurt(cluster: Cluster, broker_stub):
    host, port = cluster.brokers["broker-a"].addr.rsplit(":", 1)
    for junk in (b"\x00" * 64, b"GET / HTTP/1.1\r\n\r\n", bytes(range(256)) * 16):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(junk)
            s.settimeout(2)
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                s.recv(1024)
    assert cluster.brokers["broker-a"].alive
    with Producer(cluster.addr) as producer:
        assert producer.send(Message("BadInputT", b"still serving")).msg_id


@pytest.mark.parametrize(("key", "value"), [("listenPort", "abc"), ("flushDiskType", "FAST"),
                                            ("brokerId", "-1"), ("mappedFileSizeCommitLog", "12")])
def test_bad_broker_conf_refuses_to_start(tmp_path, key, value):
    conf = write_broker_conf(tmp_path / "broker.conf", {"brokerName": "bad", "storePathRootDir": tmp_path, key: value})
    with pytest.raises(DaemonStartError, match="exited"):
        start_daemon("bad", "broker.main", ["-c", str(conf)], tmp_path, ready_timeout=20)
    lines = [line for line in (tmp_path / "bad.log").read_text().splitlines() if line.strip()]
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in lines[0], lines


CHOICES = {"flushDiskType": "ASYNC_FLUSH, SYNC_FLUSH", "storeType": "default, defaultRocksDB",
           "kvStoreType": "rocksdb, memory", "tieredBackendServiceProvider": "posix, memory, s3",
           "tieredStorageLevel": "DISABLE, NOT_IN_DISK, NOT_IN_MEM, FORCE"}


@pytest.mark.parametrize("key", CHOICES)
def test_bad_choice_names_the_key_and_the_allowed_values(key):
    with pytest.raises(ConfigError) as raised:
        load_broker_config(f"{key}=nope")
    assert str(raised.value) == f"{key}: 'nope' is not one of {CHOICES[key]}"


def test_choices_are_parsed_once_into_enum_members_that_print_as_spelled():
    config = load_broker_config("flushDiskType=SYNC_FLUSH\nstoreType=defaultRocksDB\nkvStoreType=memory\n"
                                "tieredBackendServiceProvider=memory\ntieredStorageLevel=FORCE")
    parsed = (config.flush_disk_type, config.store_type, config.kv_store_type,
              config.tiered_backend_service_provider, config.tiered_storage_level)
    assert parsed == (FlushDiskType.SYNC_FLUSH, StoreType.DEFAULT_ROCKSDB, KvStoreType.MEMORY,
                      TieredBackendServiceProvider.MEMORY, TieredStorageLevel.FORCE)
    assert [f"{value}" for value in parsed] == ["SYNC_FLUSH", "defaultRocksDB", "memory", "memory", "FORCE"]
    store_config = config.store_config("127.0.0.1:10911")
    assert (store_config.flush_disk_type, store_config.store_type) == parsed[:2]


@pytest.mark.parametrize("value", ["04,16", "4am", "24", "4;x"])
def test_a_delete_when_that_no_hour_matches_is_refused(value: str):
    """(It was taken, and expired segments were then never deleted until the disk was nearly full.)"""
    with pytest.raises(ConfigError, match=r"deleteWhen: .* is not hours 0\.\.23 separated by ';'"):
        load_broker_config(f"deleteWhen={value}")
    for good in ("04", "4;16", "*", "0;23;"):
        assert load_broker_config(f"deleteWhen={good}").delete_when == good


@pytest.mark.parametrize("key", ["namesrvAddr", "haMasterAddress", "controllerAddr"])
@pytest.mark.parametrize("value, why", [("127.0.0.1:99999", "outside 1..65535"), ("127.0.0.1:0", "outside"),
                                        ("nohost", "is not HOST:PORT"), ("h:x1", "not a number")])
def test_an_address_with_a_bad_port_names_the_key(key: str, value: str, why: str):
    """gRPC takes a port modulo 65536: 127.0.0.1:99999 was a broker registering with 127.0.0.1:34463."""
    with pytest.raises(ConfigError) as raised:
        load_broker_config(f"{key}=127.0.0.1:9876;{value}")
    assert str(raised.value).startswith(f"{key}: ") and why in str(raised.value), raised.value


def test_a_heartbeat_timeout_not_above_the_registration_period_is_refused():
    """The name servers would drop the live broker from every route between its registrations."""
    with pytest.raises(ConfigError, match="brokerNotActiveTimeoutMillis=1000 is not above registerNameServerPeriod"):
        load_broker_config("registerNameServerPeriod=1000\nbrokerNotActiveTimeoutMillis=1000")

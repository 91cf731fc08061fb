"""Data written before the hostile requests, and the check that it still reads back byte-equal afterwards.

The protected topic and keys are never offered to the request generator (``KNOWN_NAMES`` names a probe topic
instead). Reads address the broker directly, so that what a hostile request did to the name server's routes
cannot hide or fake broker data.
"""

from dataclasses import dataclass, field

import grpc

from client import Admin, KVClient
from common.kv_shard import KV_TOPIC
from common.message_codec import decode_records
from common.response_code import ResponseCode
from proto import broker_pb2, broker_pb2_grpc, common_pb2, kv_pb2, kv_pb2_grpc

PROTECTED_TOPIC = "ProtectedT"
PROBE_TOPIC = "ProbeT"  # offered to the generator, so hostile values reach the code behind the name checks
PROBE_STATIC_TOPIC = "ProbeStaticT"  # the same, for the logic-queue paths of static topics
QUEUES = 2
KV_SHARDS = 4
PROTECTED_KEYS = {b"protected-%02d" % i: b"value \x00\xff %d" % i for i in range(16)}
READ_WRITE = 6

# Values that exist, by field-name fragment (first match wins), so requests get past "does not exist". The
# broker's own name is left out on purpose: with it a hostile UpdateTopicQueueMapping could legitimately replace
# the KV store's mapping (an admin's power).
KNOWN_NAMES = {
    "topic": [PROBE_TOPIC, PROBE_STATIC_TOPIC, KV_TOPIC, "TBW102", "%RETRY%g"],
    "group": ["g", "%RETRY%g"],
    "host": ["127.0.0.1:10911"],
    "addr": ["127.0.0.1:10911"],
    "expression": ["*", "TagA || TagB"],
    "cluster": ["DefaultCluster"],
    "name": ["broker-other"],
    "key": ["k", "protected-key-not"],
}


@dataclass
class ProtectedData:
    messages: dict[tuple[int, int], bytes] = field(default_factory=dict)  # (queue id, queue offset) -> body

    def seed(self, broker_addr: str, namesrv_addr: str, broker_name: str) -> None:
        """The protected and probe topics with messages (straight to the broker), a static probe topic, and the
        KV store's shards (on this broker) with the protected keys."""
        with Admin(namesrv_addr) as admin:
            admin.update_static_topic(PROBE_STATIC_TOPIC, QUEUES, brokers=[broker_name])
            admin.kv_init(KV_SHARDS, brokers=[broker_name])
        with grpc.insecure_channel(broker_addr) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            for topic in (PROTECTED_TOPIC, PROBE_TOPIC):
                config = common_pb2.TopicConfig(topic_name=topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES,
                                                perm=READ_WRITE)
                r = stub.UpdateAndCreateTopic(broker_pb2.UpdateTopicRequest(config=config), timeout=10)
                assert r.code == ResponseCode.SUCCESS, r.remark
            for i in range(12):
                body = b"protected %d " % i + bytes(range(i * 7 % 256)) + b"\x00end"
                for topic in (PROTECTED_TOPIC, PROBE_TOPIC):
                    r = stub.SendMessage(broker_pb2.SendMessageRequest(topic=topic, queue_id=i % QUEUES,
                                                                       bodies=[body]), timeout=10)
                    assert r.code == ResponseCode.SUCCESS, r.remark
                    if topic == PROTECTED_TOPIC:
                        self.messages[(i % QUEUES, r.queue_offset)] = body
                r = stub.SendMessage(broker_pb2.SendMessageRequest(topic=PROBE_STATIC_TOPIC, queue_id=i % QUEUES,
                                                                   bodies=[body], addressing=broker_pb2.LOGIC))
                assert r.code == ResponseCode.SUCCESS, r.remark
        with KVClient(namesrv_addr) as kv:
            for key, value in PROTECTED_KEYS.items():
                kv.put(key, value)

    def assert_intact(self, broker_addr: str, after: str) -> None:
        """Every protected message reads back byte-equal, and every protected key holds its value."""
        with grpc.insecure_channel(broker_addr) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            found: dict[tuple[int, int], bytes] = {}
            for queue_id in range(QUEUES):
                r = stub.PullMessage(broker_pb2.PullMessageRequest(
                    consumer_group="boundary-verify", topic=PROTECTED_TOPIC, queue_id=queue_id, queue_offset=0,
                    max_msg_nums=64), timeout=10)
                assert r.code == ResponseCode.SUCCESS, f"after {after}: pull of queue {queue_id}: {r.code} {r.remark}"
                found.update({(queue_id, m.queue_offset): m.body for m in decode_records(r.records)})
            assert found == self.messages, f"after {after}: the protected messages changed"
            got = kv_pb2_grpc.KvServiceStub(channel).Get(kv_pb2.KvGetRequest(
                keys=list(PROTECTED_KEYS), addressing=broker_pb2.LOGIC), timeout=10)
            assert got.code == ResponseCode.SUCCESS, f"after {after}: KV get: {got.code} {got.remark}"
            assert list(got.states) == [b"\x01" + v for v in PROTECTED_KEYS.values()], f"after {after}: KV changed"

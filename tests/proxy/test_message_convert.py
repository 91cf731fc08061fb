"""v2 messages to the project's and back, in process: what each v2 field becomes in the store and what a client
is handed; and the telemetry channels the transaction work pushes check-backs on."""

import asyncio
import gzip
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from client.errors import MQClientError
from client.message_encoding import batch_wire_properties, wire_properties
from common.message import Message
from common.message_codec import decode_record, encode_record
from common.message_id import encode_host
from common.message_properties import (
    MAX_PROPERTIES_SIZE,
    PROPERTY_BORN_HOST,
    PROPERTY_SHARDING_KEY,
    PROPERTY_UNIQUE_KEY,
    decode_properties,
    encode_properties,
)
from common.refusal import DEPOSED_MASTER, NOT_GROUP_MASTER
from common.response_code import ResponseCode
from proto.v2 import definition_pb2, service_pb2
from proxy.message_convert import RESERVED_PROPERTIES, to_outgoing, to_v2_message
from proxy.processor.transaction_processor import TransactionProcessor
from proxy.telemetry_channels import TelemetryChannel, TelemetryChannels
from proxy.v2_codes import Code, ProxyError, refusal

MAX_BODY = 4 * 1024 * 1024


def v2(body: bytes = b"hello", **system: object) -> definition_pb2.Message:
    return definition_pb2.Message(topic=definition_pb2.Resource(name="T"), body=body, user_properties={"color": "red"},
                                  system_properties=definition_pb2.SystemProperties(message_id="01ABC", **system))


def test_a_send_keeps_the_clients_fields_and_id():
    out = to_outgoing(v2(tag="TagA", keys=["k1", "k2"], message_type=definition_pb2.NORMAL), MAX_BODY)
    msg = out.message
    assert (msg.topic, msg.body, msg.tags, msg.key_list()) == ("T", b"hello", "TagA", ["k1", "k2"])
    assert msg.deliver_at_ms == 0 and msg.delay_level == 0
    assert msg.properties == {"color": "red", PROPERTY_UNIQUE_KEY: "01ABC"}
    assert (out.message_id, out.message_group, out.transactional) == ("01ABC", None, False)
    # the SDK stores the client's id as the unique key, once
    (wire,) = batch_wire_properties([msg])
    assert wire.count(PROPERTY_UNIQUE_KEY.encode()) == 1 and decode_properties(wire)[PROPERTY_UNIQUE_KEY] == "01ABC"


def test_a_message_group_is_the_sharding_key_and_a_delivery_time_the_timer():
    fifo = to_outgoing(v2(message_group="order-7", message_type=definition_pb2.FIFO), MAX_BODY)
    assert fifo.message_group == "order-7" and fifo.message.properties[PROPERTY_SHARDING_KEY] == "order-7"
    delayed = to_outgoing(v2(delivery_timestamp=Timestamp(seconds=1_800_000_000, nanos=250_000_000),
                             message_type=definition_pb2.DELAY), MAX_BODY)
    assert delayed.message.deliver_at_ms == 1_800_000_000_250
    assert to_outgoing(v2(message_type=definition_pb2.TRANSACTION), MAX_BODY).transactional


def test_a_gzip_body_is_stored_as_its_content():
    out = to_outgoing(v2(gzip.compress(b"x" * 10_000), body_encoding=definition_pb2.GZIP), MAX_BODY)
    assert out.message.body == b"x" * 10_000


def gzip_of_zeros(mib: int) -> bytes:
    """A small GZIP body that decompresses to ``mib`` MiB (about 1 KiB for each MiB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    return b"".join(packer.compress(chunk) for _ in range(mib)) + packer.flush()


def test_a_gzip_bomb_is_refused_without_decompressing_it_whole():
    """A 64 KiB body standing for 64 MiB: never more than the body limit is made (it was decompressed whole, on
    the event loop, before its size was looked at: a 1 MiB body standing for 1 GiB took 12 s and 2 GB)."""
    bomb = gzip_of_zeros(64)
    tracemalloc.start()
    try:
        started = time.monotonic()
        with pytest.raises(ProxyError) as err:
            to_outgoing(v2(bomb, body_encoding=definition_pb2.GZIP), MAX_BODY)
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.code == Code.MESSAGE_BODY_TOO_LARGE, err.value.message
    assert peak < 3 * MAX_BODY, f"{peak} bytes allocated for a body limit of {MAX_BODY}"
    assert elapsed < 1.0


def test_a_gzip_body_up_to_the_limit_is_taken_in_one_member_or_several():
    assert to_outgoing(v2(gzip.compress(b"y" * MAX_BODY), body_encoding=definition_pb2.GZIP),
                       MAX_BODY).message.body == b"y" * MAX_BODY
    members = gzip.compress(b"first ") + gzip.compress(b"second") + bytes(4)  # zero padding after the last
    assert to_outgoing(v2(members, body_encoding=definition_pb2.GZIP), MAX_BODY).message.body == b"first second"
    with pytest.raises(ProxyError) as err:
        to_outgoing(v2(gzip.compress(b"y" * MAX_BODY) + gzip.compress(b"z"), body_encoding=definition_pb2.GZIP),
                    MAX_BODY)
    assert err.value.code == Code.MESSAGE_BODY_TOO_LARGE


@pytest.mark.parametrize("body", [gzip.compress(b"x" * 1000)[:-5], gzip.compress(b"x")[:10], b"not gzip at all",
                                  gzip.compress(b"x") + b"trailing garbage"],
                         ids=["truncated-trailer", "truncated-data", "no-gzip", "trailing-garbage"])
def test_a_body_that_is_not_the_gzip_it_says_is_corrupted(body: bytes):
    with pytest.raises(ProxyError) as err:
        to_outgoing(v2(body, body_encoding=definition_pb2.GZIP), MAX_BODY)
    assert err.value.code == Code.MESSAGE_CORRUPTED, err.value.message


@pytest.mark.parametrize("system", [{"tag": "t" * 40_000}, {"keys": ["k" * 40_000]},
                                    {"keys": [f"k{i}" for i in range(10_000)]}, {"tag": "t" * 2000, "big": True}],
                         ids=["long-tag", "long-key", "many-keys", "tag-and-properties"])
def test_tags_and_keys_count_toward_the_properties_limit(system: dict):
    """The SDK writes tags and keys among the properties: a send it would refuse ("properties ... at most 32767",
    an error without a code, answered INTERNAL_SERVER_ERROR) is refused here with the code that names it."""
    message = v2(**{k: v for k, v in system.items() if k != "big"})
    if system.get("big"):
        message.user_properties["big"] = "v" * (MAX_PROPERTIES_SIZE - 100)
    with pytest.raises(ProxyError) as err:
        to_outgoing(message, MAX_BODY)
    assert err.value.code == Code.MESSAGE_PROPERTIES_TOO_LARGE, err.value.message


def test_properties_are_refused_exactly_where_the_sdk_would_refuse_them():
    def with_value(chars: int) -> definition_pb2.Message:
        message = v2(tag="TagA", keys=["k1", "k2"])
        message.user_properties["big"] = "v" * chars
        return message

    def sdk_takes(chars: int) -> bool:
        try:
            wire_properties(Message("T", b"x", tags="TagA", keys=["k1", "k2"], properties={
                "color": "red", "big": "v" * chars}), "01ABC")
        except MQClientError:
            return False
        return True

    low, high = 0, MAX_PROPERTIES_SIZE  # the SDK takes ``low`` chars and refuses ``high``
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if sdk_takes(middle) else (low, middle)
    assert to_outgoing(with_value(low), MAX_BODY).message.properties["big"] == "v" * low
    with pytest.raises(ProxyError) as err:
        to_outgoing(with_value(high), MAX_BODY)
    assert err.value.code == Code.MESSAGE_PROPERTIES_TOO_LARGE


@pytest.mark.parametrize(("message", "code"), [
    (v2(message_group="g", delivery_timestamp=Timestamp(seconds=1)), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (v2(message_type=definition_pb2.DELAY), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (v2(delivery_timestamp=Timestamp(seconds=-5)), Code.ILLEGAL_DELIVERY_TIME),
    (v2(b"x" * (MAX_BODY + 1)), Code.MESSAGE_BODY_TOO_LARGE),
    (v2(tag="a\x01b"), Code.ILLEGAL_MESSAGE_TAG),
    (v2(message_type=definition_pb2.PRIORITY), Code.UNSUPPORTED),
])
def test_what_cannot_be_stored_faithfully_is_refused(message: definition_pb2.Message, code: int):
    with pytest.raises(ProxyError) as err:
        to_outgoing(message, MAX_BODY)
    assert err.value.code == code and err.value.message


def test_every_property_name_of_the_project_is_reserved():
    assert {"TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TIMER_DELIVER_MS", "REAL_TOPIC", "RETRY_TOPIC", "__SHARDINGKEY",
            "TRAN_MSG", "PGROUP", "__transactionId__", "TRANSACTION_CHECK_TIMES"} <= RESERVED_PROPERTIES
    assert "color" not in RESERVED_PROPERTIES


@pytest.mark.parametrize("name", ["TRAN_MSG", "PGROUP"])
def test_a_normal_send_cannot_make_itself_a_half_message(name: str):
    message = v2(message_type=definition_pb2.NORMAL)
    message.user_properties[name] = "true"
    with pytest.raises(ProxyError) as err:
        to_outgoing(message, MAX_BODY)
    assert err.value.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_a_clients_born_time_and_host_are_kept_and_handed_back():
    """The record's born time was the proxy's and its born host the proxy's address: a v2 consumer saw the proxy as
    every message's producer. The born time is the client's, its host name a property handed back on receive."""
    out = to_outgoing(v2(born_timestamp=Timestamp(seconds=1_700_000_000, nanos=5_000_000), born_host="app-7"),
                      MAX_BODY)
    assert out.born_timestamp == 1_700_000_000_005 and out.message.properties[PROPERTY_BORN_HOST] == "app-7"
    assert to_outgoing(v2(), MAX_BODY).born_timestamp == 0  # not said: the proxy's now
    assert PROPERTY_BORN_HOST not in to_outgoing(v2(born_host="a\x01b"), MAX_BODY).message.properties
    (wire,) = batch_wire_properties([out.message])
    record = encode_record(b"T", 0, b"b", wire, born_timestamp=out.born_timestamp,
                           born_host=encode_host("10.0.0.9:1234"))
    sp = to_v2_message(decode_record(record), "T", "handle", 0, 30_000).system_properties
    assert (sp.born_host, sp.born_timestamp.ToMilliseconds()) == ("app-7", 1_700_000_000_005)
    assert PROPERTY_BORN_HOST not in to_v2_message(decode_record(record), "T", "handle", 0, 30_000).user_properties


def test_a_popped_record_is_handed_out_with_its_digest_attempt_and_handle():
    properties = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01ABC", PROPERTY_SHARDING_KEY: "g1",
                                    "color": "red"})
    record = encode_record(b"T", 3, b"body!", properties, queue_offset=41, physical_offset=1234,
                           store_timestamp=1_700_000_000_500, born_timestamp=1_700_000_000_123,
                           born_host=encode_host("10.0.0.7:5555"), store_host=encode_host("127.0.0.1:10911"))
    msg = to_v2_message(decode_record(record), "T", "v1|broker-a|3|41|7|99|2", 2, 30_000)
    sp = msg.system_properties
    assert (msg.topic.name, msg.body, dict(msg.user_properties)) == ("T", b"body!", {"color": "red"})
    assert (sp.message_id, sp.tag, list(sp.keys), sp.message_group) == ("01ABC", "TagA", ["k1", "k2"], "g1")
    # MD5 in upper-case hex, as upstream: every official client checks it alike (a CRC32's hex they do not)
    assert (sp.body_digest.type, sp.body_digest.checksum) == (definition_pb2.MD5, "CBA84730B1622568056768F1FE8289B1")
    assert sp.body_encoding == definition_pb2.IDENTITY and sp.message_type == definition_pb2.FIFO
    assert (sp.receipt_handle, sp.delivery_attempt, sp.queue_id, sp.queue_offset) == (
        "v1|broker-a|3|41|7|99|2", 3, 3, 41)
    assert (sp.born_host, sp.store_host, sp.invisible_duration.seconds) == ("10.0.0.7", "127.0.0.1:10911", 30)
    assert sp.born_timestamp.ToMilliseconds() == 1_700_000_000_123
    assert sp.store_timestamp.ToMilliseconds() == 1_700_000_000_500


def test_a_check_back_goes_to_a_producer_of_the_topic_on_its_stream():
    async def scenario() -> list[service_pb2.TelemetryCommand]:
        channels = TelemetryChannels()
        settings = definition_pb2.Settings(client_type=definition_pb2.PRODUCER, publishing=definition_pb2.Publishing(
            topics=[definition_pb2.Resource(name="T")]))
        hello = asyncio.Event()

        async def requests() -> AsyncIterator[service_pb2.TelemetryCommand]:
            yield service_pb2.TelemetryCommand(settings=settings)
            await asyncio.sleep(3600)  # the client keeps its side open

        async def on_command(channel: TelemetryChannel, command: service_pb2.TelemetryCommand) -> None:
            channel.settings = command.settings
            hello.set()

        stream = channels.serve("client-1", requests(), on_command)
        first = asyncio.ensure_future(stream.__anext__())
        await hello.wait()
        transactions = TransactionProcessor(channels)
        nobody_publishes = definition_pb2.Message(topic=definition_pb2.Resource(name="U"))
        assert not await transactions.recover_orphaned_transaction(nobody_publishes, "tx-0")
        assert await transactions.recover_orphaned_transaction(v2(), "tx-1")
        pushed = [await first]
        channels.close_all()
        pushed += [command async for command in stream]
        assert len(channels) == 0
        return pushed

    (command,) = asyncio.run(scenario())
    assert command.recover_orphaned_transaction_command.transaction_id == "tx-1"
    assert command.recover_orphaned_transaction_command.message.topic.name == "T"


def test_a_body_over_the_brokers_limit_is_body_too_large_not_a_bad_request():
    """Brokers with a maxMessageSize below the 4 MiB the proxy tells clients refuse a body the proxy took: the v2
    code says what the client must change (it was BAD_REQUEST)."""
    error = refusal(ResponseCode.INVALID_PARAMETER, "send: message body of 65537 bytes exceeds maxMessageSize 65536")
    assert error.code == Code.MESSAGE_BODY_TOO_LARGE
    assert refusal(ResponseCode.INVALID_PARAMETER, "queue id 9 does not exist").code == Code.BAD_REQUEST


def test_a_broker_that_is_not_its_groups_master_is_a_failover_not_a_permission():
    """Mid-failover a receive was answered FORBIDDEN (40300, ForbiddenException to the application) for a broker
    that said it is not its group's master (the proxy review); it is the code clients retry on."""
    remark = f"receive from topic T: NO_PERMISSION: broker broker-a {NOT_GROUP_MASTER}: POP state lives on the master"
    assert refusal(ResponseCode.NO_PERMISSION, remark).code == Code.PROXY_TIMEOUT
    assert refusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"send: {DEPOSED_MASTER}: restarting").code == Code.PROXY_TIMEOUT
    assert refusal(ResponseCode.NO_PERMISSION, "access denied: no DENY for user u").code == Code.FORBIDDEN


def test_a_born_time_that_is_no_time_is_refused_by_its_own_entry():
    """Past year 9999 the conversion raised ValueError: the whole request failed INTERNAL while its other messages
    were stored, and the client's retry stored them twice."""
    with pytest.raises(ProxyError) as err:
        to_outgoing(v2(born_timestamp=Timestamp(seconds=2**40)), MAX_BODY)
    assert err.value.code == Code.BAD_REQUEST and "born timestamp" in err.value.message
    assert to_outgoing(v2(born_timestamp=Timestamp(seconds=-5)), MAX_BODY).born_timestamp == 0


def test_a_stored_property_that_is_not_utf8_is_handed_out_replaced():
    """Brokers refuse such properties now; one stored before failed every v2 receive of its queue."""
    record = encode_record(b"T", 0, b"b", b"UNIQ_KEY\x0101ABC\x02note\x01caf\xe9\x02",
                           born_host=encode_host("10.0.0.9:1234"))
    message = to_v2_message(decode_record(record), "T", "handle", 0, 30_000)
    assert message.user_properties["note"] == "caf\ufffd"
    assert decode_properties(b"a\x01\xff\x02") == {"a": "\ufffd"}

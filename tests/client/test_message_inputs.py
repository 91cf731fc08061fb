"""A Message whose fields the SDK could not send is refused where it is built, as the SDK's error saying what is
wrong (it failed deep in a send with a TypeError or an AttributeError)."""

import pytest

from client import Admin, KVClient, Message, MQClientError, Producer, PullConsumer, SimpleConsumer
from client.message_encoding import batch_wire_properties
from common.message_properties import decode_properties
from common.message_queue import MessageQueue


@pytest.mark.parametrize(("fields", "said"), [
    ({"body": "text"}, "body must be bytes, not str"),
    ({"body": None}, "body must be bytes, not NoneType"),
    ({"topic": None}, "topic must be a str, not NoneType"),
    ({"tags": 5}, "tags must be a str or None, not int"),
    ({"tags": "a||b"}, "tags 'a||b' hold '||', which separates a subscription's tags"),  # before: no one received it
    ({"keys": [None]}, "keys must be strs, not None"),
    ({"keys": ["k", 5]}, "keys must be strs, not 5"),
    ({"keys": 5}, "keys must be a str or a list of str, not int"),
    ({"properties": {"a": 1}}, "properties must be a dict of str to str, not 'a': 1"),
    ({"properties": {1: "a"}}, "properties must be a dict of str to str, not 1: 'a'"),
    ({"properties": [("a", "b")]}, "properties must be a dict of str to str, not list"),
    ({"flag": "1"}, "flag must be a 32-bit integer, not '1'"),
    ({"flag": 2**31}, "flag must be a 32-bit integer, not 2147483648"),
])
def test_a_field_the_sdk_cannot_send_is_refused_when_the_message_is_built(fields: dict, said: str):
    with pytest.raises(MQClientError, match="bad message: ") as refused:
        Message(**{"topic": "T", "body": b"x", **fields})
    assert said in str(refused.value)


def test_what_was_sent_before_is_still_taken():
    for msg in (Message("T", b"x"), Message("T", bytearray(b"x"), tags="", keys="a b"),
                Message("T", b"x", keys=("a", "b")), Message("T", b"x", properties=None),  # type: ignore[arg-type]
                Message("T", b"x", flag=-1), Message("", b"x")):  # (an empty topic: the producer says so)
        batch_wire_properties([msg])
    props = decode_properties(batch_wire_properties([Message("T", b"x", tags="A", keys=["k1", "k2"],
                                                             properties={"p": "v"})])[0])
    assert props["TAGS"] == "A" and props["p"] == "v"


def test_delays_are_still_checked_when_encoded():
    msg = Message("T", b"x", delay_level=1.5)  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="are integers"):
        batch_wire_properties([msg])


def test_acks_of_what_no_receive_handed_out_are_refused_as_sdk_errors() -> None:
    """A simple consumer's ack of None, of a pulled message (no receipt handle) or of something else raised a
    TypeError or an IndexError; now MQClientError saying what was wrong, before anything is sent."""
    from client import SimpleConsumer
    from common.message import MessageExt

    pulled = MessageExt(topic="T", body=b"x", queue_id=0, queue_offset=0, physical_offset=0, store_timestamp=0,
                        born_timestamp=0)
    with SimpleConsumer("127.0.0.1:1", group="g", topic="T") as consumer:  # (no connection is needed to refuse these)
        for bad, says in ((None, "not NoneType"), (pulled, "no receipt handle"), ([42], "not int")):
            with pytest.raises(MQClientError, match=says):
                consumer.ack_async(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["TAGS", "KEYS", "DELAY", "TIMER_DELIVER_MS", "RETRY_TOPIC", "RECONSUME_TIME",
                                  "ORIGIN_MESSAGE_ID", "REAL_TOPIC", "__LOGIC_QUEUE", "TRAN_MSG", "PGROUP"])
def test_a_property_named_as_one_the_sdk_or_broker_writes_is_refused_when_sent(name: str):
    """A producer's own TAGS beside the message's tags: the broker indexed the first, readers kept the last, so a
    tag subscriber skipped the message and POP handed it out under the other tag; its own RECONSUME_TIME sent a
    message to the dead letter queue at its first failure. Refused, as upstream's putUserProperty does."""
    with pytest.raises(MQClientError, match=f"property '{name}' is reserved"):
        batch_wire_properties([Message("T", b"x", tags="real", properties={name: "1"})])


def test_the_unique_key_and_message_group_may_be_set_and_tags_and_keys_must_be_utf8():
    props = decode_properties(batch_wire_properties([Message("T", b"x", properties={
        "UNIQ_KEY": "id-1", "__SHARDINGKEY": "g", "app": "v"})])[0])
    assert (props["UNIQ_KEY"], props["__SHARDINGKEY"], props["app"]) == ("id-1", "g", "v")
    for fields in ({"tags": "\ud800"}, {"keys": ["\udcff"]}):  # a lone surrogate: a UnicodeEncodeError before
        with pytest.raises(MQClientError, match="tags and keys must be text UTF-8 can encode"):
            batch_wire_properties([Message("T", b"x", **fields)])


@pytest.mark.parametrize(("send", "said"), [
    (lambda p: p.send("hello"), "a send takes a Message, not str"),
    (lambda p: p.send(None), "a send takes a Message, not NoneType"),
    (lambda p: p.send_batch("abc"), "a batch is a sequence of Message, not str"),
    (lambda p: p.send_batch(Message("T1", b"x")), "a batch is a sequence of Message, not Message"),
    (lambda p: p.send_batch([Message("T1", b"x"), b"y"]), "a send takes Message objects, not bytes"),
    (lambda p: p.send(Message("T1", b"x"), queue=("T1", "broker-a", 0)), "queue must be a MessageQueue, not tuple"),
    # stored in T1 at queue 0 while the result named T2's queue 0 (the SDK review)
    (lambda p: p.send(Message("T1", b"x"), queue=MessageQueue("T2", "broker-a", 0)),
     "queue T2@broker-a:0 is of topic T2, not the messages' topic T1"),
])
def test_a_send_the_sdk_cannot_make_is_refused_before_anything_goes(send, said: str):
    with Producer("127.0.0.1:1") as producer, pytest.raises(MQClientError) as refused:
        send(producer)
    assert said in str(refused.value)


@pytest.mark.parametrize(("call", "said"), [
    (lambda c: c.receive(1, 1000, wait_ms=float("nan")), "wait_ms must be an integer"),  # blocked 60 s, then TypeError
    (lambda c: c.receive(1, 1000, wait_ms=-20_000), "wait_ms -20000 is outside 0.."),
    (lambda c: c.receive("5"), "max_nums must be an integer in 1..32, not '5'"),
    (lambda c: c.receive(1, invisible_ms=2**63), "invisible_ms 9223372036854775808 is outside 1..43200000"),
    (lambda c: c.receive(1, invisible_ms=0), "invisible_ms 0 is outside 1..43200000"),
])
def test_a_receive_the_sdk_cannot_make_is_refused_naming_the_argument(call, said: str):
    from client import SimpleConsumer

    with SimpleConsumer("127.0.0.1:1", group="g", topic="T") as consumer, pytest.raises(MQClientError) as refused:
        call(consumer)
    assert said in str(refused.value)


@pytest.mark.parametrize(("call", "said"), [
    (lambda c, mq: c.pull(mq, "0"), "offset must be an integer"),
    (lambda c, mq: c.pull(mq, 2**63), "offset 9223372036854775808 is outside"),
    (lambda c, mq: c.pull(mq, 0, max_nums=2**40), "max_nums 1099511627776 is outside"),
    (lambda c, mq: c.pull(mq, 0, suspend_ms=float("nan")), "suspend_ms must be an integer"),
    (lambda c, mq: c.commit(mq, "5"), "cannot commit offset '5'"),
    (lambda c, mq: c.commit(mq, 2**63), "offset 9223372036854775808 is outside"),
    (lambda c, mq: c.search_offset(mq, "x"), "timestamp_ms must be an integer"),
])
def test_a_pull_the_sdk_cannot_make_is_refused_naming_the_argument(call, said: str):
    from client import PullConsumer

    with PullConsumer("127.0.0.1:1", group="g") as consumer, pytest.raises(MQClientError) as refused:
        call(consumer, MessageQueue("T", "broker-a", 0))
    assert said in str(refused.value)


def test_a_long_polls_deadline_is_bounded_by_the_longest_hold_of_any_broker():
    """A pull asking to be held an hour waited an hour on a stopped broker (the broker holds it 30 s at most)."""
    from client.argument_checks import held_s
    from common.wait_limits import MAX_SUSPEND_MS

    assert held_s(3_600_000) == MAX_SUSPEND_MS / 1000 and held_s(1500) == 1.5


def test_a_batched_kv_get_of_one_string_is_refused():
    """get_batch("gk") read the keys "g" and "k" and answered [None, None] (the SDK review)."""
    from client import KVClient

    with KVClient("127.0.0.1:1") as kv, pytest.raises(MQClientError, match="get_batch takes a list of keys"):
        kv.get_batch("gk")


@pytest.mark.parametrize(("make", "said"), [
    (lambda: Producer("127.0.0.1:1", send_timeout_ms="3000"), "send_timeout_ms must be a number of milliseconds"),
    (lambda: Producer("127.0.0.1:1", send_timeout_ms=0), "send_timeout_ms must be a number of milliseconds above 0"),
    (lambda: Producer("127.0.0.1:1", send_timeout_ms=float("nan")), "not nan"),
    (lambda: Producer("127.0.0.1:1", send_timeout_ms=-5), "not -5"),
    (lambda: Admin("127.0.0.1:1", rpc_timeout_ms=0), "rpc_timeout_ms must be a number of milliseconds above 0"),
    (lambda: PullConsumer("127.0.0.1:1", rpc_timeout_ms=None), "not None"),
    (lambda: SimpleConsumer("127.0.0.1:1", topic="T", rpc_timeout_ms=True), "not True"),
    (lambda: KVClient("127.0.0.1:1", retry_timeout_ms=-1), "retry_timeout_ms must be a number of milliseconds >= 0"),
])
def test_a_client_made_with_a_timeout_it_cannot_use_is_refused(make, said: str):
    """0, negative or NaN timeouts were taken and failed every call with DEADLINE_EXCEEDED naming none; a string
    raised TypeError (the SDK review)."""
    with pytest.raises(MQClientError) as refused:
        make()
    assert said in str(refused.value)


def test_timeouts_as_before_are_taken():
    for client in (Producer("127.0.0.1:1", send_timeout_ms=2500.5), KVClient("127.0.0.1:1", retry_timeout_ms=0),
                   Admin("127.0.0.1:1", rpc_timeout_ms=1)):
        client.close()

"""A send with a sharding_key carries it as the messages' message group (``__SHARDINGKEY``), as a RocketMQ 5 client's
message group does: a FIFO POP consumer (the official clients, through mqproxy) kept them in order with the other
messages of that group; without it they counted as one group of their own, and the two went out side by side. The
SDK's born host is the machine's address, not 127.0.0.1 whatever the machine. Real daemons."""

from pathlib import Path

import pytest

from client import Message, MQClientError, Producer, PullConsumer
from client.producer import local_ip
from common.message_properties import PROPERTY_SHARDING_KEY
from tests.cluster import make_cluster


def test_a_sharding_key_is_the_message_group(tmp_path: Path) -> None:
    c = make_cluster(tmp_path, ("broker-a",), registerNameServerPeriod=1000)
    try:
        c.create_topic("GroupT", 1)
        with Producer(c.addr) as producer:
            producer.send(Message("GroupT", b"keyed"), sharding_key="order-1")
            producer.send(Message("GroupT", b"own", properties={PROPERTY_SHARDING_KEY: "mine"}), sharding_key="x")
            producer.send(Message("GroupT", b"plain"))
            with pytest.raises(MQClientError, match="sharding_key must be a str"):
                producer.send(Message("GroupT", b"bad"), sharding_key=5)  # type: ignore[arg-type]
        with PullConsumer(c.addr, group="group-reader") as consumer:
            mq = consumer.queues("GroupT")[0]
            got = {m.body: m for m in consumer.pull(mq, 0, 32).messages}
        assert got[b"keyed"].properties.get(PROPERTY_SHARDING_KEY) == "order-1"  # was absent
        assert got[b"own"].properties.get(PROPERTY_SHARDING_KEY) == "mine"  # the message's own group is kept
        assert PROPERTY_SHARDING_KEY not in got[b"plain"].properties
        assert got[b"plain"].born_host.rpartition(":")[0] == local_ip()
    finally:
        c.stop()

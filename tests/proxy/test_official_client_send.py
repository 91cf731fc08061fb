"""The official RocketMQ 5 Python client sends through mqproxy; this repository's own PullConsumer reads the
messages back from the brokers: the same bodies, tags, keys, properties and message ids, and a delayed message no
earlier than its delivery time, and a recalled one never."""

import time
import uuid

from client import Admin, PullConsumer
from common.message import MessageExt
from tests.cluster import wait_until
from tests.proxy.conftest import OfficialClient, ProxyCluster

DELAY_S = 10  # the acceptance: +10 s, delivered not before
RECALL_DELAY_S = 5  # the client sends two, then recalls: room for a loaded machine


def fresh_topic(proxy_cluster: ProxyCluster, queues: int = 4) -> str:
    topic = f"ProxySend_{uuid.uuid4().hex[:8]}"
    proxy_cluster.cluster.create_topic(topic, queues)
    return topic


def pull_all(namesrv: str, topic: str) -> list[MessageExt]:
    out: list[MessageExt] = []
    with PullConsumer(namesrv, group=f"pull_{uuid.uuid4().hex[:6]}") as consumer:
        for mq in consumer.queues(topic):
            offset = 0
            while True:
                result = consumer.pull(mq, offset=offset, max_nums=32)
                if not result.messages:
                    break
                out.extend(result.messages)
                offset = result.next_begin_offset
    return out


def test_sync_and_async_sends_are_stored_as_sent(proxy_cluster: ProxyCluster, official_client: OfficialClient):
    topic = fresh_topic(proxy_cluster)
    sent = []
    for mode in ("sync", "async"):
        lines = official_client.run("produce.py", proxy_cluster.endpoint, topic, 10, "--mode", mode,
                                    "--prefix", mode, "--tag", "TagA", "--keys", "--property", "color=red")
        sent += [line for line in lines if "message_id" in line]
    assert len(sent) == 20 and len({s["message_id"] for s in sent}) == 20

    stored = wait_until(lambda: (m := pull_all(proxy_cluster.namesrv, topic)) and len(m) >= 20 and m,
                        timeout=15, what="20 messages stored")
    by_id = {m.msg_id: m for m in stored}
    assert len(stored) == 20 and set(by_id) == {s["message_id"] for s in sent}  # the client's ids, each once
    for s in sent:
        msg = by_id[s["message_id"]]
        assert msg.body.decode() == s["body"]
        assert msg.tags == "TagA"
        assert msg.keys == [f"key-{s['i']}"]
        assert msg.properties["color"] == "red"
        # the client's born time (it says whole seconds) and host, not the proxy's
        assert msg.born_timestamp % 1000 == 0 and msg.properties.get("__BORNHOST"), (msg.born_timestamp, msg.properties)
    # round robin over the brokers' queues, as any producer of this cluster
    assert len({(m.queue_id, m.store_host) for m in stored}) > 1


def test_delayed_message_is_not_delivered_before_its_time(proxy_cluster: ProxyCluster,
                                                          official_client: OfficialClient):
    topic = fresh_topic(proxy_cluster, queues=2)
    started = time.time()
    lines = official_client.run("produce.py", proxy_cluster.endpoint, topic, 1, "--delay-s", DELAY_S,
                                "--prefix", "later")
    (sent,) = [line for line in lines if "message_id" in line]
    due = sent["deliver_at"]  # epoch seconds: what the client put in the message's delivery timestamp
    assert due >= int(sent["sent_at"]) + DELAY_S - 1
    while time.time() < due - 0.3:
        # Judged by when it was stored, not when the pull ended: one begun just before due may end after it.
        early = [m for m in pull_all(proxy_cluster.namesrv, topic) if m.store_timestamp / 1000 < due - 0.001]
        assert early == [], "delivered before its delivery time"
        time.sleep(0.2)
    (msg,) = wait_until(lambda: pull_all(proxy_cluster.namesrv, topic), timeout=10, what="the delayed message")
    assert msg.body == b"later-0" and msg.msg_id == sent["message_id"]
    assert msg.store_timestamp / 1000 >= due - 0.001, "stored in its topic before it was due"
    assert time.time() - started < DELAY_S + 30


def test_a_recalled_delayed_message_is_never_delivered(proxy_cluster: ProxyCluster, official_client: OfficialClient):
    """Both messages on one broker (the timer delivers in due order), the recalled one due no later than the other:
    once the other arrived, the recalled one would have too."""
    topic = f"ProxyRecall_{uuid.uuid4().hex[:8]}"
    broker = sorted(proxy_cluster.cluster.brokers)[0]
    with Admin(proxy_cluster.namesrv) as admin:
        admin.create_topic(topic, brokers=[broker], read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: topic in admin.topic_list(), what=f"route of {topic}")
    lines = official_client.run("produce.py", proxy_cluster.endpoint, topic, 2, "--delay-s", RECALL_DELAY_S,
                                "--prefix", "recall", "--recall-first", 1)
    sent = [line for line in lines if "message_id" in line]
    assert [s["recall_handle"].split("|")[1] for s in sent] == [broker, broker]  # a handle names its broker
    (recalled,) = [line for line in lines if "recalled" in line]
    assert recalled["recalled"] == sent[0]["message_id"]
    (again,) = [line for line in lines if "recall_again_error" in line or "recalled_again" in line]
    assert "NotFoundException" in again.get("recall_again_error", ""), again
    assert "not pending" in again["recall_again_error"], again
    (msg,) = wait_until(lambda: pull_all(proxy_cluster.namesrv, topic), timeout=RECALL_DELAY_S + 15,
                        what="the message not recalled")
    assert msg.body == b"recall-1" and msg.msg_id == sent[1]["message_id"]
    assert [m.body for m in pull_all(proxy_cluster.namesrv, topic)] == [b"recall-1"]

"""Long polling: a parked pull wakes on arrival, or answers not-found at its timeout."""

import threading
import time

from client import Message, Producer, PullConsumer, PullStatus
from tests.integration.conftest import Cluster


def test_parked_pull_returns_soon_after_a_matching_send(cluster: Cluster):
    topic = "LongPollT"
    cluster.create_topic(topic, queues=1)
    with PullConsumer(cluster.addr, group="lp-group") as consumer, Producer(cluster.addr) as producer:
        mq = next(q for q in consumer.queues(topic) if q.broker_name == "broker-a")
        latencies = []
        for round_ in range(5):
            offset = consumer.max_offset(mq)
            result: dict[str, object] = {}

            def park(offset: int = offset, result: dict[str, object] = result) -> None:
                res = consumer.pull(mq, offset, 32, suspend_ms=5_000)
                result["status"], result["at"] = res.status, time.monotonic()
                result["bodies"] = [m.body for m in res.messages]

            t = threading.Thread(target=park)
            t.start()
            time.sleep(0.3)  # let the pull reach the broker and park (what is measured starts at the send)
            assert "status" not in result, "the pull answered without waiting"
            sent_at = time.monotonic()
            producer.send(Message(topic, f"wake-{round_}".encode()), queue=mq)
            t.join(5)
            assert result["status"] is PullStatus.FOUND and result["bodies"] == [f"wake-{round_}".encode()]
            latencies.append(result["at"] - sent_at)
        print(f"long-poll wake latencies ms: {[round(x * 1000, 1) for x in latencies]}")
        # Woken by the arrival: a periodic re-check (a second, as upstream's short polling) would make the median
        # about half its period; 250 ms leaves a loaded machine room (idle, the median is 5 to 20 ms).
        assert sorted(latencies)[len(latencies) // 2] < 0.25, latencies


def test_parked_pull_times_out_with_not_found(cluster: Cluster):
    topic = "LongPollIdleT"
    cluster.create_topic(topic, queues=1)
    with PullConsumer(cluster.addr, group="lp-idle") as consumer:
        mq = consumer.queues(topic)[0]
        offset = consumer.max_offset(mq)
        start = time.monotonic()
        result = consumer.pull(mq, offset, 32, suspend_ms=700)
        waited = time.monotonic() - start
        assert result.status is PullStatus.NO_NEW_MSG
        assert 0.6 <= waited < 2.0, waited


def test_tag_filtered_pull(cluster: Cluster):
    topic = "TagPullT"
    cluster.create_topic(topic, queues=1)
    with Producer(cluster.addr) as producer, PullConsumer(cluster.addr, group="tag-group") as consumer:
        mq = next(q for q in consumer.queues(topic) if q.broker_name == "broker-b")
        for i in range(30):
            producer.send(Message(topic, f"m{i}".encode(), tags="A" if i % 3 else "B"), queue=mq)
        result = consumer.pull(mq, 0, 64, sub_expression="B")
        assert [m.body for m in result.messages] == [f"m{i}".encode() for i in range(0, 30, 3)]
        assert all(m.tags == "B" for m in result.messages)
        assert result.next_begin_offset == 30
        none = consumer.pull(mq, 0, 64, sub_expression="Z")
        assert none.status is PullStatus.NO_MATCHED_MSG and none.next_begin_offset == 30

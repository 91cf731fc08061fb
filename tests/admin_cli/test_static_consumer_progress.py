"""consumerProgress on a static topic: brokers report physical queues, members hold logic queues
(``__logical_queue_broker__``); each row names the member holding the logic queue its physical queue serves."""

from collections.abc import Iterator

import pytest

from client import Admin, Message, Producer, PushConsumer
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from tests.admin_cli.helpers import CLUSTER, ok, ok_json, registered_cluster
from tests.cluster import Cluster, wait_static_route, wait_until

BROKERS = ["broker-a", "broker-b"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = registered_cluster(tmp_path_factory.mktemp("static-progress"), BROKERS, registerNameServerPeriod=1000)
    try:
        yield c
    finally:
        c.stop()


def logic_of_physical(cluster: Cluster, topic: str) -> dict[tuple[str, int], int]:
    """(broker, physical queue id) -> logic queue id, as the route's mapping infos say."""
    with Admin(cluster.addr) as admin:
        route = admin.topic_route(topic)
    return {(b, physical): logic for b, i in route.topic_queue_mapping_by_broker.items()
            for logic, physical in i.curr_id_map.items()}


def test_each_physical_row_names_the_member_of_its_logic_queue(cluster: Cluster):
    topic, group = "StaticProgT", "static-prog"
    with Admin(cluster.addr) as admin:
        admin.update_static_topic(topic, 8, cluster=CLUSTER)
    wait_static_route(cluster.addr, topic, 0)
    members = [PushConsumer(cluster.addr, group=group, topic=topic, handler=lambda m: None, consume_from_first=True)
               for _ in range(2)]
    for m in members:
        m.start()
    try:
        with Producer(cluster.addr) as producer:
            for i in range(32):
                producer.send(Message(topic, f"s{i}".encode()), sharding_key=str(i))
        logic = logic_of_physical(cluster, topic)
        assert len(logic) == 8

        def logic_owners() -> dict[int, str] | None:
            held = {q.queue_id: m.client_id for m in members for q in m.assigned_queues()
                    if q.topic == topic and q.broker_name == LOGICAL_QUEUE_MOCK_BROKER_NAME}
            return held if len(held) == 8 and all(m.assigned_queues() for m in members) else None

        def settled() -> list[dict] | None:  # every message committed, members reported their logic queues
            owners = logic_owners()
            shown_rows = ok_json(cluster.addr, "consumerProgress", "-g", group, "-t", topic)
            done = len(shown_rows) == 8 and all(r["diff"] == 0 for r in shown_rows)
            shown = owners is not None and all(
                r["client_id"] == owners[logic[(r["broker_name"], r["queue_id"])]] for r in shown_rows)
            return shown_rows if done and shown else None

        rows = wait_until(settled, timeout=20, interval=0.3, what="each physical row owned by its logic queue's member")
        assert {r["client_id"] for r in rows} == {m.client_id for m in members}
        assert sorted((r["broker_name"], r["queue_id"]) for r in rows) == sorted(logic)
        text = ok(cluster.addr, "consumerProgress", "-g", group, "-t", topic)
        cells = [line.split() for line in text.splitlines()[1:] if line.startswith(topic)]
        assert {(c[1], int(c[2])): c[5] for c in cells} == {(r["broker_name"], r["queue_id"]): r["client_id"]
                                                            for r in rows}  # the column after Consumer Offset
    finally:
        for m in members:
            m.close()

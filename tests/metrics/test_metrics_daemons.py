"""Metrics and health (issue 18, item 3) on real daemons started on port 0 (``metricsPromExporterPort=0``): scrapes
under load show the counters moving; gRPC health and reflection answer on each daemon's own port; a broker goes
NOT_SERVING when its store stops taking writes (a full disk, steered through ``PYROCKETMQ_DISK_USAGE_FILE``) and
SERVING again when writes resume; the Grafana dashboard in ``deploy/`` parses and names only metrics that a real
scrape has."""

import json
import re
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from broker.store.disk_usage_watcher import USAGE_FILE_ENV
from client import Admin, KVClient, Message, MQClientError, Producer, PullConsumer, SimpleConsumer
from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from tests.cluster import REPO, Cluster, Daemon, make_cluster, start_broker, start_daemon, wait_until

PROM = {"metricsExporterType": "PROM", "metricsPromExporterPort": 0}
PROM_FLAGS = ("--metrics-exporter-type", "PROM", "--metrics-prom-exporter-port", "0")
DASHBOARD = REPO / "deploy" / "grafana" / "pyrocketmq-dashboard.json"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Scrape:
    families: set[str]  # family and sample names, with and without _total/_bucket/...
    samples: Samples

    def value(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)


def metrics_port(daemon: Daemon) -> int:
    """The port from the daemon's structured ``metrics_exporter_started ... port=N`` line."""
    match = wait_until(lambda: re.search(r"metrics_exporter_started .*? port=(\d+)", daemon.log()),
                       what=f"{daemon.name}'s metrics_exporter_started line")
    return int(match.group(1))


def scrape(port: int) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    families: set[str] = set()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for s in family.samples:
            families.add(s.name)
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return Scrape(families, samples)


def health(addr: str, service: str = "") -> int:
    with grpc.insecure_channel(addr) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                          timeout=5).status


def reflected_services(addr: str) -> set[str]:
    with grpc.insecure_channel(addr) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                            timeout=5)
        return {s.name for s in next(answers).list_services_response.service}


@dataclass
class MetricsCluster:
    cluster: Cluster
    proxy: Daemon

    def stop(self) -> None:
        if self.proxy.alive:
            self.proxy.stop()
        self.cluster.stop()


@pytest.fixture(scope="module")
def mc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsCluster]:
    tmp = tmp_path_factory.mktemp("metrics")
    cluster = make_cluster(tmp, ("broker-a",), namesrv_args=PROM_FLAGS, registerNameServerPeriod=1000,
                           kvEnable="true", tieredStoreEnable="true", tieredBackendServiceProvider="posix",
                           tieredStoreGroupCommitAge=50, **PROM)
    try:
        proxy = start_daemon("mqproxy", "proxy.main", ["-n", cluster.addr, "--host", "127.0.0.1", "-p", "0",
                                                       *PROM_FLAGS], tmp / "proxy")
    except BaseException:
        cluster.stop()
        raise
    mc = MetricsCluster(cluster, proxy)
    yield mc
    mc.stop()


def _send_and_pull(cluster: Cluster, topic: str, group: str, batches: int, batch: int) -> int:
    """Sends ``batches`` batches; pulls every queue to its end; returns the bytes of the bodies sent."""
    body = b"m" * 100
    with Producer(cluster.addr, group=f"{group}_P") as producer:
        for _ in range(batches):
            producer.send_batch([Message(topic, body) for _ in range(batch)])
    pulled = 0
    with PullConsumer(cluster.addr, group=group) as consumer:
        for mq in consumer.queues(topic):
            offset = 0
            while result := consumer.pull(mq, offset, max_nums=64).messages:
                pulled += len(result)
                offset = result[-1].queue_offset + 1
            consumer.commit(mq, offset // 2)  # half of each queue left: a lag to see
    assert pulled == batches * batch
    return batches * batch * len(body)


def test_broker_counters_move_under_load(mc: MetricsCluster):
    cluster = mc.cluster
    topic, group = f"Metrics_{uuid.uuid4().hex[:8]}", f"MetricsGroup_{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, queues=2)
    port = metrics_port(cluster.brokers["broker-a"])
    before = scrape(port)
    sent_bytes = _send_and_pull(cluster, topic, group, batches=5, batch=20)
    after = wait_until(lambda: (s := scrape(port)).value("rocketmq_consumer_lag_messages", topic=topic) > 0 and s,
                       what="the consumer lag gauge")

    def moved(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert moved("rocketmq_messages_in_total", topic=topic) == 100
    assert moved("rocketmq_throughput_in_total", topic=topic) >= sent_bytes
    assert moved("rocketmq_messages_out_total", topic=topic, consumer_group=group) == 100
    assert moved("rocketmq_throughput_out_total", topic=topic, consumer_group=group) >= sent_bytes
    assert moved("rocketmq_rpc_latency_count", request_code="send") >= 5
    assert moved("rocketmq_rpc_latency_count", request_code="pull") >= 2
    # committed half of each queue: the other half is the lag, per queue
    lag = after.value("rocketmq_consumer_lag_messages", topic=topic, consumer_group=group)
    assert 0 < lag <= 100
    assert {ls for (n, ls) in after.samples if n == "rocketmq_consumer_lag_messages"
            and ("topic", topic) in ls} == {frozenset({("topic", topic), ("consumer_group", group),
                                                      ("queue_id", str(q))}) for q in range(2)}
    # store offsets: the commitlog grew; nothing is left undispatched once the sends are answered and settled
    assert moved("rocketmq_store_commit_offset") >= sent_bytes
    assert after.value("rocketmq_store_writeable") == 1
    settled = wait_until(lambda: (s := scrape(port)).value("rocketmq_storage_dispatch_behind_bytes") == 0 and s,
                         what="dispatch to catch up")
    assert settled.value("rocketmq_store_dispatch_offset") == settled.value("rocketmq_store_confirm_offset")
    # the tier uploads what was sent (group commit age 50 ms)
    wait_until(lambda: scrape(port).value("rocketmq_tiered_uploaded_messages_total") >= 100,
               what="tiered uploads in the metrics")


def test_a_deleted_topics_series_go(mc: MetricsCluster):
    """Its message counters stayed exported for good: one more set of series every topic made and deleted."""
    cluster = mc.cluster
    topic, group = f"Deleted_{uuid.uuid4().hex[:8]}", f"DeletedGroup_{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, queues=1)
    port = metrics_port(cluster.brokers["broker-a"])
    _send_and_pull(cluster, topic, group, batches=1, batch=4)
    assert scrape(port).value("rocketmq_messages_out_total", topic=topic) == 4
    with Admin(cluster.addr) as admin:
        admin.delete_topic(topic, "DefaultCluster")
    gone = scrape(port)
    assert not [n for (n, ls) in gone.samples if ("topic", topic) in ls], "a deleted topic's series are exported"


def test_a_deleted_groups_counters_and_pop_state_go(mc: MetricsCluster):
    """deleteSubGroup removed only the config: the group's counters and POP state (messages in flight) stayed for
    good (the leaks review). Its committed offsets stay, and so do the lag and statsAll rows read from them."""
    cluster = mc.cluster
    topic, group = f"GoneGroup_{uuid.uuid4().hex[:8]}", f"GoneGroup_{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, queues=1)
    port = metrics_port(cluster.brokers["broker-a"])
    _send_and_pull(cluster, topic, group, batches=1, batch=4)  # committed 2 of 4
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        in_flight = consumer.receive(32, invisible_ms=600_000, wait_ms=2000)
    assert [m.queue_offset for m in in_flight] == [2, 3]
    assert scrape(port).value("rocketmq_consumer_lag_messages", consumer_group=group) == 2
    with Admin(cluster.addr) as admin:
        assert admin.delete_subscription_group(group, "DefaultCluster") == {"broker-a": True}
        assert [(row.total, row.count_since_boot) for _, row in admin.stats_all() if row.group == group] == [(2, 0)]
        with Producer(cluster.addr) as producer:
            producer.send(Message(topic, b"after"))
        gone = scrape(port)
        assert not [n for (n, ls) in gone.samples if ("consumer_group", group) in ls and n.startswith(
            ("rocketmq_messages_out", "rocketmq_throughput_out"))], "a deleted group's counters"
        assert gone.value("rocketmq_consumer_lag_messages", consumer_group=group) == 3  # from its offsets
        assert [p.consumer_offset for p in admin.consumer_progress(group, topic)] == [2]  # its offsets stay
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as again:  # made again: from its committed offset
        got = again.receive(32, invisible_ms=30_000, wait_ms=2000)
        assert [m.queue_offset for m in got] == [2, 3, 4]  # not held back as in flight for 10 minutes


def test_pop_receives_count_as_messages_out(mc: MetricsCluster):
    cluster = mc.cluster
    topic, group = f"MetricsPop_{uuid.uuid4().hex[:8]}", f"MetricsPopGroup_{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, queues=2)
    port = metrics_port(cluster.brokers["broker-a"])
    before = scrape(port)
    with Producer(cluster.addr) as producer:
        producer.send_batch([Message(topic, b"p" * 50) for _ in range(10)])
    got = 0
    with SimpleConsumer(cluster.addr, group=group, topic=topic) as consumer:
        while got < 10:
            batch = consumer.receive(32, invisible_ms=30_000, wait_ms=2000)
            assert batch, "the messages sent are received"
            consumer.ack(batch)
            got += len(batch)
    after = scrape(port)
    assert after.value("rocketmq_messages_out_total", topic=topic, consumer_group=group) - before.value(
        "rocketmq_messages_out_total", topic=topic, consumer_group=group) == 10
    assert after.value("rocketmq_throughput_out_total", topic=topic, consumer_group=group) >= 500
    assert after.value("rocketmq_rpc_latency_count", request_code="pop") > before.value(
        "rocketmq_rpc_latency_count", request_code="pop")


def test_kv_ops_counted(mc: MetricsCluster):
    port = metrics_port(mc.cluster.brokers["broker-a"])
    before = scrape(port).value("rocketmq_kv_applied_ops_total")
    with KVClient(mc.cluster.addr) as kv:
        for i in range(5):
            kv.put(f"k{i}".encode(), b"v")
    wait_until(lambda: scrape(port).value("rocketmq_kv_applied_ops_total") >= before + 5, what="KV ops counted")


def test_namesrv_gauges_and_rpc_counts(mc: MetricsCluster):
    port = metrics_port(mc.cluster.namesrv)
    first = scrape(port)
    assert first.value("rocketmq_namesrv_live_brokers") == 1
    assert first.value("rocketmq_namesrv_brokers") == 1
    assert first.value("rocketmq_namesrv_topics") >= 1
    before = first.value("rocketmq_rpc_requests_total")
    # the broker registers every second (registerNameServerPeriod=1000): the counts move by themselves
    wait_until(lambda: scrape(port).value("rocketmq_rpc_requests_total") > before, timeout=15,
               what="name server RPC counts to move")
    assert scrape(port).value("rocketmq_rpc_latency_count") > 0


def test_proxy_rpc_counts_and_latency(mc: MetricsCluster):
    topic = f"ProxyMetrics_{uuid.uuid4().hex[:8]}"
    mc.cluster.create_topic(topic, queues=2)
    port = metrics_port(mc.proxy)
    before = scrape(port)
    with grpc.insecure_channel(mc.proxy.addr) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for _ in range(3):
            message = definition_pb2.Message(
                topic=definition_pb2.Resource(name=topic), body=b"x",
                system_properties=definition_pb2.SystemProperties(message_id=uuid.uuid4().hex.upper()))
            answer = stub.SendMessage(service_pb2.SendMessageRequest(messages=[message]), timeout=10)
            assert answer.status.code == definition_pb2.Code.OK, answer.status
    after = scrape(port)
    assert (after.value("rocketmq_rpc_requests_total", request_code="SendMessage")
            - before.value("rocketmq_rpc_requests_total", request_code="SendMessage")) == 3
    assert (after.value("rocketmq_rpc_latency_count", request_code="SendMessage")
            - before.value("rocketmq_rpc_latency_count", request_code="SendMessage")) == 3


def test_health_and_reflection_on_every_daemon(mc: MetricsCluster):
    broker = mc.cluster.brokers["broker-a"]
    for daemon, service in ((mc.cluster.namesrv, "rmq.NamesrvService"), (broker, "rmq.BrokerService"),
                            (mc.proxy, "apache.rocketmq.v2.MessagingService")):
        assert health(daemon.addr) == SERVING, daemon.name
        assert health(daemon.addr, service) == SERVING, daemon.name
        services = reflected_services(daemon.addr)
        assert {service, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services


def test_dashboard_names_only_metrics_that_exist(mc: MetricsCluster):
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert exprs, "the dashboard has no queries"
    named = {m for e in exprs for m in re.findall(r"\b(?:rocketmq|process)_[a-z_]+\b", e)}
    scraped: set[str] = set()
    for daemon in (mc.cluster.namesrv, mc.cluster.brokers["broker-a"], mc.proxy):
        scraped |= scrape(metrics_port(daemon)).families
    assert named - scraped == set(), f"the dashboard names metrics no daemon exports: {named - scraped}"


def test_broker_not_serving_while_the_disk_is_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    usage_file = tmp_path / "disk-usage"
    usage_file.write_text("50")
    monkeypatch.setenv(USAGE_FILE_ENV, str(usage_file))  # the broker process inherits it
    cluster = make_cluster(tmp_path / "cluster", ("broker-a",), **PROM)
    try:
        cluster.create_topic("HealthDisk", queues=1)
        broker = cluster.brokers["broker-a"]
        port = metrics_port(broker)
        assert health(broker.addr) == SERVING
        with Producer(cluster.addr) as producer:
            producer.send(Message("HealthDisk", b"before"))
            usage_file.write_text("99")  # the disk fills up: the store refuses writes
            wait_until(lambda: health(broker.addr) == NOT_SERVING, timeout=15, what="NOT_SERVING on a full disk")
            assert health(broker.addr, "rmq.BrokerService") == NOT_SERVING
            assert scrape(port).value("rocketmq_store_writeable") == 0
            with pytest.raises(MQClientError):
                producer.send(Message("HealthDisk", b"refused"))
            usage_file.write_text("50")  # room again: writes resume
            wait_until(lambda: health(broker.addr) == SERVING, timeout=15, what="SERVING once writes resume")
            assert scrape(port).value("rocketmq_store_writeable") == 1
            producer.send(Message("HealthDisk", b"after"))
    finally:
        cluster.stop()


def test_broker_not_serving_after_a_fail_stop(tmp_path: Path):
    """An injected fsync failure (``PYROCKETMQ_FAULTS``) fail-stops the store: NOT_SERVING, and it stays so (a
    fail-stop is cleared only by a restart, which serves again)."""
    settings = {"flushDiskType": "SYNC_FLUSH", "flushIntervalCommitLog": 10, **PROM}
    cluster = make_cluster(tmp_path, broker_names=(), **settings)
    try:
        broker = cluster.brokers["broker-a"] = start_broker(tmp_path, "broker-a", cluster.addr,
                                                            env={"PYROCKETMQ_FAULTS": "fsync@20"}, **settings)
        cluster.create_topic("HealthFailStop", queues=1)
        assert health(broker.addr) == SERVING
        with Producer(cluster.addr, retry_times=0) as producer, pytest.raises(MQClientError):
            for i in range(2000):
                producer.send(Message("HealthFailStop", b"m-%05d" % i))
        wait_until(lambda: health(broker.addr) == NOT_SERVING, timeout=15, what="NOT_SERVING after a fail-stop")
        assert scrape(metrics_port(broker)).value("rocketmq_store_writeable") == 0
        assert broker.stop() == 0
        broker = cluster.brokers["broker-a"] = start_broker(tmp_path, "broker-a", cluster.addr, **settings)
        assert health(broker.addr) == SERVING
    finally:
        cluster.stop()

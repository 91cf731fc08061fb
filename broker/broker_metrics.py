"""The broker's Prometheus metrics (``metricsExporterType=PROM``).

Two kinds, to keep the hot path cheap:
- counters and the send/pull latency histogram, moved once per batch by the broker servicer (never per message);
- gauges computed at scrape time by :class:`BrokerStateCollector` from the state the broker keeps anyway (store
  offsets, committed consumer offsets, KV, tier, replication), so no request pays for them.
"""

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.metrics import RPC_LATENCY_BUCKETS_MS, new_registry

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController


class BrokerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else new_registry()
        r = self.registry
        self.messages_in = Counter("rocketmq_messages_in", "Messages stored by sends, per topic", ["topic"],
                                   registry=r)
        self.throughput_in = Counter("rocketmq_throughput_in", "Message bytes stored by sends (records as encoded, "
                                     "or bodies of unary sends), per topic", ["topic"], registry=r)
        self.messages_out = Counter("rocketmq_messages_out", "Messages handed out by pulls and pops, per topic and "
                                    "group",
                                    ["topic", "consumer_group"], registry=r)
        self.throughput_out = Counter("rocketmq_throughput_out", "Message bytes handed out by pulls and pops",
                                      ["topic", "consumer_group"], registry=r)
        self.rpc_latency = Histogram("rocketmq_rpc_latency", "Send, pull and pop handling time in milliseconds",
                                     ["request_code"], buckets=RPC_LATENCY_BUCKETS_MS, registry=r)
        self._send_latency = self.rpc_latency.labels("send")
        self._pull_latency = self.rpc_latency.labels("pull")
        self._pop_latency = self.rpc_latency.labels("pop")

    def sent(self, topic: str, messages: int, size: int) -> None:
        """One stored send batch: its messages and their body bytes."""
        if messages:
            self.messages_in.labels(topic).inc(messages)
            self.throughput_in.labels(topic).inc(size)

    def send_answered(self, started: float) -> None:
        """A send's answer is ready (``started``: its ``time.perf_counter()``): the latency a client sees, the wait
        for the fsync (SYNC_FLUSH) and the slaves (SYNC_MASTER) included."""
        self._send_latency.observe((time.perf_counter() - started) * 1000)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series go (they stayed exported for good: one more set a topic made and deleted)."""
        for counter in (self.messages_in, self.throughput_in):
            with contextlib.suppress(KeyError):  # (never sent to)
                counter.remove(topic)
        self._forget_out("topic", topic)

    def forget_group(self, group: str) -> None:
        """A deleted group's series go, as a deleted topic's do."""
        self._forget_out("consumer_group", group)

    def _forget_out(self, label: str, value: str) -> None:
        """The messages-out series whose ``label`` is ``value``."""
        for counter in (self.messages_out, self.throughput_out):
            series = {(sample.labels["topic"], sample.labels["consumer_group"]) for family in counter.collect()
                      for sample in family.samples if sample.labels.get(label) == value}
            for topic, group in series:
                counter.remove(topic, group)

    def pulled(self, topic: str, group: str, messages: int, size: int, elapsed_s: float) -> None:
        """One pull answer (``elapsed_s``: the handling time, long-polling parks not counted)."""
        self._handed_out(self._pull_latency, topic, group, messages, size, elapsed_s)

    def popped(self, topic: str, group: str, messages: int, size: int, elapsed_s: float) -> None:
        """One pop answer (the proxy's receives included); ``elapsed_s`` as :meth:`pulled`."""
        self._handed_out(self._pop_latency, topic, group, messages, size, elapsed_s)

    def _handed_out(self, latency, topic: str, group: str, messages: int, size: int, elapsed_s: float) -> None:
        latency.observe(elapsed_s * 1000)
        if messages > 0:
            self.messages_out.labels(topic, group).inc(messages)
            self.throughput_out.labels(topic, group).inc(size)


class BrokerStateCollector(Collector):
    """Gauges read at scrape time from the running broker."""

    def __init__(self, controller: "BrokerController") -> None:
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        yield from self._store()
        yield from self._consumer_lag()
        yield from self._kv()
        yield from self._tiered()
        yield from self._replication()

    def _store(self) -> Iterator[Metric]:
        store = self.controller.local_store
        log = store.commit_log
        commit, confirm, flushed = log.max_offset(), log.confirm_offset, log.flushed_offset()
        dispatch = store.reput.reput_from_offset
        gauges = [
            ("rocketmq_store_commitlog_min_offset", "Commitlog start (bytes)", log.min_offset()),
            ("rocketmq_store_commit_offset", "Commitlog end: everything appended (bytes)", commit),
            ("rocketmq_store_confirm_offset", "What consumers may see: appended and confirmed (flushed under "
                                              "SYNC_FLUSH, replicated under SYNC_MASTER)", confirm),
            ("rocketmq_store_dispatch_offset", "What the reput service dispatched to consume queues and indexes",
             dispatch),
            ("rocketmq_store_flush_offset", "What is flushed to disk", flushed),
            ("rocketmq_storage_flush_behind_bytes", "Commit offset minus flush offset", max(0, commit - flushed)),
            ("rocketmq_storage_dispatch_behind_bytes", "Confirm offset minus dispatch offset",
             max(0, confirm - dispatch)),
            ("rocketmq_store_confirm_behind_bytes", "Commit offset minus confirm offset", max(0, commit - confirm)),
        ]
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=value)
        flags = store.running_flags
        yield GaugeMetricFamily("rocketmq_store_writeable",
                                "1 while the store takes writes, 0 after a fail-stop or while the disk is full",
                                value=0 if (flags.fail_stop_reason or flags.disk_full_reason) else 1)

    def _consumer_lag(self) -> Iterator[Metric]:
        c = self.controller
        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages",
                                "Messages in a queue past the group's committed offset (its master's only)",
                                labels=["consumer_group", "topic", "queue_id"])
        if c._not_master() is not None:  # a replica's copy of the offsets: summed with the master's, lag doubled
            yield lag
            return
        for group, topic, queue_id, offset in c.consumer_offset_manager.all_offsets():
            try:
                end = c.store.max_offset(topic, queue_id)
            except Exception:  # a queue deleted since the offset was committed
                continue
            lag.add_metric([group, topic, str(queue_id)], max(0, end - offset))
        yield lag

    def _kv(self) -> Iterator[Metric]:
        kv = self.controller.kv
        if kv is None or getattr(kv, "dispatcher", None) is None:
            return
        dispatcher = kv.dispatcher
        yield CounterMetricFamily("rocketmq_kv_applied_ops", "KV operations applied to the KV state",
                                  value=dispatcher.applied_ops)
        confirm = self.controller.local_store.commit_log.confirm_offset
        yield GaugeMetricFamily("rocketmq_kv_apply_behind_bytes",
                                "Confirm offset minus what the KV state has applied",
                                value=max(0, confirm - dispatcher.applied_offset))

    def _tiered(self) -> Iterator[Metric]:
        tiered = self.controller.tiered
        if tiered is None:
            return
        dispatcher = tiered.dispatcher
        yield CounterMetricFamily("rocketmq_tiered_uploaded_messages", "Messages uploaded to the tier",
                                  value=dispatcher.uploaded_messages)
        yield CounterMetricFamily("rocketmq_tiered_uploaded_bytes", "Message bytes uploaded to the tier",
                                  value=dispatcher.uploaded_bytes)
        confirm = self.controller.local_store.commit_log.confirm_offset
        yield GaugeMetricFamily("rocketmq_tiered_upload_lag_bytes",
                                "Confirm offset minus what the tier holds durably (commitlog bytes)",
                                value=max(0, confirm - dispatcher.current_checkpoint()))

    def _replication(self) -> Iterator[Metric]:
        following = self.controller.replica_services.ha_client
        if following is not None:
            yield GaugeMetricFamily("rocketmq_ha_replication_stopped",
                                    "1 while this replica does not copy its master: refused (haRefusal says why), "
                                    "or no stream from it (its master unreachable)",
                                    value=1 if following.refusal or not following.streaming else 0)
        ha = self.controller.ha
        if ha is None:
            return
        if self.controller.replicas is not None and self.controller.replicas.role == "MASTER":  # controller mode
            yield GaugeMetricFamily("rocketmq_ha_lease_valid", "1 while this master's controller lease holds (it "
                                    "refuses writes without one)", value=1 if ha.lease_valid() else 0)
            yield GaugeMetricFamily("rocketmq_ha_sync_state_set_size", "Replicas in the in-sync set, the master "
                                    "included", value=1 + len(ha.sync_state_set.members))
        end = self.controller.local_store.commit_log.max_offset()
        acked = GaugeMetricFamily("rocketmq_ha_slave_ack_offset", "What each connected slave acknowledged",
                                  labels=["slave_id"])
        lag = GaugeMetricFamily("rocketmq_ha_replication_lag_bytes", "Commit offset minus each slave's ack",
                                labels=["slave_id"])
        for slave_id, offset in ha.slave_acks().items():
            acked.add_metric([str(slave_id)], offset)
            lag.add_metric([str(slave_id)], max(0, end - offset))
        yield acked
        yield lag
        yield GaugeMetricFamily("rocketmq_ha_slaves", "Connected slaves", value=len(ha.slave_acks()))

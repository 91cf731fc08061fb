"""Broker gauges that read the broker's role: lag from the group's master only (a replica's copy of the offsets,
summed with the master's on the dashboard, doubled every group's lag), and a slave whose master is gone shown as
not copying (it read 0: nothing said it was disconnected)."""

from types import SimpleNamespace
from typing import Any

from broker.broker_metrics import BrokerStateCollector


def _families(controller: Any) -> dict[str, list]:
    collector = BrokerStateCollector(controller)
    return {f.name: f.samples for f in [*collector._consumer_lag(), *collector._replication()]}


def _controller(not_master: str | None, following: Any = None) -> Any:
    offsets = SimpleNamespace(all_offsets=lambda: [("G", "T", 0, 10)])
    return SimpleNamespace(_not_master=lambda: not_master, consumer_offset_manager=offsets,
                           store=SimpleNamespace(max_offset=lambda topic, queue_id: 50),
                           replica_services=SimpleNamespace(ha_client=following), ha=None, replicas=None)


def test_consumer_lag_comes_from_the_master_only() -> None:
    assert [s.value for s in _families(_controller(None))["rocketmq_consumer_lag_messages"]] == [40]
    assert _families(_controller("a slave"))["rocketmq_consumer_lag_messages"] == []


def test_a_slave_without_a_stream_from_its_master_is_shown_not_copying() -> None:
    gone = SimpleNamespace(refusal="", streaming=False)
    copying = SimpleNamespace(refusal="", streaming=True)
    assert _families(_controller("a slave", gone))["rocketmq_ha_replication_stopped"][0].value == 1
    assert _families(_controller("a slave", copying))["rocketmq_ha_replication_stopped"][0].value == 0

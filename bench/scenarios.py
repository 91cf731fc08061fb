"""Every scenario of ``python -m bench``, in the order they run.

A scenario is a group of metrics (``Metric``: id, label, unit, which echo figure it is divided by, target)
and a function ``scenario(cfg, rec)`` that starts what it needs, records one value per metric id and stops
everything it started. Built-in: ``store``, ``cluster``, ``peers`` (Redis Streams and NATS JetStream beside
our SDK, when the ``bench`` extra is installed), ``static``.

Scenarios of issues not done yet are declared here with the metrics their issue asks for and run only once a
module ``bench/<name>_bench.py`` exists (kv, metadata, tiered, spark). Such a module may provide either

- ``METRICS`` (a list of ``bench.harness.Metric``) and ``scenario(cfg, rec)`` like the built-in ones
  (``cfg.mode`` is "smoke", "quick" or "full": smoke must finish in a few seconds), optionally
  ``FULL_ONLY = True``; or ``scenario(cfg, rec)`` alone, declaring each metric as it goes with ``rec.add``;
- or ``run(**kwargs)`` returning rows ``(label (unit), value, target, ratio text)`` like the older
  benchmarks. It is called with those of ``seconds``, ``window``, ``smoke``, ``full``, ``mode``, ``workdir``
  its signature names; without a ``smoke`` parameter it is not run by the smoke test.
"""

import importlib
import importlib.util
import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import cluster_bench, peers_bench, static_topic_bench, store_bench
from bench.harness import MET, NOT_MET, SCALED, Config, Metric, Recorder, Target


@dataclass
class Scenario:
    name: str
    title: str
    issue: int | None
    metrics: list[Metric]
    run: Callable[[Config, Recorder], None] | None = None
    not_run: str = ""  # why run is None
    full_only: bool = False
    dynamic: bool = False  # the rows are what the run declares (rec.add), the metrics only say what to expect
    aliases: tuple[str, ...] = ()
    error: str = ""  # set when the module exists but cannot be used
    extra: dict = field(default_factory=dict)


# -- placeholders: what issues 5-8 ask for ----------------------------------------------------------
KV_METRICS: list[Metric] = []  # declared by bench/kv_bench.py
METADATA_METRICS = [
    Metric("metadata.restart_1m", "broker restart to ready, 1M topics, RocksDB", "s", echo="p50",
           target=Target("<=", 15), issue=5),
    Metric("metadata.restart_1m_alone", "the same, without a name server", "s", echo="p50", issue=5),
    Metric("metadata.rss_1m", "broker RSS, 1M topics, RocksDB", "MiB", echo="rss",
           target=Target("<=", 1536, text="<= 1.5 GiB"), issue=5),
    Metric("metadata.update_1k", "update one topic, 1k topics, RocksDB", "ms", echo="p50", issue=5,
           short="1k topics"),
    Metric("metadata.update_1m", "update one topic, 1M topics, RocksDB", "ms", echo="p50", vs="metadata.update_1k",
           target=Target("<=", 2, of="metadata.update_1k"), issue=5),
    Metric("metadata.update_json_100k", "update one topic, 100k topics, JSON mode", "ms", echo="p50", issue=5),
    Metric("metadata.send_8q", "send round-robin, 8 queues", "msgs/s", echo="batch", issue=5, short="8 queues"),
    Metric("metadata.send_100kq", "send round-robin, 100k queues", "msgs/s", echo="batch", vs="metadata.send_8q",
           target=Target(">=", 0.7, of="metadata.send_8q"), issue=5),
    Metric("metadata.files_100kq", "store files, 100k queues / 8 queues", "x", issue=5, target_note="flat"),
]
TIERED_METRICS: list[Metric] = []  # declared by bench/tiered_bench.py
SPARK_METRICS: list[Metric] = []  # declared by bench/spark_bench.py
TIMER_METRICS: list[Metric] = []  # declared by bench/timer_bench.py
GROUP_METRICS: list[Metric] = []  # declared by bench/group_bench.py
HA_METRICS: list[Metric] = []  # declared by bench/ha_bench.py
FAILOVER_METRICS: list[Metric] = []  # declared by bench/failover_bench.py
POP_METRICS: list[Metric] = []  # declared by bench/pop_bench.py
PROXY_METRICS: list[Metric] = []  # declared by bench/proxy_bench.py
SECURITY_METRICS: list[Metric] = []  # declared by bench/security_bench.py
OPTIONAL = [  # name, issue, title, expected metrics, full mode only by default
    ("kv", 6, "KV store inside the broker", KV_METRICS, False),
    ("metadata", 5, "metadata scale: RocksDB topics and queues (full mode)", METADATA_METRICS, True),
    ("tiered", 7, "tiered storage", TIERED_METRICS, False),
    ("spark", 8, "Spark compaction", SPARK_METRICS, False),
    ("timer", 15, "delayed and timed messages: name server + 1 broker, SDK here", TIMER_METRICS, False),
    ("group", 15, "consumer groups: name server + 1 broker, consumers here", GROUP_METRICS, False),
    ("ha", 16, "replication: a master and its slaves, SDK here", HA_METRICS, False),
    ("failover", 16, "controller failover under load: 2 replicas + a plain broker, SDK here", FAILOVER_METRICS,
     False),
    ("pop", 17, "POP consumption: name server + 1 broker, consumers here", POP_METRICS, False),
    ("proxy", 17, "produce through mqproxy: name server + 1 broker + proxy, official client vs our SDK",
     PROXY_METRICS, False),
    ("security", 18, "produce with TLS (and ACL) on vs off: name server + 1 broker, SDK here", SECURITY_METRICS,
     False),
]


def builtin() -> list[Scenario]:
    return [
        Scenario("store", "store (issue 2): in-process, vs its raw encode+append ceiling", 2, store_bench.METRICS,
                 store_bench.scenario),
        Scenario("cluster", "cluster (issue 3): name server + 1 broker, SDK here", 3, cluster_bench.METRICS,
                 cluster_bench.scenario, aliases=("produce", "consume", "latency")),
        Scenario("peers", "peers (issue 14): Redis Streams and NATS JetStream, same shape, beside our SDK", 14,
                 peers_bench.METRICS, peers_bench.scenario, aliases=("redis", "nats")),
        Scenario("static", "static topics (issue 4): name server + 3 brokers, SDK here", 4,
                 static_topic_bench.METRICS, static_topic_bench.scenario, aliases=("remap",)),
    ]


def optional(name: str, issue: int, title: str, metrics: list[Metric], full_only: bool) -> Scenario:
    title = f"{name} (issue {issue}): {title}"
    module_name = f"bench.{name}_bench"
    if importlib.util.find_spec(module_name) is None:
        return Scenario(name, title, issue, metrics, not_run=f"issue {issue} not done", full_only=full_only)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a broken module is a failure to report, not a reason to skip the others
        return Scenario(name, title, issue, metrics, error=f"import {module_name}: {exc!r}")
    full_only = getattr(module, "FULL_ONLY", full_only)
    if callable(getattr(module, "scenario", None)):
        declared = getattr(module, "METRICS", None)
        return Scenario(name, title, issue, declared or metrics, module.scenario, full_only=full_only,
                        dynamic=declared is None)
    if name in ADAPTERS and all(callable(getattr(module, f, None)) for f in ADAPTERS[name][0]):
        return Scenario(name, title, issue, metrics, ADAPTERS[name][1](module), full_only=full_only)
    if callable(getattr(module, "run", None)):
        params = inspect.signature(module.run).parameters
        return Scenario(name, title, issue, metrics, legacy_runner(module.run, name, issue), full_only=full_only,
                        dynamic=True, extra={"smoke_ok": "smoke" in params})
    return Scenario(name, title, issue, metrics, error=f"{module_name} has neither scenario() nor run()")


# -- modules with their own command line only: measured here through their functions ------------------
METADATA_SIZES = {  # topics at scale, small, JSON mode; single-topic updates timed (RocksDB, JSON)
    "smoke": (2_000, 100, 500, 200, 3),
    "quick": (100_000, 1_000, 10_000, 2000, 10),
    "full": (1_000_000, 1_000, 100_000, 5000, 20),
}


def metadata_adapter(module) -> Callable[[Config, Recorder], None]:
    """``bench/metadata_bench.py`` (issue 5) as written: its set-up and timing functions, at the mode's size."""

    def scenario(cfg: Config, rec: Recorder) -> None:
        from bench.daemons import start_namesrv
        from broker.store.config import StoreType

        big_n, small_n, json_n, runs, json_runs = METADATA_SIZES[cfg.mode]
        work = cfg.workdir / "metadata"
        big, small, js = work / "rocksdb-big", work / "rocksdb-small", work / "json"
        for d in (big, small, js):
            d.mkdir(parents=True, exist_ok=True)
        scaled = f"at {big_n:,} topics" if big_n != 1_000_000 else ""
        module.create_topics(StoreType.DEFAULT_ROCKSDB, big, big_n)
        ready_s, _, _ = module.broker_restart(big, "")
        rec.record("metadata.restart_1m_alone", ready_s, scaled)
        namesrv = start_namesrv(work)
        try:
            ready_s, rss, peak = module.broker_restart(big, namesrv.addr)
        finally:
            namesrv.stop()
        rec.record("metadata.restart_1m", ready_s, ", ".join(filter(None, [scaled, "incl. first registration"])))
        rec.record("metadata.rss_1m", rss, ", ".join(filter(None, [scaled, f"peak {peak:,.0f} MiB"])))
        _, median_big, _ = module.update_cost(StoreType.DEFAULT_ROCKSDB, big, runs)
        rec.record("metadata.update_1m", median_big, ", ".join(filter(None, [scaled, "median"])))
        module.create_topics(StoreType.DEFAULT_ROCKSDB, small, small_n)
        _, median_small, _ = module.update_cost(StoreType.DEFAULT_ROCKSDB, small, runs)
        rec.record("metadata.update_1k", median_small, "median" if small_n == 1_000 else f"at {small_n:,} topics")
        module.create_topics(StoreType.DEFAULT, js, json_n)
        _, median_json, _ = module.update_cost(StoreType.DEFAULT, js, json_runs)
        rec.record("metadata.update_json_100k", median_json, "median" if json_n == 100_000 else f"at {json_n:,} topics")
        if big_n != 1_000_000:
            rec.status.update({m: SCALED for m in ("metadata.restart_1m", "metadata.rss_1m", "metadata.update_1m")})
        for metric_id in ("metadata.send_8q", "metadata.send_100kq", "metadata.files_100kq"):
            rec.skip(metric_id, "not in bench/metadata_bench.py yet")

    return scenario


ADAPTERS = {"metadata": (("create_topics", "update_cost", "broker_restart"), metadata_adapter)}


def all_scenarios() -> list[Scenario]:
    return [*builtin(), *(optional(*spec) for spec in OPTIONAL)]


# -- rows from older-style benchmark modules ---------------------------------------------------------
_UNIT = re.compile(r"\s*\(([^()]*)\)\s*$")
_TARGET = re.compile(r"^\s*(>=|<=|<|>)\s*([0-9][0-9,_]*(?:\.[0-9]+)?)\s*(x?)")
_RATIO = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)")


def echo_ref_for(unit: str, label: str) -> str | None:
    if unit in ("msgs/s", "keys/s", "MB/s"):
        return "batch"
    if unit in ("calls/s", "ops/s"):
        return "unary"
    if unit in ("ms", "s"):
        return "p99" if "p99" in label else "p50"
    if unit in ("MiB", "GiB"):
        return "rss"
    return None


def legacy_row(group: str, issue: int | None, row: dict[str, Any] | Sequence[Any],
               ) -> tuple[Metric, float | None, str, str]:
    """(metric, value, status override or "", note) from ``(name, value[, target[, ratio]])`` or a dict with
    name/label, value, unit, target, ratio."""
    if isinstance(row, dict):
        name = str(row.get("label") or row.get("name"))
        value, unit = row.get("value"), row.get("unit")
        target_s, ratio_s = str(row.get("target") or ""), str(row.get("ratio") or "")
    else:
        name, value, target_s, ratio_s, *_ = (*row, "", "")
        unit = None
    m = _UNIT.search(name)
    if unit is None:
        unit = m.group(1) if m else ""
    label = _UNIT.sub("", name) if m else name
    slug = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
    target = None
    status = ""
    t = _TARGET.match(str(target_s))
    if t:
        number = float(t.group(2).replace(",", "").replace("_", ""))
        if t.group(3):  # relative to another row: judged on the ratio text the module printed
            r = _RATIO.match(str(ratio_s))
            if r and value is not None:
                status = MET if Target(t.group(1), number).met(float(r.group(1))) else NOT_MET
        else:
            target = Target(t.group(1), number, text=str(target_s).strip())
    metric = Metric(f"{group}.{slug}", label, unit, echo=echo_ref_for(unit, label), target=target, issue=issue,
                    target_note="" if target else str(target_s).strip())
    return metric, None if value is None else float(value), status, str(ratio_s or "")


def legacy_runner(run: Callable, group: str, issue: int) -> Callable[[Config, Recorder], None]:
    def scenario(cfg: Config, rec: Recorder) -> None:
        available = {"seconds": cfg.seconds, "window": cfg.window, "smoke": cfg.smoke, "full": cfg.full,
                     "mode": cfg.mode, "workdir": cfg.workdir / group}
        params = inspect.signature(run).parameters
        for metric, value, status, note in map(lambda r: legacy_row(group, issue, r),
                                               run(**{k: v for k, v in available.items() if k in params})):
            rec.add(metric, value, note)
            if status:
                rec.status[metric.id] = status

    return scenario

"""The bench harness's own logic: ratios to the echo, targets, not-run rows, older-style modules."""

import importlib.machinery
import sys
import types
from concurrent.futures import Future

import pytest

from bench import harness as h
from bench import scenarios

ECHO = {"unary": 2000.0, "batch": 100_000.0, "p50": 0.5, "p99": 2.0, "rss": 40.0}


def _rows(metrics, values, reason="", status=None):
    rec = h.Recorder(values=dict(values), status=dict(status or {}))
    return {r.metric.id: r for r in h.build_rows([("g", metrics, rec, reason)], ECHO)}


def test_ratios_to_the_echo_and_absolute_targets():
    rows = _rows([h.Metric("a", "batch rate", "msgs/s", echo="batch", target=h.Target(">=", 150_000)),
                  h.Metric("b", "call rate", "calls/s", echo="unary"),
                  h.Metric("c", "p99", "ms", echo="p99", target=h.Target("<=", 5)),
                  h.Metric("d", "remap", "s", echo="p50", target=h.Target("<", 5)),
                  h.Metric("e", "rss", "MiB", echo="rss"),
                  h.Metric("f", "bytes", "MB/s", echo="batch")],
                 {"a": 50_000, "b": 1000, "c": 4.0, "d": 0.1, "e": 80, "f": 51.2})
    assert rows["a"].echo_ratio == pytest.approx(0.5) and rows["a"].status == h.NOT_MET
    assert rows["b"].echo_ratio == pytest.approx(0.5) and rows["b"].status == h.NO_TARGET
    assert rows["c"].echo_ratio == pytest.approx(2.0) and rows["c"].status == h.MET
    assert rows["d"].echo_ratio == pytest.approx(200) and rows["d"].status == h.MET
    assert rows["e"].echo_ratio == pytest.approx(2.0)
    assert rows["f"].echo_ratio == pytest.approx(51.2 / 102.4)


def test_relative_targets_against_another_row_and_the_echo():
    metrics = [h.Metric("n", "normal", "msgs/s", echo="batch", short="normal"),
               h.Metric("s", "static", "msgs/s", echo="batch", vs="n", target=h.Target(">=", 0.95, of="n")),
               h.Metric("k", "kv put", "ops/s", echo="unary", target=h.Target(">=", 0.7, of="echo.unary"))]
    rows = _rows(metrics, {"n": 1000, "s": 940, "k": 1500})
    assert rows["s"].vs_ratio == pytest.approx(0.94) and rows["s"].status == h.NOT_MET
    assert rows["s"].target_text == ">= 0.95x normal"
    assert rows["k"].status == h.MET
    assert _rows(metrics, {"n": 1000, "s": 960, "k": 1000})["k"].status == h.NOT_MET


def test_missing_values_are_not_run_with_a_reason_or_failed():
    m = [h.Metric("x", "x", "msgs/s", echo="batch", target=h.Target(">=", 1))]
    assert _rows(m, {}, reason="issue 9 not done")["x"].status == h.NOT_RUN
    assert _rows(m, {}, reason="issue 9 not done")["x"].note == "issue 9 not done"
    assert _rows(m, {})["x"].status == h.FAILED
    assert _rows(m, {"x": 0.5}, status={"x": h.MET})["x"].status == h.MET  # a scenario's own judgement wins


def test_table_has_every_row():
    rows = h.build_rows([("g", [h.Metric("a", "alpha rate", "msgs/s", echo="batch"),
                              h.Metric("b", "beta rate", "msgs/s", echo="batch")], h.Recorder(values={"a": 1.0}), "")],
                      ECHO)
    table = h.format_table(rows, {"g": "group g"})
    assert "alpha rate" in table and "beta rate" in table and "-- group g" in table and "failed" in table


def test_windowed_rate_and_percentile():
    def submit() -> Future:
        f: Future = Future()
        f.set_result(3)
        return f

    assert h.windowed_rate(submit, lambda r: r, window=4, seconds=0.05, warmup=0.01) > 0
    assert h.percentile(range(1, 101), 50) == 50 and h.percentile(range(1, 101), 99) == 99
    assert h.percentile([7.0], 99) == 7.0


def test_older_style_rows_are_parsed():
    metric, value, status, note = scenarios.legacy_row("meta", 5, ("restart, 1M topics (s)", 12.5, "<= 15", ""))
    assert (metric.id, metric.unit, metric.echo, value, status) == ("meta.restart_1m_topics", "s", "p50", 12.5, "")
    assert metric.target == h.Target("<=", 15, text="<= 15")
    metric, value, status, note = scenarios.legacy_row("meta", 5, ("send 100k queues (msgs/s)", 7e4, ">= 0.7x",
                                                                   "0.81 x 8 queues"))
    assert metric.target is None and metric.target_note == ">= 0.7x" and status == h.MET and note == "0.81 x 8 queues"


def _fake_module(monkeypatch, name: str, **attrs) -> None:
    module = types.ModuleType(f"bench.{name}_bench")
    module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None)
    for k, v in attrs.items():
        setattr(module, k, v)
    monkeypatch.setitem(sys.modules, module.__name__, module)


def test_optional_scenarios_are_placeholders_until_their_module_exists(monkeypatch, tmp_path):
    s = scenarios.optional("nosuch", 99, "t", [h.Metric("nosuch.a", "a", "s")], False)
    assert s.run is None and s.not_run == "issue 99 not done"

    def run(seconds, smoke=False):
        return [("thing (msgs/s)", 123.0, ">= 100", "")]

    _fake_module(monkeypatch, "fakeold", run=run)
    s = scenarios.optional("fakeold", 98, "t", [], True)
    assert s.full_only and s.dynamic and s.extra["smoke_ok"]
    rec = h.Recorder()
    s.run(h.Config.for_mode("smoke", tmp_path), rec)
    rows = h.build_rows([("fakeold", rec.added, rec, "")], ECHO)
    assert rows[0].value == 123.0 and rows[0].status == h.MET and rows[0].echo_ratio == pytest.approx(123e-5)

    declared = [h.Metric("fakenew.a", "a", "msgs/s", echo="batch")]
    _fake_module(monkeypatch, "fakenew", METRICS=declared, scenario=lambda cfg, rec: rec.record("fakenew.a", 1.0),
                 FULL_ONLY=False)
    s = scenarios.optional("fakenew", 97, "t", [], True)
    assert s.metrics == declared and not s.full_only and not s.dynamic

    _fake_module(monkeypatch, "fakebad")
    assert "neither" in scenarios.optional("fakebad", 96, "t", [], False).error

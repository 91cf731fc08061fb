"""The peers scenario (issue 14, ``bench/peers_bench.py``): its rows are declared with their targets, and a peer
that cannot start gives "not run" rows with the reason instead of failing the run. No real peer is needed."""

import os
import stat
import time
from pathlib import Path

import pytest

from bench import cluster_bench, peers_bench, scenarios
from bench import harness as h

ECHO = {"unary": 2000.0, "batch": 100_000.0, "p50": 0.5, "p99": 2.0, "rss": 40.0}


def _script(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_peers_scenario_and_its_rows_are_declared() -> None:
    by_name = {s.name: s for s in scenarios.all_scenarios()}
    peers = by_name["peers"]
    assert peers.run is peers_bench.scenario and not peers.error and not peers.full_only and peers.issue == 14
    ids = {m.id for m in peers.metrics}
    assert {"peers.sdk_produce", "peers.redis_produce", "peers.nats_produce", "peers.best_produce",
            "peers.sdk_consume", "peers.redis_consume", "peers.nats_consume"} <= ids
    for _, _, rows in peers_bench.PEERS:
        assert set(rows) <= ids
    metrics = {m.id: m for m in peers.metrics}
    assert metrics["peers.sdk_produce"].target == h.Target(">=", 1.5, of="peers.best_produce")
    assert metrics["peers.sdk_consume"].target == h.Target(">=", 1.0, of="peers.redis_consume")
    assert all(m.echo == "batch" for m in peers.metrics if m.unit == "msgs/s")
    rss = {m.id: m for m in cluster_bench.METRICS}["cluster.broker_rss"]
    assert rss.echo == "rss" and rss.target == h.Target("<=", 200)


def test_ratios_to_the_best_peer_and_to_redis_are_judged() -> None:
    rec = h.Recorder(values={"peers.sdk_produce": 60_000, "peers.redis_produce": 50_000,
                             "peers.nats_produce": 20_000, "peers.best_produce": 50_000,
                             "peers.sdk_consume": 80_000, "peers.redis_consume": 200_000})
    rows = {r.metric.id: r for r in h.build_rows([("peers", peers_bench.METRICS, rec, "")], ECHO)}
    assert rows["peers.sdk_produce"].vs_ratio == pytest.approx(1.2)
    assert rows["peers.sdk_produce"].status == h.NOT_MET
    assert rows["peers.sdk_produce"].target_text == ">= 1.5x best peer"
    assert rows["peers.sdk_consume"].vs_ratio == pytest.approx(0.4)
    assert rows["peers.sdk_consume"].target_text == ">= 1x Redis XREAD"


def test_a_peer_that_exits_or_never_listens_is_unavailable_and_stopped(tmp_path: Path) -> None:
    failing = _script(tmp_path / "exits", "echo 'bad config' >&2; exit 3")
    with pytest.raises(peers_bench.PeerUnavailable, match="exited with 3 before listening: bad config"):
        peers_bench.start_peer("exits", [failing], tmp_path, peers_bench.free_port())

    silent = _script(tmp_path / "silent", f"echo $$ > {tmp_path / 'pid'}; exec sleep 60")
    t0 = time.monotonic()
    with pytest.raises(peers_bench.PeerUnavailable, match="not listening on port"):
        peers_bench.start_peer("silent", [silent], tmp_path, peers_bench.free_port(), timeout=0.5)
    assert time.monotonic() - t0 < 15
    assert _pid_gone(int((tmp_path / "pid").read_text())), "the server that never listened was stopped"

    with pytest.raises(peers_bench.PeerUnavailable, match="cannot run"):
        peers_bench.start_peer("missing", [str(tmp_path / "no-such-binary")], tmp_path, peers_bench.free_port())


def test_a_peer_that_cannot_start_gives_not_run_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = _script(tmp_path / "server", "echo 'cannot start here' >&2; exit 1")
    monkeypatch.setattr(peers_bench, "redis_server_binary", lambda: (failing, "a test stand-in"))
    monkeypatch.setattr(peers_bench, "nats_server_binary", lambda: failing)
    cfg = h.Config.for_mode("smoke", tmp_path)
    rec = h.Recorder()
    peers_bench.scenario(cfg, rec)  # no peer starts: no exception, and our SDK is not measured either

    rows = {r.metric.id: r for r in h.build_rows([("peers", peers_bench.METRICS, rec, "")], ECHO)}
    assert set(rows) == {m.id for m in peers_bench.METRICS}
    for row in rows.values():
        assert row.value is None and row.status == h.NOT_RUN and row.note, row
    for _, _, ids in peers_bench.PEERS:
        for metric_id in ids:  # why: the server exited, or its client library is missing
            assert "exited with 1" in rows[metric_id].note or "not installed" in rows[metric_id].note
    assert "no peer ran" in rows["peers.sdk_produce"].note
    assert not list((tmp_path / "peers").glob("*-data"))  # data directories removed


def test_one_peer_down_the_other_still_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer that fails mid-way leaves its rows failed with the error; one that is unavailable, not run;
    the best peer and our SDK rows come from what did run."""

    def redis_ok(cfg: h.Config, rec: h.Recorder, workdir: Path) -> None:
        rec.record("peers.redis_produce", 50_000)
        rec.record("peers.redis_consume", 100_000)
        rec.record("peers.redis_rss", 30)

    def nats_down(cfg: h.Config, rec: h.Recorder, workdir: Path) -> None:
        raise peers_bench.PeerUnavailable("no nats-server")

    def sdk(cfg: h.Config, rec: h.Recorder, workdir: Path) -> None:
        rec.record("peers.sdk_produce", 40_000)
        rec.record("peers.sdk_consume", 120_000)
        rec.record("peers.broker_rss", 300)

    monkeypatch.setattr(peers_bench, "PEERS", [("Redis Streams", redis_ok, peers_bench.REDIS_ROWS),
                                               ("NATS JetStream", nats_down, peers_bench.NATS_ROWS)])
    monkeypatch.setattr(peers_bench, "measure_sdk", sdk)
    rec = h.Recorder()
    peers_bench.scenario(h.Config.for_mode("smoke", tmp_path), rec)
    rows = {r.metric.id: r for r in h.build_rows([("peers", peers_bench.METRICS, rec, "")], ECHO)}
    assert rows["peers.best_produce"].value == 50_000 and rows["peers.best_produce"].note == "Redis Streams"
    assert rows["peers.sdk_produce"].vs_ratio == pytest.approx(0.8) and rows["peers.sdk_produce"].status == h.NOT_MET
    assert rows["peers.sdk_consume"].vs_ratio == pytest.approx(1.2) and rows["peers.sdk_consume"].status == h.MET
    assert rows["peers.nats_produce"].status == h.NOT_RUN and rows["peers.nats_produce"].note == "no nats-server"

    def redis_breaks(cfg: h.Config, rec: h.Recorder, workdir: Path) -> None:
        rec.record("peers.redis_produce", 50_000)
        raise ConnectionError("reset by peer")

    monkeypatch.setattr(peers_bench, "PEERS", [("Redis Streams", redis_breaks, peers_bench.REDIS_ROWS),
                                               ("NATS JetStream", nats_down, peers_bench.NATS_ROWS)])
    rec = h.Recorder()
    peers_bench.scenario(h.Config.for_mode("smoke", tmp_path), rec)
    rows = {r.metric.id: r for r in h.build_rows([("peers", peers_bench.METRICS, rec, "")], ECHO)}
    assert rows["peers.redis_consume"].status == h.FAILED and "reset by peer" in rows["peers.redis_consume"].note
    assert rows["peers.sdk_produce"].status == h.NOT_MET  # judged against Redis's produce, which ran
    assert rows["peers.sdk_consume"].status == h.NOT_RUN and "Redis XREAD not measured" in \
        rows["peers.sdk_consume"].note

"""``python -m bench [--full | --smoke] [--only NAME ...] [--json-dir DIR]``: every scenario, each figure beside
a bare gRPC echo measured in the same run (at its start and end, in the same process layout: server in its own
process, client here with the same calls in flight), the absolute number and its issue's target.

Modes: quick (default, ``make bench``, under 3 minutes), full (``make bench-full``: longer measurements and
the scale scenarios), smoke (a fraction of a second per measurement: the test that keeps the harness alive).
The table goes to stdout, progress to stderr, and everything to ``<json-dir>/<UTC timestamp>.json`` with the
machine's description. Exit status 1 when a scenario failed (a target not met is a result, not a failure).
"""

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

from bench import echo_bench
from bench.daemons import REPO, start_echo
from bench.harness import FAILED, NOT_RUN, Config, Recorder, build_rows, format_table
from bench.scenarios import Scenario, all_scenarios
from client.switch_interval import lower_switch_interval

DEFAULT_JSON_DIR = REPO / "bench" / "results"


def _log(t0: float, msg: str) -> None:
    print(f"[bench {time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def machine_info() -> dict:
    info: dict = {"cpu_count": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
                  "hostname": platform.node()}
    with contextlib.suppress(AttributeError):
        info["cpu_affinity"] = len(os.sched_getaffinity(0))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
        info["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        pass
    for dist in ("grpcio", "protobuf", "rocksdict"):
        try:
            from importlib.metadata import version

            info[dist] = version(dist)
        except Exception:
            info[dist] = None

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    info["git_commit"] = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    info["git_dirty"] = bool(status) if status is not None else None
    return info


def parse_args(argv: list[str] | None, names: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_true", help="longer measurements and the scale scenarios")
    mode.add_argument("--smoke", action="store_true", help="tiny sizes: checks the harness, measures nothing")
    parser.add_argument("--only", nargs="+", metavar="NAME", help=f"scenarios to run: {', '.join(names)} "
                        "(the echo always runs; the others are listed as not run)")
    parser.add_argument("--json-dir", type=Path, default=DEFAULT_JSON_DIR)
    parser.add_argument("--seconds", type=float, help="override the length of each measurement")
    parser.add_argument("--window", type=int, default=8, help="calls in flight from one client thread (8)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return parser.parse_args(argv)


def _selected(scenarios: list[Scenario], only: list[str] | None) -> set[str]:
    if not only:
        return {s.name for s in scenarios}
    by_name = {n: s.name for s in scenarios for n in (s.name, *s.aliases)}
    unknown = [n for n in only if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(sorted(by_name))}")
    return {by_name[n] for n in only}


def _why_not(s: Scenario, cfg: Config, selected: set[str], only: list[str] | None) -> str:
    """Why a scenario is not run in this invocation, or "" to run it. Full-mode-only scenarios run in quick
    mode (at the quick size) when named with --only."""
    if s.name not in selected:
        return "not selected (--only)"
    if s.run is None:
        return s.not_run
    if cfg.smoke and s.extra.get("smoke_ok") is False:
        return f"bench/{s.name}_bench.py has no smoke mode"
    if s.full_only and cfg.mode == "quick" and s.name not in (only or ()):
        return "full mode only (make bench-full)"
    return ""


def _run_one(s: Scenario, cfg: Config, reason: str, t0: float) -> tuple[Recorder, dict]:
    """Run one scenario unless ``reason`` says why not; what it recorded and its entry for the JSON."""
    rec = Recorder()
    entry: dict = {"name": s.name, "issue": s.issue, "title": s.title}
    if reason:
        entry.update(status=NOT_RUN, reason=reason)
        return rec, entry
    if s.error:  # its module exists but cannot be used
        entry.update(status=FAILED, error=s.error)
        _log(t0, f"{s.name}: {s.error}")
    else:
        assert s.run is not None, "a scenario without a run has a reason not to run"
        _log(t0, f"{s.name}: running")
        start = time.perf_counter()
        try:
            s.run(cfg, rec)
            entry["status"] = "ran"
        except Exception as exc:
            entry.update(status=FAILED, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
            _log(t0, f"{s.name}: FAILED\n{traceback.format_exc()}")
        entry["seconds"] = round(time.perf_counter() - start, 2)
        _log(t0, f"{s.name}: {entry['status']} in {entry['seconds']} s")
    if entry["status"] == FAILED:
        metrics = (rec.added or s.metrics) if s.dynamic else s.metrics
        rec.notes.update({m.id: entry["error"][:200] for m in metrics if m.id not in rec.values})
    return rec, entry


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    started = datetime.now(UTC)
    scenarios = all_scenarios()
    args = parse_args(argv, [n for s in scenarios for n in (s.name, *s.aliases)])
    if args.list:
        for s in scenarios:
            state = s.error or s.not_run or ("full mode only" if s.full_only else "quick and full")
            print(f"{s.name:10} {s.title}  [{state}]")
        return 0
    selected = _selected(scenarios, args.only)
    mode = "full" if args.full else "smoke" if args.smoke else "quick"
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    cfg = Config.for_mode(mode, workdir, args.seconds, args.window)
    _log(t0, f"mode {mode}: {cfg.seconds:g} s a measurement, {cfg.window} in flight; work dir {workdir}")
    machine = machine_info()

    groups = []
    records = []
    echo_runs: list[dict[str, float]] = []
    lower_switch_interval()  # what the first SDK client does: the echo ceilings run under the same interval
    _log(t0, f"switch interval {sys.getswitchinterval() * 1000:g} ms")
    echo_server = start_echo(workdir)
    try:
        _log(t0, "echo: measuring the ceiling")
        echo_runs.append(echo_bench.measure(echo_server, cfg))
        for s in scenarios:
            rec, entry = _run_one(s, cfg, _why_not(s, cfg, selected, args.only), t0)
            metrics = (rec.added or s.metrics) if s.dynamic else s.metrics
            groups.append((s.name, metrics, rec, entry.get("reason", "")))
            records.append(entry)
        _log(t0, "echo: measuring the ceiling again")
        echo_runs.append(echo_bench.measure(echo_server, cfg))
    finally:
        echo_server.stop()

    echo = echo_bench.combine(echo_runs)
    echo_rec = Recorder()
    for m, key in zip(echo_bench.METRICS, echo_bench.KEYS, strict=True):
        fmt = ",.2f" if key in ("p50", "p99") else ",.0f"
        runs = zip(("start", "end"), echo_runs, strict=False)
        echo_rec.record(m.id, echo[key], note=" / ".join(f"{when} {r[key]:{fmt}}" for when, r in runs))
    groups.insert(0, ("echo", echo_bench.METRICS, echo_rec, ""))
    rows = build_rows(groups, echo)
    failed = any(r.status == FAILED for r in rows) or any(e["status"] == FAILED for e in records)
    titles = {"echo": "echo: bare gRPC echo server process, client here (start / end of the run)",
              **{s.name: s.title for s in scenarios}}
    wall = time.perf_counter() - t0

    print(format_table(rows, titles))
    drift = echo_runs[-1]["batch"] / echo_runs[0]["batch"] - 1
    print(f"\nmode {mode}, {cfg.seconds:g} s a measurement, {cfg.window} calls in flight; wall time {wall:.0f} s; "
          f"echo batch moved {drift:+.0%} between start and end of the run")

    with contextlib.suppress(OSError):
        machine["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    result = {
        "schema": 1, "started_at": started.isoformat(timespec="seconds"), "wall_s": round(wall, 1), "mode": mode,
        "argv": sys.argv[1:] if argv is None else argv, "ok": not failed,
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(cfg).items()},
        "machine": machine, "echo": {"runs": echo_runs, "used": echo},
        "scenarios": records, "rows": [r.as_json() for r in rows],
    }
    args.json_dir.mkdir(parents=True, exist_ok=True)
    path = args.json_dir / f"{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    n = 1
    while path.exists():
        path = args.json_dir / f"{started.strftime('%Y%m%dT%H%M%SZ')}-{n}.json"
        n += 1
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"results: {path}")
    if failed:
        print(f"some scenarios FAILED; daemon logs kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0

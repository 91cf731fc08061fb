"""``python -m bench --smoke``: every scenario at a tiny size, so the harness cannot rot. It checks that each
scenario produced its numbers (or says plainly why it did not run), not how fast anything is."""

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

from bench.daemons import REPO
from bench.harness import SCALED

BUILT_IN = {"echo", "store", "cluster", "static"}
PLACEHOLDERS = {"kv", "metadata", "tiered", "spark", "timer"}
# About 90 s on a quiet machine; a suite's heavier tests (Spark's) beside it on two cores have made it take more
# than twice that. The test is that the harness runs, not how fast.
TIMEOUT_S = 600


def test_every_scenario_runs_at_smoke_size(tmp_path: Path) -> None:
    # Its own session: a bench killed at the timeout takes the daemons it started with it.
    proc = subprocess.Popen([sys.executable, "-m", "bench", "--smoke", "--json-dir", str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):  # (all gone meanwhile)
            os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        raise AssertionError(f"bench --smoke still running after {TIMEOUT_S} s; its last lines (which scenario it "
                             f"was in):\n{stderr[-3000:]}") from None
    assert proc.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr[-5000:]}"

    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1, files
    result = json.loads(files[0].read_text())
    assert result["mode"] == "smoke" and result["ok"] is True

    machine = result["machine"]
    for key in ("cpu_count", "cpu_model", "memory_gib", "python", "grpcio", "git_commit"):
        assert key in machine, key
    assert len(result["echo"]["runs"]) == 2
    assert all(result["echo"]["used"][k] > 0 for k in ("unary", "batch", "p50", "p99", "rss"))

    rows = result["rows"]
    groups = {r["group"] for r in rows}
    assert groups >= BUILT_IN | PLACEHOLDERS, groups
    assert {s["name"] for s in result["scenarios"]} >= (BUILT_IN | PLACEHOLDERS) - {"echo"}
    for row in rows:
        assert row["status"] != "failed", row
        if row["value"] is None:
            assert row["status"] == "not run" and row["note"], row
            assert row["group"] not in BUILT_IN, row  # these always run
        else:
            assert math.isfinite(row["value"]) and row["value"] >= 0, row
            if row["echo_ref"]:
                assert row["x_echo"] is not None and row["x_echo"] > 0, row
            if row["target"].startswith(("<", ">")):  # a judged target: met, not met, or measured too small
                assert row["status"] in ("met", "not met", SCALED), row
        if row["group"] in BUILT_IN:
            assert row["value"] is not None, row
        assert row["label"] in stdout, row["label"]  # every row is in the printed table
    for s in result["scenarios"]:
        assert s["status"] in ("ran", "not run"), s

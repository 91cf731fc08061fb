"""mqproxy's lines for refused calls are bounded per minute (a flood of bad signatures grew its log at the flood's
rate); the next line logged says how many were left out."""

import logging

import pytest

from proxy.refusal_log import RefusalLog


def test_refusals_beyond_a_windows_lines_are_counted_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    refusals = RefusalLog(logging.getLogger("refusal-test"), per_window=3, window_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="refusal-test"):
        logged = [refusals.refused("QueryRoute", "UNAUTHORIZED", f"bad signature {i}") for i in range(1000)]
        assert logged.count(True) == 3 and logged[:3] == [True] * 3
        now[0] = 59.9
        assert not refusals.refused("QueryRoute", "UNAUTHORIZED", "still flooding")
        now[0] = 60.0  # a new window: logged again, with the count of those left out
        assert refusals.refused("SendMessage", "FORBIDDEN", "no Pub")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4
    assert "rpc=QueryRoute code=UNAUTHORIZED reason='bad signature 0' unlogged_before=0" in lines[0]
    assert "rpc=SendMessage code=FORBIDDEN reason='no Pub' unlogged_before=998" in lines[3]

"""A replica whose controller is down tries a session every half second; it said so on every attempt (170,000
lines a day per replica). Now once when the session breaks, a reminder every 30 s, and once when it is back. In
process: the real ControllerLink against a port nothing listens on."""

import asyncio
import logging
import socket

import pytest

from broker.ha import controller_link
from broker.ha.controller_link import ControllerLink
from proto import controller_pb2


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _run_link(seconds: float) -> None:
    async def on_assignment(_a: controller_pb2.ReplicaAssignment) -> None:
        return None

    link = ControllerLink([f"127.0.0.1:{_closed_port()}"], lambda: controller_pb2.BrokerHeartbeat(), on_assignment,
                          3000)
    link.start()
    await asyncio.sleep(seconds)
    link.end_session()
    assert link._task is not None
    link._task.cancel()
    await asyncio.gather(link._task, return_exceptions=True)


def test_a_broken_session_is_said_once_then_reminded(caplog: pytest.LogCaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_link, "BROKEN_REMINDER_S", 1.0, raising=False)
    with caplog.at_level(logging.WARNING, logger="broker.ha.controller_link"):
        asyncio.run(_run_link(2.6))
    lines = [r.getMessage() for r in caplog.records]
    broken = [m for m in lines if m.startswith("controller_session_broken")]
    reminders = [m for m in lines if m.startswith("controller_session_still_broken")]
    assert len(broken) == 1, lines  # was one per attempt (every 0.5 s)
    assert 1 <= len(reminders) <= 3, lines
    assert "attempts=" in reminders[0]

"""A store or posix tier directory the broker cannot use stops it at start with one line naming the key and the
path (the store's said only "No such file or directory: '/proc/forbidden'"; the tier's started the broker, which
then failed every upload, retried for ever, while keeping every local segment)."""

from pathlib import Path

import pytest

from tests.cluster import DaemonStartError, start_broker


def refused_line(tmp_path: Path, settings: dict[str, object]) -> str:
    """The one line a broker that must not start prints (its log lines aside)."""
    try:
        daemon = start_broker(tmp_path, "broker-p", "", None, **settings)
    except DaemonStartError as exc:
        assert "exited (1)" in str(exc), str(exc)
    else:
        daemon.stop()
        pytest.fail(f"the broker started: {daemon.log()[-3000:]}")
    text = (tmp_path / "broker-p" / "broker-p.log").read_text()
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.strip() and not line[:4].isdigit()]  # not log lines
    assert len(lines) == 1, text
    return lines[0]


def in_the_way(tmp_path: Path) -> Path:
    """A regular file where a parent directory should be (unwritable even for root, unlike a chmod)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    return blocker


@pytest.mark.parametrize("where", ["proc", "file"])
def test_a_store_directory_that_cannot_be_made_names_storePathRootDir(tmp_path: Path, where: str) -> None:
    store = Path("/proc/forbidden/store") if where == "proc" else in_the_way(tmp_path) / "store"
    line = refused_line(tmp_path, {"storePathRootDir": store})
    assert line.startswith(f"mqbroker: cannot start: storePathRootDir={store}: "), line


@pytest.mark.parametrize("where", ["proc", "file"])
def test_a_posix_tier_that_cannot_be_written_names_tieredStoreFilePath(tmp_path: Path, where: str) -> None:
    tier = Path("/proc/nope/tier") if where == "proc" else in_the_way(tmp_path) / "tier"
    line = refused_line(tmp_path, {"tieredStoreEnable": "true", "tieredStoreFilePath": tier})
    assert line.startswith(f"mqbroker: cannot start: tieredStoreFilePath={tier}: "), line


def test_a_new_posix_tier_directory_is_made_and_left_clean(tmp_path: Path) -> None:
    tier = tmp_path / "new" / "tier"
    broker = start_broker(tmp_path, "broker-p", "", tieredStoreEnable="true", tieredStoreFilePath=tier)
    try:
        assert tier.is_dir()
        assert not list(tier.glob(".write-check-*")), "the startup check left its file"
    finally:
        broker.stop()

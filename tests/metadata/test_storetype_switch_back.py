"""storeType=default on a store whose metadata RocksDB mode holds: the broker refuses to start with one line naming
both ways out, touching nothing (it opened empty JSON tables and served without its topics, groups and offsets)."""

from pathlib import Path

import grpc
import pytest

from proto import broker_pb2, broker_pb2_grpc, common_pb2
from tests.cluster import Daemon, DaemonStartError, start_broker

ROCKSDB = "defaultRocksDB"


def stub(daemon: Daemon) -> broker_pb2_grpc.BrokerServiceStub:
    return broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(daemon.addr))


def topics(daemon: Daemon) -> set[str]:
    return {c.topic_name for c in stub(daemon).GetAllTopicConfig(common_pb2.Empty(), timeout=30).configs}


def create_topics(daemon: Daemon, names: list[str]) -> None:
    stub(daemon).UpdateAndCreateTopicList(broker_pb2.UpdateTopicListRequest(configs=[
        common_pb2.TopicConfig(topic_name=n, read_queue_nums=2, write_queue_nums=2, perm=6) for n in names]),
        timeout=10)


def commit_offset(daemon: Daemon, offset: int) -> None:
    stub(daemon).UpdateConsumerOffset(broker_pb2.UpdateConsumerOffsetRequest(
        consumer_group="SG", topic="S0", queue_id=0, commit_offset=offset), timeout=5)


def query_offset(daemon: Daemon) -> int:
    return stub(daemon).QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
        consumer_group="SG", topic="S0", queue_id=0), timeout=5).offset


def refused_start(tmp_path: Path, name: str) -> str:
    """The one line a broker started with storeType=default prints when it must not start (log lines aside)."""
    log = tmp_path / name / f"{name}.log"
    seen = len(log.read_text()) if log.exists() else 0
    try:
        daemon = start_broker(tmp_path, name, "")  # storeType=default
    except DaemonStartError as exc:
        assert "exited (1)" in str(exc), str(exc)
    else:
        daemon.stop()
        pytest.fail(f"the broker started: {daemon.log()[seen:][-3000:]}")
    text = log.read_text()[seen:]
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.strip() and not line[:4].isdigit()]  # not log lines
    assert len(lines) == 1, text
    return lines[0]


def listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def test_back_to_default_after_an_import_refuses_then_either_way_out_works(tmp_path: Path) -> None:
    store = tmp_path / "broker-s" / "store"
    broker = start_broker(tmp_path, "broker-s", "")  # storeType=default: JSON files
    try:
        create_topics(broker, [f"S{i}" for i in range(20)])
        commit_offset(broker, 40)
    finally:
        broker.stop()  # a clean stop writes the offsets file
    broker = start_broker(tmp_path, "broker-s", "", storeType=ROCKSDB)  # imports config/*.json, renames them *.imported
    try:
        create_topics(broker, ["AfterImport"])
        commit_offset(broker, 77)
    finally:
        broker.stop()
    config = store / "config"
    assert (config / "topics.json.imported").exists() and not (config / "topics.json").exists()
    before = listing(config)

    line = refused_start(tmp_path, "broker-s")
    assert line.startswith("mqbroker: cannot start: storeType=default"), line
    assert str(store / "metadata") in line and "set storeType=defaultRocksDB" in line, line
    assert "topics.json" in line and "consumerOffset.json" in line and "*.json.imported back" in line, line
    assert listing(config) == before, "the refused broker wrote the JSON tables"

    broker = start_broker(tmp_path, "broker-s", "", storeType=ROCKSDB)  # way out 1: RocksDB mode, nothing lost
    try:
        assert {f"S{i}" for i in range(20)} | {"AfterImport"} <= topics(broker)
        assert query_offset(broker) == 77
    finally:
        broker.stop()

    for f in config.glob("*.json.imported"):  # way out 2: the README's renaming back, state as of the import
        f.rename(f.with_suffix(""))
    broker = start_broker(tmp_path, "broker-s", "")
    try:
        assert {f"S{i}" for i in range(20)} <= topics(broker) and "AfterImport" not in topics(broker)
        assert query_offset(broker) == 40
    finally:
        broker.stop()
    broker = start_broker(tmp_path, "broker-s", "")  # and stays in JSON mode: the files are its tables now
    broker.stop()


def test_default_mode_refuses_a_store_made_in_rocksdb_mode(tmp_path: Path) -> None:
    """No JSON files ever (the store was new in RocksDB mode): nothing to rename back."""
    broker = start_broker(tmp_path, "broker-r", "", storeType=ROCKSDB)
    try:
        create_topics(broker, ["OnlyInRocks"])
    finally:
        broker.stop()
    metadata = tmp_path / "broker-r" / "store" / "metadata"
    line = refused_start(tmp_path, "broker-r")
    assert "set storeType=defaultRocksDB" in line and f"move {metadata} away" in line, line
    assert not any((tmp_path / "broker-r" / "store" / "config").glob("*.json"))
    broker = start_broker(tmp_path, "broker-r", "", storeType=ROCKSDB)
    try:
        assert "OnlyInRocks" in topics(broker)
    finally:
        broker.stop()

"""Tiered metadata a newer release wrote (a record with fields this release does not know): the broker does not
start on it, with one line naming the fields, and touches nothing; the record as this release knows it starts it
again. Before, the field was passed on blindly: a traceback at start (as an older release prints on today's store,
whose queue records carry ``commit_log_offsets_from``), and a field this release ignored could change what a
record means."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from client import Message, Producer, PullConsumer
from tests.cluster import DaemonStartError, make_cluster, start_broker, wait_until

BROKER = "broker-a"
TOPIC = "TooNew"


def rewrite_queue_records(metadata_dir: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    store = RocksDBTieredMetadataStore(metadata_dir)
    try:
        db = store._db  # raw records: this release's decoder is what is under test
        keys = [k for k, _ in db.items() if k[:1] == b"Q"]
        for key in keys:
            db.put(key, json.dumps(change(json.loads(db.get(key)))).encode())
        return len(keys)
    finally:
        store.close()


def test_a_queue_record_of_a_newer_release_stops_the_start_with_one_line_and_the_known_one_starts(
        tmp_path: Path) -> None:
    settings = dict(tieredStoreEnable="true", tieredBackendServiceProvider="posix",
                    tieredStoreFilePath=tmp_path / "tier", tieredStoreGroupCommitAge=50,
                    tieredStoreGroupCommitCount=1)
    cluster = make_cluster(tmp_path, (BROKER,), **settings)
    try:
        cluster.create_topic(TOPIC, 1)
        with Producer(cluster.addr) as producer:
            producer.send_batch([Message(TOPIC, b"m%d" % i) for i in range(5)])
        broker = cluster.brokers[BROKER]
        wait_until(lambda: _uploaded(tmp_path), timeout=20, what="the messages uploaded to the tier")
        broker.stop()
        metadata = tmp_path / BROKER / "store" / "tiered_metadata"
        assert rewrite_queue_records(metadata, lambda d: {**d, "added_later": 7}) >= 1

        log = tmp_path / BROKER / f"{BROKER}.log"
        seen = len(log.read_text())
        with pytest.raises(DaemonStartError, match=r"exited \(1\)"):
            start_broker(tmp_path, BROKER, cluster.addr, **settings).stop()
        text = log.read_text()[seen:]
        assert "Traceback" not in text, text
        [line] = [x for x in text.splitlines() if x.strip() and not x[:4].isdigit()]  # not log lines
        assert line.startswith("mqbroker: cannot start: tiered metadata"), line
        assert "QueueMetadata fields this release does not know (added_later)" in line, line

        rewrite_queue_records(metadata, lambda d: {k: v for k, v in d.items() if k != "added_later"})
        cluster.start_broker(BROKER)
        with PullConsumer(cluster.addr, group="too-new") as consumer:
            mq = consumer.queues(TOPIC)[0]
            got = wait_until(lambda: consumer.pull(mq, offset=0, max_nums=32).messages, what="messages served")
            assert [m.body for m in got] == [b"m%d" % i for i in range(5)]
    finally:
        cluster.stop()


def _uploaded(tmp_path: Path) -> bool:
    return any(p.is_file() and p.stat().st_size > 0 for p in (tmp_path / "tier").rglob("*"))

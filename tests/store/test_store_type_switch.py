"""A broker switched from ``storeType=default`` to ``defaultRocksDB`` (README's migration path) on a store whose
oldest segments expired: a queue whose records all went with them came back at offset 0. Its group's committed
offset was out of range, and the first messages sent after the switch took offsets the group had committed past:
no one read them. Such queues keep their offsets now; queues with records left are rebuilt from the commitlog."""

import shutil
from pathlib import Path

from client import Message, Producer, PullConsumer, PullStatus
from tests.cluster import make_cluster, start_broker, wait_until

RETENTION = {"fileReservedTime": "0.0003", "deleteWhen": "*", "cleanResourceInterval": "200"}


def test_a_queue_whose_records_expired_keeps_its_offsets_after_a_switch_to_rocksdb(tmp_path: Path):
    c = make_cluster(tmp_path, broker_names=("broker-a",), registerNameServerPeriod=1000,
                     mappedFileSizeCommitLog=8192, **RETENTION)
    commit_log = tmp_path / "broker-a" / "store" / "commitlog"
    try:
        c.create_topic("SwitchOld", queues=1)
        c.create_topic("SwitchFill", queues=1)
        with Producer(c.addr) as producer, PullConsumer(c.addr, group="switch-g") as consumer:
            for i in range(10):
                producer.send(Message("SwitchOld", b"old%d" % i))
            old = consumer.queues("SwitchOld")[0]
            consumer.commit(old, 10)
            for _ in range(120):  # about 15 segments: the first one, with SwitchOld's records, expires
                producer.send(Message("SwitchFill", b"f" * 400))
            wait_until(lambda: min(p.name for p in commit_log.iterdir() if p.name.isdigit()) > "0" * 20,
                       timeout=30, what="the first segment, with every SwitchOld record, to expire")
        c.brokers["broker-a"].stop()
        c.brokers["broker-a"] = start_broker(tmp_path, "broker-a", c.addr, **{
            **c.settings, "storeType": "defaultRocksDB", "fileReservedTime": "72"})
        assert "consume_queue_carried_over" in c.brokers["broker-a"].log()
        with Producer(c.addr) as producer, PullConsumer(c.addr, group="switch-g") as consumer:
            old = consumer.queues("SwitchOld")[0]
            assert (consumer.min_offset(old), consumer.max_offset(old), consumer.committed(old)) == (10, 10, 10)
            assert producer.send(Message("SwitchOld", b"new")).queue_offset == 10  # before: 0
            result = consumer.pull(old, consumer.committed(old), 32)
            assert result.status is PullStatus.FOUND and [m.body for m in result.messages] == [b"new"]
            fill = consumer.queues("SwitchFill")[0]
            assert consumer.max_offset(fill) == 120  # rebuilt from the records left
            result = consumer.pull(fill, consumer.min_offset(fill), 32)
            assert result.status is PullStatus.FOUND and result.messages[0].queue_offset == consumer.min_offset(fill)
            for i in range(4):
                producer.send(Message("SwitchOld", b"later%d" % i))
        # Once: the RocksDB consume queue removed to be rebuilt (a damaged one's remedy), the files, stale since,
        # are not read again (their end, 10, would hide offsets 10..14 sent since).
        c.brokers["broker-a"].stop()
        shutil.rmtree(tmp_path / "broker-a" / "store" / "consumequeue_rocksdb")
        c.brokers["broker-a"] = start_broker(tmp_path, "broker-a", c.addr, **{
            **c.settings, "storeType": "defaultRocksDB", "fileReservedTime": "72"})
        assert "consume_queue_carried_over" not in c.brokers["broker-a"].log().split("broker_stopped")[-1]
        with PullConsumer(c.addr, group="switch-g") as consumer:
            old = consumer.queues("SwitchOld")[0]
            assert consumer.max_offset(old) == 15
            result = consumer.pull(old, 10, 32)
            assert [m.body for m in result.messages] == [b"new", b"later0", b"later1", b"later2", b"later3"]
    finally:
        c.stop()

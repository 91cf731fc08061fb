"""POP on a full disk (a combination no other test runs): the broker's store on a small tmpfs, filled to the last byte
while a group has messages acked and messages in flight, then receives and an ack. Each is answered only as it is
recorded: refused with "disk full" where the POP state cannot be written, or taken where it still can (RocksDB
writes into log space it set aside), and the broker keeps serving. Once room is made and the broker restarted,
every message not acked comes back (those in flight after their invisible time) and none that was acked does.
Mounting needs root (as CI and the developers' machines run)."""

import os
import time
from pathlib import Path

import pytest

from broker.pop.pop_state_store import PopStateStore, PopWrite
from client import MQClientError, SimpleConsumer
from common.storage_refusal import is_disk_full
from tests.cluster import make_cluster
from tests.disk.tmpfs import fill_file_system, free_bytes, remount_tmpfs, remove_filler, try_mount_tmpfs, unmount
from tests.pop.test_pop_consumption import create, drain, produce

MIB = 1 << 20


@pytest.mark.parametrize("settings", [{"flushDiskType": "SYNC_FLUSH"},
                                      {"storeType": "defaultRocksDB", "flushDiskType": "ASYNC_FLUSH"}],
                         ids=["file-sync-flush", "rocksdb-async-flush"])
def test_pop_on_a_full_disk_answers_only_what_it_recorded_and_loses_nothing(tmp_path: Path, settings: dict[str, str]):
    disk = tmp_path / "disk"
    disk.mkdir()
    assert try_mount_tmpfs(disk, "24m"), f"cannot mount a tmpfs on {disk} (uid {os.geteuid()}: needs root)"
    c = None
    try:
        c = make_cluster(tmp_path / "cluster", ("broker-a",), registerNameServerPeriod=1000,
                         storePathRootDir=disk / "store", mappedFileSizeCommitLog=MIB,
                         cleanFileForciblyEnable="false", **settings)
        topic, group = "PopFullT", "pop-full"
        create(c, topic, queues=2, brokers=("broker-a",))
        bodies = [f"f{i}".encode() for i in range(40)]
        produce(c, topic, bodies)
        with SimpleConsumer(c.addr, group=group, topic=topic) as consumer:
            received: list = []
            deadline = time.monotonic() + 20
            while len(received) < 20 and time.monotonic() < deadline:
                received += consumer.receive(10, invisible_ms=3000, wait_ms=200)
            assert len(received) >= 20, len(received)
            acked, in_flight = received[:10], received[10:]
            consumer.ack(acked)

            fill_file_system(disk)
            assert free_bytes(disk) == 0
            # What a receive or an ack answers is recorded: refused with "disk full" where the POP state cannot be
            # written; taken where it still can (RocksDB writes into log space it set aside).
            for _ in range(3):
                try:
                    consumer.receive(10, invisible_ms=3000, wait_ms=0)
                except MQClientError as exc:
                    assert "disk full" in str(exc), exc
            try:
                consumer.ack(in_flight[0])
                acked.append(in_flight.pop(0))
            except MQClientError as exc:
                assert "disk full" in str(exc), exc

        broker = c.brokers["broker-a"]
        assert broker.stop() == 0
        assert "Traceback" not in broker.log_path.read_text(errors="replace")
        remove_filler(disk)
        remount_tmpfs(disk, "64m")  # room past the broker's 90% refusal level too
        c.start_broker("broker-a")

        with SimpleConsumer(c.addr, group=group, topic=topic) as consumer:
            got = drain(consumer, len(bodies) - len(acked), deadline_s=30, restarted=True)
            assert consumer.receive(32, invisible_ms=1000, wait_ms=300) == []
        want = sorted(set(bodies) - {m.body for m in acked})
        assert sorted(m.body for m in got) == want  # in flight and never received: back; acked: never
    finally:
        if c is not None:
            c.stop()
        unmount(disk)


def test_the_pop_state_takes_writes_again_once_the_full_disk_has_room(tmp_path: Path):
    """RocksDB keeps a failed log append's error and refuses every later write with it, room or not, until the
    database is reopened: the POP state reopens it at the first write after room is back (receives worked again
    only after a restart before), and refuses as disk full, without reopening, while there is none."""
    disk = tmp_path / "disk"
    disk.mkdir()
    assert try_mount_tmpfs(disk, "16m"), f"cannot mount a tmpfs on {disk} (uid {os.geteuid()}: needs root)"
    key = ("G", "T", 0)
    try:
        store = PopStateStore(disk / "pop", sync=True)
        store.write(PopWrite(scan={key: 1}))
        fill_file_system(disk)
        refused: Exception | None = None
        for offset in range(2, 1000):  # the log's set-aside room takes a few first
            try:
                store.write(PopWrite(scan={key: offset}, held={(key, offset): "g" * 4096}))
            except Exception as exc:
                refused = exc
                break
        assert refused is not None and is_disk_full(refused), refused
        with pytest.raises(OSError) as still_full:
            store.write(PopWrite(scan={key: 5000}))
        assert is_disk_full(still_full.value) and "reopened once" in str(still_full.value)
        remove_filler(disk)
        store.write(PopWrite(scan={key: 5001}))
        store.close()
        assert PopStateStore(disk / "pop", sync=True).load()[key].scan_offset == 5001
    finally:
        unmount(disk)

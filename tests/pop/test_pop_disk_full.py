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

from client import MQClientError, SimpleConsumer
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

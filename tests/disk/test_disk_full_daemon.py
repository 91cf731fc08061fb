"""A real broker daemon on a small disk (issue #13, item 5): 1 MiB segments, 2 KiB messages, sent until refused.

Where this process may mount (root), the store is on a 24 MiB tmpfs: writes are refused (code 14, "disk full")
before the file system is full; then a filler file takes the rest, and every acknowledged message stays readable,
by a consumer group the broker has never seen too; SIGTERM exits 0; once the tmpfs is remounted bigger a restart
recovers every acknowledged message and takes writes again. The same story also runs on the broker's steered disk
probe (``PYROCKETMQ_DISK_USAGE_FILE``, see ``broker/store/disk_usage_watcher.py``), and only on it where mounting
is not allowed: the path is picked at run time, never skipped. It runs once more with every RocksDB store on the
full disk (storeType=defaultRocksDB: consume queue and metadata; kvEnable: the KV state), whose memtables cannot
be flushed at the stop: the stop still exits 0 with one line per refused step, and a KV value put before the disk
filled is there after the restart. The file store's cells run under SYNC_FLUSH, the RocksDB cell under ASYNC_FLUSH
(acknowledged before the flush: the stop's flush of the commitlog is the one that must land). One more cell SIGKILLs
the broker on the truly full disk instead of stopping it: no stop step runs, and the restart recovers everything
acknowledged from what the kill left. And one sends to a static topic with tiered storage on, its posix tier on the
same small disk (a second copy of the commitlog that keeps uploading while the disk fills), and once more with the
S3 tier, whose uploads are not paused by the full disk while its metadata is on it."""

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker.store.disk_usage_watcher import USAGE_FILE_ENV
from client import Admin, KVClient, Message, MQClientError, Producer, PullConsumer
from cluster.daemon_process import DaemonStartError
from common.response_code import ResponseCode
from tests.cluster import Cluster, make_cluster, wait_until
from tests.disk.tmpfs import fill_file_system, free_bytes, remount_tmpfs, remove_filler, try_mount_tmpfs, unmount
from tests.s3_server import s3_server

__all__ = ["s3_server"]  # the fixture, for the S3 tier's cell

TOPIC = "DiskFull"
QUEUES = 4
BODY_SIZE = 2048
BATCH = 16
MIB = 1 << 20


@dataclass
class SmallDisk:
    """The broker's store directory on a real 24 MiB tmpfs, or (``usage_file`` set) on a disk whose usage the
    broker reads from that file."""

    mount: Path
    usage_file: Path | None = None
    settings: dict[str, str] = field(default_factory=dict)  # more broker.conf keys
    sigkill: bool = False  # the broker is killed on the full disk, not stopped
    static_topic: bool = False  # the topic is a static topic (one logic queue per physical queue here)

    @property
    def real(self) -> bool:
        return self.usage_file is None

    @property
    def store(self) -> Path:
        return self.mount / "store"

    def free_bytes(self) -> int:
        return free_bytes(self.mount)

    def used_percent(self) -> float:
        st = os.statvfs(self.mount)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        return 100 * used / (used + st.f_bavail * st.f_frsize)

    def fill_up(self) -> None:
        """Take every byte left (only a real disk): the broker's own headroom is gone too."""
        fill_file_system(self.mount)

    def make_room(self) -> None:
        if self.real:
            remove_filler(self.mount)
            remount_tmpfs(self.mount, "64m")
        else:
            assert self.usage_file is not None
            self.usage_file.write_text("50")


ROCKSDB_AND_KV = {"storeType": "defaultRocksDB", "kvEnable": "true", "flushDiskType": "ASYNC_FLUSH"}
# Under <storePathRootDir>/tiered: on the small disk too. Uploads every 100 ms.
TIERED = {"tieredStoreEnable": "true", "tieredBackendServiceProvider": "posix", "tieredStoreGroupCommitAge": "100"}
# The S3 tier (a moto server process, its objects off the small disk; the fixture adds the server's keys): its
# uploads go on while the disk fills, and the tier's metadata, on the small disk, meets the full disk.
TIERED_S3 = {**TIERED, "tieredBackendServiceProvider": "s3"}
# Each cell: (more broker.conf keys, SIGKILLed rather than stopped, a static topic).
CELLS: dict[str, tuple[dict[str, str], bool, bool]] = {
    "tmpfs": ({}, False, False),
    "probe": ({}, False, False),
    "tmpfs-rocksdb-kv-async": (ROCKSDB_AND_KV, False, False),
    "tmpfs-sigkill": ({}, True, False),
    "tmpfs-tiered-static": (TIERED, False, True),
    "tmpfs-s3-tiered-static": (TIERED_S3, False, True),
    "tmpfs-tiered-rocksdb-kv-async-static-sigkill": ({**ROCKSDB_AND_KV, **TIERED}, True, True),
    "tmpfs-s3-tiered-rocksdb-kv-async-static-sigkill": ({**ROCKSDB_AND_KV, **TIERED_S3}, True, True),
}


@pytest.fixture(params=list(CELLS))
def small_disk(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SmallDisk]:
    """``tmpfs``: a real 24 MiB file system where this process may mount one, else the probe; ``probe``: always
    the steered usage file (so both paths run where mounting works); ``tmpfs-rocksdb-kv-async``: as ``tmpfs``,
    with the RocksDB stores and the KV store on it, under ASYNC_FLUSH; ``tmpfs-sigkill``: as ``tmpfs``, the broker
    SIGKILLed on the full disk; ``tmpfs-tiered-static``: as ``tmpfs``, a static topic and the tier on the disk;
    ``tmpfs-s3-tiered-static``: the same with the S3 tier (its metadata on the disk, its objects off it); the last
    two cells: all of those at once, with either tier."""
    mount = tmp_path / "disk"
    mount.mkdir()
    settings, sigkill, static_topic = CELLS[request.param]
    if settings.get("tieredBackendServiceProvider") == "s3":
        settings = {**settings, **request.getfixturevalue("s3_server").broker_conf()}
    cell = dict(settings=settings, sigkill=sigkill, static_topic=static_topic)
    if request.param.startswith("tmpfs") and try_mount_tmpfs(mount, "24m"):
        try:
            yield SmallDisk(mount, **cell)
        finally:
            unmount(mount)
        return
    usage_file = tmp_path / "disk-usage"
    usage_file.write_text("50")
    monkeypatch.setenv(USAGE_FILE_ENV, str(usage_file))  # the broker processes inherit it
    yield SmallDisk(mount, usage_file, **cell)


def _start(tmp_path: Path, disk: SmallDisk) -> Cluster:
    settings = {"flushDiskType": "SYNC_FLUSH", **disk.settings}
    cluster = make_cluster(tmp_path / "cluster", ("broker-a",), registerNameServerPeriod=1000,
                           storePathRootDir=disk.store, mappedFileSizeCommitLog=MIB, cleanFileForciblyEnable="false",
                           **settings)
    if disk.static_topic:
        with Admin(cluster.addr) as admin:
            admin.update_static_topic(TOPIC, QUEUES, brokers=["broker-a"])
            wait_until(lambda: TOPIC in admin.topic_list(), what=f"route of {TOPIC}")
    else:
        cluster.create_topic(TOPIC, queues=QUEUES)
    return cluster


def _body(i: int) -> bytes:
    return f"{i:08d}".encode().ljust(BODY_SIZE, b".")


def _send_until_refused(producer: Producer, acked: dict[int, dict[int, bytes]], disk: SmallDisk) -> MQClientError:
    """Send batches until the broker refuses one; records every acknowledged message by queue and offset."""
    sent = sum(map(len, acked.values()))
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        bodies = [_body(sent + k) for k in range(BATCH)]
        try:
            result = producer.send_batch([Message(TOPIC, b) for b in bodies])
        except MQClientError as exc:
            return exc
        for k, body in enumerate(bodies):
            acked.setdefault(result.queue.queue_id, {})[result.queue_offset + k] = body
        sent += BATCH
        if not disk.real and sent == 50 * BATCH:
            assert disk.usage_file is not None
            disk.usage_file.write_text("95")  # the steered disk fills up now
    raise AssertionError(f"no refusal after {sent} messages (disk {disk.used_percent():.1f}% used)")


def _read_all(namesrv: str, group: str) -> dict[int, dict[int, bytes]]:
    got: dict[int, dict[int, bytes]] = {}
    with PullConsumer(namesrv, group=group) as consumer:
        for mq in consumer.queues(TOPIC):
            offset = 0
            while True:
                result = consumer.pull(mq, offset, max_nums=256)
                if not result.messages:
                    break
                for msg in result.messages:
                    got.setdefault(mq.queue_id, {})[msg.queue_offset] = msg.body
                offset = result.next_begin_offset
            consumer.commit(mq, offset)  # a commit on a full disk: kept in memory, written when it can be
    return got


def test_a_broker_on_a_small_disk_refuses_before_full_keeps_serving_and_recovers(
        tmp_path: Path, small_disk: SmallDisk) -> None:
    disk = small_disk
    cluster = _start(tmp_path, disk)
    try:
        broker = cluster.brokers["broker-a"]
        kv = "kvEnable" in disk.settings
        if kv:
            with KVClient(cluster.addr) as client:
                client.put(b"put-before-full", b"kept")
        acked: dict[int, dict[int, bytes]] = {}
        with Producer(cluster.addr) as producer:
            refused = _send_until_refused(producer, acked, disk)
        count = sum(map(len, acked.values()))
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused
        assert "disk full:" in str(refused) and "above diskSpaceWarningLevelRatio=90" in str(refused), refused
        assert count >= 50 * BATCH
        if disk.real:  # refused for the real reason, and before the file system was full
            assert disk.used_percent() > 90
            assert disk.free_bytes() >= MIB, f"only {disk.free_bytes()} bytes left when writes stopped"
        log = broker.log()
        for bad in ("No space left", "Errno 28", "Traceback", "rpc_failed"):
            assert bad not in log, f"{bad!r} in the broker log before the disk was full:\n{log[-3000:]}"
        assert "disk_full_writes_refused" in log
        with Admin(cluster.addr) as admin:
            info = admin.broker_runtime_info(broker.addr)
        assert info["storeWriteable"] == "false" and info["storeRefusal"].startswith("disk full:"), info
        assert float(info["commitLogDiskRatio"]) > 0.9, info
        if kv:
            with KVClient(cluster.addr) as client, pytest.raises(MQClientError, match="disk full"):
                client.put(b"put-while-full", b"refused")

        if disk.real:
            disk.fill_up()  # now truly full: reads must not need a single byte
            assert disk.free_bytes() == 0
        assert _read_all(cluster.addr, "never-seen-group") == acked
        if disk.sigkill:
            broker.proc.kill()
            broker.proc.wait(10)
        else:
            assert broker.stop() == 0, broker.log()[-3000:]
        log = broker.log()
        assert "Traceback" not in log and "cannot start" not in log, log[-3000:]
        if disk.real:  # started on the truly full disk: it says why on one line (a RocksDB store replaying its log
            # raised a bare Exception, shown as a traceback: the disk-full review), or serves
            try:
                cluster.start_broker("broker-a").stop()
            except DaemonStartError as exc:
                assert "mqbroker: cannot start:" in str(exc) and "Traceback" not in str(exc), str(exc)[-3000:]

        disk.make_room()
        broker = cluster.start_broker("broker-a")
        assert _read_all(cluster.addr, "group-after-restart") == acked
        with Producer(cluster.addr) as producer:
            assert producer.send(Message(TOPIC, b"after the disk grew")).queue_offset >= 0
        if kv:
            with KVClient(cluster.addr) as client:
                assert (client.get(b"put-before-full"), client.get(b"put-while-full")) == (b"kept", None)
        assert "Traceback" not in broker.log()
    finally:
        cluster.stop()
